//! Traces a Llama-family model step into the graph IR. The KV length is never part of
//! a shape, so every decode step (one token) traces to the same graph.

use crate::graph::{
    AttentionParams, AttentionVariant, DType, Graph, GraphBuilder, GraphError, Shape, ValueId,
};

use std::collections::BTreeSet;

use super::{Family, FfnActivation, LlamaConfig, RopeParams, TensorRole};
use crate::graph::Op;
use crate::step::inputs;

/// Declared dtype and shape of a weight, as the model file has it.
pub trait WeightInfo {
    /// The dtype and shape of the weight with this role, or `None` when the file has
    /// none (an optional weight such as a bias or a separate output head).
    fn info(&self, role: TensorRole) -> Option<(DType, Shape)>;
    /// The tensor name in the file for a role.
    fn name(&self, role: TensorRole) -> String;
}

/// Traces one step of `n_tokens` tokens of one sequence; the output is the logits
/// `[1, vocab]` of the row named by the `logits_row` input (the last real token).
pub fn trace_step(
    config: &LlamaConfig,
    weights: &dyn WeightInfo,
    n_tokens: usize,
) -> Result<Graph, GraphError> {
    trace_batch(config, weights, n_tokens, 1)
}

/// Traces one step of `n_tokens` token rows shared by several sequences (which rows
/// belong to which sequence is runtime state, not shape); the output is the logits
/// `[n_logits, vocab]` of the rows named by the `logits_row` input (`[n_logits]`).
/// With `n_logits` 0 (a prompt chunk before the last) the graph has neither that input
/// nor an output: it ends at the last layer's attention, which writes the KV cache.
pub fn trace_batch(
    config: &LlamaConfig,
    weights: &dyn WeightInfo,
    n_tokens: usize,
    n_logits: usize,
) -> Result<Graph, GraphError> {
    let mut b = GraphBuilder::new();
    let tokens = b.input(inputs::TOKENS, DType::I32, [n_tokens])?;
    let positions = b.input(inputs::POSITIONS, DType::I32, [n_tokens])?;
    let logits_row = match n_logits {
        0 => None,
        n => Some(b.input(inputs::LOGITS_ROW, DType::I32, [n])?),
    };
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
    if let Some(scale) = config.embed_scale {
        x = b.affine(x, scale, 0.0)?;
    }
    let gemma = config.family == Family::Gemma;
    let (h, hkv, dh) = (config.n_heads, config.n_kv_heads, config.head_dim);
    // RMSNorm by the weight of `role`; Gemma's checkpoints store `w` and scale by `1 + w`.
    let norm = |b: &mut GraphBuilder, x: ValueId, role: TensorRole| {
        let mut nw = w(b, role)?;
        if config.norm_plus_one {
            if b.node(nw)?.dtype != DType::F32 {
                nw = b.cast(nw, DType::F32)?;
            }
            nw = b.affine(nw, 1.0, 1.0)?;
        }
        b.rms_norm(x, nw, config.rms_eps)
    };
    // `x · wᵀ`, plus the bias when the file has one.
    let linear = |b: &mut GraphBuilder, x: ValueId, weight: TensorRole, bias: TensorRole| {
        let wv = w(b, weight)?;
        let y = b.matmul(x, wv)?;
        match weights.info(bias) {
            Some(_) => {
                let bv = w(b, bias)?;
                b.add(y, bv)
            }
            None => Ok(y),
        }
    };
    // Per-head RMSNorm (Qwen3's and Gemma 3's q_norm / k_norm) when the file has it.
    let head_norm = |b: &mut GraphBuilder, x: ValueId, role: TensorRole| match weights.info(role) {
        Some(_) => norm(b, x, role),
        None => Ok(x),
    };
    let rotate = |b: &mut GraphBuilder, x: ValueId, rope: &RopeParams| match &rope.inv_freq {
        Some(table) => b.rope_freqs(x, positions, rope.mode, table.clone(), rope.attn_factor),
        None => b.rope(
            x,
            positions,
            rope.mode,
            rope.n_rot,
            rope.freq_base,
            rope.freq_scale,
        ),
    };
    for layer in 0..config.n_layers {
        let window = config.windows.get(layer).copied().flatten();
        let rope = match (&config.rope_local, window) {
            (Some(local), Some(_)) => local,
            _ => &config.rope,
        };
        let hn = norm(&mut b, x, TensorRole::AttnNorm(layer))?;
        let (q, k, v) = match weights.info(TensorRole::AttnQkv(layer)) {
            // Phi-3's fused projection: q, k and v rows one after another.
            Some(_) => {
                let wv = w(&mut b, TensorRole::AttnQkv(layer))?;
                let qkv = b.matmul(hn, wv)?;
                let (q_end, k_end) = (h * dh, (h + hkv) * dh);
                (
                    b.slice(qkv, 1, 0, q_end)?,
                    b.slice(qkv, 1, q_end, k_end)?,
                    b.slice(qkv, 1, k_end, k_end + hkv * dh)?,
                )
            }
            None => (
                linear(
                    &mut b,
                    hn,
                    TensorRole::AttnQ(layer),
                    TensorRole::AttnQBias(layer),
                )?,
                linear(
                    &mut b,
                    hn,
                    TensorRole::AttnK(layer),
                    TensorRole::AttnKBias(layer),
                )?,
                linear(
                    &mut b,
                    hn,
                    TensorRole::AttnV(layer),
                    TensorRole::AttnVBias(layer),
                )?,
            ),
        };
        let q = b.reshape(q, [n_tokens, h, dh])?;
        let k = b.reshape(k, [n_tokens, hkv, dh])?;
        let q = head_norm(&mut b, q, TensorRole::AttnQNorm(layer))?;
        let k = head_norm(&mut b, k, TensorRole::AttnKNorm(layer))?;
        let q = rotate(&mut b, q, rope)?;
        let k = rotate(&mut b, k, rope)?;
        let q = b.reshape(q, [n_tokens, h * dh])?;
        let k = b.reshape(k, [n_tokens, hkv * dh])?;
        let params = AttentionParams {
            layer: layer as u32,
            n_heads: h as u32,
            n_kv_heads: hkv as u32,
            head_dim: dh as u32,
            scale: config.attn_scale,
        };
        let variant = AttentionVariant {
            window,
            softcap: config.attn_softcap,
        };
        let mut attn = b.attention_variant(q, k, v, params, variant)?;
        if layer + 1 == config.n_layers {
            // Only the logits rows go on past the last layer's attention (their KV is
            // written): its output projection and FFN skip every other row.
            let Some(rows) = logits_row else {
                return b.finish(Vec::new());
            };
            attn = b.embedding(attn, rows)?;
            x = b.embedding(x, rows)?;
        }
        let mut attn = linear(
            &mut b,
            attn,
            TensorRole::AttnOutput(layer),
            TensorRole::AttnOutputBias(layer),
        )?;
        if gemma {
            attn = norm(&mut b, attn, TensorRole::AttnPostNorm(layer))?;
        }
        x = b.add(x, attn)?;
        let pre_ffn = match config.family {
            Family::Llama => TensorRole::FfnNorm(layer),
            Family::Gemma => TensorRole::FfnPreNorm(layer),
        };
        let hn = norm(&mut b, x, pre_ffn)?;
        let (gate, up) = match weights.info(TensorRole::FfnGateUp(layer)) {
            // Phi-3's fused projection: gate rows, then up rows.
            Some(_) => {
                let wv = w(&mut b, TensorRole::FfnGateUp(layer))?;
                let gate_up = b.matmul(hn, wv)?;
                let f = config.d_ffn;
                (b.slice(gate_up, 1, 0, f)?, b.slice(gate_up, 1, f, 2 * f)?)
            }
            None => (
                linear(
                    &mut b,
                    hn,
                    TensorRole::FfnGate(layer),
                    TensorRole::FfnGateBias(layer),
                )?,
                linear(
                    &mut b,
                    hn,
                    TensorRole::FfnUp(layer),
                    TensorRole::FfnUpBias(layer),
                )?,
            ),
        };
        let act = match config.activation {
            FfnActivation::Silu => b.swiglu(gate, up)?,
            FfnActivation::GeluTanh => {
                let gate = b.gelu(gate)?;
                b.mul(gate, up)?
            }
            FfnActivation::GeluErf => {
                let gate = b.gelu_erf(gate)?;
                b.mul(gate, up)?
            }
        };
        let mut down = linear(
            &mut b,
            act,
            TensorRole::FfnDown(layer),
            TensorRole::FfnDownBias(layer),
        )?;
        if gemma {
            down = norm(&mut b, down, TensorRole::FfnPostNorm(layer))?;
        }
        x = b.add(x, down)?;
    }
    let last = match (config.n_layers, logits_row) {
        (_, None) => return b.finish(Vec::new()),
        (0, Some(rows)) => b.embedding(x, rows)?,
        _ => x,
    };
    let last = norm(&mut b, last, TensorRole::OutputNorm)?;
    let head = if config.tie_embeddings {
        embd
    } else {
        w(&mut b, TensorRole::Output)?
    };
    let mut logits = b.matmul(last, head)?;
    if let Some(cap) = config.final_softcap {
        logits = b.softcap(logits, cap)?;
    }
    b.finish(vec![logits])
}

/// Checks that a traced model reads every tensor in `names` except those in
/// `unused_ok` (an untied-away `lm_head`, tensors the config already consumed), so
/// that a tensor which would change the result is never silently skipped.
pub fn check_tensors_used<'a>(
    config: &LlamaConfig,
    weights: &dyn WeightInfo,
    names: impl IntoIterator<Item = &'a str>,
    unused_ok: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let graph = trace_step(config, weights, 1).map_err(|e| e.to_string())?;
    let used: BTreeSet<&str> = graph
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Weight { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    match names
        .into_iter()
        .find(|name| !used.contains(name) && !unused_ok(name))
    {
        Some(name) => Err(format!(
            "tensor {name:?} is not used by the {} tracer",
            config.architecture
        )),
        None => Ok(()),
    }
}
