//! The graph cache: compiled executors keyed by verified structural keys, a step index
//! for the decode fast path, and LRU eviction under an entry and a byte budget.
//!
//! A lookup first probes the step index (no tracing). On a step miss the caller
//! describes the step into a [`CanonicalWriter`]; the cache hashes the bytes with its own
//! [`KeyHasher`] and compares the canonical bytes of every entry with that hash, so a
//! hash collision is a miss, never a wrong executor.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{CacheStats, StepKey};
use crate::graph::{default_hasher, CanonicalWriter, KeyHasher, StructuralKey};

/// Something the cache stores: it reports the bytes it holds (its own buffers and
/// kernels, not shared weights) so the byte budget can be enforced.
pub trait CacheEntry {
    /// Bytes this entry holds itself.
    fn bytes(&self) -> usize;
}

/// Limits on what the cache holds; eviction starts at whichever is reached first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CacheBudget {
    /// Most entries stored at once.
    pub max_entries: usize,
    /// Most bytes (sum of [`CacheEntry::bytes`]) stored at once.
    pub max_bytes: usize,
}

struct Slot<E> {
    key: StructuralKey,
    entry: Arc<E>,
    bytes: usize,
    last_used: u64,
    steps: Vec<StepKey>,
}

/// An LRU cache of compiled entries (executors) keyed by [`StructuralKey`], with a
/// [`StepKey`] index in front. Entries are shared by `Arc`, so eviction only drops the
/// cache's reference.
pub struct GraphCache<E> {
    budget: CacheBudget,
    hasher: KeyHasher,
    slots: HashMap<u64, Slot<E>>,
    by_hash: HashMap<u128, Vec<u64>>,
    by_step: HashMap<StepKey, u64>,
    /// Last-use tick -> slot id; the first entry is the least recently used.
    lru: BTreeMap<u64, u64>,
    clock: u64,
    next_id: u64,
    bytes: usize,
    stats: CacheStats,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl<E: CacheEntry> GraphCache<E> {
    /// An empty cache with the default key hash.
    pub fn new(budget: CacheBudget) -> GraphCache<E> {
        GraphCache::with_hasher(budget, default_hasher)
    }

    /// An empty cache hashing keys with `hasher` (tests pass a colliding one).
    pub fn with_hasher(budget: CacheBudget, hasher: KeyHasher) -> GraphCache<E> {
        GraphCache {
            budget,
            hasher,
            slots: HashMap::new(),
            by_hash: HashMap::new(),
            by_step: HashMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
            next_id: 0,
            bytes: 0,
            stats: CacheStats::default(),
        }
    }

    /// The budget this cache enforces.
    pub fn budget(&self) -> CacheBudget {
        self.budget
    }

    /// Counters and current occupancy.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.stats.step_hits + self.stats.structural_hits,
            entries: self.slots.len(),
            bytes: self.bytes,
            ..self.stats
        }
    }

    /// Drops every entry (after a backend is lost, its executors are useless and hold
    /// its memory); the counters stay, and the dropped entries count as evictions.
    pub fn clear(&mut self) {
        self.stats.evictions += self.slots.len() as u64;
        self.slots.clear();
        self.by_hash.clear();
        self.by_step.clear();
        self.lru.clear();
        self.bytes = 0;
    }

    /// The entry a previous lookup recorded for `step`, without tracing; marks it
    /// recently used. `None` is not counted as a miss: the caller goes on to
    /// [`GraphCache::get_or_insert_with`].
    pub fn get_by_step(&mut self, step: &StepKey) -> Option<Arc<E>> {
        let start = Instant::now();
        let id = self.by_step.get(step).copied()?;
        let found = self.touch(id);
        let took = start.elapsed();
        self.stats.lookup_time_ns = self.stats.lookup_time_ns.saturating_add(nanos(took));
        let (short, entry) = found?;
        self.stats.step_hits += 1;
        log::debug!("graph cache: step hit {short} ({:.3} ms)", millis(took));
        Some(entry)
    }

    /// The entry for `step`, compiling it on a miss.
    ///
    /// 1. Step index hit: returned at once; neither closure runs.
    /// 2. Otherwise `describe` writes the step's canonical bytes (graph, placement,
    ///    backend versions) and returns whatever `compile` needs (e.g. the traced graph
    ///    and plan). The cache hashes the bytes with its own hasher; an entry with equal
    ///    bytes is a hit, and `step` is recorded for it.
    /// 3. On a miss `compile` builds the entry, which is stored (evicting least
    ///    recently used entries until both budgets hold) and returned. An entry larger
    ///    than the byte budget is returned but not stored.
    ///
    /// Errors from either closure are returned unchanged and store nothing.
    pub fn get_or_insert_with<T, Err>(
        &mut self,
        step: &StepKey,
        describe: impl FnOnce(&mut CanonicalWriter) -> Result<T, Err>,
        compile: impl FnOnce(T) -> Result<E, Err>,
    ) -> Result<Arc<E>, Err> {
        if let Some(entry) = self.get_by_step(step) {
            return Ok(entry);
        }
        let mut writer = CanonicalWriter::new();
        let described = describe(&mut writer)?;

        let start = Instant::now();
        let key = writer.finish_with(self.hasher);
        let found = self
            .find(&key)
            .and_then(|id| self.touch(id).map(|hit| (id, hit)));
        let took = start.elapsed();
        self.stats.lookup_time_ns = self.stats.lookup_time_ns.saturating_add(nanos(took));
        if let Some((id, (short, entry))) = found {
            self.stats.structural_hits += 1;
            self.link_step(*step, id);
            log::debug!(
                "graph cache: structural hit {short} ({:.3} ms)",
                millis(took)
            );
            return Ok(entry);
        }
        self.stats.misses += 1;
        log::debug!("graph cache: miss {} ({:.3} ms)", key.short(), millis(took));

        let start = Instant::now();
        let compiled = compile(described);
        let took = start.elapsed();
        self.stats.compiles += 1;
        self.stats.compile_time_ns = self.stats.compile_time_ns.saturating_add(nanos(took));
        let entry = Arc::new(compiled?);
        log::debug!(
            "graph cache: compiled {} in {:.3} ms",
            key.short(),
            millis(took)
        );
        self.insert(key, *step, Arc::clone(&entry));
        Ok(entry)
    }

    /// The slot whose canonical bytes equal `key`'s; counts same-hash mismatches.
    fn find(&mut self, key: &StructuralKey) -> Option<u64> {
        let mut found = None;
        for id in self.by_hash.get(&key.hash()).into_iter().flatten() {
            if let Some(slot) = self.slots.get(id) {
                if slot.key.bytes() == key.bytes() {
                    found = Some(*id);
                } else {
                    self.stats.collisions_detected += 1;
                    log::debug!(
                        "graph cache: hash collision on {} (bytes differ)",
                        key.short()
                    );
                }
            }
        }
        found
    }

    /// Marks slot `id` most recently used; returns its key prefix and entry.
    fn touch(&mut self, id: u64) -> Option<(String, Arc<E>)> {
        let slot = self.slots.get_mut(&id)?;
        self.lru.remove(&slot.last_used);
        self.clock += 1;
        slot.last_used = self.clock;
        self.lru.insert(self.clock, id);
        Some((slot.key.short(), Arc::clone(&slot.entry)))
    }

    fn link_step(&mut self, step: StepKey, id: u64) {
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.steps.push(step);
            self.by_step.insert(step, id);
        }
    }

    fn insert(&mut self, key: StructuralKey, step: StepKey, entry: Arc<E>) {
        let bytes = entry.bytes();
        if self.budget.max_entries == 0 || bytes > self.budget.max_bytes {
            self.stats.rejections += 1;
            log::debug!(
                "graph cache: {} not stored ({bytes} bytes, budget {} bytes)",
                key.short(),
                self.budget.max_bytes
            );
            return;
        }
        while self.slots.len() >= self.budget.max_entries
            || bytes > self.budget.max_bytes.saturating_sub(self.bytes)
        {
            if !self.evict_lru() {
                break;
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.clock += 1;
        self.by_hash.entry(key.hash()).or_default().push(id);
        self.lru.insert(self.clock, id);
        self.by_step.insert(step, id);
        self.bytes += bytes;
        self.slots.insert(
            id,
            Slot {
                key,
                entry,
                bytes,
                last_used: self.clock,
                steps: vec![step],
            },
        );
    }

    /// Drops the least recently used entry and its step-index entries.
    fn evict_lru(&mut self) -> bool {
        let Some((_, id)) = self.lru.pop_first() else {
            return false;
        };
        let Some(slot) = self.slots.remove(&id) else {
            return true; // a stale tick; the LRU list still shrank
        };
        if let Some(ids) = self.by_hash.get_mut(&slot.key.hash()) {
            ids.retain(|&other| other != id);
            if ids.is_empty() {
                self.by_hash.remove(&slot.key.hash());
            }
        }
        for step in &slot.steps {
            self.by_step.remove(step);
        }
        self.bytes -= slot.bytes;
        self.stats.evictions += 1;
        log::debug!(
            "graph cache: evicted {} ({} bytes)",
            slot.key.short(),
            slot.bytes
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::convert::Infallible;

    use super::*;
    use crate::cache::{fingerprint, Phase, Pick, StepArm};

    #[derive(Debug, PartialEq)]
    struct Entry {
        name: &'static str,
        bytes: usize,
    }

    impl CacheEntry for Entry {
        fn bytes(&self) -> usize {
            self.bytes
        }
    }

    fn step(bucket: u32) -> StepKey {
        StepKey {
            model: fingerprint(b"model"),
            phase: Phase::Decode,
            bucket,
            sequences: 1,
            pick: Pick::Logits,
            backends: fingerprint(b"cpu"),
            arm: StepArm::Baseline,
        }
    }

    fn lookup(
        cache: &mut GraphCache<Entry>,
        bucket: u32,
        name: &'static str,
        bytes: usize,
    ) -> Arc<Entry> {
        let result: Result<_, Infallible> = cache.get_or_insert_with(
            &step(bucket),
            |w| {
                w.str(name);
                Ok(())
            },
            |()| Ok(Entry { name, bytes }),
        );
        result.unwrap_or_else(|never| match never {})
    }

    const ROOMY: CacheBudget = CacheBudget {
        max_entries: 8,
        max_bytes: 1000,
    };

    #[test]
    fn the_step_index_keeps_each_arm_apart() {
        let mut cache = GraphCache::new(ROOMY);
        lookup(&mut cache, 4, "baseline", 1);
        assert!(cache.get_by_step(&step(4)).is_some());
        for arm in [
            StepArm::Only(crate::backend::BackendId(1)),
            StepArm::Split { ratios: 7 },
        ] {
            let other = StepKey { arm, ..step(4) };
            assert!(cache.get_by_step(&other).is_none(), "{arm:?}");
        }
    }

    #[test]
    fn colliding_hashes_never_return_the_wrong_entry() {
        let mut cache = GraphCache::with_hasher(ROOMY, |_| 0);
        for (bucket, name) in [(10, "a"), (11, "b"), (12, "c")] {
            assert_eq!(lookup(&mut cache, bucket, name, 1).name, name);
        }
        // Different buckets, so the structural path decides, not the step index.
        for (bucket, name) in [(1, "c"), (2, "a"), (3, "b")] {
            assert_eq!(lookup(&mut cache, bucket, name, 1).name, name);
        }
        let stats = cache.stats();
        assert_eq!(stats.misses, 3);
        assert_eq!(stats.structural_hits, 3);
        // Misses: 0 + 1 + 2 mismatches; each hit compares against the 2 others.
        assert_eq!(stats.collisions_detected, 3 + 3 * 2);
        assert_eq!(stats.entries, 3);
    }

    #[test]
    fn step_hit_runs_neither_closure() {
        let mut cache = GraphCache::new(ROOMY);
        let first = lookup(&mut cache, 7, "decode", 10);
        let called = Cell::new(false);
        let again: Result<_, Infallible> = cache.get_or_insert_with(
            &step(7),
            |_| {
                called.set(true);
                Ok(())
            },
            |()| {
                called.set(true);
                Ok(Entry {
                    name: "other",
                    bytes: 1,
                })
            },
        );
        assert!(!called.get());
        assert!(again.is_ok_and(|e| Arc::ptr_eq(&e, &first)));
        assert_eq!(cache.stats().step_hits, 1);
    }

    #[test]
    fn oversized_entry_is_returned_but_not_stored() {
        let mut cache = GraphCache::new(ROOMY);
        assert_eq!(lookup(&mut cache, 0, "huge", 1001).bytes, 1001);
        let stats = cache.stats();
        assert_eq!((stats.rejections, stats.entries, stats.bytes), (1, 0, 0));
        assert!(cache.get_by_step(&step(0)).is_none());
    }

    #[test]
    fn eviction_drops_step_index_entries() {
        let budget = CacheBudget {
            max_entries: 1,
            max_bytes: 1000,
        };
        let mut cache = GraphCache::new(budget);
        lookup(&mut cache, 0, "a", 1);
        lookup(&mut cache, 1, "b", 1);
        assert!(cache.get_by_step(&step(0)).is_none());
        assert!(cache.get_by_step(&step(1)).is_some());
        assert_eq!(cache.stats().evictions, 1);
    }

    #[test]
    fn errors_store_nothing() {
        let mut cache: GraphCache<Entry> = GraphCache::new(ROOMY);
        let failed = cache.get_or_insert_with(&step(0), |_| Ok(()), |()| Err("no kernel"));
        assert_eq!(failed.err(), Some("no kernel"));
        let failed = cache.get_or_insert_with(
            &step(0),
            |_| Err::<(), _>("no trace"),
            |()| {
                Ok(Entry {
                    name: "x",
                    bytes: 1,
                })
            },
        );
        assert_eq!(failed.err(), Some("no trace"));
        let stats = cache.stats();
        assert_eq!((stats.misses, stats.compiles, stats.entries), (1, 1, 0));
    }
}
