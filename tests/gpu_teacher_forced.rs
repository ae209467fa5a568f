//! The GPU against the CPU over a whole reply: with every node of a decode step on the
//! GPU (`cpu,gpu`, co-execution off), teacher-forced on the CPU's 64 greedy tokens, the
//! GPU picks the CPU's argmax wherever the CPU's top-2 margin is at least 0.5, and the
//! CPU's ten best logits stay within 1.0 on the GPU (the tolerance the CPU keeps
//! against llama.cpp). Exact greedy equality is not the test: the two round differently
//! (their own summation orders, exp and rounding of 8-bit activations at a tie), so a
//! near-tie may break either way and the texts part there.
//!
//! On the K-quant files the 1.0 is not a bound any second implementation can keep: the
//! CPU against itself, with only its KV cache in f32 instead of f16 (both are settings
//! users run), parts by up to 1.64 (Q4_K_M) and 1.04 (Q5_K_M) here, one step of 64
//! each (measured 2026-12-06), because every last-bit difference flips the rounding of
//! some 8-bit activations and 30 layers carry it on. So there the GPU is held to the
//! larger of 1.0 and 1.25 times that self-difference, measured in the same run, on the
//! worst step and on the mean over the steps. The products themselves agree to 1e-7
//! (`gpu_formats`): both quantize a K-quant product's activations per 256.
//!
//! On the default model, and on the Q4_K_M and Q5_K_M files `scripts/make-bench-model.sh
//! --sizes 135m --formats Q4_K_M,Q5_K_M` makes (looked for in `$SWITCHYARD_VARIANTS_DIR`,
//! default `$SWITCHYARD_HOME/bench-models`; a missing one is reported SKIPPED on stderr
//! with the command that makes it).
#![cfg(feature = "gpu")]

mod gpu_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use switchyard::backend::cpu::greedy;
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet, KvDType};
use switchyard::model::LlamaStep;
use switchyard::model::{fetch, gguf::GgufFile, llama::LlamaConfig, GgufWeights};
use switchyard::step::{CoexecMode, Runner};

/// Greedy tokens the CPU generates and the GPU is forced through.
const STEPS: usize = 64;
/// Where the CPU's top two are at least this far apart, the GPU must pick its top one.
const MARGIN: f32 = 0.5;
/// How far the GPU may put any of the CPU's ten best logits from the CPU's value.
const TOLERANCE: f32 = 1.0;
/// On the K-quant files, how far beyond the CPU's own difference under an f32 KV cache
/// the GPU's may go (see the module's comment).
const SELF_FACTOR: f32 = 1.25;

