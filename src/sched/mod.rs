//! Step orchestration over many sequences: which sequences step together, how a
//! prompt's prefill is chunked between other sequences' decodes, and when each one
//! ends. Model-agnostic: it drives a [`crate::step::Runner`] through batched steps and
//! a [`crate::decode::Decoding`] per sequence, and knows nothing of HTTP.

mod prefix;
mod scheduler;

pub use prefix::{PrefixCache, PrefixStats};
pub use scheduler::{
    Event, Limits, Request, Scheduler, StepReport, DEFAULT_PREFILL_TOKENS, DEFAULT_PREFIXES,
};
