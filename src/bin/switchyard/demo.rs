//! The demo transformer block of `switchyard plan --demo`: RMSNorm, GQA attention with
//! RoPE over a KV cache, and a SwiGLU FFN, with small random weights.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard::backend::{BackendError, HostTensor, SharedBytes};
use switchyard::cache::WeightSource;
use switchyard::graph::{AttentionParams, DType, Graph, GraphBuilder, GraphError, RopeMode};

/// Sizes of the demo block (a small Llama layer).
pub const D_MODEL: usize = 128;
const N_HEADS: usize = 4;
const N_KV_HEADS: usize = 2;
const HEAD_DIM: usize = 32;
/// `(n_kv_heads, head_dim)` of the demo block's KV cache.
pub const KV_SHAPE: (usize, usize) = (N_KV_HEADS, HEAD_DIM);
const D_FFN: usize = 256;

/// The demo block for `n_tokens` new tokens, its linear weights in `dtype`.
pub fn block(n_tokens: usize, dtype: DType) -> Result<Graph, GraphError> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [n_tokens, D_MODEL])?;
    let pos = b.input("positions", DType::I32, [n_tokens])?;
    let q_dim = N_HEADS * HEAD_DIM;
    let kv_dim = N_KV_HEADS * HEAD_DIM;
    let attn_norm = b.weight("attn_norm", DType::F32, [D_MODEL])?;
    let wq = b.weight("wq", dtype, [q_dim, D_MODEL])?;
    let wk = b.weight("wk", dtype, [kv_dim, D_MODEL])?;
    let wv = b.weight("wv", dtype, [kv_dim, D_MODEL])?;
    let wo = b.weight("wo", dtype, [D_MODEL, q_dim])?;
    let ffn_norm = b.weight("ffn_norm", DType::F32, [D_MODEL])?;
    let w_gate = b.weight("w_gate", dtype, [D_FFN, D_MODEL])?;
    let w_up = b.weight("w_up", dtype, [D_FFN, D_MODEL])?;
    let w_down = b.weight("w_down", dtype, [D_MODEL, D_FFN])?;

    let h = b.rms_norm(x, attn_norm, 1e-5)?;
    let q = b.matmul(h, wq)?;
    let k = b.matmul(h, wk)?;
    let v = b.matmul(h, wv)?;
    let q = b.reshape(q, [n_tokens, N_HEADS, HEAD_DIM])?;
    let k = b.reshape(k, [n_tokens, N_KV_HEADS, HEAD_DIM])?;
    let q = b.rope(q, pos, RopeMode::Neox, HEAD_DIM as u32, 10_000.0, 1.0)?;
    let k = b.rope(k, pos, RopeMode::Neox, HEAD_DIM as u32, 10_000.0, 1.0)?;
    let q = b.reshape(q, [n_tokens, q_dim])?;
    let k = b.reshape(k, [n_tokens, kv_dim])?;
    let params = AttentionParams {
        layer: 0,
        n_heads: N_HEADS as u32,
        n_kv_heads: N_KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
    };
    let attn = b.attention(q, k, v, params)?;
    let attn_out = b.matmul(attn, wo)?;
    let x = b.add(x, attn_out)?;
    let h = b.rms_norm(x, ffn_norm, 1e-5)?;
    let gate = b.matmul(h, w_gate)?;
    let up = b.matmul(h, w_up)?;
    let act = b.swiglu(gate, up)?;
    let down = b.matmul(act, w_down)?;
    let out = b.add(x, down)?;
    b.finish(vec![out])
}

/// Deterministic small random f32 weights for every weight node of `graph`, with
/// norm weights near 1 so activations stay in a realistic range.
pub struct RandomWeights {
    tensors: HashMap<String, HostTensor>,
}

impl RandomWeights {
    /// Weights for `graph`, seeded by `seed`.
    pub fn for_graph(graph: &Graph, seed: u64) -> Result<RandomWeights, BackendError> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut tensors = HashMap::new();
        for node in graph.nodes() {
            let switchyard::graph::Op::Weight { name } = &node.op else {
                continue;
            };
            let is_norm = node.shape.rank() == 1;
            let values: Vec<f32> = (0..node.shape.numel())
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    if is_norm {
                        1.0 + 0.2 * unit
                    } else {
                        0.2 * unit
                    }
                })
                .collect();
            let bytes = SharedBytes::from_vec(bytemuck_f32(&values));
            let tensor = HostTensor::new(DType::F32, node.shape.clone(), bytes)?;
            tensors.insert(name.clone(), tensor);
        }
        Ok(RandomWeights { tensors })
    }

    /// Shares the weights as a weight source.
    pub fn into_source(self) -> Arc<dyn WeightSource> {
        Arc::new(self)
    }
}

fn bytemuck_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl WeightSource for RandomWeights {
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| BackendError::MissingWeight(name.to_string()))
    }
}
