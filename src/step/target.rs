//! What a runner's steps are traced and planned over: the model, the live backends (with
//! the fingerprint every step key carries, kept in step with them), the placement
//! policy and the resident weights. Failover shrinks it; nothing else changes it.

use std::sync::Arc;

use crate::backend::{Backend, BackendId, BackendSet, MemorySpace};
use crate::cache::{CompileError, Pick, WeightStore};
use crate::graph::{eliminate_dead_code, Graph};
use crate::plan::Policy;

use super::returns::with_pick;
use super::StepModel;

/// The model, backends, policy and weights a runner plans on.
pub(super) struct Target {
    model: Arc<dyn StepModel>,
    backends: BackendSet,
    /// Fingerprint of `backends`, computed whenever they change.
    fingerprint: u64,
    policy: Policy,
    store: WeightStore,
}

impl Target {
    /// `model` on `backends` under the default policy, no weight resident yet.
    pub(super) fn new(model: Arc<dyn StepModel>, backends: BackendSet) -> Target {
        Target {
            store: WeightStore::new(model.weights()),
            model,
            fingerprint: backends.fingerprint(),
            backends,
            policy: Policy::default(),
        }
    }

    /// The same target planning with `policy`.
    pub(super) fn with_policy(self, policy: Policy) -> Target {
        Target { policy, ..self }
    }

    /// The model.
    pub(super) fn model(&self) -> &dyn StepModel {
        self.model.as_ref()
    }

    /// The live backends.
    pub(super) fn backends(&self) -> &BackendSet {
        &self.backends
    }

    /// The live backends' fingerprint.
    pub(super) fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The placement policy.
    pub(super) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The weights, loaded into each backend's memory on first use.
    pub(super) fn store(&self) -> &WeightStore {
        &self.store
    }

    /// Whether some live backend computes in `space`.
    pub(super) fn holds(&self, space: MemorySpace) -> bool {
        self.backends
            .iter()
            .any(|b| b.capability().memory_space == space)
    }

    /// The graph of a step of `n_tokens` rows and `n_logits` logits rows (or the token
    /// `pick` takes from each), dead code removed.
    pub(super) fn graph(
        &self,
        n_tokens: usize,
        n_logits: usize,
        pick: Pick,
    ) -> Result<Graph, CompileError> {
        let graph = with_pick(self.model.trace(n_tokens, n_logits)?, pick)?;
        Ok(eliminate_dead_code(&graph))
    }

    /// Drops backend `id` and the weights resident in its memory, and returns it; `None`
    /// when it is not live.
    pub(super) fn drop_backend(&mut self, id: BackendId) -> Option<Arc<dyn Backend>> {
        let backend = self.backends.get(id)?.clone();
        self.backends = self.backends.without(id);
        self.fingerprint = self.backends.fingerprint();
        self.store.release(backend.capability().memory_space);
        Some(backend)
    }
}
