//! Model files, tokenizers, tracing and generation.

mod coexec;
mod error;
mod generate;
mod hf_chat;
mod loader;
mod mapped;
mod runner;
mod runner_arms;
mod runner_failover;
#[cfg(test)]
mod special_tokens_tests;
mod weights;

pub mod chat_template;
pub mod fetch;
pub mod gguf;
pub mod llama;
pub mod safetensors;
pub mod sampler;
pub mod tokenizer;

pub use coexec::{Arm, BucketGate, CoexecMode, MIN_SPLIT_ROWS};
pub use error::ModelError;
pub use generate::{
    generate, generate_after, Decoding, FinishReason, GenerateOptions, Generation, OnPiece,
    Timings, TokenLogprobs, TopLogit, TopLogprob,
};
pub use loader::Model;
pub use runner::{
    ModelWeights, PhaseStats, Placed, Runner, Sequence, Work, MAX_STEP_TOKENS, PREFILL_CHUNK,
};
pub use runner_failover::Failover;
pub use weights::{GgufWeights, HfWeights};
