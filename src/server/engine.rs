//! The engine: one OS thread that owns the [`Runner`] and a [`Scheduler`], takes
//! [`Job`]s from a bounded queue in arrival order, and steps up to `parallel` sequences
//! together (continuous batching: sequences join and leave at step boundaries), one per
//! choice of a job, streaming each choice's text back as [`Event`]s tagged with its index.
//!
//! The boundary is the job: a tokenized prompt, its options, one sampler per choice, a
//! channel for events and a cancellation flag; the HTTP side knows nothing of batching.

use std::collections::HashMap;
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
use crate::sched::{self, Fit, Limits, Request, Scheduler};
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
        jobs: HashMap::new(),
        admitting: None,
        next_id: 0,
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

/// A running choice's owner side, kept while the scheduler steps it.
struct Running {
    events: UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
    /// Which choice of its job it is.
    index: usize,
    /// Submission to admission: the wait in the queue.
    waited: Duration,
}

/// A job taken from the queue whose choices are not all admitted yet (they join as
/// sequences leave, so `n` may exceed `parallel`).
struct Admitting {
    job: Job,
    /// The next choice to admit.
    next: usize,
}

/// The engine thread's state.
struct Engine {
    runner: Runner,
    shutdown: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    jobs: HashMap<u64, Running>,
    admitting: Option<Admitting>,
    next_id: u64,
}

