//! The engine: one OS thread that owns the [`Runner`] and serves [`Job`]s from a bounded
//! queue in arrival order, streaming each job's text back as [`Event`]s.
//!
//! The boundary is the job: a tokenized prompt, its options, a channel for events and a
//! cancellation flag. Today the loop runs one job at a time; a batching engine would
//! take several jobs off the same queue and step them together, with the same `Job` and
//! `Event` types, so the HTTP side would not change.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::metrics::{GateSnapshot, Metrics};
use crate::model::sampler::{Sampler, SamplerConfig};
use crate::model::{
    generate, FinishReason, GenerateOptions, Generation, Model, ModelError, Runner,
};

/// How often an idle engine looks at the shutdown flag.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// One generation request, ready to run.
pub(crate) struct Job {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Token limit, stop strings and stop ids.
    pub options: GenerateOptions,
    /// How to pick tokens.
    pub sampler: SamplerConfig,
    /// Where the job's text and its end go.
    pub events: UnboundedSender<Event>,
    /// Set when the client is gone: the generation stops at its next piece of text.
    pub cancel: Arc<AtomicBool>,
    /// When the job was submitted (for time to first token).
    pub submitted: Instant,
}

/// What the engine tells a job's owner.
pub(crate) enum Event {
    /// A new piece of generated text.
    Text(String),
    /// The generation ended; the last event of a job.
    Done(Result<Outcome, EngineError>),
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

/// Starts the engine thread. At most `max_queue` jobs wait while one runs.
pub(crate) fn start(
    model: Arc<Model>,
    runner: Runner,
    max_queue: usize,
    metrics: Arc<Metrics>,
) -> std::io::Result<(EngineHandle, JoinHandle<()>)> {
    let (queue, jobs) = mpsc::sync_channel(max_queue);
    let shutdown = Arc::new(AtomicBool::new(false));
    let mut engine = Engine {
        model,
        runner,
        shutdown: shutdown.clone(),
        metrics: metrics.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("switchyard-engine".into())
        .spawn(move || loop {
            match jobs.recv_timeout(IDLE_POLL) {
                Ok(job) => {
                    engine.metrics.queue_add(-1);
                    engine.run(job);
                }
                Err(RecvTimeoutError::Timeout) if engine.stopping() => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        })?;
    let handle = EngineHandle {
        queue,
        shutdown,
        metrics,
    };
    Ok((handle, thread))
}

/// The engine thread's state.
struct Engine {
    model: Arc<Model>,
    runner: Runner,
    shutdown: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

impl Engine {
    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Runs one job to its end and sends its last event. A job whose client has gone
    /// is skipped; one that arrives while stopping fails with `ShuttingDown`.
    fn run(&mut self, job: Job) {
        if job.cancel.load(Ordering::SeqCst) || job.events.is_closed() {
            return;
        }
        if self.stopping() {
            let _ = job.events.send(Event::Done(Err(EngineError::ShuttingDown)));
            return;
        }
        self.metrics.running_add(1);
        let started = Instant::now();
        let result = self.generate(&job);
        self.metrics.running_add(-1);
        let result = result.map(|generation| {
            let timings = generation.timings;
            let waited = started.duration_since(job.submitted).as_secs_f64();
            let per_token = (generation.tokens.len() > 1 && timings.decode_tok_s > 0.0)
                .then(|| 1.0 / timings.decode_tok_s);
            self.metrics.generation(
                generation.prompt_tokens.len(),
                generation.tokens.len(),
                generation.finish_reason,
                waited + timings.ttft_ms / 1e3,
                per_token,
            );
            Outcome {
                prompt_tokens: generation.prompt_tokens.len(),
                completion_tokens: generation.tokens.len(),
                finish_reason: generation.finish_reason,
                text: generation.text,
            }
        });
        let result = match result {
            Ok(outcome) if outcome.finish_reason == FinishReason::Cancelled && self.stopping() => {
                Err(EngineError::ShuttingDown)
            }
            other => other,
        };
        self.metrics
            .cache(self.runner.cache_stats(), self.runner.phase_stats());
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
        let _ = job.events.send(Event::Done(result));
    }

    /// Generates for `job`, streaming its text; a panic becomes an error of this job.
    fn generate(&mut self, job: &Job) -> Result<Generation, EngineError> {
        let mut sampler = Sampler::new(job.sampler)
            .map_err(|e| EngineError::Model(Box::new(ModelError::Sampling(e))))?;
        let shutdown = &self.shutdown;
        let mut on_text = |piece: &str| {
            !job.cancel.load(Ordering::Relaxed)
                && !shutdown.load(Ordering::Relaxed)
                && job.events.send(Event::Text(piece.to_string())).is_ok()
        };
        let (runner, model) = (&mut self.runner, &self.model);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            generate(
                runner,
                &model.tokenizer,
                &mut sampler,
                &job.prompt,
                &job.options,
                &mut on_text,
            )
        }));
        match outcome {
            Ok(Ok(generation)) => Ok(generation),
            Ok(Err(e)) => Err(EngineError::Model(Box::new(e))),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                log::error!("generation panicked: {what}");
                Err(EngineError::Panicked(what))
            }
        }
    }
}
