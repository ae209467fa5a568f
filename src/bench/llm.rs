//! Prompt-processing and text-generation speed, measured the way `llama-bench` does:
//! `ppN` is tokens per second for one N-token prompt, `tgN` is tokens per second for N
//! single-token decode steps after a [`TG_PROMPT_TOKENS`]-token prompt. Each test runs
//! once to warm up (compiling its executors), then `reps` timed times, each on a fresh
//! sequence.

use std::time::Instant;

use serde::Serialize;

use super::stats::Summary;
use crate::backend::cpu::cut::Cut;
use crate::model::tokenizer::Tokenizer;
use crate::model::ModelError;
use crate::step::{DrawSettings, Returned, Returns, Runner, Work};

/// Prompt length before the decode steps of a `tg` test.
pub const TG_PROMPT_TOKENS: usize = 128;

/// English text repeated to make benchmark prompts (the same text llama.cpp is
/// measured on, so both tokenize comparable prompts).
pub const BENCH_TEXT: &str = "The history of the city spans many centuries, and its streets \
    still carry the marks of every era. Merchants, scholars and travelers arrived by river \
    and by road, bringing goods, ideas and languages. ";

/// One benchmark test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchTest {
    /// Prompt processing: one prefill of this many tokens.
    Prompt(usize),
    /// Text generation: this many decode steps after a [`TG_PROMPT_TOKENS`] prompt.
    Generate(usize),
    /// Batched text generation: `steps` decode steps of `sequences` sequences stepped
    /// together, each after its own [`TG_PROMPT_TOKENS`] prompt (prefilled untimed).
    Batch {
        /// Decode steps.
        steps: usize,
        /// Sequences per step.
        sequences: usize,
    },
}

impl BenchTest {
    /// Its llama-bench name: `pp512`, `tg128`.
    pub fn name(&self) -> String {
        match self {
            BenchTest::Prompt(n) => format!("pp{n}"),
            BenchTest::Generate(n) => format!("tg{n}"),
            BenchTest::Batch { steps, sequences } => format!("tg{steps}x{sequences}"),
        }
    }

    /// Tokens each timed repetition processes (and divides its time by).
    pub fn tokens(&self) -> usize {
        match self {
            BenchTest::Prompt(n) | BenchTest::Generate(n) => *n,
            BenchTest::Batch { steps, sequences } => steps * sequences,
        }
    }

    /// Prompt tokens it needs.
    pub fn prompt_needed(&self) -> usize {
        match self {
            BenchTest::Prompt(n) => *n,
            BenchTest::Generate(_) | BenchTest::Batch { .. } => TG_PROMPT_TOKENS,
        }
    }

    /// Context positions it needs (per sequence).
    pub fn context_needed(&self) -> usize {
        match self {
            BenchTest::Prompt(n) => *n,
            BenchTest::Generate(n) | BenchTest::Batch { steps: n, .. } => TG_PROMPT_TOKENS + n,
        }
    }
}

/// The timed repetitions of one test.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestResult {
    /// `ppN` or `tgN`.
    pub test: String,
    /// Tokens per repetition.
    pub tokens: usize,
    /// Tokens per second of each timed repetition, in the order run.
    pub tok_s: Vec<f64>,
    /// Median, min, max and CI of `tok_s`.
    pub summary: Summary,
}

/// The benchmark prompt: [`BENCH_TEXT`] repeated, tokenized and cut to `n` tokens.
pub fn bench_prompt(tokenizer: &Tokenizer, n: usize) -> Result<Vec<u32>, ModelError> {
    let mut repeats = 16;
    loop {
        let ids = tokenizer.encode(&BENCH_TEXT.repeat(repeats), false)?;
        if ids.len() >= n {
            return Ok(ids[..n].to_vec());
        }
        if ids.len() <= repeats {
            return Err(ModelError::Input(format!(
                "the tokenizer makes only {} tokens of the benchmark text",
                ids.len()
            )));
        }
        repeats = repeats.saturating_mul(2);
    }
}

/// Runs `test` on `prompt` (at least [`BenchTest::prompt_needed`] tokens): one warm-up,
/// then `reps` timed repetitions. `on_rep` is called after each repetition, warm-up
/// included.
pub fn run_test(
    runner: &mut Runner,
    prompt: &[u32],
    test: BenchTest,
    reps: usize,
    decode: Decode,
    on_rep: &mut dyn FnMut(),
) -> Result<TestResult, ModelError> {
    if reps == 0 {
        return Err(ModelError::Input(
            "a benchmark needs at least one repetition".into(),
        ));
    }
    if test.tokens() == 0 {
        return Err(ModelError::Input(format!(
            "{}: no tokens to time",
            test.name()
        )));
    }
    let prompt = prompt.get(..test.prompt_needed()).ok_or_else(|| {
        ModelError::Input(format!(
            "{} needs a {}-token prompt, got {}",
            test.name(),
            test.prompt_needed(),
            prompt.len()
        ))
    })?;
    let mut tok_s = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let seconds = match test {
            BenchTest::Prompt(_) => time_prompt(runner, prompt)?,
            BenchTest::Generate(n) => time_generation(runner, prompt, n, decode)?,
            BenchTest::Batch { steps, sequences } => {
                time_batch(runner, prompt, steps, sequences, decode)?
            }
        };
        if rep > 0 {
            tok_s.push(test.tokens() as f64 / seconds.max(f64::MIN_POSITIVE));
        }
        on_rep();
    }
    let summary = Summary::of(&tok_s)
        .ok_or_else(|| ModelError::Internal(format!("{}: no finite timings", test.name())))?;
    Ok(TestResult {
        test: test.name(),
        tokens: test.tokens(),
        tok_s,
        summary,
    })
}

