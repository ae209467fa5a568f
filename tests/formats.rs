//! A small random-weight Llama model, written by this test both as GGUF (q/k rows
//! permuted as the GGUF converter does, adjacent-pair RoPE) and as a Hugging Face
//! safetensors directory (original rows, NeoX RoPE): both must give the same logits at
//! every step, and N decode steps must cost one decode compile and N−1 hits.

use std::sync::Arc;

use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet, HostTensor, SharedBytes};
use switchyard::graph::DType;
use switchyard::model::gguf::{write_gguf, GgufFile, Value};
use switchyard::model::llama::{LlamaConfig, TensorRole};
use switchyard::model::safetensors::{write_safetensors, HfModel};
use switchyard::model::LlamaStep;
use switchyard::model::{GgufWeights, HfWeights, ModelWeights};
use switchyard::step::Runner;

const VOCAB: usize = 96;
const D: usize = 64;
const H: usize = 4;
const HKV: usize = 2;
const DH: usize = 16;
const F: usize = 128;
const LAYERS: usize = 2;

struct Lcg(u64);

impl Lcg {
    fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                offset + scale * ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            })
            .collect()
    }
}

fn tensor(shape: &[usize], values: &[f32]) -> HostTensor {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    HostTensor::new(
        DType::F32,
        shape.to_vec().into(),
        SharedBytes::from_vec(bytes),
    )
    .unwrap()
}

/// Reorders the rows of a q or k projection the way the GGUF converter does, so that
/// rotating adjacent pairs equals HF's rotate-half on the original rows.
fn permute_rows(values: &[f32], n_heads: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for head in 0..n_heads {
        for half in 0..2 {
            for i in 0..DH / 2 {
                let hf_row = head * DH + half * DH / 2 + i;
                let gguf_row = head * DH + 2 * i + half;
                out[gguf_row * D..(gguf_row + 1) * D]
                    .copy_from_slice(&values[hf_row * D..(hf_row + 1) * D]);
            }
        }
    }
    out
}

fn roles() -> Vec<(TensorRole, Vec<usize>)> {
    let mut roles = vec![
        (TensorRole::TokenEmbedding, vec![VOCAB, D]),
        (TensorRole::OutputNorm, vec![D]),
    ];
    for l in 0..LAYERS {
        roles.extend([
            (TensorRole::AttnNorm(l), vec![D]),
            (TensorRole::AttnQ(l), vec![H * DH, D]),
            (TensorRole::AttnK(l), vec![HKV * DH, D]),
            (TensorRole::AttnV(l), vec![HKV * DH, D]),
            (TensorRole::AttnOutput(l), vec![D, H * DH]),
            (TensorRole::FfnNorm(l), vec![D]),
            (TensorRole::FfnGate(l), vec![F, D]),
            (TensorRole::FfnUp(l), vec![F, D]),
            (TensorRole::FfnDown(l), vec![D, F]),
        ]);
    }
    roles
}

fn write_both(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut rng = Lcg(11);
    let mut gguf_tensors = Vec::new();
    let mut hf_tensors = Vec::new();
    for (role, shape) in roles() {
        let n = shape.iter().product();
        let values = if shape.len() == 1 {
            rng.vec(n, 0.2, 1.0)
        } else {
            rng.vec(n, 0.4, 0.0)
        };
        let gguf_values = match role {
            TensorRole::AttnQ(_) => permute_rows(&values, H),
            TensorRole::AttnK(_) => permute_rows(&values, HKV),
            _ => values.clone(),
        };
        gguf_tensors.push((role.gguf_name(), tensor(&shape, &gguf_values)));
        hf_tensors.push((role.hf_name(), tensor(&shape, &values)));
    }
    let gguf_path = dir.join("model.gguf");
    let metadata = [
        ("general.architecture", Value::Str("llama".into())),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.embedding_length", Value::U32(D as u32)),
        ("llama.feed_forward_length", Value::U32(F as u32)),
        ("llama.attention.head_count", Value::U32(H as u32)),
        ("llama.attention.head_count_kv", Value::U32(HKV as u32)),
        ("llama.context_length", Value::U32(256)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
    ];
    let refs: Vec<(&str, &HostTensor)> =
        gguf_tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_gguf(&gguf_path, &metadata, &refs).unwrap();

    let hf_dir = dir.join("hf");
    std::fs::create_dir_all(&hf_dir).unwrap();
    let refs: Vec<(&str, &HostTensor)> = hf_tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(hf_dir.join("model.safetensors"), &refs).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": D,
        "intermediate_size": F,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": H,
        "num_key_value_heads": HKV,
        "vocab_size": VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true
    });
    std::fs::write(hf_dir.join("config.json"), config.to_string()).unwrap();
    (gguf_path, hf_dir)
}

