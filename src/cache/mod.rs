//! The cache: compiled executors keyed by step and by verified structure
//! ([`GraphCache`]), and weights made resident once per memory space ([`WeightStore`]).
//!
//! **Invariant:** the cache knows nothing of models. Callers build the keys; the
//! cache guarantees that an entry is only returned for equal canonical bytes.

mod compile;
mod graph_cache;
mod stats;
mod step_key;
mod weight_store;

pub use compile::{get_or_compile, get_or_compile_plan, CompileContext, CompileError};
pub use graph_cache::{CacheBudget, CacheEntry, GraphCache};
pub use stats::CacheStats;
pub use step_key::{fingerprint, Phase, Pick, StepArm, StepKey};
pub use weight_store::{SpaceStats, WeightSource, WeightStats, WeightStore};
