//! The backends a run may use, looked up by id, with a fingerprint over their ids and
//! detected versions (part of every cache key, so a driver update is a miss).

use std::sync::Arc;

use super::{Backend, BackendId, Capability};
use crate::graph::CanonicalWriter;

/// An ordered set of backends with distinct ids.
#[derive(Clone, Default)]
pub struct BackendSet {
    backends: Vec<Arc<dyn Backend>>,
}

impl BackendSet {
    /// A set of `backends`, sorted by id; a repeated id is an error naming it.
    pub fn new(mut backends: Vec<Arc<dyn Backend>>) -> Result<BackendSet, String> {
        backends.sort_by_key(|b| b.id());
        for pair in backends.windows(2) {
            if pair[0].id() == pair[1].id() {
                return Err(format!(
                    "backends {} and {} share id {}",
                    pair[0].name(),
                    pair[1].name(),
                    pair[0].id()
                ));
            }
        }
        Ok(BackendSet { backends })
    }

    /// The same set without the backend `id` (a backend that failed is dropped).
    pub fn without(&self, id: BackendId) -> BackendSet {
        BackendSet {
            backends: self
                .backends
                .iter()
                .filter(|b| b.id() != id)
                .cloned()
                .collect(),
        }
    }

    /// The backend with `id`.
    pub fn get(&self, id: BackendId) -> Option<&Arc<dyn Backend>> {
        self.backends.iter().find(|b| b.id() == id)
    }

    /// All backends, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Backend>> {
        self.backends.iter()
    }

    /// `(id, capability)` pairs, as the partitioner takes them.
    pub fn capabilities(&self) -> Vec<(BackendId, &Capability)> {
        self.backends
            .iter()
            .map(|b| (b.id(), b.capability()))
            .collect()
    }

    /// The name of backend `id`, or its id when absent.
    pub fn name_of(&self, id: BackendId) -> String {
        self.get(id)
            .map_or_else(|| id.to_string(), |b| b.name().to_string())
    }

    /// Appends every backend's id, name and detected version to a key.
    pub fn write_canonical(&self, writer: &mut CanonicalWriter) {
        writer.str("backends/1");
        writer.u64(self.backends.len() as u64);
        for b in &self.backends {
            writer.u8(b.id().0);
            writer.str(b.name());
            writer.str(&b.capability().version);
        }
    }

    /// A 64-bit fingerprint of [`BackendSet::write_canonical`], for step keys.
    pub fn fingerprint(&self) -> u64 {
        let mut writer = CanonicalWriter::new();
        self.write_canonical(&mut writer);
        xxhash_rust::xxh3::xxh3_64(writer.as_bytes())
    }
}
