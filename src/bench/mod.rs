//! Benchmarks in the style of `llama-bench`: the environment stamp ([`env`](mod@env), with
//! [`sensors`] for power and temperatures), summary statistics ([`stats`]) and
//! prompt/generation speed of a model ([`llm`]); the checks that refuse misleading runs
//! ([`guard`]).

pub mod env;
pub mod guard;
pub mod llm;
pub mod sensors;
pub mod stats;
