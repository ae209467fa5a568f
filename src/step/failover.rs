//! Failover's rule and record: when a backend other than the fallback fails with a lost
//! device or out of memory ([`crate::backend::Fault::fails_over`]) while compiling or
//! running a step, the runner drops it from its backend set, forgets everything compiled
//! or resident for it, re-plans the step on the survivors and runs it again (the one
//! retry path, `Runner::step`). A sequence whose KV rows lived on the lost device is
//! recomputed from its tokens before its next step. After a panic,
//! [`super::Runner::reset`] drops what the panic may have left half-updated.

use serde::Serialize;

use crate::backend::{BackendId, BackendSet};
use crate::cache::Phase;

use super::target::Target;
use super::StepError;

/// A backend the runner dropped after it failed, and what that cost.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failover {
    /// The failed backend's name.
    pub backend: String,
    /// The phase of the step that failed (`Prefill` or `Decode`).
    pub phase: Phase,
    /// The device error.
    pub error: String,
    /// Positions recomputed on the survivors because their KV rows were on the lost
    /// device.
    pub recomputed: usize,
}

impl Failover {
    /// The record of dropping `backend` after `error` in a `phase` step, leaving
    /// `survivors`; logged as a warning.
    pub(super) fn new(
        backend: &str,
        survivors: &BackendSet,
        phase: Phase,
        error: &StepError,
    ) -> Failover {
        let names: Vec<String> = survivors.iter().map(|b| b.name().into()).collect();
        log::warn!(
            "backend {backend} failed ({error}); dropped it, re-planning on {}",
            names.join(",")
        );
        Failover {
            backend: backend.into(),
            phase,
            error: error.to_string(),
            recomputed: 0,
        }
    }
}

/// The backend that `error` says is lost or out of memory, when `target` can drop it
/// (it is live and not the fallback).
pub(super) fn lost_backend(error: &StepError, target: &Target) -> Option<BackendId> {
    let (id, source) = error.backend_error()?;
    let droppable = id != target.policy().fallback && target.backends().get(id).is_some();
    (droppable && source.fault().fails_over()).then_some(id)
}
