//! The engine: one OS thread that owns the [`Runner`] and a [`Scheduler`], takes
//! [`Job`]s from a bounded queue in arrival order and hands each choice of a job to the
//! scheduler as a request, which owns it from there to its last token (continuous
//! batching: sequences join and leave at step boundaries). The engine keeps only the
//! connection side of each choice, a [`Client`]: it streams the choice's scores, text
//! and end back as [`Event`]s tagged with its index, and tells the scheduler when the
//! client has gone.
//!
//! The boundary is the job: a tokenized prompt, its options, one sampler per choice, a
//! channel for events and a cancellation flag; the HTTP side knows nothing of batching.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::metrics::{GateSnapshot, Metrics};
use crate::decode::sampler::SamplerConfig;
use crate::decode::{FinishReason, GenerateOptions, Generation, TokenLogprobs};
use crate::model::{Model, ModelError};
use crate::sched::{self, Limits, Request, Scheduler};
use crate::step::Runner;

/// How often an idle engine looks at the shutdown flag.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// One generation request, ready to run.
pub(crate) struct Job {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Token limit, stop strings and stop ids.
    pub options: GenerateOptions,
    /// How to pick tokens: one sampler per choice (the request's `n`, at least one).
    pub samplers: Vec<SamplerConfig>,
    /// Where the job's text and its end go.
    pub events: UnboundedSender<Event>,
    /// Set when the client is gone: the generation stops at its next piece of text.
    pub cancel: Arc<AtomicBool>,
    /// When the job was submitted (for time to first token).
    pub submitted: Instant,
    /// Score the prompt too (a completion's `echo` with `logprobs`): its tokens'
    /// log-probabilities with this many alternatives come as [`Event::Prompt`] first.
    pub prompt_logprobs: Option<usize>,
}

/// What the engine tells a job's owner about its prompt or one of its choices.
pub(crate) enum Event {
    /// The prompt's tokens after the first, each with its log-probability given those
    /// before it; sent once, before any choice's text, when the job asked.
    Prompt {
        /// One entry per prompt token after the first.
        logprobs: Vec<TokenLogprobs>,
    },
    /// A new piece of a choice's text, with its tokens' log-probabilities when asked.
    Text {
        /// The choice.
        index: usize,
        /// The text (may be empty when only log-probabilities come).
        text: String,
        /// One entry per token since the previous piece.
        logprobs: Vec<TokenLogprobs>,
    },
    /// A choice ended; a job ends when every choice has, or at its first error.
    Done {
        /// The choice.
        index: usize,
        /// Its outcome.
        result: Result<Outcome, EngineError>,
    },
}

/// A finished generation.
pub(crate) struct Outcome {
    /// The whole generated text.
    pub text: String,
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Tokens generated (an end token included).
    pub completion_tokens: usize,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Per generated token, its log-probability and alternatives (empty unless asked).
    pub logprobs: Vec<TokenLogprobs>,
}

/// Why a job failed.
#[derive(Debug)]
pub(crate) enum EngineError {
    /// The model refused or failed the request.
    Model(Box<ModelError>),
    /// The generation panicked; the engine carried on with the next job.
    Panicked(String),
    /// The server stopped before or while running the job.
    ShuttingDown,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SubmitError {
    /// `max_queue` jobs are already waiting.
    Full,
    /// The engine is stopping or gone.
    Stopped,
}

/// The handlers' side of the engine: submits jobs and asks it to stop.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    queue: SyncSender<Job>,
    shutdown: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

impl EngineHandle {
    /// Queues `job` unless `max_queue` jobs already wait or the engine is stopping.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        if self.shutdown.load(Ordering::SeqCst) {
            return Err(SubmitError::Stopped);
        }
        self.metrics.queue_add(1);
        let result = self.queue.try_send(job);
        if result.is_err() {
            self.metrics.queue_add(-1);
        }
        match result {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(SubmitError::Full),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::Stopped),
        }
    }

    /// Cancels the running job and every waiting one; the engine thread then exits.
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }
}

