//! What can go wrong in a backend, typed by what the caller must do about it: a lost
//! device or one out of memory (fail over to the other backends), a limit of the device
//! (refused, naming what needed how much of what is available), a node the capability
//! should have refused, and Switchyard's own bugs. [`BackendError::fault`] is the one
//! place each error is given its [`Fault`]; failover and the HTTP status follow it.

use serde::Serialize;

use super::Refusal;
use crate::graph::{OpKind, ValueId};

/// Errors raised by backends while compiling or running a partition.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A node the backend cannot run reached it (the plan should have prevented this).
    #[error("node {node} ({op}) cannot run here: {why}")]
    Unsupported {
        /// The node.
        node: ValueId,
        /// Its op.
        op: OpKind,
        /// The capability's refusal.
        why: Refusal,
    },
    /// A weight the graph names is not in the model.
    #[error("weight {0:?} not found")]
    MissingWeight(String),
    /// A weight exists but differs from what the graph declares.
    #[error("weight {name:?}: {detail}")]
    WeightMismatch {
        /// The weight's name.
        name: String,
        /// How it differs.
        detail: String,
    },
    /// A run-time input is missing or malformed.
    #[error("bad input: {0}")]
    Input(String),
    /// The KV cache is missing, too small, or has the wrong layout.
    #[error("KV cache: {0}")]
    KvCache(String),
    /// The device is gone (adapter lost, driver reset, a submission or wait failed):
    /// nothing more runs on it.
    #[error("device lost: {0}")]
    Lost(String),
    /// The device could not allocate what was asked.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    /// Work needs more of a fixed resource of the device than it has.
    #[error("{what}: {needed} needed, the device has {available}")]
    Limit {
        /// The resource and who needs it ("bytes of weight output.weight").
        what: String,
        /// How much is needed.
        needed: u64,
        /// How much the device has.
        available: u64,
    },
    /// A broken invariant of Switchyard itself.
    #[error("internal error: {0}")]
    Bug(String),
    /// `SWITCHYARD_ISA` names no kernel set, or one this CPU lacks.
    #[error(transparent)]
    Isa(super::cpu::isa::IsaError),
}

/// What a failure asks of whoever handles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// The device is gone: drop the backend and run on the others.
    Lost,
    /// The device could not allocate: drop the backend and run on the others.
    OutOfMemory,
    /// A fixed limit of the device: the work cannot run there as asked, and retrying
    /// elsewhere is the planner's job (the capability), not failover's.
    Limit,
    /// Switchyard's own bug: a node the plan should not have placed here, an input the
    /// step layer built wrong, a missing or mismatched weight, a broken invariant.
    Bug,
}

impl Fault {
    /// Whether failover drops the backend and re-runs the step on the others.
    pub fn fails_over(self) -> bool {
        matches!(self, Fault::Lost | Fault::OutOfMemory)
    }
}

impl BackendError {
    /// What the caller does about this error.
    pub fn fault(&self) -> Fault {
        match self {
            BackendError::Lost(_) => Fault::Lost,
            BackendError::OutOfMemory(_) => Fault::OutOfMemory,
            BackendError::Limit { .. } => Fault::Limit,
            BackendError::Unsupported { .. }
            | BackendError::MissingWeight(_)
            | BackendError::WeightMismatch { .. }
            | BackendError::Input(_)
            | BackendError::KvCache(_)
            | BackendError::Bug(_)
            | BackendError::Isa(_) => Fault::Bug,
        }
    }

    /// A [`BackendError::Limit`]: `what` needs `needed` where the device has `available`.
    pub fn limit(what: impl Into<String>, needed: u64, available: u64) -> BackendError {
        BackendError::Limit {
            what: what.into(),
            needed,
            available,
        }
    }
}
