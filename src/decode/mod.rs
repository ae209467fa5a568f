//! Decoding policy, between `crate::model` (files, tokenizers, tracing) and
//! `crate::sched` (which sequences step together): how a step's logits become the next
//! token ([`sampler`]: penalties, temperature, top-k/p, min-p, a seeded draw), what the
//! output is held to ([`constraint`]: JSON Schema, regex, choices, Lark grammars on the
//! `llguidance` engine), and one generation's state however its steps run
//! ([`Decoding`]: streamed text, stop strings and ids, log-probabilities), with the
//! single-sequence loop ([`generate`]). Uses `crate::model` and `crate::step`; neither
//! uses it.

mod generate;

pub mod constraint;
pub mod sampler;

pub use generate::{
    generate, generate_after, prompt_logprobs, token_logprobs, Decoding, FinishReason,
    GenerateOptions, Generation, OnPiece, Timings, TokenLogprobs, TopLogit, TopLogprob,
};
