//! Why a step failed: the caller's input, or Switchyard itself.

use crate::backend::{BackendError, BackendId};
use crate::cache::CompileError;

/// A failed step, typed so that the caller's mistakes ([`StepError::Input`],
/// [`StepError::ContextFull`]) stay apart from ours (everything else).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// Tokens the model cannot evaluate (none, or outside the vocabulary).
    #[error("{0}")]
    Input(String),
    /// The sequence cannot hold the tokens.
    #[error("{needed} positions are needed but the context holds {context}; shorten the prompt, lower --max-tokens or raise --ctx")]
    ContextFull {
        /// Positions the step needs.
        needed: usize,
        /// Positions the sequence can hold.
        context: usize,
    },
    /// A broken invariant of the step layer.
    #[error("internal error: {0}")]
    Internal(String),
    /// Tracing, planning or compiling a step failed.
    #[error(transparent)]
    Compile(#[from] crate::cache::CompileError),
    /// Running a step failed.
    #[error(transparent)]
    Run(#[from] crate::exec::ExecError),
    /// A backend refused a tensor or a KV cache operation.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

impl StepError {
    /// The backend whose call failed and its error, when a partition's compile or run
    /// or a transfer failed (failover reads the error's [`crate::backend::Fault`] off it).
    pub fn backend_error(&self) -> Option<(BackendId, &BackendError)> {
        match self {
            StepError::Run(e) | StepError::Compile(CompileError::Exec(e)) => e.backend_error(),
            _ => None,
        }
    }

    /// A [`StepError::Internal`] saying what invariant broke.
    pub fn internal(detail: impl Into<String>) -> StepError {
        StepError::Internal(detail.into())
    }
}