/// Starts the engine thread. At most `max_queue` jobs wait while `limits` of them run.
pub(crate) fn start(
    model: Arc<Model>,
    runner: Runner,
    limits: Limits,
    max_queue: usize,
    metrics: Arc<Metrics>,
) -> std::io::Result<(EngineHandle, JoinHandle<()>)> {
    let (queue, jobs) = mpsc::sync_channel(max_queue);
    let shutdown = Arc::new(AtomicBool::new(false));
    let engine = Engine {
        runner,
        shutdown: shutdown.clone(),
        metrics: metrics.clone(),
        ended: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("switchyard-engine".into())
        .spawn(move || engine.serve(&model, limits, &jobs))?;
    let handle = EngineHandle {
        queue,
        shutdown,
        metrics,
    };
    Ok((handle, thread))
}

/// The connection side of one choice of a job: where its events go, its client's
/// cancellation flag, which choice it is, and how long its job waited in the queue. The
/// scheduler holds it with the request from submission to the last token and hands it
/// back with each event.
#[derive(Clone)]
struct Client {
    events: UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
    /// Which choice of its job it is.
    index: usize,
    /// Submission to the scheduler: the wait in the engine's queue.
    queued: Duration,
}

impl Client {
    /// Whether the client is gone (cancelled, or its receiver dropped).
    fn gone(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }

    /// Sends the choice's last event.
    fn end(&self, result: Result<Outcome, EngineError>) {
        let _ = self.events.send(Event::Done {
            index: self.index,
            result,
        });
    }
}

/// The engine thread's state: the runner, and the choices that ended during the
/// current step, whose last events go out once the gauges count them out.
struct Engine {
    runner: Runner,
    shutdown: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    ended: Vec<(Client, Result<Outcome, EngineError>)>,
}

impl Engine {
    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// The engine loop: move jobs from the queue into the scheduler while it has room
    /// and nothing of theirs waits there, end the requests whose clients have gone, and
    /// step, until the queue closes or the server stops.
    fn serve(mut self, model: &Model, limits: Limits, queue: &Receiver<Job>) {
        let mut scheduler = Scheduler::new(&model.tokenizer, limits);
        self.report_runner();
        loop {
            if scheduler.is_idle() {
                match queue.recv_timeout(IDLE_POLL) {
                    Ok(job) => self.take(&mut scheduler, job),
                    Err(RecvTimeoutError::Timeout) if self.stopping() => break,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            loop {
                self.admit(&mut scheduler);
                if scheduler.waiting() > 0 || !scheduler.has_room() {
                    break;
                }
                match queue.try_recv() {
                    Ok(job) => self.take(&mut scheduler, job),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if self.stopping() {
                break;
            }
            scheduler.cancel_where(Client::gone, &mut |client, event| {
                self.deliver(client, event)
            });
            self.step(&mut scheduler);
        }
        self.stop_all(&mut scheduler, queue);
    }

    /// Takes a job off the queue into the scheduler, one request per choice (the first
    /// scoring the prompt when asked), or ends it at once when its client is gone or
    /// the server is stopping.
    fn take(&mut self, scheduler: &mut Scheduler<'_, Client>, job: Job) {
        self.metrics.queue_add(-1);
        if job.cancel.load(Ordering::SeqCst) || job.events.is_closed() {
            return;
        }
        let queued = job.submitted.elapsed();
        if self.stopping() {
            let result = Err(EngineError::ShuttingDown);
            let _ = job.events.send(Event::Done { index: 0, result });
            return;
        }
        for (index, sampler) in job.samplers.into_iter().enumerate() {
            let client = Client {
                events: job.events.clone(),
                cancel: job.cancel.clone(),
                index,
                queued,
            };
            let request = Request {
                prompt: job.prompt.clone(),
                options: job.options.clone(),
                sampler,
                score: job.prompt_logprobs.filter(|_| index == 0),
            };
            scheduler.submit(client, request);
        }
    }

    /// Admits the waiting requests that fit, then publishes the gauges and the ends
    /// of those refused.
    fn admit(&mut self, scheduler: &mut Scheduler<'_, Client>) {
        let runner = &self.runner;
        let (metrics, shutdown, ended) = (&self.metrics, &self.shutdown, &mut self.ended);
        scheduler.admit(runner, &mut |client, event| {
            deliver(metrics, shutdown, ended, client, event)
        });
        self.publish(scheduler);
    }

    /// Runs one step; a panic inside it fails every running request, resets the
    /// runner's compiled state and the prefix cache, and leaves the engine serving the
    /// next ones.
    fn step(&mut self, scheduler: &mut Scheduler<'_, Client>) {
        let runner = &mut self.runner;
        let (metrics, shutdown, ended) = (&self.metrics, &self.shutdown, &mut self.ended);
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            scheduler.step(runner, &mut |client, event| {
                deliver(metrics, shutdown, ended, client, event)
            })
        }));
        match outcome {
            Ok(report) => {
                let seconds = started.elapsed().as_secs_f64();
                self.metrics.step(report.sequences, report.tokens, seconds);
            }
            Err(panic) => {
                let what = panic_message(&*panic);
                log::error!(
                    "a generation step panicked: {what}; failing its generations and \
                     resetting the runner's compiled steps and the prefix cache"
                );
                for client in scheduler.reset() {
                    let result = Err(EngineError::Panicked(what.clone()));
                    self.ended.push((client, result));
                }
                self.runner.reset();
                self.metrics.recovered();
            }
        }
        self.publish(scheduler);
        self.report_runner();
    }

    fn deliver(&mut self, client: &Client, event: sched::Event<'_>) -> bool {
        deliver(
            &self.metrics,
            &self.shutdown,
            &mut self.ended,
            client,
            event,
        )
    }

    /// Publishes the scheduler's gauges, then sends the last events of the choices
    /// that ended (so a client that saw its end never reads itself as running).
    fn publish(&mut self, scheduler: &Scheduler<'_, Client>) {
        self.metrics.running(scheduler.running());
        self.metrics.prefixes(scheduler.prefix_stats());
        self.metrics.kv(
            scheduler.kv_reserved(),
            scheduler.kv_bytes(),
            scheduler.kv_free(),
        );
        for (client, result) in self.ended.drain(..) {
            client.end(result);
        }
    }

    /// Fails every running, waiting and queued job as `ShuttingDown`.
    fn stop_all(&mut self, scheduler: &mut Scheduler<'_, Client>, queue: &Receiver<Job>) {
        for client in scheduler.abort_all() {
            self.ended.push((client, Err(EngineError::ShuttingDown)));
        }
        self.publish(scheduler);
        while let Ok(job) = queue.try_recv() {
            self.metrics.queue_add(-1);
            let result = Err(EngineError::ShuttingDown);
            let _ = job.events.send(Event::Done { index: 0, result });
        }
    }

    /// Publishes the runner's cache counters, backends and co-execution gates.
    fn report_runner(&self) {
        self.metrics.backends(
            self.runner.failovers().len(),
            self.runner.backends().iter().count(),
        );
        self.metrics
            .cache(self.runner.cache_stats(), self.runner.phase_stats());
        self.metrics.devices(
            self.runner
                .backends()
                .iter()
                .filter_map(|b| Some((b.name().to_string(), b.counters()?)))
                .collect(),
        );
        self.metrics.gates(
            self.runner
                .gate_reports()
                .iter()
                .map(|g| GateSnapshot {
                    bucket: g.bucket,
                    active: g.gate.active.and_then(|a| g.gate.arms.get(a.0).cloned()),
                    calls: g.gate.n_calls,
                    switches: g.gate.n_switches,
                })
                .collect(),
        );
    }
}

/// What a caught panic says, as text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Passes a scheduler event to its choice's client: scores and text while the client
/// listens (`false` cancels the choice); an end is recorded in the metrics and kept in
/// `ended` until the step's gauges are published. A failed choice cancels the rest of
/// its job.
fn deliver(
    metrics: &Metrics,
    shutdown: &AtomicBool,
    ended: &mut Vec<(Client, Result<Outcome, EngineError>)>,
    client: &Client,
    event: sched::Event<'_>,
) -> bool {
    let listening = || !client.cancel.load(Ordering::Relaxed) && !shutdown.load(Ordering::Relaxed);
    match event {
        sched::Event::Prompt { logprobs } => {
            let logprobs = logprobs.to_vec();
            listening() && client.events.send(Event::Prompt { logprobs }).is_ok()
        }
        sched::Event::Text { text, logprobs } => {
            listening()
                && client
                    .events
                    .send(Event::Text {
                        index: client.index,
                        text: text.to_string(),
                        logprobs: logprobs.to_vec(),
                    })
                    .is_ok()
        }
        sched::Event::Done(result) => {
            let result = match result {
                Ok(generation) => Ok(outcome(metrics, client, generation)),
                Err(e) => {
                    client.cancel.store(true, Ordering::SeqCst);
                    Err(EngineError::Model(Box::new(e)))
                }
            };
            let result = match result {
                Ok(o)
                    if o.finish_reason == FinishReason::Cancelled
                        && shutdown.load(Ordering::SeqCst) =>
                {
                    Err(EngineError::ShuttingDown)
                }
                other => other,
            };
            ended.push((client.clone(), result));
            false
        }
    }
}

/// Records a finished generation's metrics and turns it into the choice's outcome.
fn outcome(metrics: &Metrics, client: &Client, generation: Generation) -> Outcome {
    let timings = generation.timings;
    let per_token = (generation.tokens.len() > 1 && timings.decode_tok_s > 0.0)
        .then(|| 1.0 / timings.decode_tok_s);
    // The generation's clock starts when the scheduler took it; the queue before it
    // counts too.
    let ttft = client.queued.as_secs_f64() + timings.ttft_ms / 1e3;
    metrics.generation(
        generation.prompt_tokens.len(),
        generation.tokens.len(),
        generation.finish_reason,
        ttft,
        per_token,
    );
    Outcome {
        prompt_tokens: generation.prompt_tokens.len(),
        completion_tokens: generation.tokens.len(),
        finish_reason: generation.finish_reason,
        text: generation.text,
        logprobs: generation.logprobs,
    }
}
