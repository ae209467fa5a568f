//! The GPU against the CPU over a whole reply: with every node of a decode step on the
//! GPU (`cpu,gpu`, co-execution off), teacher-forced on the CPU's 64 greedy tokens, the
//! GPU picks the CPU's argmax wherever the CPU's top-2 margin is at least 0.5, and the
//! CPU's ten best logits stay within 1.0 on the GPU (the tolerance the CPU keeps
//! against llama.cpp). Exact greedy equality is not the test: the two round differently
//! (f32 against f16 caches, their own summation orders), so a near-tie may break either
//! way and the texts part there.
//!
//! The K-quant files are held to 1.25 instead of 1.0: their GPU products quantize
//! activations per 32 values and the CPU's per 256 (as llama.cpp does), and measured
//! here (lavapipe, 2026-12-06) the two part by up to 1.17 (Q4_K_M) and 1.19 (Q5_K_M),
//! while each is 3.3 to 7.0 from the same model with f32 weights (the CPU 6.37 and 3.27,
//! the GPU 7.03 and 3.84): a known gap of issue 47, not met yet.
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
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet};
use switchyard::model::LlamaStep;
use switchyard::model::{fetch, gguf::GgufFile, llama::LlamaConfig, GgufWeights};
use switchyard::step::{CoexecMode, Runner};

/// Greedy tokens the CPU generates and the GPU is forced through.
const STEPS: usize = 64;
/// Where the CPU's top two are at least this far apart, the GPU must pick its top one.
const MARGIN: f32 = 0.5;
/// How far the GPU may put any of the CPU's ten best logits from the CPU's value.
const TOLERANCE: f32 = 1.0;
/// The same for the K-quant files, whose activations the two quantize differently (see
/// the module's comment).
const K_QUANT_TOLERANCE: f32 = 1.25;

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

/// Runs the check on `path`; returns the failures, one line each.
fn check(name: &str, path: &Path, gpu: &Arc<dyn Backend>, tolerance: f32) -> Vec<String> {
    let cpu = || Arc::new(CpuBackend::new(None).unwrap()) as Arc<dyn Backend>;
    let mut on_cpu = runner(path, vec![cpu()]);
    let mut on_gpu = runner(path, vec![cpu(), gpu.clone()]);
    let prompt = prompt();
    let (mut cpu_seq, mut gpu_seq) = (
        on_cpu.new_sequence().unwrap(),
        on_gpu.new_sequence().unwrap(),
    );
    let mut want = on_cpu.forward(&mut cpu_seq, &prompt).unwrap();
    let mut got = on_gpu.forward(&mut gpu_seq, &prompt).unwrap();
    let mut failures = Vec::new();
    let (mut worst, mut flips, mut near) = (0f32, 0, 0);
    for step in 0..STEPS {
        let s = compare(&want, &got);
        worst = worst.max(s.top10);
        if s.top10 > tolerance {
            failures.push(format!(
                "{name}, step {step}: a top-10 logit {} from the CPU's",
                s.top10
            ));
        }
        if !s.same {
            flips += 1;
            if s.margin >= MARGIN {
                failures.push(format!(
                    "{name}, step {step}: another token at a CPU margin of {}",
                    s.margin
                ));
            }
        }
        near += usize::from(s.margin < MARGIN);
        let token = greedy(&want).expect("a finite logit") as u32;
        want = on_cpu.forward(&mut cpu_seq, &[token]).unwrap();
        got = on_gpu.forward(&mut gpu_seq, &[token]).unwrap();
    }
    let (_, decode) = on_gpu.placement();
    if decode.keys().collect::<Vec<_>>() != ["gpu"] {
        failures.push(format!(
            "{name}: decode nodes placed {decode:?}, not all on the GPU"
        ));
    }
    println!(
        "{name}: {STEPS} teacher-forced steps, worst top-10 |GPU - CPU| {worst:.3}, \
         {flips} other picks, {near} steps with a CPU margin under {MARGIN}"
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
        TOLERANCE,
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
        failures.extend(check(format, &path, &gpu, K_QUANT_TOLERANCE));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
