//! Graph cache and weight store, through the public API: verified keys under forced
//! hash collisions, LRU by entries and bytes against a reference model, the step fast
//! path, and weights loaded once per memory space and outliving their executors.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use switchyard::backend::{
    Backend, BackendError, BackendId, Capability, CompiledPartition, CostHints, DTypeSet,
    HostTensor, MemorySpace, OpSet, PartitionSpec, ResidentWeight, SharedBytes, Tensor,
    WeightProvider,
};
use switchyard::cache::{
    fingerprint, CacheBudget, CacheEntry, CacheStats, GraphCache, Phase, StepArm, StepKey,
    WeightSource, WeightStore,
};
use switchyard::graph::{DType, KeyHasher};

/// A stand-in for an executor: its structural key's name, its size, and any weights.
struct Entry {
    key: u32,
    bytes: usize,
    weights: Vec<ResidentWeight>,
}

impl CacheEntry for Entry {
    fn bytes(&self) -> usize {
        self.bytes
    }
}

fn step(bucket: u32) -> StepKey {
    StepKey {
        model: fingerprint(b"tiny-llama"),
        phase: Phase::Decode,
        bucket,
        sequences: 1,
        pick: switchyard::cache::Pick::Logits,
        backends: fingerprint(b"cpu"),
        arm: StepArm::Baseline,
    }
}

/// Looks up structural key `key` through step `bucket`; returns the entry and whether
/// the compile closure ran.
fn lookup(
    cache: &mut GraphCache<Entry>,
    bucket: u32,
    key: u32,
    bytes: usize,
) -> (Arc<Entry>, bool) {
    let mut compiled = false;
    let result: Result<_, Infallible> = cache.get_or_insert_with(
        &step(bucket),
        |w| {
            w.str("test-graph");
            w.u32(key);
            Ok(key)
        },
        |key| {
            compiled = true;
            Ok(Entry {
                key,
                bytes,
                weights: Vec::new(),
            })
        },
    );
    (result.unwrap_or_else(|never| match never {}), compiled)
}

#[test]
fn hits_refresh_lru_order() {
    let mut cache = GraphCache::new(CacheBudget {
        max_entries: 2,
        max_bytes: 100,
    });
    lookup(&mut cache, 0, 0, 1);
    lookup(&mut cache, 1, 1, 1);
    lookup(&mut cache, 0, 0, 1); // step hit: key 0 becomes most recent
    lookup(&mut cache, 2, 2, 1); // evicts key 1, the least recently used
    assert!(cache.get_by_step(&step(1)).is_none());
    assert_eq!(cache.get_by_step(&step(0)).map(|e| e.key), Some(0));
    assert_eq!(cache.stats().evictions, 1);
}

#[test]
fn byte_budget_evicts_before_entry_budget() {
    let mut cache = GraphCache::new(CacheBudget {
        max_entries: 10,
        max_bytes: 100,
    });
    lookup(&mut cache, 0, 0, 60);
    lookup(&mut cache, 1, 1, 30);
    lookup(&mut cache, 2, 2, 50); // 140 > 100: key 0 goes, 80 remain
    let stats = cache.stats();
    assert_eq!((stats.entries, stats.bytes, stats.evictions), (2, 80, 1));
}

#[test]
fn entry_budget_evicts_before_byte_budget() {
    let mut cache = GraphCache::new(CacheBudget {
        max_entries: 2,
        max_bytes: 1000,
    });
    for key in 0..3 {
        lookup(&mut cache, key, key, 10);
    }
    let stats = cache.stats();
    assert_eq!((stats.entries, stats.bytes, stats.evictions), (2, 20, 1));
}

#[test]
fn step_hits_return_the_same_arc_without_compiling() {
    let mut cache = GraphCache::new(CacheBudget {
        max_entries: 4,
        max_bytes: 1000,
    });
    let (first, compiled) = lookup(&mut cache, 9, 9, 10);
    assert!(compiled);
    for _ in 0..100 {
        let (again, compiled) = lookup(&mut cache, 9, 9, 10);
        assert!(!compiled);
        assert!(Arc::ptr_eq(&first, &again));
    }
    let stats = cache.stats();
    assert_eq!((stats.step_hits, stats.hits, stats.compiles), (100, 100, 1));
}