impl Engine {
    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// The engine loop: admit waiting jobs' choices while there is room, step every
    /// running one, until the queue closes or the server stops.
    fn serve(mut self, model: &Model, limits: Limits, queue: &Receiver<Job>) {
        let mut scheduler = Scheduler::new(&model.tokenizer, limits);
        self.report_runner();
        loop {
            if scheduler.running() == 0 && self.admitting.is_none() {
                match queue.recv_timeout(IDLE_POLL) {
                    Ok(job) => self.take(job),
                    Err(RecvTimeoutError::Timeout) if self.stopping() => break,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            while scheduler.has_room() {
                if self.admitting.is_some() {
                    if !self.admit_next(&mut scheduler) {
                        break;
                    }
                    continue;
                }
                match queue.try_recv() {
                    Ok(job) => self.take(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => break,
                }
            }
            if self.stopping() {
                self.stop_all(&mut scheduler, queue);
                break;
            }
            self.drop_cancelled(&mut scheduler);
            self.step(&mut scheduler);
        }
        self.stop_all(&mut scheduler, queue);
    }

    /// Takes a job off the queue for admission, or ends it at once when its client is
    /// gone or the server is stopping.
    fn take(&mut self, job: Job) {
        self.metrics.queue_add(-1);
        if job.cancel.load(Ordering::SeqCst) || job.events.is_closed() {
            return;
        }
        if self.stopping() {
            let result = Err(EngineError::ShuttingDown);
            let _ = job.events.send(Event::Done { index: 0, result });
            return;
        }
        self.admitting = Some(Admitting { job, next: 0 });
    }

    /// Hands the next choice of the job being admitted to the scheduler. A choice that
    /// cannot run fails the job (the rest of its choices are cancelled); a job whose
    /// client is gone is dropped.
    fn admit_next(&mut self, scheduler: &mut Scheduler<'_>) -> bool {
        let Some(Admitting { job, next: index }) = self.admitting.take() else {
            return true;
        };
        if job.cancel.load(Ordering::SeqCst) || job.events.is_closed() {
            return true;
        }
        let request = Request {
            prompt: job.prompt.clone(),
            options: job.options.clone(),
            sampler: job.samplers[index].clone(),
        };
        if scheduler.fits(&request) == Fit::Later {
            // Not enough KV memory until running sequences end: it waits at the head.
            self.admitting = Some(Admitting { job, next: index });
            return false;
        }
        if let (0, Some(k)) = (index, job.prompt_logprobs) {
            // Scored once per job, when its first choice joins: one pass over the prompt
            // between two steps, on a sequence of its own. A panic fails this job alone
            // and resets the runner's compiled steps, as a step's does.
            let runner = &mut self.runner;
            let scored = catch_unwind(AssertUnwindSafe(|| {
                crate::decode::prompt_logprobs(runner, &job.prompt, k)
            }));
            let failed = match scored {
                Ok(Ok(logprobs)) => {
                    let _ = job.events.send(Event::Prompt { logprobs });
                    None
                }
                Ok(Err(e)) => Some(EngineError::Model(Box::new(e))),
                Err(panic) => {
                    let what = panic_message(&*panic);
                    log::error!("scoring a prompt panicked: {what}; resetting the runner");
                    self.runner.reset();
                    self.metrics.recovered();
                    Some(EngineError::Panicked(what))
                }
            };
            if let Some(error) = failed {
                job.cancel.store(true, Ordering::SeqCst);
                let _ = job.events.send(Event::Done {
                    index,
                    result: Err(error),
                });
                return true;
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        match scheduler.admit(&self.runner, id, request) {
            Ok(()) => {
                self.metrics.running_add(1);
                self.jobs.insert(
                    id,
                    Running {
                        events: job.events.clone(),
                        cancel: job.cancel.clone(),
                        index,
                        waited: job.submitted.elapsed(),
                    },
                );
                if index + 1 < job.samplers.len() {
                    self.admitting = Some(Admitting {
                        job,
                        next: index + 1,
                    });
                }
            }
            Err(e) => {
                job.cancel.store(true, Ordering::SeqCst);
                let result = Err(EngineError::Model(Box::new(e)));
                let _ = job.events.send(Event::Done { index, result });
            }
        }
        true
    }

    /// Ends the running jobs whose clients have gone.
    fn drop_cancelled(&mut self, scheduler: &mut Scheduler<'_>) {
        let gone: Vec<u64> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.cancel.load(Ordering::Relaxed) || j.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            scheduler.cancel(id, &mut |id, event| self.on_event(id, event));
        }
    }

    /// Runs one step; a panic inside it fails every running job, resets the runner's
    /// compiled state and the prefix cache, and leaves the engine serving the next ones.
    fn step(&mut self, scheduler: &mut Scheduler<'_>) {
        let runner = &mut self.runner;
        let (jobs, metrics, shutdown) = (&mut self.jobs, &self.metrics, &self.shutdown);
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            scheduler.step(runner, &mut |id, event| {
                deliver(jobs, metrics, shutdown, id, event)
            })
        }));
        match outcome {
            Ok(report) => {
                let seconds = started.elapsed().as_secs_f64();
                self.metrics.step(report.sequences, report.tokens, seconds);
                self.metrics.prefixes(scheduler.prefix_stats());
                self.metrics.kv(
                    scheduler.kv_reserved(),
                    scheduler.kv_bytes(),
                    scheduler.kv_free(),
                );
            }
            Err(panic) => {
                let what = panic_message(&*panic);
                log::error!(
                    "a generation step panicked: {what}; failing its generations and \
                     resetting the runner's compiled steps and the prefix cache"
                );
                for id in scheduler.reset() {
                    self.finish(id, Err(EngineError::Panicked(what.clone())));
                }
                self.runner.reset();
                self.metrics.recovered();
            }
        }
        self.report_runner();
    }

    fn on_event(&mut self, id: u64, event: sched::Event<'_>) -> bool {
        deliver(&mut self.jobs, &self.metrics, &self.shutdown, id, event)
    }

    /// Sends a running choice's last event and forgets it.
    fn finish(&mut self, id: u64, result: Result<Outcome, EngineError>) {
        if let Some(job) = self.jobs.remove(&id) {
            self.metrics.running_add(-1);
            let _ = job.events.send(Event::Done {
                index: job.index,
                result,
            });
        }
    }

    /// Fails every running, half-admitted and waiting job as `ShuttingDown`.
    fn stop_all(&mut self, scheduler: &mut Scheduler<'_>, queue: &Receiver<Job>) {
        for id in scheduler.abort_all() {
            self.finish(id, Err(EngineError::ShuttingDown));
        }
        if let Some(Admitting { job, next }) = self.admitting.take() {
            let result = Err(EngineError::ShuttingDown);
            let _ = job.events.send(Event::Done {
                index: next,
                result,
            });
        }
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

/// Passes a scheduler event to its choice's job: text while the client listens (`false`
/// cancels the choice), and the end with its metrics.
fn deliver(
    jobs: &mut HashMap<u64, Running>,
    metrics: &Metrics,
    shutdown: &AtomicBool,
    id: u64,
    event: sched::Event<'_>,
) -> bool {
    let Some(job) = jobs.get(&id) else {
        return false;
    };
    match event {
        sched::Event::Text { text, logprobs } => {
            !job.cancel.load(Ordering::Relaxed)
                && !shutdown.load(Ordering::Relaxed)
                && job
                    .events
                    .send(Event::Text {
                        index: job.index,
                        text: text.to_string(),
                        logprobs: logprobs.to_vec(),
                    })
                    .is_ok()
        }
        sched::Event::Done(result) => {
            let job = jobs.remove(&id).expect("looked up above");
            metrics.running_add(-1);
            let result = match result {
                Ok(generation) => Ok(outcome(metrics, &job, generation)),
                Err(e) => Err(EngineError::Model(Box::new(e))),
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
            let _ = job.events.send(Event::Done {
                index: job.index,
                result,
            });
            false
        }
    }
}

/// Records a finished generation's metrics and turns it into the job's outcome.
fn outcome(metrics: &Metrics, job: &Running, generation: Generation) -> Outcome {
    let timings = generation.timings;
    let per_token = (generation.tokens.len() > 1 && timings.decode_tok_s > 0.0)
        .then(|| 1.0 / timings.decode_tok_s);
    // The generation's clock starts at admission; the wait before it counts too.
    let ttft = job.waited.as_secs_f64() + timings.ttft_ms / 1e3;
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
