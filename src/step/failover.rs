//! Failover: when a backend other than the fallback fails with a lost device or out of
//! memory ([`crate::backend::Fault::fails_over`]) while compiling or running a step, the runner drops it from its
//! backend set, forgets everything compiled or resident for it, re-plans the step on
//! the survivors and runs it again. A sequence whose KV rows lived on the lost device
//! is recomputed from its tokens before its next step. After a panic, [`Runner::reset`]
//! drops what the panic may have left half-updated.

use serde::Serialize;

use crate::backend::BackendId;
use crate::cache::Phase;

use super::{Runner, Sequence, StepError};

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

impl Runner {
    /// Backends dropped so far, oldest first.
    pub fn failovers(&self) -> &[Failover] {
        &self.failovers
    }

    /// Forgets everything a panic inside a step may have left half-updated: compiled
    /// executors (their partitions' buffers), the co-execution gates (a pending choice)
    /// and plans. Resident weights stay: they are never written after loading.
    pub fn reset(&mut self) {
        self.cache.clear();
        self.coexec.forget(&self.backends, self.policy.fallback);
        self.placement = Default::default();
    }

    /// When `error` is a device failure of a backend that is not the fallback, drops
    /// that backend and returns true: the caller re-runs the step. Otherwise false.
    pub(super) fn fail_over(&mut self, error: &StepError, phase: Phase) -> bool {
        let Some(lost) = self.failed_device(error) else {
            return false;
        };
        let Some(backend) = self.backends.get(lost).cloned() else {
            return false;
        };
        self.backends = self.backends.without(lost);
        self.backends_fingerprint = self.backends.fingerprint();
        self.cache.clear();
        self.store.release(backend.capability().memory_space);
        self.coexec.forget(&self.backends, self.policy.fallback);
        self.placement = Default::default();
        let survivors: Vec<String> = self.backends.iter().map(|b| b.name().into()).collect();
        log::warn!(
            "backend {} failed ({error}); dropped it, re-planning on {}",
            backend.name(),
            survivors.join(",")
        );
        self.failovers.push(Failover {
            backend: backend.name().into(),
            phase,
            error: error.to_string(),
            recomputed: 0,
        });
        true
    }

    /// The backend that `error` says is lost or out of memory, when the runner can drop
    /// it (it is live and not the fallback).
    fn failed_device(&self, error: &StepError) -> Option<BackendId> {
        let (id, source) = error.backend_error()?;
        let droppable = id != self.policy.fallback && self.backends.get(id).is_some();
        (droppable && source.fault().fails_over()).then_some(id)
    }

    /// Recomputes `seq` from its tokens when its newest KV rows were on a backend that
    /// is gone; a no-op otherwise.
    pub(super) fn heal(&mut self, seq: &mut Sequence) -> Result<(), StepError> {
        let backends = &self.backends;
        let live = |space| {
            backends
                .iter()
                .any(|b| b.capability().memory_space == space)
        };
        if !seq.kv.drop_lost_device(live) || seq.is_empty() {
            return Ok(());
        }
        let tokens = std::mem::take(&mut seq.tokens);
        log::warn!(
            "recomputing {} positions whose KV rows were on a lost device",
            tokens.len()
        );
        if let Some(last) = self.failovers.last_mut() {
            last.recomputed += tokens.len();
        }
        self.forward(seq, &tokens).map(drop)
    }
}
