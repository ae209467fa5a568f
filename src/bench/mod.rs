//! Benchmarks in the style of `llama-bench`: the environment stamp ([`env`]), summary
//! statistics ([`stats`]) and prompt/generation speed of a model ([`llm`]).

pub mod env;
pub mod llm;
pub mod stats;
