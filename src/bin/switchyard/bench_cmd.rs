//! `switchyard bench`: prompt-processing (`ppN`) and generation (`tgN`) speed of a model
//! in the style of `llama-bench` — a table of median tok/s with min–max, or one JSON
//! object with every repetition, the peak RSS and an environment stamp.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use switchyard::backend::KvDType;

use switchyard::backend::cpu::cut::Cut;
use switchyard::bench::bandwidth::{BandwidthProbe, PASSES_PER_PROBE, PROBE_BYTES};
use switchyard::bench::env::{peak_rss_bytes, EnvStamp};
use switchyard::bench::llm::{bench_prompt, run_test, BenchTest, Decode, TestResult};
use switchyard::bench::tensor_mix::TensorMix;

use crate::bench_arms;
use crate::bench_constrained;
use crate::bench_device;
use crate::bench_profile;
use crate::grammar_args::GrammarArgs;
use crate::model_args::ModelArgs;

/// Flags of `switchyard bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt lengths to time as one prefill each (ppN), comma-separated.
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        default_value = "128,512",
        allow_negative_numbers = true
    )]
    prompt_tokens: Vec<usize>,
    /// Decode steps to time after a 128-token prompt (tgN); 0 skips the test. The
    /// machine's read bandwidth is probed after each tgN run (the best of 5 passes over
    /// 1 GiB, not counted in the peak RSS), and the decode's weight GB/s is shown as a
    /// share of it.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    gen_tokens: usize,
    /// Also time --gen-tokens decode steps of B sequences stepped together (tgNxB),
    /// for each B in the list (aggregate tok/s of all B).
    #[arg(
        long,
        value_name = "B,B,...",
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    batch: Vec<usize>,
    /// Draw each decode step's token at this temperature, on the device that computed
    /// the logits as the server's default sampling does (0: greedy, as llama-bench).
    /// The random bits come from a fixed seed, so runs repeat.
    #[arg(
        long,
        value_name = "T",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    temperature: f32,
    /// With --temperature: keep only the K most likely tokens (0: all), on the device
    /// too (ties at the K-th kept).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    top_k: usize,
    /// With --temperature: keep only the most likely tokens holding P of the
    /// probability (1: all), on the device too.
    #[arg(
        long,
        value_name = "P",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    top_p: f32,
    /// Timed repetitions of each test, after one warm-up.
    #[arg(
        long,
        value_name = "R",
        default_value_t = 5,
        allow_negative_numbers = true
    )]
    reps: usize,
    /// Print one JSON object (environment, model, every repetition) instead of a table.
    #[arg(long)]
    json: bool,
    /// After the timed tests, run each once more with every CPU node timed and show
    /// where a step's time goes: op, calls per step, µs per call, share of the step and
    /// weight GB/s of each product (untimed by the tests' numbers); and for each tg
    /// test, what the server's default sampling (temperature 1) costs its step's rows.
    #[arg(long)]
    profile: bool,
    /// Compare execution arms under the fairness protocol instead: any of `cpu` (CPU
    /// only), `cpu2` (a second CPU-only runner: an A/A control whose ratio to `cpu`
    /// shows the benchmark's own noise floor), `gpu` (the GPU plan), `split` (prefill
    /// linears row-split across CPU and GPU), `gate` (the no-regression gate). Times the
    /// first --prompt-tokens prompt (time to first token) and --gen-tokens decode steps
    /// per run.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    arms: Vec<String>,
    /// With --arms: timed rounds (each runs every arm once, in a shuffled order).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 50,
        allow_negative_numbers = true
    )]
    rounds: usize,
    /// With --arms: warm-up rounds before timing (not recorded).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 10,
        allow_negative_numbers = true
    )]
    warmup: usize,
    /// With --arms: seed of the round orders (default: the start time; always recorded).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    seed: Option<u64>,
    /// With --arms: run even when precisions differ or memory looks too small (the
    /// result is marked as forced).
    #[arg(long)]
    force: bool,
    /// With --arms: where to write `<PREFIX>.json`, `.md` and `.svg`.
    #[arg(long, value_name = "PREFIX", default_value = "switchyard-arms")]
    out: std::path::PathBuf,
    /// With a grammar (--json-schema, --json-object, --regex, --choice or --grammar):
    /// time --gen-tokens decode steps of --batch sequences (16 unless told) through the
    /// scheduler, sampled at temperature 1, unconstrained against every sequence held
    /// to it, in --reps alternating rounds; and the constraint's time per token (its
    /// mask, and applying that to a logit row), median and p99.
    #[command(flatten)]
    shape: GrammarArgs,
}

