//! Sampling flags shared by `generate` and `chat`.

use anyhow::{bail, Result};
use clap::Args;

use switchyard::model::sampler::{Sampler, SamplerConfig};

/// How to pick each next token, and when to stop.
#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 128, value_name = "N")]
    pub max_tokens: usize,
    /// 0 picks the most likely token (greedy); higher values sample more freely.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "T",
        allow_negative_numbers = true
    )]
    pub temperature: f32,
    /// Sample only among the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 40, value_name = "K")]
    pub top_k: usize,
    /// Sample only among the most likely tokens whose probabilities sum to P.
    #[arg(
        long,
        default_value_t = 0.95,
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one.
    #[arg(
        long,
        default_value_t = 0.05,
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub min_p: f32,
    /// Penalise tokens seen in the last --repeat-last-n tokens (1 = off).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "X",
        allow_negative_numbers = true
    )]
    pub repeat_penalty: f32,
    /// How many recent tokens --repeat-penalty looks at.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub repeat_last_n: usize,
    /// Random seed: the same seed gives the same output.
    #[arg(long, default_value_t = 42, value_name = "S")]
    pub seed: u64,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
}

impl SamplingArgs {
    /// A sampler configured by these flags.
    pub fn sampler(&self) -> Result<Sampler> {
        if self.stop.iter().any(String::is_empty) {
            bail!("--stop takes a non-empty text (an empty one would stop before any token)");
        }
        Ok(Sampler::new(SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
        })?)
    }
}