/// The reference model: keys in LRU order (least recent first) with the buckets
/// linked to each.
#[derive(Default)]
struct Model {
    lru: Vec<(u32, Vec<u32>)>,
    expected: CacheStats,
}

impl Model {
    fn bytes(&self, sizes: &[usize]) -> usize {
        self.lru.iter().map(|(k, _)| sizes[*k as usize]).sum()
    }

    /// Applies one lookup; returns whether a compile is expected.
    fn apply(
        &mut self,
        budget: CacheBudget,
        sizes: &[usize],
        key: u32,
        bucket: u32,
        collide: bool,
    ) -> bool {
        let pos = self.lru.iter().position(|(k, _)| *k == key);
        if let Some(p) = self.lru.iter().position(|(_, b)| b.contains(&bucket)) {
            let linked = self.lru.remove(p);
            self.lru.push(linked);
            self.expected.step_hits += 1;
            return false;
        }
        if collide {
            self.expected.collisions_detected +=
                (self.lru.len() - usize::from(pos.is_some())) as u64;
        }
        if let Some(p) = pos {
            let (k, mut buckets) = self.lru.remove(p);
            buckets.push(bucket);
            self.lru.push((k, buckets));
            self.expected.structural_hits += 1;
            return false;
        }
        self.expected.misses += 1;
        self.expected.compiles += 1;
        let size = sizes[key as usize];
        if budget.max_entries == 0 || size > budget.max_bytes {
            self.expected.rejections += 1;
            return true;
        }
        while self.lru.len() >= budget.max_entries || self.bytes(sizes) + size > budget.max_bytes {
            self.lru.remove(0);
            self.expected.evictions += 1;
        }
        self.lru.push((key, vec![bucket]));
        true
    }
}

proptest! {
    #[test]
    fn cache_matches_reference_lru(
        max_entries in 0usize..5,
        max_bytes in 0usize..120,
        sizes in prop::collection::vec(0usize..60, 8),
        ops in prop::collection::vec((0u32..8, 0u32..3), 1..120),
        collide in any::<bool>(),
    ) {
        let budget = CacheBudget { max_entries, max_bytes };
        let hasher: KeyHasher = if collide { |_| 0 } else { switchyard::graph::default_hasher };
        let mut cache = GraphCache::with_hasher(budget, hasher);
        let mut model = Model::default();
        for (key, variant) in ops {
            // Each key has three step keys, so both the step and structural paths run.
            let bucket = key * 3 + variant;
            let want_compile = model.apply(budget, &sizes, key, bucket, collide);
            let (entry, compiled) = lookup(&mut cache, bucket, key, sizes[key as usize]);
            prop_assert_eq!(entry.key, key);
            prop_assert_eq!(compiled, want_compile);
            let stats = cache.stats();
            prop_assert!(stats.bytes <= max_bytes && stats.entries <= max_entries);
            let expected = CacheStats {
                hits: model.expected.step_hits + model.expected.structural_hits,
                entries: model.lru.len(),
                bytes: model.bytes(&sizes),
                compile_time_ns: stats.compile_time_ns,
                lookup_time_ns: stats.lookup_time_ns,
                ..model.expected
            };
            prop_assert_eq!(stats, expected);
        }
    }
}

/// Host weights from a map, counting reads.
struct MapSource {
    weights: HashMap<String, HostTensor>,
    reads: AtomicUsize,
}

impl WeightSource for MapSource {
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.weights
            .get(name)
            .cloned()
            .ok_or_else(|| BackendError::MissingWeight(name.to_string()))
    }
}

fn source(names: &[&str]) -> Arc<MapSource> {
    let weights = names
        .iter()
        .map(|&name| {
            let data = SharedBytes::from_vec(vec![7; 16]);
            let tensor =
                HostTensor::new(DType::F32, [4].into(), data).expect("16 bytes hold 4 f32");
            (name.to_string(), tensor)
        })
        .collect();
    Arc::new(MapSource {
        weights,
        reads: AtomicUsize::new(0),
    })
}

/// A backend that only uploads: copies the bytes into its "memory space".
struct CopyBackend {
    capability: Capability,
    /// Space written into uploaded weights (differs from the declared one to test checks).
    puts_in: MemorySpace,
}