#[derive(Serialize)]
struct Report {
    env: EnvStamp,
    model: ModelReport,
    backends: String,
    threads: usize,
    reps: usize,
    /// The decode tests' sampling temperature (0: greedy).
    temperature: f32,
    /// Their top-k (0: off) and top-p (1: off).
    top_k: usize,
    top_p: f32,
    results: Vec<TestResult>,
    /// Weight bytes read per decode step × the median tok/s of the `tg` test, GB/s.
    decode_read_gb_s: Option<f64>,
    /// What the machine read (GB/s) in probes between the `tg` test's runs.
    read_bandwidth: Option<ReadBandwidth>,
    peak_rss_bytes: Option<u64>,
    /// With `--profile`: each test's node times.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Vec<bench_profile::TestProfile>>,
    /// With `--profile`: the default sampling's time beside each `tg` test's step.
    #[serde(skip_serializing_if = "Option::is_none")]
    sampling: Option<Vec<bench_profile::SamplingShare>>,
    /// Each test's device counters, for the backends that keep them (the GPU).
    devices: Vec<bench_device::DeviceUse>,
}

/// Read-bandwidth probes taken between the `tg` test's runs (after each, warm-up
/// included), with the test's threads.
#[derive(Serialize)]
struct ReadBandwidth {
    /// Bytes each probe read.
    bytes: usize,
    /// Each probe's GB/s (the best of its passes).
    probes_gb_s: Vec<f64>,
    /// The median probe.
    median_gb_s: f64,
}

#[derive(Serialize)]
struct ModelReport {
    path: String,
    file_bytes: u64,
    kv_bytes: usize,
    kv_dtype: KvDType,
    ctx: usize,
    n_layers: usize,
    d_model: usize,
    vocab_size: usize,
    /// Tensors and bytes per dtype, and the weight bytes one decode step reads.
    tensors: TensorMix,
}

/// Largest `--batch` size: one step's tokens must fit a batched step.
const MAX_BENCH_BATCH: usize = switchyard::step::MAX_STEP_TOKENS;

/// Most `--reps` (each a whole run of every test).
const MAX_REPS: usize = 1000;

/// Most `--rounds` and `--warmup` rounds of `--arms` (each runs every arm once).
const MAX_ROUNDS: usize = 10_000;

/// Largest `--prompt-tokens` or `--gen-tokens`: past any model's context, and small
/// enough that adding the two never wraps.
const MAX_BENCH_TOKENS: usize = 1 << 24;

/// Refuses counts that cannot run or would run for days, naming the flag, before the
/// model loads.
fn check_flags(args: &BenchArgs) -> Result<()> {
    if args.reps == 0 || args.reps > MAX_REPS {
        bail!(
            "--reps {} is out of range: it takes 1 to {MAX_REPS}",
            args.reps
        );
    }
    if let Some(n) = args.prompt_tokens.iter().find(|&&n| n > MAX_BENCH_TOKENS) {
        bail!("--prompt-tokens {n} is longer than any context (at most {MAX_BENCH_TOKENS})");
    }
    if args.gen_tokens > MAX_BENCH_TOKENS {
        bail!(
            "--gen-tokens {} is longer than any context (at most {MAX_BENCH_TOKENS})",
            args.gen_tokens
        );
    }
    if !args.arms.is_empty() {
        if args.profile {
            bail!("--profile times the tests' nodes and cannot be combined with --arms");
        }
        if args.rounds == 0 || args.rounds > MAX_ROUNDS {
            bail!(
                "--rounds {} is out of range: it takes 1 to {MAX_ROUNDS}",
                args.rounds
            );
        }
        if args.warmup > MAX_ROUNDS {
            bail!(
                "--warmup {} is out of range: it takes 0 to {MAX_ROUNDS}",
                args.warmup
            );
        }
    }
    Ok(())
}

