//! Runs one model's steps: sequences and their KV caches, single and batched steps
//! through the graph cache under typed step keys, the co-execution arms and their gates,
//! and failover when a backend dies. Model-agnostic: it runs whatever graphs a
//! [`StepModel`] traces, so `crate::model` keeps files, tokenizers, tracing and
//! sampling, and `crate::sched` decides which sequences step together.

mod arms;
mod coexec;
mod error;
mod failover;
mod logits;
mod model;
mod returns;
mod rows;
mod runner;
mod target;

pub use arms::{Arm, MIN_SPLIT_ROWS};
pub use coexec::{BucketGate, CoexecMode};
pub use error::StepError;
pub use failover::Failover;
pub use logits::BatchLogits;
pub use model::{inputs, KvShape, StepModel};
pub use returns::{DrawSettings, Returned, Returns, StepOutput};
pub use runner::{
    step_bucket, PhaseStats, Placed, Runner, Sequence, Work, MAX_STEP_TOKENS, PREFILL_CHUNK,
};
