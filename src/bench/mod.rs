//! Benchmarks. In the style of `llama-bench`: the environment stamp ([`env`](mod@env), with
//! [`sensors`] for power and temperatures), summary statistics ([`stats`]) and
//! prompt/generation speed of a model ([`llm`]) and the machine's read bandwidth beside it
//! ([`bandwidth`]), what a constrained decode step costs against an unconstrained one
//! ([`constrained`]) and what sampling costs a batched step ([`sampling`]). The fairness protocol of FusionML:
//! [`arm`]s interleaved with seeded shuffles, warm-ups, medians with intervals and speedups
//! ([`fairness`]), the checks that refuse misleading runs ([`guard`]), and its outputs
//! ([`report`], [`plot`]).

pub mod arm;
pub mod bandwidth;
pub mod constrained;
pub mod env;
pub mod fairness;
pub mod guard;
pub mod llm;
pub mod plot;
pub mod report;
pub mod sampling;
pub mod sensors;
pub mod stats;
pub mod tensor_mix;
