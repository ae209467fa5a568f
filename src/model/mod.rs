//! Model files, tokenizers, tracing and generation.

mod error;
mod mapped;

pub mod fetch;
pub mod gguf;
pub mod llama;
mod runner;
pub mod safetensors;
mod weights;

pub use error::ModelError;
pub use runner::{ModelWeights, PhaseStats, Runner, Sequence, PREFILL_CHUNK};
pub use weights::{GgufWeights, HfWeights};
