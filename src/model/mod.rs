//! Model files, tokenizers, tracing and generation.

mod error;
mod mapped;

pub mod fetch;
pub mod gguf;
pub mod safetensors;

pub use error::ModelError;