/// Seconds to prefill `prompt` into a fresh sequence.
fn time_prompt(runner: &mut Runner, prompt: &[u32]) -> Result<f64, ModelError> {
    let mut seq = runner.new_sequence()?;
    let start = Instant::now();
    runner.forward(&mut seq, prompt)?;
    Ok(start.elapsed().as_secs_f64())
}

/// How a decode test picks each step's token: greedily (temperature 0, as
/// `llama-bench`), or drawn at a temperature, top-k and top-p cutting or not, where the
/// logits are computed (decisions 196, 201), from random bits of a fixed seed so runs
/// (and each repetition) repeat.
#[derive(Clone, Copy, Debug)]
pub struct Decode {
    temperature: f32,
    cut: Cut,
    state: u64,
}

impl Decode {
    /// Picks at `temperature` (0: greedy) under `cut`; `None` unless the temperature
    /// is finite and at least 0.
    pub fn at(temperature: f32, cut: Cut) -> Option<Decode> {
        (temperature.is_finite() && temperature >= 0.0).then_some(Decode {
            temperature,
            cut,
            state: 0x9E37_79B9_7F4A_7C15,
        })
    }

    /// The temperature.
    pub fn temperature(&self) -> f32 {
        self.temperature
    }

    /// What the next step returns: the greedy token, or one drawn with the next bits.
    fn head(&mut self) -> Returns {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let bits = (self.state >> 32) as u32;
        DrawSettings::new(self.temperature, 0.0, self.cut, bits)
            .map_or(Returns::Token, Returns::Draw)
    }
}

/// Seconds for `steps` decode steps after prefilling `prompt` (not timed), each
/// returning only its token (greedy, or drawn: `decode`), as generation runs
/// (decisions 147, 196).
fn time_generation(
    runner: &mut Runner,
    prompt: &[u32],
    steps: usize,
    mut decode: Decode,
) -> Result<f64, ModelError> {
    let mut seq = runner.new_sequence()?;
    let mut token = picked(runner.forward_token(&mut seq, prompt, decode.head())?)?;
    let start = Instant::now();
    for _ in 0..steps {
        token = picked(runner.forward_token(&mut seq, &[token], decode.head())?)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Seconds for `steps` decode steps of `sequences` sequences stepped together (each
/// returning only its token, as `decode` picks it), after prefilling `prompt` into
/// each (not timed).
fn time_batch(
    runner: &mut Runner,
    prompt: &[u32],
    steps: usize,
    sequences: usize,
    mut decode: Decode,
) -> Result<f64, ModelError> {
    let mut seqs = Vec::with_capacity(sequences);
    let mut next = Vec::with_capacity(sequences);
    for _ in 0..sequences {
        let mut seq = runner.new_sequence()?;
        next.push([picked(runner.forward_greedy(&mut seq, prompt)?)?]);
        seqs.push(seq);
    }
    let start = Instant::now();
    for _ in 0..steps {
        let mut work: Vec<Work<'_>> = seqs
            .iter_mut()
            .zip(&next)
            .map(|(seq, tokens)| Work {
                seq,
                tokens,
                returns: decode.head(),
            })
            .collect();
        let output = runner.forward_batch(&mut work)?;
        for (n, returned) in next.iter_mut().zip(output.iter()) {
            n[0] = match returned {
                Returned::Token(token) => picked(token)?,
                Returned::Logits(logits) => argmax(logits)?,
            };
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

/// A greedy step's token, or an error when every logit was -inf or NaN.
fn picked(token: Option<u32>) -> Result<u32, ModelError> {
    token.ok_or_else(|| ModelError::internal("the model returned no finite logit"))
}

/// Index of the largest logit, ties to the lowest id (greedy decoding without a
/// sampler, [`crate::backend::cpu::argmax`]), or an error for no logits.
pub fn argmax(logits: &[f32]) -> Result<u32, ModelError> {
    crate::backend::cpu::argmax(logits)
        .map(|i| i as u32)
        .ok_or_else(|| ModelError::internal("the model returned no logits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_are_named_and_sized_like_llama_bench() {
        let pp = BenchTest::Prompt(512);
        let tg = BenchTest::Generate(128);
        assert_eq!(
            (pp.name(), pp.tokens(), pp.prompt_needed()),
            ("pp512".into(), 512, 512)
        );
        assert_eq!(
            (tg.name(), tg.tokens(), tg.prompt_needed()),
            ("tg128".into(), 128, 128)
        );
        let batch = BenchTest::Batch {
            steps: 32,
            sequences: 16,
        };
        assert_eq!((batch.name(), batch.tokens()), ("tg32x16".into(), 512));
        assert_eq!(batch.context_needed(), 160);
        assert_eq!(pp.context_needed(), 512);
        assert_eq!(tg.context_needed(), 256);
    }

    #[test]
    fn argmax_picks_the_largest_logit_and_rejects_empty_logits() {
        assert_eq!(argmax(&[0.1, 3.0, -2.0, 2.9]).unwrap(), 1);
        assert!(argmax(&[]).is_err());
    }
}
