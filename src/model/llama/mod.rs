//! Llama-family models (Llama 2/3, SmolLM2, TinyLlama, Mistral, Qwen2/2.5): their
//! hyper-parameters, the names of their tensors in each file format, and tracing.

mod config;
mod trace;

pub use config::SUPPORTED_ARCHITECTURES;
pub use trace::{inputs, trace_step, WeightInfo};

use crate::graph::RopeMode;

/// Rotary embedding parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Pairing of rotated dimensions: `Normal` for GGUF `llama` (the converter permuted
    /// q/k rows), `Neox` for HF checkpoints and GGUF `qwen2`.
    pub mode: RopeMode,
    /// Rotated dimensions per head.
    pub n_rot: u32,
    /// Frequency base θ.
    pub freq_base: f32,
    /// Linear position scale (1.0 for none).
    pub freq_scale: f32,
}

/// Hyper-parameters of a Llama-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Architecture name as the file gives it (`llama`, `qwen2`, `mistral`).
    pub architecture: String,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Residual width.
    pub d_model: usize,
    /// FFN hidden width.
    pub d_ffn: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Context length the model was trained for.
    pub context_length: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Rotary embedding.
    pub rope: RopeParams,
}

/// What a tensor is for, independent of how a file format names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// Token embedding table `[vocab, d_model]`.
    TokenEmbedding,
    /// RMSNorm weight before attention.
    AttnNorm(usize),
    /// Query projection.
    AttnQ(usize),
    /// Key projection.
    AttnK(usize),
    /// Value projection.
    AttnV(usize),
    /// Query bias (Qwen2).
    AttnQBias(usize),
    /// Key bias (Qwen2).
    AttnKBias(usize),
    /// Value bias (Qwen2).
    AttnVBias(usize),
    /// Attention output projection.
    AttnOutput(usize),
    /// RMSNorm weight before the FFN.
    FfnNorm(usize),
    /// FFN gate projection.
    FfnGate(usize),
    /// FFN up projection.
    FfnUp(usize),
    /// FFN down projection.
    FfnDown(usize),
    /// Final RMSNorm weight.
    OutputNorm,
    /// Output head; absent when tied to the embedding.
    Output,
}

impl TensorRole {
    /// The tensor's name in a GGUF file.
    pub fn gguf_name(self) -> String {
        match self {
            TensorRole::TokenEmbedding => "token_embd.weight".into(),
            TensorRole::AttnNorm(l) => format!("blk.{l}.attn_norm.weight"),
            TensorRole::AttnQ(l) => format!("blk.{l}.attn_q.weight"),
            TensorRole::AttnK(l) => format!("blk.{l}.attn_k.weight"),
            TensorRole::AttnV(l) => format!("blk.{l}.attn_v.weight"),
            TensorRole::AttnQBias(l) => format!("blk.{l}.attn_q.bias"),
            TensorRole::AttnKBias(l) => format!("blk.{l}.attn_k.bias"),
            TensorRole::AttnVBias(l) => format!("blk.{l}.attn_v.bias"),
            TensorRole::AttnOutput(l) => format!("blk.{l}.attn_output.weight"),
            TensorRole::FfnNorm(l) => format!("blk.{l}.ffn_norm.weight"),
            TensorRole::FfnGate(l) => format!("blk.{l}.ffn_gate.weight"),
            TensorRole::FfnUp(l) => format!("blk.{l}.ffn_up.weight"),
            TensorRole::FfnDown(l) => format!("blk.{l}.ffn_down.weight"),
            TensorRole::OutputNorm => "output_norm.weight".into(),
            TensorRole::Output => "output.weight".into(),
        }
    }

    /// The tensor's name in a Hugging Face safetensors checkpoint.
    pub fn hf_name(self) -> String {
        let layer = |l: usize, rest: &str| format!("model.layers.{l}.{rest}");
        match self {
            TensorRole::TokenEmbedding => "model.embed_tokens.weight".into(),
            TensorRole::AttnNorm(l) => layer(l, "input_layernorm.weight"),
            TensorRole::AttnQ(l) => layer(l, "self_attn.q_proj.weight"),
            TensorRole::AttnK(l) => layer(l, "self_attn.k_proj.weight"),
            TensorRole::AttnV(l) => layer(l, "self_attn.v_proj.weight"),
            TensorRole::AttnQBias(l) => layer(l, "self_attn.q_proj.bias"),
            TensorRole::AttnKBias(l) => layer(l, "self_attn.k_proj.bias"),
            TensorRole::AttnVBias(l) => layer(l, "self_attn.v_proj.bias"),
            TensorRole::AttnOutput(l) => layer(l, "self_attn.o_proj.weight"),
            TensorRole::FfnNorm(l) => layer(l, "post_attention_layernorm.weight"),
            TensorRole::FfnGate(l) => layer(l, "mlp.gate_proj.weight"),
            TensorRole::FfnUp(l) => layer(l, "mlp.up_proj.weight"),
            TensorRole::FfnDown(l) => layer(l, "mlp.down_proj.weight"),
            TensorRole::OutputNorm => "model.norm.weight".into(),
            TensorRole::Output => "lm_head.weight".into(),
        }
    }
}