fn runner(path: &Path, backends: Vec<Arc<dyn Backend>>) -> Runner {
    let file = GgufFile::open(path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    Runner::new(
        LlamaStep::new(config, Arc::new(GgufWeights(file)), 1),
        BackendSet::new(backends).unwrap(),
        512,
    )
    .with_calibration_file(None)
    .with_coexec(CoexecMode::Off)
}

/// The prompt: the default model's first llama.cpp reference case (its chat template
/// applied).
fn prompt() -> Vec<u32> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reference/smollm2-135m-q4_1.llamacpp.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    reference["cases"][0]["prompt_token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// What one step's GPU logits did against the CPU's.
struct Step {
    /// The largest |GPU - CPU| over the CPU's ten best tokens.
    top10: f32,
    /// The CPU's top-2 margin.
    margin: f32,
    /// Whether both picked the same token.
    same: bool,
}

fn compare(cpu: &[f32], gpu: &[f32]) -> Step {
    let mut order: Vec<usize> = (0..cpu.len()).collect();
    order.sort_by(|&a, &b| cpu[b].total_cmp(&cpu[a]));
    let top10 = order[..10]
        .iter()
        .map(|&t| (gpu[t] - cpu[t]).abs())
        .fold(0f32, f32::max);
    Step {
        top10,
        margin: cpu[order[0]] - cpu[order[1]],
        same: greedy(cpu) == greedy(gpu),
    }
}

/// What a whole teacher-forced reply did: the CPU's and another runner's logits
/// compared step by step.
struct Trace {
    /// The largest top-10 difference of any step.
    worst: f32,
    /// The mean over the steps of each step's largest top-10 difference.
    mean: f32,
    /// Steps where the two picked different tokens.
    flips: usize,
    /// Steps where the CPU's top-2 margin was under [`MARGIN`].
    near: usize,
    /// Steps where the other runner picked another token at a margin of at least
    /// [`MARGIN`], as failure lines.
    wrong_picks: Vec<String>,
}

/// Forces `other` through the CPU's greedy reply to the prompt and compares their
/// logits at every step.
fn follow(name: &str, on_cpu: &mut Runner, other: &mut Runner) -> Trace {
    let prompt = prompt();
    let (mut cpu_seq, mut other_seq) = (
        on_cpu.new_sequence().unwrap(),
        other.new_sequence().unwrap(),
    );
    let mut want = on_cpu.forward(&mut cpu_seq, &prompt).unwrap();
    let mut got = other.forward(&mut other_seq, &prompt).unwrap();
    let mut trace = Trace {
        worst: 0.0,
        mean: 0.0,
        flips: 0,
        near: 0,
        wrong_picks: Vec::new(),
    };
    for step in 0..STEPS {
        let s = compare(&want, &got);
        trace.worst = trace.worst.max(s.top10);
        trace.mean += s.top10 / STEPS as f32;
        if !s.same {
            trace.flips += 1;
            if s.margin >= MARGIN {
                trace.wrong_picks.push(format!(
                    "{name}, step {step}: another token at a CPU margin of {}",
                    s.margin
                ));
            }
        }
        trace.near += usize::from(s.margin < MARGIN);
        let token = greedy(&want).expect("a finite logit") as u32;
        want = on_cpu.forward(&mut cpu_seq, &[token]).unwrap();
        got = other.forward(&mut other_seq, &[token]).unwrap();
    }
    trace
}

/// Runs the check on `path`, against a bound of [`TOLERANCE`] or, with `self_bound`,
/// of the CPU's own difference under an f32 KV cache; returns the failures, one line
/// each.
fn check(name: &str, path: &Path, gpu: &Arc<dyn Backend>, self_bound: bool) -> Vec<String> {
    let cpu = || Arc::new(CpuBackend::new(None).unwrap()) as Arc<dyn Backend>;
    let mut on_gpu = runner(path, vec![cpu(), gpu.clone()]);
    let trace = follow(name, &mut runner(path, vec![cpu()]), &mut on_gpu);
    let mut failures = trace.wrong_picks;
    let (mut worst_bound, mut mean_bound) = (TOLERANCE, f32::INFINITY);
    if self_bound {
        let mut f32_kv = runner(path, vec![cpu()]).with_kv_dtype(KvDType::F32);
        let own = follow(name, &mut runner(path, vec![cpu()]), &mut f32_kv);
        println!(
            "{name}: the CPU with an f32 KV cache, worst top-10 |f32 - f16| {:.3}, mean {:.3}",
            own.worst, own.mean
        );
        worst_bound = worst_bound.max(SELF_FACTOR * own.worst);
        mean_bound = SELF_FACTOR * own.mean;
    }
    if trace.worst > worst_bound {
        failures.push(format!(
            "{name}: a top-10 logit {} from the CPU's, over {worst_bound}",
            trace.worst
        ));
    }
    if trace.mean > mean_bound {
        failures.push(format!(
            "{name}: top-10 logits {} from the CPU's on the mean, over {mean_bound}",
            trace.mean
        ));
    }
    let (_, decode) = on_gpu.placement();
    if decode.keys().collect::<Vec<_>>() != ["gpu"] {
        failures.push(format!(
            "{name}: decode nodes placed {decode:?}, not all on the GPU"
        ));
    }
    println!(
        "{name}: {STEPS} teacher-forced steps, worst top-10 |GPU - CPU| {:.3}, mean {:.3}, \
         {} other picks, {} steps with a CPU margin under {MARGIN}",
        trace.worst, trace.mean, trace.flips, trace.near
    );
    failures
}

fn variants_dir() -> PathBuf {
    match std::env::var_os("SWITCHYARD_VARIANTS_DIR") {
        Some(dir) if !dir.is_empty() => dir.into(),
        _ => fetch::switchyard_home().unwrap().join("bench-models"),
    }
}

#[test]
fn the_gpu_follows_the_cpu_through_64_teacher_forced_steps() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let gpu: Arc<dyn Backend> = Arc::new(gpu);
    let mut failures = check(
        "default model (Q4_1)",
        &fetch::default_model_path(false).expect("fetching the default model"),
        &gpu,
        false,
    );
    for format in ["Q4_K_M", "Q5_K_M"] {
        let path = variants_dir().join(format!("SmolLM2-135M-Instruct.{format}.gguf"));
        if !path.exists() {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {} is absent; `scripts/make-bench-model.sh --sizes 135m --formats \
                 {format}` makes it",
                path.display()
            );
            continue;
        }
        failures.extend(check(format, &path, &gpu, true));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