/// Runs the command.
pub fn run(args: &BenchArgs) -> Result<()> {
    check_flags(args)?;
    if !(args.top_p > 0.0 && args.top_p <= 1.0) {
        bail!("--top-p {} is out of range: it takes (0, 1]", args.top_p);
    }
    if args.temperature == 0.0 && (args.top_k != 0 || args.top_p < 1.0) {
        bail!("--top-k and --top-p cut a draw: give --temperature above 0 with them");
    }
    let cut = Cut::new(args.top_k, args.top_p);
    let decode = Decode::at(args.temperature, cut).with_context(|| {
        format!(
            "--temperature {} is not a temperature: use a finite number of at least 0",
            args.temperature
        )
    })?;
    if args.temperature > 0.0 && (!args.arms.is_empty() || args.shape.grammar()?.is_some()) {
        bail!("--temperature draws the plain tg tests' tokens and cannot be combined with --arms or a grammar");
    }
    if let Some(grammar) = args.shape.grammar()? {
        if !args.arms.is_empty() || args.profile {
            bail!("a grammar times constrained decode steps and cannot be combined with --arms or --profile");
        }
        let request = bench_constrained::ConstrainedRequest {
            model: &args.model,
            batch: &args.batch,
            steps: args.gen_tokens,
            rounds: args.reps,
            json: args.json,
        };
        return bench_constrained::run(&request, &grammar);
    }
    if !args.arms.is_empty() {
        return bench_arms::run(&bench_arms::ArmsRequest {
            model: &args.model,
            arms: &args.arms,
            prompt_tokens: args.prompt_tokens.first().copied().unwrap_or(128),
            gen_tokens: args.gen_tokens,
            warmup: args.warmup,
            rounds: args.rounds,
            seed: args.seed,
            force: args.force,
            out: args.out.clone(),
        });
    }
    let env = EnvStamp::capture();
    let mut tests: Vec<BenchTest> = args
        .prompt_tokens
        .iter()
        .filter(|&&n| n > 0)
        .map(|&n| BenchTest::Prompt(n))
        .collect();
    if args.gen_tokens > 0 {
        tests.push(BenchTest::Generate(args.gen_tokens));
        for &sequences in &args.batch {
            if !(2..=MAX_BENCH_BATCH).contains(&sequences) {
                bail!("--batch takes sizes from 2 to {MAX_BENCH_BATCH} (1 is the tg test), got {sequences}");
            }
            tests.push(BenchTest::Batch {
                steps: args.gen_tokens,
                sequences,
            });
        }
    }
    if tests.is_empty() {
        bail!("nothing to measure: give --prompt-tokens or a --gen-tokens above 0");
    }
    let needed = tests
        .iter()
        .map(BenchTest::context_needed)
        .max()
        .unwrap_or(1);
    let mut model_args = args.model.clone();
    model_args.ctx = model_args.ctx.max(needed);
    let (model, mut runner) = model_args.load()?;
    let ctx = runner.new_sequence()?.context();
    if ctx < needed {
        bail!(
            "--prompt-tokens/--gen-tokens: the largest test needs {needed} positions but the \
             model's context holds {ctx}"
        );
    }
    let longest = tests
        .iter()
        .map(BenchTest::prompt_needed)
        .max()
        .unwrap_or(1);
    let prompt = bench_prompt(&model.tokenizer, longest)?;

    let progress = if args.json {
        ProgressBar::hidden()
    } else {
        // --reps is at most MAX_REPS (check_flags), so this cannot wrap.
        ProgressBar::new((tests.len() * (args.reps + 1)) as u64)
    };
    progress.set_style(
        ProgressStyle::with_template("{msg:>6} [{bar:30}] {pos}/{len} runs, {elapsed}")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    let threads = args
        .model
        .threads
        .filter(|&t| t > 0)
        .unwrap_or(env.cores_logical);
    // The decode's GB/s means most beside what the machine reads in the same minutes.
    let mut probe = tests
        .iter()
        .any(|t| matches!(t, BenchTest::Generate(_)))
        .then(|| BandwidthProbe::new(threads, PROBE_BYTES))
        .flatten();
    let mut results = Vec::with_capacity(tests.len());
    let mut devices = Vec::new();
    for &test in &tests {
        progress.set_message(test.name());
        let probing = matches!(test, BenchTest::Generate(_));
        let before = bench_device::snapshot(&runner);
        results.push(run_test(
            &mut runner,
            &prompt,
            test,
            args.reps,
            decode,
            &mut || {
                progress.inc(1);
                if let Some(probe) = probe.as_mut().filter(|_| probing) {
                    probe.probe();
                }
            },
        )?);
        let after = bench_device::snapshot(&runner);
        devices.extend(bench_device::uses(&test.name(), &before, &after));
    }
    progress.finish_and_clear();
    let (profile, sampling) = if args.profile {
        (
            Some(bench_profile::profile_tests(
                &mut runner,
                &prompt,
                &tests,
                decode,
            )?),
            Some(bench_profile::sampling_shares(
                &mut runner,
                &prompt,
                &tests,
                &results,
            )?),
        )
    } else {
        (None, None)
    };

    let tensors = TensorMix::of(&model.config, model.weights.as_ref());
    let decode_read_gb_s = results
        .iter()
        .find(|r| r.test.starts_with("tg") && !r.test.contains('x'))
        .map(|r| tensors.decode_gb_s(r.summary.median));
    let report = Report {
        env,
        model: ModelReport {
            path: model.path.display().to_string(),
            file_bytes: model_bytes(&model.path)?,
            kv_bytes: runner.new_sequence()?.kv_capacity_bytes(),
            kv_dtype: runner.kv_dtype(),
            ctx,
            n_layers: model.config.n_layers,
            d_model: model.config.d_model,
            vocab_size: model.config.vocab_size,
            tensors,
        },
        backends: backend_list(&runner),
        threads,
        reps: args.reps,
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        results,
        decode_read_gb_s,
        read_bandwidth: probe.as_ref().and_then(|p| {
            Some(ReadBandwidth {
                bytes: PROBE_BYTES,
                probes_gb_s: p.results().to_vec(),
                median_gb_s: p.median_gb_s()?,
            })
        }),
        peak_rss_bytes: probe
            .as_ref()
            .map_or_else(peak_rss_bytes, |p| Some(p.peak_rss_bytes())),
        profile,
        sampling,
        devices,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
        bench_device::print(&report.devices);
        if let Some(profile) = &report.profile {
            let others = runner.backends().iter().any(|b| b.op_profile().is_none());
            bench_profile::print_profiles(profile, others);
        }
        if let Some(sampling) = &report.sampling {
            bench_profile::print_sampling(sampling);
        }
    }
    Ok(())
}

/// Bytes of a GGUF file, or of the `*.safetensors` files of a model directory.
fn model_bytes(path: &Path) -> Result<u64> {
    if !path.is_dir() {
        return Ok(std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len());
    }
    let mut total = 0;
    for entry in std::fs::read_dir(path).with_context(|| format!("listing {}", path.display()))? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "safetensors") {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn print_table(report: &Report) {
    let name = Path::new(&report.model.path).file_name().map_or_else(
        || report.model.path.clone(),
        |n| n.to_string_lossy().into_owned(),
    );
    println!(
        "| {:<32} | {:>10} | {:>5} | {:<7} | {:>7} | {:>6} | {:>10} | {:>17} |",
        "model", "size", "ctx", "backend", "threads", "test", "t/s", "min–max"
    );
    println!(
        "| {:-<32} | {:->10} | {:->5} | {:-<7} | {:->7} | {:->6} | {:->10} | {:->17} |",
        ":", ":", ":", ":", ":", ":", ":", ":"
    );
    for r in &report.results {
        let s = r.summary;
        println!(
            "| {:<32} | {:>10} | {:>5} | {:<7} | {:>7} | {:>6} | {:>10.2} | {:>17} |",
            name,
            mib(report.model.file_bytes),
            report.model.ctx,
            report.backends,
            report.threads,
            r.test,
            s.median,
            format!("{:.2}–{:.2}", s.min, s.max)
        );
    }
    if let Some(gb_s) = report.decode_read_gb_s {
        let mix = &report.model.tensors;
        let types: Vec<String> = mix
            .dtypes
            .iter()
            .map(|d| format!("{} {}×", d.dtype, d.tensors))
            .collect();
        let share = report
            .read_bandwidth
            .as_ref()
            .map_or_else(String::new, |bw| {
                format!(
                    ", {:.0} % of the {:.1} GB/s the machine read between its runs \
                 (median of {} probes, each the best of {} passes over {} MiB)",
                    100.0 * gb_s / bw.median_gb_s,
                    bw.median_gb_s,
                    bw.probes_gb_s.len(),
                    PASSES_PER_PROBE,
                    bw.bytes >> 20
                )
            });
        println!(
            "\ndecode reads {:.1} MB of weights per token ({}): {gb_s:.1} GB/s at the tg \
             median{share}",
            mix.decode_read_bytes as f64 / 1e6,
            types.join(", ")
        );
    }
    let rss = report.peak_rss_bytes.map_or_else(|| "n/a".into(), mib);
    println!(
        "\npeak RSS {rss}; model {} + KV {} ({} positions); {} reps after a warm-up; \
         decode {}; switchyard {} ({})",
        mib(report.model.file_bytes),
        mib(report.model.kv_bytes as u64),
        report.model.ctx,
        report.reps,
        match (report.temperature, report.top_k, report.top_p) {
            (0.0, _, _) => "greedy".to_string(),
            (t, 0, p) if p >= 1.0 => format!("drawn at temperature {t}"),
            (t, k, p) => format!("drawn at temperature {t}, top-k {k}, top-p {p}"),
        },
        report.env.version,
        report.env.git_commit
    );
}

/// The runner's backends by name, comma-separated, as the reports print them.
pub(crate) fn backend_list(runner: &switchyard::step::Runner) -> String {
    let names: Vec<&str> = runner.backends().iter().map(|b| b.name()).collect();
    names.join(",")
}
