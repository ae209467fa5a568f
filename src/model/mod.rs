//! Model files, tokenizers, tracing, sampling, generation and perplexity. Stepping a traced model
//! (sequences, batches, co-execution arms, step keys) is `crate::step`'s.

mod error;
mod generate;
mod hf_chat;
mod loader;
mod mapped;
#[cfg(test)]
mod special_tokens_tests;
mod step_model;
mod weights;

pub mod chat_template;
pub mod constraint;
pub mod fetch;
pub mod gguf;
pub mod llama;
pub mod perplexity;
pub mod safetensors;
pub mod sampler;
mod sampler_select;
pub mod tokenizer;

pub use error::ModelError;
pub use generate::{
    generate, generate_after, prompt_logprobs, token_logprobs, Decoding, FinishReason,
    GenerateOptions, Generation, OnPiece, Timings, TokenLogprobs, TopLogit, TopLogprob,
};
pub use loader::Model;
pub use step_model::LlamaStep;
pub use weights::{GgufWeights, HfWeights, ModelWeights};
