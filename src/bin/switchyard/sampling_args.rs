//! Sampling flags shared by `generate` and `chat`.

use anyhow::{bail, Result};
use clap::Args;

use switchyard::decode::sampler::{Sampler, SamplerConfig};

/// How to pick each next token, and when to stop.
#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(
        long,
        short = 'n',
        default_value_t = 128,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_tokens: usize,
    /// 0 picks the most likely token (greedy); higher values sample more freely.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "T",
        allow_hyphen_values = true
    )]
    pub temperature: f32,
    /// Sample only among the K most likely tokens (0 = all; tokens tied with the K-th
    /// are kept too).
    #[arg(
        long,
        default_value_t = 40,
        value_name = "K",
        allow_negative_numbers = true
    )]
    pub top_k: usize,
    /// Sample only among the most likely tokens whose probabilities sum to P.
    #[arg(
        long,
        default_value_t = 0.95,
        value_name = "P",
        allow_hyphen_values = true
    )]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one.
    #[arg(
        long,
        default_value_t = 0.05,
        value_name = "P",
        allow_hyphen_values = true
    )]
    pub min_p: f32,
    /// Penalise tokens seen in the last --repeat-last-n tokens (1 = off).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "X",
        allow_hyphen_values = true
    )]
    pub repeat_penalty: f32,
    /// How many recent tokens --repeat-penalty looks at.
    #[arg(
        long,
        default_value_t = 64,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub repeat_last_n: usize,
    /// Subtract X from a token's logit for each time this generation already produced
    /// it (OpenAI's frequency_penalty; -2 to 2, 0 = off).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "X",
        allow_hyphen_values = true
    )]
    pub frequency_penalty: f32,
    /// Subtract X once from the logit of every token this generation already produced
    /// (OpenAI's presence_penalty; -2 to 2, 0 = off).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "X",
        allow_hyphen_values = true
    )]
    pub presence_penalty: f32,
    /// Add BIAS to token ID's logit, written ID+BIAS or ID-BIAS as in llama.cpp (e.g.
    /// 15043+1; 15043-inf never picks it); repeatable. `switchyard tokenize` shows ids.
    #[arg(long, value_name = "ID±BIAS", value_parser = parse_logit_bias, allow_hyphen_values = true)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Random seed: the same seed gives the same output.
    #[arg(
        long,
        default_value_t = 42,
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub seed: u64,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
}

/// Largest `--temperature`: far above it sampling is already uniform, so a larger
/// value is a typo.
const MAX_TEMPERATURE: f32 = 100.0;

/// Largest `--repeat-penalty`: 100 already all but bans every recent token.
const MAX_REPEAT_PENALTY: f32 = 100.0;

/// Largest magnitude of `--frequency-penalty` and `--presence-penalty` (OpenAI's range,
/// as the server takes them).
const MAX_PENALTY: f32 = 2.0;

/// Reads `--logit-bias`'s `ID+BIAS` / `ID-BIAS` (llama.cpp's form): a token id, a
/// sign, then a finite number or `inf` (only `-inf`, which bans the token).
fn parse_logit_bias(text: &str) -> Result<(u32, f32), String> {
    let form = || format!("{text:?} is not ID+BIAS or ID-BIAS (e.g. 15043+1, 15043-inf)");
    let at = text.find(['+', '-']).ok_or_else(form)?;
    let id = text[..at].parse::<u32>().map_err(|_| form())?;
    let bias = text[at..].parse::<f32>().map_err(|_| form())?;
    if bias.is_nan() || bias == f32::INFINITY {
        return Err(format!(
            "{text:?}: a bias is a finite number, or -inf to ban the token"
        ));
    }
    Ok((id, bias))
}

impl SamplingArgs {
    /// Refuses flag values that cannot mean what the user wants, naming the flag:
    /// `-n 0`, an empty `--stop`, and sampler values out of range, NaN or infinite.
    pub fn check(&self) -> Result<()> {
        if self.max_tokens == 0 {
            bail!("-n/--max-tokens must be at least 1");
        }
        if self.stop.iter().any(String::is_empty) {
            bail!("--stop takes a non-empty text (an empty one would stop before any token)");
        }
        let t = self.temperature;
        if !(t.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&t)) {
            bail!("--temperature {t} is out of range: it takes 0 (greedy) to {MAX_TEMPERATURE}");
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            bail!("--top-p {p} is out of range: it takes a value above 0 and at most 1");
        }
        let m = self.min_p;
        if !(0.0..=1.0).contains(&m) {
            bail!("--min-p {m} is out of range: it takes 0 (off) to 1");
        }
        for (flag, x) in [
            ("--frequency-penalty", self.frequency_penalty),
            ("--presence-penalty", self.presence_penalty),
        ] {
            if !(-MAX_PENALTY..=MAX_PENALTY).contains(&x) {
                bail!("{flag} {x} is out of range: it takes -{MAX_PENALTY} to {MAX_PENALTY} (0 = off)");
            }
        }
        let r = self.repeat_penalty;
        if !(r > 0.0 && r <= MAX_REPEAT_PENALTY) {
            bail!(
                "--repeat-penalty {r} is out of range: it takes a value above 0 and at most \
                 {MAX_REPEAT_PENALTY} (1 = off)"
            );
        }
        Ok(())
    }

    /// A sampler configured by these flags, for a vocabulary of `vocab` tokens: a
    /// `--top-k` above it keeps every token, which is said once on stderr.
    pub fn sampler(&self, vocab: usize) -> Result<Sampler> {
        self.check()?;
        let top_k = if self.top_k > vocab {
            eprintln!(
                "warning: --top-k {} exceeds the vocabulary of {vocab} tokens; using {vocab} \
                 (every token)",
                self.top_k
            );
            vocab
        } else {
            self.top_k
        };
        if let Some((id, _)) = self
            .logit_bias
            .iter()
            .find(|&&(id, _)| id as usize >= vocab)
        {
            bail!(
                "--logit-bias names token {id}, but the vocabulary has {vocab} tokens (0 to {})",
                vocab.saturating_sub(1)
            );
        }
        Ok(Sampler::new(SamplerConfig {
            temperature: self.temperature,
            top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            logit_bias: self.logit_bias.clone(),
            seed: self.seed,
        })?)
    }
}
