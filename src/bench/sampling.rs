//! What sampling costs a batched decode step on the server's default path
//! (temperature 1, no top-k or top-p): one [`Sampler`] per sequence draws from its own
//! row of the model's logits, one after the other, as the scheduler's sequences do on
//! the engine's thread after each step. `switchyard bench --profile` sets it beside
//! the step time of each `tgNxB` test.

use std::time::Instant;

use serde::Serialize;

use super::stats::MedianSummary;
use crate::decode::sampler::{History, Sampler, SamplerConfig};
use crate::model::ModelError;
use crate::step::Runner;

/// Draws timed per row count unless told otherwise.
pub const SAMPLING_REPS: usize = 200;

/// The default path's sampling time for one step of `rows` sequences.
#[derive(Clone, Debug, Serialize)]
pub struct SamplingCost {
    /// Sequences (logit rows) sampled per step.
    pub rows: usize,
    /// Microseconds to sample every row once, per repetition.
    pub step_us: MedianSummary,
}

/// Times sampling one token from each of `rows` logit rows of `runner`'s model, `reps`
/// times. The rows are the model's own: the logits after each of the first `rows`
/// tokens of `prompt` (taken again from the first when the prompt is shorter), scored
/// in one pass on a fresh sequence.
pub fn default_sampling_cost(
    runner: &mut Runner,
    prompt: &[u32],
    rows: usize,
    reps: usize,
) -> Result<SamplingCost, ModelError> {
    if prompt.is_empty() || rows == 0 {
        return Err(ModelError::Input(
            "sampling needs a prompt and at least one row".into(),
        ));
    }
    let tokens = &prompt[..rows.min(prompt.len())];
    let mut seq = runner.new_sequence()?;
    let chunks = runner.forward_every_logit(&mut seq, tokens)?;
    let logits: Vec<&[f32]> = chunks.iter().flat_map(|c| c.iter()).collect();
    let mut samplers = (0..rows as u64)
        .map(|seed| {
            Sampler::new(SamplerConfig {
                temperature: 1.0,
                seed,
                ..SamplerConfig::default()
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut times = Vec::with_capacity(reps);
    // One untimed pass first, so every sampler's buffers are allocated.
    for rep in 0..=reps {
        let start = Instant::now();
        for (i, sampler) in samplers.iter_mut().enumerate() {
            let at = i % logits.len();
            let history = History::prompt(&tokens[..=at]);
            std::hint::black_box(sampler.sample(logits[at], history)?);
        }
        if rep > 0 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(SamplingCost {
        rows,
        step_us: MedianSummary::of(&times)
            .ok_or_else(|| ModelError::internal("no finite sampling timings"))?,
    })
}
