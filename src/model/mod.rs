//! Model files, tokenizers, tracing and perplexity. Stepping a traced model (sequences,
//! batches, co-execution arms, step keys) is `crate::step`'s; sampling, constraints and
//! the generation loop are `crate::decode`'s.

mod error;
mod hf_chat;
mod loader;
mod mapped;
#[cfg(test)]
mod special_tokens_tests;
mod step_model;
mod weights;

pub mod chat_template;
pub mod fetch;
pub mod gguf;
pub mod llama;
pub mod perplexity;
pub mod safetensors;
pub mod tokenizer;

pub use error::{ModelError, SamplerError};
pub use loader::Model;
pub use step_model::LlamaStep;
pub use weights::{GgufWeights, HfWeights, ModelWeights};
