//! `switchyard bench --arms cpu,gpu,split,gate`: the fairness protocol over execution
//! arms of one model — interleaved rounds in a seeded shuffled order, warm-ups, median
//! and 95 % CI of time to first token and decode speed per arm, speedups against the
//! first arm, an environment stamp taken before anything loads — written as JSON, a
//! markdown table and an SVG plot.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use switchyard::backend::{Backend, BackendSet};
use switchyard::bench::arm::{Arm, Sample};
use switchyard::bench::env::{CallerFacts, EnvStamp};
use switchyard::bench::fairness::{run_arms, FairnessConfig};
use switchyard::bench::llm::{argmax, bench_prompt};
use switchyard::bench::report::{markdown, write_outputs};
use switchyard::model::{fetch, Model};
use switchyard::step::{CoexecMode, Runner};

use crate::model_args::{backend_set, ModelArgs};

/// What `--arms` asked for, besides the model flags.
pub struct ArmsRequest<'a> {
    /// Model, backends, context and KV flags.
    pub model: &'a ModelArgs,
    /// Arm names, the first being the baseline of the speedups.
    pub arms: &'a [String],
    /// Prompt length whose time to first token is measured.
    pub prompt_tokens: usize,
    /// Decode steps timed after it.
    pub gen_tokens: usize,
    /// Rounds run before timing.
    pub warmup: usize,
    /// Rounds timed.
    pub rounds: usize,
    /// Seed of the round orders (default: the start time).
    pub seed: Option<u64>,
    /// Run despite a failed precision or memory check, marking the result.
    pub force: bool,
    /// Output prefix.
    pub out: PathBuf,
}

