//! Prefill co-execution on the default model over the CPU and the test-only `sim`
//! backend (given block-format weights so it can take the model's linears): the row
//! split's logits equal the single-backend logits within 3.9e-3, greedy tokens are the
//! same with the gate as without, and decode never splits (its own gate offers the
//! baseline and the CPU alone).

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use switchyard::backend::{
    cpu::CpuBackend, sim::SimBackend, Backend, BackendId, BackendSet, DTypeSet,
};
use switchyard::graph::DType;
use switchyard::model::LlamaStep;
use switchyard::model::{fetch, gguf::GgufFile, llama::LlamaConfig, GgufWeights};
use switchyard::step::{CoexecMode, Runner};

const STEPS: usize = 8;

fn runner(with_sim: bool, mode: CoexecMode) -> Runner {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let file = GgufFile::open(&path).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let mut backends: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend::new(None).unwrap())];
    if with_sim {
        let mut capability = SimBackend::default_capability();
        capability.operand_dtypes = DTypeSet::of(&[DType::Q4_0, DType::Q4_1, DType::Q8_0]);
        backends.push(Arc::new(
            SimBackend::with_capability(BackendId::SIM, capability).unwrap(),
        ));
    }
    Runner::new(
        LlamaStep::new(config, Arc::new(GgufWeights(file)), 1),
        BackendSet::new(backends).unwrap(),
        512,
    )
    .with_coexec(mode)
    .with_calibration_file(None)
    .with_split_ratio(300)
}

fn prompts() -> Vec<(String, Vec<u32>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reference/smollm2-135m-q4_1.llamacpp.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let ids = c["prompt_token_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32);
            (c["name"].as_str().unwrap().to_string(), ids.collect())
        })
        .collect()
}

fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
        .0 as u32
}

/// The prompt's last logits, then the greedy tokens.
fn greedy(runner: &mut Runner, prompt: &[u32]) -> (Vec<f32>, Vec<u32>) {
    let mut seq = runner.new_sequence().unwrap();
    let first = runner.forward(&mut seq, prompt).unwrap();
    let mut logits = first.clone();
    let mut tokens = Vec::new();
    for _ in 0..STEPS {
        tokens.push(argmax(&logits));
        logits = runner
            .forward(&mut seq, &[*tokens.last().unwrap()])
            .unwrap();
    }
    (first, tokens)
}

fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    let max_ref = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / max_ref
}

#[test]
fn split_logits_match_single_backend_and_the_gate_keeps_greedy_tokens() {
    let mut cpu_only = runner(false, CoexecMode::Off);
    let mut split = runner(true, CoexecMode::Split);
    let mut gated = runner(true, CoexecMode::Gate);
    let mut off = runner(true, CoexecMode::Off);
    for (name, prompt) in prompts() {
        let (want_logits, want_tokens) = greedy(&mut cpu_only, &prompt);
        let (split_logits, split_tokens) = greedy(&mut split, &prompt);
        let err = relative_error(&split_logits, &want_logits);
        assert!(
            err <= 3.9e-3,
            "{name}: split vs CPU-only logits, relative error {err}"
        );
        assert_eq!(split_tokens, want_tokens, "{name}: split greedy tokens");
        let (_, off_tokens) = greedy(&mut off, &prompt);
        let (_, gate_tokens) = greedy(&mut gated, &prompt);
        assert_eq!(gate_tokens, off_tokens, "{name}: --coexec gate vs off");
    }
    let (prefill, decode) = split.placement();
    assert!(
        prefill.get("sim").is_some_and(|&n| n > 0),
        "split halves ran on sim: {prefill:?}"
    );
    let (off_prefill, off_decode) = off.placement();
    assert!(
        prefill["cpu"] > off_prefill["cpu"] + 30 * 7,
        "each layer's 7 linears gained slices, a CPU half and a concat: {prefill:?} vs {off_prefill:?}"
    );
    assert_eq!(
        decode, off_decode,
        "decode plans are the same with and without co-execution"
    );
    for r in [&split, &off] {
        assert_eq!(
            r.phase_stats().1.compiles,
            1,
            "decode compiles once and never splits"
        );
    }
    assert_eq!(
        gated.phase_stats().1.compiles,
        2,
        "the gated decode compiles once per arm (baseline, cpu) and never splits"
    );
    let reports = serde_json::to_value(gated.gate_reports()).unwrap();
    let arms_of = |i: usize| -> (u64, Vec<String>) {
        let arms = reports[i]["gate"]["arms"].as_array().unwrap();
        let names = arms.iter().map(|a| a.as_str().unwrap().into()).collect();
        (reports[i]["bucket"].as_u64().unwrap(), names)
    };
    assert_eq!(
        arms_of(0),
        (1, vec!["baseline".into(), "cpu".into()]),
        "decode's gate"
    );
    let (bucket, names) = arms_of(1);
    assert!(bucket >= 2, "a prefill bucket");
    assert_eq!(
        names,
        ["baseline", "split", "cpu"],
        "the prefill gate's arms"
    );
}
