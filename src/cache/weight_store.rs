//! The weight store: each weight read from its source and uploaded at most once per
//! memory space, then shared by `Arc` with every executor that uses it. Evicting an
//! executor never frees weights; the store keeps them for the model's lifetime.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;

use crate::backend::{
    Backend, BackendError, HostTensor, MemorySpace, ResidentWeight, WeightProvider,
};

/// Where host copies of weights come from (the model loader; an in-memory map in
/// tests). Reads should be cheap views (e.g. into a memory map): the store may ask
/// once per memory space.
pub trait WeightSource: Send + Sync {
    /// The host copy of weight `name`.
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError>;
}

/// Residency of one memory space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SpaceStats {
    /// The memory space.
    pub space: MemorySpace,
    /// Weights made resident there.
    pub loads: usize,
    /// Bytes those weights occupy there.
    pub resident_bytes: usize,
}

/// A snapshot of a [`WeightStore`]'s counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WeightStats {
    /// Calls of [`WeightProvider::resident`].
    pub requests: usize,
    /// Calls of [`Backend::upload`], failed ones included.
    pub uploads: usize,
    /// Per memory space, in space order.
    pub spaces: Vec<SpaceStats>,
}

/// One (space, name) entry; its own lock makes concurrent first requests load once
/// while different weights load in parallel.
type Slot = Arc<Mutex<Option<ResidentWeight>>>;

#[derive(Default)]
struct Counters {
    requests: usize,
    uploads: usize,
    spaces: BTreeMap<MemorySpace, SpaceStats>,
}

/// Weights resident per memory space, loaded on first request. Implements
/// [`WeightProvider`] for backends' `compile`; thread-safe.
pub struct WeightStore {
    source: Arc<dyn WeightSource>,
    slots: Mutex<HashMap<MemorySpace, HashMap<String, Slot>>>,
    counters: Mutex<Counters>,
}

/// Locks `m`, ignoring poisoning: every guarded value is valid between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WeightStore {
    /// An empty store reading host weights from `source`.
    pub fn new(source: Arc<dyn WeightSource>) -> WeightStore {
        WeightStore {
            source,
            slots: Mutex::new(HashMap::new()),
            counters: Mutex::new(Counters::default()),
        }
    }

    /// Weights made resident, over all memory spaces.
    pub fn loads(&self) -> usize {
        lock(&self.counters).spaces.values().map(|s| s.loads).sum()
    }

    /// Weights made resident in `space`.
    pub fn loads_in(&self, space: MemorySpace) -> usize {
        lock(&self.counters)
            .spaces
            .get(&space)
            .map_or(0, |s| s.loads)
    }

    /// Bytes resident in `space`.
    pub fn resident_bytes(&self, space: MemorySpace) -> usize {
        lock(&self.counters)
            .spaces
            .get(&space)
            .map_or(0, |s| s.resident_bytes)
    }

    /// Calls of [`Backend::upload`] so far, failed ones included.
    pub fn uploads(&self) -> usize {
        lock(&self.counters).uploads
    }

    /// All counters.
    pub fn stats(&self) -> WeightStats {
        let counters = lock(&self.counters);
        WeightStats {
            requests: counters.requests,
            uploads: counters.uploads,
            spaces: counters.spaces.values().copied().collect(),
        }
    }

    /// Forgets every weight resident in `space` (its backend is gone); they are loaded
    /// again if that space is ever asked for.
    pub fn release(&self, space: MemorySpace) {
        lock(&self.slots).remove(&space);
        if let Some(stats) = lock(&self.counters).spaces.get_mut(&space) {
            stats.resident_bytes = 0;
        }
    }

    fn slot(&self, space: MemorySpace, name: &str) -> Slot {
        let mut slots = lock(&self.slots);
        let per_space = slots.entry(space).or_default();
        match per_space.get(name) {
            Some(slot) => Arc::clone(slot),
            None => Arc::clone(per_space.entry(name.to_owned()).or_default()),
        }
    }
}

impl WeightProvider for WeightStore {
    fn resident(&self, name: &str, backend: &dyn Backend) -> Result<ResidentWeight, BackendError> {
        let space = backend.capability().memory_space;
        lock(&self.counters).requests += 1;
        let slot = self.slot(space, name);
        let mut resident = lock(&slot);
        if let Some(weight) = resident.as_ref() {
            return Ok(weight.clone());
        }
        let host = self.source.host_tensor(name)?;
        lock(&self.counters).uploads += 1;
        let weight = backend.upload(&host)?;
        if weight.space != space {
            return Err(BackendError::Bug(format!(
                "backend {} put weight {name:?} in {:?} but declares {space:?}",
                backend.name(),
                weight.space
            )));
        }
        {
            let mut counters = lock(&self.counters);
            let stats = counters.spaces.entry(space).or_insert(SpaceStats {
                space,
                loads: 0,
                resident_bytes: 0,
            });
            stats.loads += 1;
            stats.resident_bytes += weight.bytes;
        }
        log::debug!(
            "weight store: {name:?} resident in {space:?} ({} bytes)",
            weight.bytes
        );
        *resident = Some(weight.clone());
        Ok(weight)
    }
}
