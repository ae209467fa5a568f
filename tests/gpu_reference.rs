//! The default model greedy-decodes the same tokens on `cpu,gpu` as on `cpu` for the
//! reference prompts (first 8 tokens). The 301-token `long` prompt is left out: its
//! prefill alone takes over a minute on lavapipe. Prints the lavapipe timings.
#![cfg(feature = "gpu")]

mod gpu_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet};
use switchyard::model::LlamaStep;
use switchyard::model::{fetch, gguf::GgufFile, llama::LlamaConfig, GgufWeights};
use switchyard::step::Runner;

const STEPS: usize = 8;

fn greedy(runner: &mut Runner, prompt: &[u32]) -> Vec<u32> {
    let mut seq = runner.new_sequence().unwrap();
    let mut logits = runner.forward(&mut seq, prompt).unwrap();
    let mut out = Vec::new();
    for _ in 0..STEPS {
        let next = logits
            .iter()
            .enumerate()
            .fold(
                (0, f32::MIN),
                |best, (i, &v)| if v > best.1 { (i, v) } else { best },
            )
            .0 as u32;
        out.push(next);
        if out.len() < STEPS {
            logits = runner.forward(&mut seq, &[next]).unwrap();
        }
    }
    out
}

#[test]
fn default_model_greedy_tokens_are_the_same_on_cpu_and_gpu() {
    let Some(gpu) = gpu_support::gpu() else {
        return;
    };
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let file = Arc::new(GgufFile::open(&path).unwrap());
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let runner = |backends: Vec<Arc<dyn Backend>>| {
        let file = GgufFile::open(&path).unwrap();
        Runner::new(
            LlamaStep::new(config.clone(), Arc::new(GgufWeights(file)), 1),
            BackendSet::new(backends).unwrap(),
            512,
        )
    };
    let cpu = || Arc::new(CpuBackend::new(None).unwrap()) as Arc<dyn Backend>;
    let mut on_cpu = runner(vec![cpu()]);
    let mut on_gpu = runner(vec![cpu(), Arc::new(gpu)]);
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/reference/smollm2-135m-q4_1.llamacpp.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for case in reference["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt: Vec<u32> = case["prompt_token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        if prompt.len() > 64 {
            continue;
        }
        let want = greedy(&mut on_cpu, &prompt);
        let started = Instant::now();
        let got = greedy(&mut on_gpu, &prompt);
        eprintln!(
            "{name}: {} prompt tokens + {STEPS} greedy steps on the GPU in {:.1} s",
            prompt.len(),
            started.elapsed().as_secs_f64()
        );
        assert_eq!(got, want, "{name}: GPU greedy tokens differ from the CPU's");
    }
    let (_, decode) = on_gpu.placement();
    assert!(
        decode.get("gpu").copied().unwrap_or(0) > 0,
        "decode ran on the GPU: {decode:?}"
    );
    let (_, stats) = on_gpu.phase_stats();
    assert_eq!(stats.compiles, 1, "one decode compile for every prompt");
}
