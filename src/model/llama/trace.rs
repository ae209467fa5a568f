//! Traces a Llama-family model step into the graph IR. The KV length is never part of
//! a shape, so every decode step (one token) traces to the same graph.

use crate::graph::{AttentionParams, DType, Graph, GraphBuilder, GraphError, Shape, ValueId};

use super::{LlamaConfig, TensorRole};

/// Declared dtype and shape of a weight, as the model file has it.
pub trait WeightInfo {
    /// The dtype and shape of the weight with this role, or `None` when the file has
    /// none (an optional weight such as a bias or a separate output head).
    fn info(&self, role: TensorRole) -> Option<(DType, Shape)>;
    /// The tensor name in the file for a role.
    fn name(&self, role: TensorRole) -> String;
}

/// Inputs of a traced step, bound by these names.
pub mod inputs {
    /// Token ids, `[n] i32`.
    pub const TOKENS: &str = "tokens";
    /// Absolute positions, `[n] i32`.
    pub const POSITIONS: &str = "positions";
    /// Index of the row whose logits are returned, `[1] i32`.
    pub const LOGITS_ROW: &str = "logits_row";
}

/// Traces one step of `n_tokens` tokens; the output is the logits `[1, vocab]` of the
/// row named by the `logits_row` input (the last real token of the step).
pub fn trace_step(
    config: &LlamaConfig,
    weights: &dyn WeightInfo,
    n_tokens: usize,
) -> Result<Graph, GraphError> {
    let mut b = GraphBuilder::new();
    let tokens = b.input(inputs::TOKENS, DType::I32, [n_tokens])?;
    let positions = b.input(inputs::POSITIONS, DType::I32, [n_tokens])?;
    let logits_row = b.input(inputs::LOGITS_ROW, DType::I32, [1])?;
    let w = |b: &mut GraphBuilder, role: TensorRole| -> Result<ValueId, GraphError> {
        let (dtype, shape) = weights.info(role).ok_or_else(|| GraphError::Attribute {
            op: crate::graph::OpKind::Weight,
            detail: format!("the model has no tensor {:?}", weights.name(role)),
        })?;
        b.weight(&weights.name(role), dtype, shape)
    };
    let embd = w(&mut b, TensorRole::TokenEmbedding)?;
    let mut x = b.embedding(embd, tokens)?;
    if b.node(x)?.dtype != DType::F32 {
        x = b.cast(x, DType::F32)?;
    }
    let (h, hkv, dh) = (config.n_heads, config.n_kv_heads, config.head_dim);
    for layer in 0..config.n_layers {
        let norm = w(&mut b, TensorRole::AttnNorm(layer))?;
        let hn = b.rms_norm(x, norm, config.rms_eps)?;
        let project = |b: &mut GraphBuilder, weight: TensorRole, bias: TensorRole| {
            let wv = w(b, weight)?;
            let y = b.matmul(hn, wv)?;
            match weights.info(bias) {
                Some(_) => {
                    let bv = w(b, bias)?;
                    b.add(y, bv)
                }
                None => Ok(y),
            }
        };
        let q = project(
            &mut b,
            TensorRole::AttnQ(layer),
            TensorRole::AttnQBias(layer),
        )?;
        let k = project(
            &mut b,
            TensorRole::AttnK(layer),
            TensorRole::AttnKBias(layer),
        )?;
        let v = project(
            &mut b,
            TensorRole::AttnV(layer),
            TensorRole::AttnVBias(layer),
        )?;
        let q = b.reshape(q, [n_tokens, h, dh])?;
        let k = b.reshape(k, [n_tokens, hkv, dh])?;
        let rope = &config.rope;
        let q = b.rope(
            q,
            positions,
            rope.mode,
            rope.n_rot,
            rope.freq_base,
            rope.freq_scale,
        )?;
        let k = b.rope(
            k,
            positions,
            rope.mode,
            rope.n_rot,
            rope.freq_base,
            rope.freq_scale,
        )?;
        let q = b.reshape(q, [n_tokens, h * dh])?;
        let k = b.reshape(k, [n_tokens, hkv * dh])?;
        let params = AttentionParams {
            layer: layer as u32,
            n_heads: h as u32,
            n_kv_heads: hkv as u32,
            head_dim: dh as u32,
            scale: 1.0 / (dh as f32).sqrt(),
        };
        let attn = b.attention(q, k, v, params)?;
        let wo = w(&mut b, TensorRole::AttnOutput(layer))?;
        let attn = b.matmul(attn, wo)?;
        x = b.add(x, attn)?;
        let norm = w(&mut b, TensorRole::FfnNorm(layer))?;
        let hn = b.rms_norm(x, norm, config.rms_eps)?;
        let gate = w(&mut b, TensorRole::FfnGate(layer))?;
        let up = w(&mut b, TensorRole::FfnUp(layer))?;
        let gate = b.matmul(hn, gate)?;
        let up = b.matmul(hn, up)?;
        let act = b.swiglu(gate, up)?;
        let down = w(&mut b, TensorRole::FfnDown(layer))?;
        let down = b.matmul(act, down)?;
        x = b.add(x, down)?;
    }
    let last = b.embedding(x, logits_row)?;
    let norm = w(&mut b, TensorRole::OutputNorm)?;
    let last = b.rms_norm(last, norm, config.rms_eps)?;
    let head = match weights.info(TensorRole::Output) {
        Some(_) => w(&mut b, TensorRole::Output)?,
        None => embd,
    };
    let logits = b.matmul(last, head)?;
    b.finish(vec![logits])
}
