//! The default model against llama.cpp's reference outputs
//! (`tests/data/reference/smollm2-135m-q4_1.llamacpp.json`) with the tolerances of the
//! reference README: last-prompt-position logits, teacher-forced steps, and free-running
//! greedy up to the first low-margin step. Shared by the CPU test (`reference_model.rs`)
//! and the GPU one (`gpu_reference.rs`), so every backend answers to the same
//! independent reference.

use std::path::Path;

use serde_json::Value;
use switchyard::step::Runner;

use crate::reference_support::{argmax, ids, top10_diff};

/// The reference JSON of the default model.
pub fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reference/smollm2-135m-q4_1.llamacpp.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs reference `case` on `runner` for at most `max_steps` greedy steps and asserts
/// every tolerance.
pub fn check_case(runner: &mut Runner, case: &Value, max_steps: usize) {
    let name = case["name"].as_str().unwrap();
    let prompt = ids(&case["prompt_token_ids"]);
    let greedy = ids(&case["greedy_token_ids"]);
    let steps = case["greedy_steps"].as_array().unwrap();
    let steps = &steps[..steps.len().min(max_steps)];
    let mut seq = runner.new_sequence().unwrap();

    let mut logits = runner.forward(&mut seq, &prompt).unwrap();
    let last_top10: Vec<Value> = case["last_position_top10"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Value::Array(vec![e["id"].clone(), e["logit"].clone()]))
        .collect();
    let first = top10_diff(&logits, &last_top10);
    assert!(first <= 1.25, "{name}: last-position top-10 diff {first}");
    if let Some(file) = case["last_position_logits_file"].as_str() {
        full_vector_check(name, &logits, file);
    }

    // Teacher forcing: step i sees the prompt plus llama.cpp's first i tokens. Until
    // the first low-margin step, our argmax equals llama.cpp's token, so this is also
    // the free-running greedy check.
    let mut free_running_agrees = true;
    let (mut worst_top10, mut worst_regret) = (0f32, 0f32);
    for (i, step) in steps.iter().enumerate() {
        if i > 0 {
            logits = runner.forward(&mut seq, &[greedy[i - 1]]).unwrap();
        }
        let top10 = step["top10"].as_array().unwrap();
        worst_top10 = worst_top10.max(top10_diff(&logits, top10));
        let margin = step["margin"].as_f64().unwrap() as f32;
        let top1 = step["top1"].as_u64().unwrap() as usize;
        let ours = argmax(&logits);
        if margin >= 1.0 {
            assert_eq!(
                ours, top1,
                "{name} step {i}: argmax differs at margin {margin}"
            );
        }
        if margin < 1.0 {
            free_running_agrees = false;
        }
        if free_running_agrees {
            assert_eq!(
                ours as u32, greedy[i],
                "{name} step {i}: free-running greedy"
            );
        }
        let their_logit_for_ours = top10
            .iter()
            .find(|p| p[0].as_u64().unwrap() as usize == ours)
            .map(|p| p[1].as_f64().unwrap() as f32)
            .unwrap_or_else(|| panic!("{name} step {i}: our argmax {ours} not in top-10"));
        let best = top10[0][1].as_f64().unwrap() as f32;
        worst_regret = worst_regret.max(best - their_logit_for_ours);
    }
    println!("{name}: first-position top-10 {first:.3}, teacher-forced top-10 {worst_top10:.3}, regret {worst_regret:.3}");
    assert!(
        worst_top10 <= 2.0,
        "{name}: teacher-forced top-10 diff {worst_top10}"
    );
    assert!(worst_regret <= 0.75, "{name}: regret {worst_regret}");
}

fn full_vector_check(name: &str, ours: &[f32], file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reference")
        .join(file);
    let bytes = std::fs::read(path).unwrap();
    let theirs: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(theirs.len(), ours.len());
    let n = ours.len() as f64;
    let diffs: Vec<f64> = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs() as f64)
        .collect();
    let max = diffs.iter().cloned().fold(0.0, f64::max);
    let mean = diffs.iter().sum::<f64>() / n;
    let (ma, mb) = (
        ours.iter().map(|&v| v as f64).sum::<f64>() / n,
        theirs.iter().map(|&v| v as f64).sum::<f64>() / n,
    );
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (&a, &b) in ours.iter().zip(&theirs) {
        let (da, db) = (a as f64 - ma, b as f64 - mb);
        cov += da * db;
        va += da * da;
        vb += db * db;
    }
    let pearson = cov / (va * vb).sqrt();
    println!("{name}: full vector max {max:.3} mean {mean:.3} pearson {pearson:.5}");
    assert!(max <= 1.5, "{name}: full-vector max abs diff {max}");
    assert!(mean <= 0.4, "{name}: full-vector mean abs diff {mean}");
    assert!(pearson >= 0.995, "{name}: Pearson {pearson}");
}
