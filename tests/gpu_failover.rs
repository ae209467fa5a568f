//! Failover on the real binary and the real GPU backend (lavapipe in CI):
//! `SWITCHYARD_FAULT=gpu:N` loses the GPU at its `N`th partition run (in prefill or in
//! decode) and `gpu:alloc` makes its allocations fail; `generate --backends cpu,gpu
//! --temperature 0 -n 32 --json` then prints the same tokens as `--backends cpu` and
//! reports the failover, with the positions whose KV rows were on the GPU recomputed
//! (counted exactly with `--coexec off`, where every step runs on the GPU plan). The
//! prompt's greedy continuation is far from ties (the CPU's margin is checked), so the
//! tokens the GPU makes before it fails are the CPU's too: this tests failover, not
//! how two backends round a near-tie. A GPU with a lowered buffer limit
//! (`gpu:limit:BYTES`) is no failure: `plan` puts the product whose weight is over it on
//! the CPU and says why, and `generate` keeps the rest on the GPU without failing over.
#![cfg(feature = "gpu")]

mod gpu_support;

use std::process::Command;

use serde_json::Value;

const PROMPT: &str = "1, 2, 3,";

/// The first tokens, made on the GPU before a fault, that must be far from ties.
const CLEAR_TOKENS: usize = 8;

fn generate(backends: &str, fault: Option<&str>, extra: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    command.args([
        "generate",
        "--backends",
        backends,
        "--temperature",
        "0",
        "-n",
        "32",
        "--json",
    ]);
    command.args(extra).arg(PROMPT);
    match fault {
        Some(fault) => command.env("SWITCHYARD_FAULT", fault),
        None => command.env_remove("SWITCHYARD_FAULT"),
    };
    let out = command.output().expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{fault:?}: {stderr}");
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn a_lost_or_full_gpu_fails_over_to_the_cpu_with_the_same_tokens() {
    if gpu_support::gpu().is_none() {
        return;
    }
    let on_cpu = generate("cpu", None, &["--top-logits", "2"]);
    let expected = on_cpu["tokens"].clone();
    assert!(expected.as_array().is_some_and(|t| t.len() == 32));
    for (i, top) in on_cpu["top_logits"].as_array().unwrap()[..CLEAR_TOKENS]
        .iter()
        .enumerate()
    {
        let margin = top[0]["logit"].as_f64().unwrap() - top[1]["logit"].as_f64().unwrap();
        assert!(margin >= 1.0, "token {i} is a near-tie (margin {margin})");
    }
    let prompt = on_cpu["prompt_tokens"].as_array().unwrap().len();
    // With the plain GPU plan (`--coexec off`) every step is one GPU partition: run 1
    // is the prefill of the prompt, run k > 1 the decode after k - 1 tokens, so
    // prompt + k - 2 positions are on the GPU when it fails, and are recomputed.
    let plain = [
        ("gpu:1", "Prefill", 0),
        ("gpu:3", "Decode", prompt + 1),
        ("gpu:8", "Decode", prompt + 6),
        ("gpu:alloc", "Prefill", 0),
    ];
    for (fault, phase, recomputed) in plain {
        let report = generate("cpu,gpu", Some(fault), &["--coexec", "off"]);
        let failovers = check(&report, &expected, fault);
        assert_eq!(failovers[0]["phase"], phase, "{fault}");
        assert_eq!(failovers[0]["recomputed"], recomputed, "{fault}");
    }
    // With the default co-execution gate the decode gate also times the CPU-only plan,
    // so later GPU runs fall on steps that mix rows computed on both (where the GPU's
    // f32 activations and the CPU's Q8 ones can break a near-tie differently, fault or
    // not). A loss in the prefill or at the first decode leaves every step after it to
    // the CPU, and the tokens are the CPU's.
    for (fault, phase, recomputed) in [
        ("gpu:1", "Prefill", 0),
        ("gpu:2", "Decode", prompt),
        ("gpu:alloc", "Prefill", 0),
    ] {
        let failovers = check(&generate("cpu,gpu", Some(fault), &[]), &expected, fault);
        assert_eq!(failovers[0]["phase"], phase, "{fault}");
        assert_eq!(failovers[0]["recomputed"], recomputed, "{fault}");
    }
}

/// A GPU whose buffers hold at most 16 MiB, as a smaller adapter's would: the output
/// head's weight (the tied 49,152 × 576 embedding, 28 Mi elements) is over it, so the
/// plan places that product on the CPU and says so, the layers run on the GPU, nothing
/// fails over and the clear tokens are the CPU's.
#[test]
fn a_weight_over_a_lowered_buffer_limit_is_placed_on_the_cpu() {
    if gpu_support::gpu().is_none() {
        return;
    }
    const FAULT: &str = "gpu:limit:16777216";
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["plan", "--backends", "cpu,gpu"])
        .env("SWITCHYARD_FAULT", FAULT)
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let why = format!(
        "refused by gpu: {} elements exceed limit {}",
        49_152 * 576,
        4 << 20
    );
    assert!(text.contains(&why), "{text}");

    let on_cpu = generate("cpu", None, &[]);
    let report = generate("cpu,gpu", Some(FAULT), &["--coexec", "off"]);
    assert_eq!(
        report["failovers"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert!(
        report["placement"]["decode"].get("gpu").is_some(),
        "{report}"
    );
    let tokens = |r: &Value| r["tokens"].as_array().unwrap()[..CLEAR_TOKENS].to_vec();
    assert_eq!(tokens(&report), tokens(&on_cpu));
}

/// Checks `report` has the CPU's tokens and one failover of the GPU; returns the
/// failover list.
fn check(report: &Value, expected: &Value, fault: &str) -> Vec<Value> {
    assert_eq!(&report["tokens"], expected, "{fault}");
    let failovers = report["failovers"].as_array().expect("a failover list");
    assert_eq!(failovers.len(), 1, "{fault}: {failovers:?}");
    assert_eq!(failovers[0]["backend"], "gpu", "{fault}");
    assert_eq!(report["placement"]["decode"].get("gpu"), None, "{fault}");
    failovers.clone()
}