/// Runs the protocol and writes its outputs.
pub fn run(req: &ArmsRequest<'_>) -> Result<()> {
    if req.arms.is_empty() {
        bail!("--arms needs at least one of cpu, gpu, split, gate");
    }
    if req.prompt_tokens < 2 {
        bail!("the time-to-first-token prompt needs at least 2 tokens (--prompt-tokens)");
    }
    let path = req.model.model_path()?;
    let spec = if req.model.backends == "auto" {
        "auto"
    } else {
        req.model.backends.as_str()
    };
    let gpu_set = backend_set(spec, req.model.threads)?;
    // Every arm shares the one CPU backend (its thread pool and packed weights), so
    // that arms differ only in their plans: with an instance each, the same CPU plan
    // ran −6 % to +13 % apart between two arms, from run to run.
    let cpu_set = BackendSet::new(
        gpu_set
            .iter()
            .filter(|b| b.name() == "cpu")
            .cloned()
            .collect(),
    )
    .map_err(anyhow::Error::msg)?;
    let gpu: Option<&Arc<dyn Backend>> = gpu_set.iter().find(|b| b.name() != "cpu");
    // The GPU's detected version reads "ADAPTER (API, TYPE, driver DRIVER) features [..]".
    let version = gpu.map(|g| g.capability().version.clone());
    let stamp = EnvStamp::capture_with(CallerFacts {
        gpu_adapter: version
            .as_deref()
            .map(|v| v.split(" (").next().unwrap_or(v).to_string()),
        gpu_driver: version.as_deref().and_then(|v| {
            let driver = v.split("driver ").nth(1)?;
            Some(
                driver
                    .split(") features")
                    .next()
                    .unwrap_or(driver)
                    .to_string(),
            )
        }),
        model_sha256: Some(fetch::sha256_file(&path)?),
    });
    let seed = req.seed.unwrap_or(stamp.unix_time);
    let model = Model::open(&path).with_context(|| format!("loading {}", path.display()))?;
    // Checked before the prompt is built: a huge --prompt-tokens would otherwise make
    // the benchmark text that long first.
    let ctx = req
        .prompt_tokens
        .checked_add(req.gen_tokens)
        .and_then(|n| n.checked_add(1))
        .filter(|&n| n <= model.config.context_length)
        .with_context(|| {
            format!(
                "--prompt-tokens {} plus --gen-tokens {} exceed the model's context of {}",
                req.prompt_tokens, req.gen_tokens, model.config.context_length
            )
        })?;
    let prompt = bench_prompt(&model.tokenizer, req.prompt_tokens)?;
    let kv = req.model.kv_dtype();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let precision = format!("{file_name} weights as stored, {kv:?} KV cache");
    let mut runners = Vec::new();
    for name in req.arms {
        let (set, mode): (&BackendSet, CoexecMode) = match name.as_str() {
            "cpu" | "cpu2" => (&cpu_set, CoexecMode::Off),
            "gpu" => (&gpu_set, CoexecMode::Off),
            "split" => (&gpu_set, CoexecMode::Split),
            "gate" => (&gpu_set, CoexecMode::Gate),
            other => bail!("unknown arm {other:?} (arms: cpu, cpu2, gpu, split, gate)"),
        };
        if !is_cpu_only(name) && gpu.is_none() {
            bail!("arm {name} needs a GPU, and --backends {spec} found none (a software one needs --backends cpu,gpu)");
        }
        let runner = model
            .runner(set.clone(), ctx)
            .with_kv_dtype(kv)
            .with_coexec(mode);
        runners.push((name.clone(), runner));
    }
    let file_bytes = std::fs::metadata(&path)?.len();
    let gpu_arms = req.arms.iter().filter(|a| !is_cpu_only(a)).count() as u64;
    let mut kv_bytes = 0u64;
    for (_, runner) in &runners {
        kv_bytes += runner.new_sequence()?.kv_capacity_bytes() as u64;
    }
    let working_set = file_bytes * (1 + gpu_arms) + kv_bytes;
    let gen_tokens = req.gen_tokens;
    let mut arms: Vec<Arm<'_, anyhow::Error>> = runners
        .iter_mut()
        .map(|(name, runner)| {
            let prompt = &prompt;
            Arm::new(name.clone(), precision.clone(), move || {
                sample(runner, prompt, gen_tokens)
            })
        })
        .collect();
    let config = FairnessConfig {
        warmup_rounds: req.warmup,
        timed_rounds: req.rounds,
        seed,
        baseline: None,
        estimated_working_set_bytes: working_set,
        force: req.force.into(),
    };
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len} runs, {elapsed}")?
            .progress_chars("=> "),
    );
    eprintln!(
        "seed {seed}; {} warm-up and {} timed rounds of {} arms",
        req.warmup,
        req.rounds,
        arms.len()
    );
    let report = run_arms(&mut arms, stamp, &config, &mut |p| {
        bar.set_length(p.runs_total as u64);
        bar.set_position(p.runs_done as u64);
        bar.set_message(format!("{:?} {}", p.phase, p.arm));
    })?;
    bar.finish_and_clear();
    let paths = write_outputs(&report, &req.out)?;
    print!("{}", markdown(&report));
    eprintln!(
        "wrote {}, {}, {}",
        paths.json.display(),
        paths.markdown.display(),
        paths.svg.display()
    );
    Ok(())
}

/// One run of an arm: a fresh sequence, the prompt (time to first token, logits read
/// back), then `gen_tokens` greedy decode steps.
fn sample(runner: &mut Runner, prompt: &[u32], gen_tokens: usize) -> Result<Sample> {
    let mut seq = runner.new_sequence()?;
    let started = Instant::now();
    let mut logits = runner.forward(&mut seq, prompt)?;
    let ttft = started.elapsed();
    let started = Instant::now();
    for _ in 0..gen_tokens {
        logits = runner.forward(&mut seq, &[argmax(&logits)?])?;
    }
    Ok(Sample {
        ttft,
        decode: started.elapsed(),
        decode_tokens: gen_tokens,
    })
}

/// Whether arm `name` runs on the CPU alone (`cpu`, and `cpu2`, its A/A control).
fn is_cpu_only(name: &str) -> bool {
    matches!(name, "cpu" | "cpu2")
}
