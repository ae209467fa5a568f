//! Counters the graph cache keeps, reported by `switchyard bench` and the logs.

use serde::Serialize;

/// A snapshot of a [`super::GraphCache`]'s counters and occupancy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Lookups answered from the cache: `step_hits + structural_hits`.
    pub hits: u64,
    /// Hits through the step index (no key was built).
    pub step_hits: u64,
    /// Hits found by structural key (canonical bytes equal).
    pub structural_hits: u64,
    /// Lookups that built a key and found no entry with equal bytes.
    pub misses: u64,
    /// Calls of the compile closure, failed ones included.
    pub compiles: u64,
    /// Entries removed to fit the budget.
    pub evictions: u64,
    /// Stored entries whose hash equalled a looked-up key while the bytes differed,
    /// summed over lookups. Such an entry is never returned.
    pub collisions_detected: u64,
    /// Compiled entries returned but not stored because they alone exceed the budget.
    pub rejections: u64,
    /// Total time in the compile closure, nanoseconds.
    pub compile_time_ns: u64,
    /// Total time the cache spent looking up (index probe, hashing, byte comparison),
    /// nanoseconds; excludes the key-building and compile closures.
    pub lookup_time_ns: u64,
    /// Entries stored now.
    pub entries: usize,
    /// Bytes of the entries stored now.
    pub bytes: usize,
}