fn cpu() -> BackendSet {
    BackendSet::new(vec![
        Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>
    ])
    .unwrap()
}

/// Logits after the prompt and after each of `decode` single-token steps.
fn run(runner: &mut Runner, prompt: &[u32], decode: &[u32]) -> Vec<Vec<f32>> {
    let mut seq = runner.new_sequence().unwrap();
    let mut all = vec![runner.forward(&mut seq, prompt).unwrap()];
    for &t in decode {
        all.push(runner.forward(&mut seq, &[t]).unwrap());
    }
    all
}

#[test]
fn gguf_and_safetensors_give_the_same_logits_and_decode_compiles_once() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf_path, hf_dir) = write_both(dir.path());
    let gguf = GgufFile::open(&gguf_path).unwrap();
    let hf = HfModel::open(&hf_dir).unwrap();
    let gguf_config = LlamaConfig::from_gguf(&gguf).unwrap();
    let hf_config = LlamaConfig::from_hf(&hf).unwrap();
    assert_eq!(gguf_config.n_layers, hf_config.n_layers);
    assert_ne!(gguf_config.rope.mode, hf_config.rope.mode);

    let gguf_weights: Arc<dyn ModelWeights> = Arc::new(GgufWeights(gguf));
    let hf_weights: Arc<dyn ModelWeights> = Arc::new(HfWeights(hf));
    let mut gguf_runner = Runner::new(LlamaStep::new(gguf_config, gguf_weights, 1), cpu(), 64);
    let mut hf_runner = Runner::new(LlamaStep::new(hf_config, hf_weights, 2), cpu(), 64);

    let prompt = [3, 17, 42, 5, 88];
    let decode = [7, 61, 2, 95, 30, 12];
    let from_gguf = run(&mut gguf_runner, &prompt, &decode);
    let from_hf = run(&mut hf_runner, &prompt, &decode);
    for (step, (a, b)) in from_gguf.iter().zip(&from_hf).enumerate() {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            diff <= 1e-4 * scale,
            "step {step}: max diff {diff} (scale {scale})"
        );
    }

    for runner in [&gguf_runner, &hf_runner] {
        let (prefill, decode_stats) = runner.phase_stats();
        assert_eq!(prefill.compiles, 1);
        assert_eq!(decode_stats.compiles, 1, "one decode compile");
        assert_eq!(decode_stats.hits, decode.len() as u64 - 1, "then only hits");
    }
}

#[test]
fn a_wrong_rope_layout_would_be_caught() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf_path, hf_dir) = write_both(dir.path());
    let gguf = GgufFile::open(&gguf_path).unwrap();
    let mut wrong = LlamaConfig::from_gguf(&gguf).unwrap();
    wrong.rope.mode = switchyard::graph::RopeMode::Neox;
    let hf = HfModel::open(&hf_dir).unwrap();
    let hf_config = LlamaConfig::from_hf(&hf).unwrap();
    let mut wrong_runner = Runner::new(
        LlamaStep::new(wrong, Arc::new(GgufWeights(gguf)), 1),
        cpu(),
        64,
    );
    let mut hf_runner = Runner::new(
        LlamaStep::new(hf_config, Arc::new(HfWeights(hf)), 2),
        cpu(),
        64,
    );
    let a = run(&mut wrong_runner, &[3, 17, 42, 5, 88], &[]);
    let b = run(&mut hf_runner, &[3, 17, 42, 5, 88], &[]);
    let diff = a[0]
        .iter()
        .zip(&b[0])
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff > 1e-3, "the permutation must matter: diff {diff}");
}
