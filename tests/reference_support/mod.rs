//! Shared by the tests against llama.cpp's reference outputs: reading token ids from the
//! reference JSON, argmax with llama.cpp's tie rule, and the top-10 logit difference.

use serde_json::Value;

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Index of the largest logit; ties go to the lowest id, as in the reference.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best
}

/// Largest |ours − theirs| over llama.cpp's top-10 `[[id, logit], ...]`.
pub fn top10_diff(ours: &[f32], top10: &[Value]) -> f32 {
    top10
        .iter()
        .map(|pair| {
            let id = pair[0].as_u64().unwrap() as usize;
            (ours[id] - pair[1].as_f64().unwrap() as f32).abs()
        })
        .fold(0.0, f32::max)
}