impl CopyBackend {
    fn new(space: u8) -> CopyBackend {
        CopyBackend {
            capability: Capability {
                ops: OpSet::all(),
                dtypes: DTypeSet::all(),
                operand_dtypes: DTypeSet::default(),
                max_dims: 4,
                alignment: 1,
                max_elements: 1 << 20,
                priority: 1,
                memory_space: MemorySpace(space),
                version: "test".into(),
                cost: CostHints {
                    gflops: 1.0,
                    bandwidth_gbs: 1.0,
                    launch_us: 1.0,
                    transfer_gbs: 1.0,
                    transfer_us: 1.0,
                },
            },
            puts_in: MemorySpace(space),
        }
    }
}

fn compiles_nothing() -> BackendError {
    BackendError::Bug("test backend compiles nothing".into())
}

impl Backend for CopyBackend {
    fn id(&self) -> BackendId {
        BackendId(self.capability.memory_space.0)
    }
    fn name(&self) -> &str {
        "copy"
    }
    fn capability(&self) -> &Capability {
        &self.capability
    }
    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError> {
        let copy = weight.data.as_bytes().to_vec();
        Ok(ResidentWeight {
            space: self.puts_in,
            bytes: copy.len(),
            handle: Arc::new(copy),
        })
    }
    fn compile(
        &self,
        _: &PartitionSpec<'_>,
        _: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError> {
        Err(compiles_nothing())
    }
    fn import(&self, _: Tensor) -> Result<Tensor, BackendError> {
        Err(compiles_nothing())
    }
    fn export(&self, _: &Tensor) -> Result<Tensor, BackendError> {
        Err(compiles_nothing())
    }
}

#[test]
fn weights_load_once_per_space_and_outlive_evicted_executors() -> Result<(), BackendError> {
    let src = source(&["w.q", "w.k"]);
    let store = WeightStore::new(src.clone());
    let backends = [CopyBackend::new(0), CopyBackend::new(1)];
    // One entry at a time: every compile evicts the previous executor.
    let mut cache = GraphCache::new(CacheBudget {
        max_entries: 1,
        max_bytes: 1000,
    });
    let mut first_q = None;
    for bucket in 0..6u32 {
        let backend = &backends[bucket as usize % 2];
        let entry = cache.get_or_insert_with(
            &step(bucket),
            |w| {
                w.u32(bucket);
                Ok(())
            },
            |()| {
                let weights = ["w.q", "w.k"]
                    .iter()
                    .map(|name| store.resident(name, backend))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Entry {
                    key: bucket,
                    bytes: 10,
                    weights,
                })
            },
        )?;
        first_q.get_or_insert_with(|| Arc::downgrade(&entry.weights[0].handle));
    }
    assert_eq!(cache.stats().evictions, 5);
    drop(cache);
    for space in [MemorySpace(0), MemorySpace(1)] {
        assert_eq!(store.loads_in(space), 2);
        assert_eq!(store.resident_bytes(space), 32);
    }
    assert_eq!(
        (
            store.loads(),
            store.uploads(),
            src.reads.load(Ordering::SeqCst)
        ),
        (4, 4, 4)
    );
    assert_eq!(store.stats().requests, 12);
    // Every executor is gone; the store still holds the weight, and hands out that copy.
    let first_q = first_q
        .and_then(|weak| weak.upgrade())
        .expect("weight survives eviction");
    let again = store.resident("w.q", &backends[0])?;
    assert!(Arc::ptr_eq(&first_q, &again.handle));
    assert_eq!(store.loads(), 4);
    Ok(())
}

#[test]
fn concurrent_first_requests_load_once() {
    let src = source(&["w"]);
    let store = WeightStore::new(src.clone());
    let backend = CopyBackend::new(1);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| assert!(store.resident("w", &backend).is_ok()));
        }
    });
    assert_eq!((store.loads(), src.reads.load(Ordering::SeqCst)), (1, 1));
}

#[test]
fn errors_are_reported_and_nothing_is_kept() {
    let store = WeightStore::new(source(&["w"]));
    let honest = CopyBackend::new(0);
    assert!(matches!(
        store.resident("missing", &honest),
        Err(BackendError::MissingWeight(name)) if name == "missing"
    ));
    let liar = CopyBackend {
        puts_in: MemorySpace(3),
        ..CopyBackend::new(2)
    };
    assert!(matches!(
        store.resident("w", &liar),
        Err(BackendError::Bug(_))
    ));
    assert_eq!(store.loads(), 0);
}
