//! Llama-family models (Llama 2/3/3.1/3.2, SmolLM2, TinyLlama, Mistral, Qwen2/2.5,
//! Qwen3, Gemma 2/3, Phi-3/3.5): their hyper-parameters, the names of their tensors in
//! each file format, and tracing.

mod config;
mod gemma;
mod gguf_config;
pub mod keys;
pub mod rope;
mod trace;

pub use config::SUPPORTED_ARCHITECTURES;
pub use gguf_config::GGUF_ARCHITECTURES;
pub use trace::{check_tensors_used, trace_batch, trace_step, WeightInfo};

use crate::graph::RopeMode;

/// Rotary embedding parameters.
#[derive(Clone, Debug, PartialEq)]
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
    /// Per-dimension inverse frequencies (`n_rot / 2` of them) replacing
    /// `freq_base`/`freq_scale` when the scaling is band-wise (Llama 3.1 `llama3`,
    /// GGUF `rope_freqs.weight`).
    pub inv_freq: Option<Vec<f32>>,
    /// Multiplier of the rotated dims' cos and sin with `inv_freq` (Phi-3 `longrope`).
    pub attn_factor: f32,
}

/// How a block is wired: Llama's (pre-norms only) or Gemma's (`1 + w` norm weights,
/// norms after attention and after the feed-forward too, a scaled embedding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Llama, Mistral, Qwen2, Qwen3.
    Llama,
    /// Gemma 2 and Gemma 3.
    Gemma,
}

/// The feed-forward activation applied to the gate projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnActivation {
    /// `silu(gate) · up` (SwiGLU; `hidden_act: silu`).
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU; `hidden_act: gelu_pytorch_tanh`).
    GeluTanh,
    /// `gelu(gate) · up` with the exact erf GELU (`hidden_act: gelu`).
    GeluErf,
}

/// Hyper-parameters of a Llama-family model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Architecture name as the file gives it (`llama`, `qwen2`, `gemma2`, ...).
    pub architecture: String,
    /// Block wiring.
    pub family: Family,
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
    /// Per layer, the sliding attention window (positions each query sees, itself
    /// included), or `None` for full causal attention; layers past the end of the
    /// list attend fully.
    pub windows: Vec<Option<u32>>,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Rotary embedding.
    pub rope: RopeParams,
    /// Rotary embedding of sliding-window layers when it differs (Gemma 3).
    pub rope_local: Option<RopeParams>,
    /// Attention score scale (`1/√head_dim`, or Gemma's `query_pre_attn_scalar^-½`).
    pub attn_scale: f32,
    /// Attention score soft-capping (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Final logit soft-capping (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Factor the token embedding is multiplied by (Gemma: `√d_model`).
    pub embed_scale: Option<f32>,
    /// Feed-forward activation.
    pub activation: FfnActivation,
    /// Whether the output head is the token embedding (any `lm_head` is then unused).
    pub tie_embeddings: bool,
    /// Whether RMSNorm scales by `1 + w` rather than `w`: Gemma in a Hugging Face
    /// checkpoint (llama.cpp's converter stores `1 + w` in its GGUF files instead).
    pub norm_plus_one: bool,
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
    /// Fused query/key/value projection (Phi-3), rows in that order.
    AttnQkv(usize),
    /// Query bias (Qwen2).
    AttnQBias(usize),
    /// Key bias (Qwen2).
    AttnKBias(usize),
    /// Value bias (Qwen2).
    AttnVBias(usize),
    /// Per-head RMSNorm of queries (Qwen3).
    AttnQNorm(usize),
    /// Per-head RMSNorm of keys (Qwen3).
    AttnKNorm(usize),
    /// Attention output projection.
    AttnOutput(usize),
    /// Attention output bias (`attention_bias`).
    AttnOutputBias(usize),
    /// RMSNorm weight after attention, before the residual add (Gemma).
    AttnPostNorm(usize),
    /// RMSNorm weight before the FFN in Gemma's naming (`pre_feedforward_layernorm`).
    FfnPreNorm(usize),
    /// RMSNorm weight after the FFN, before the residual add (Gemma).
    FfnPostNorm(usize),
    /// RMSNorm weight before the FFN.
    FfnNorm(usize),
    /// FFN gate projection.
    FfnGate(usize),
    /// FFN up projection.
    FfnUp(usize),
    /// FFN down projection.
    FfnDown(usize),
    /// Fused gate/up projection (Phi-3), gate rows first.
    FfnGateUp(usize),
    /// FFN gate bias (`mlp_bias`).
    FfnGateBias(usize),
    /// FFN up bias (`mlp_bias`).
    FfnUpBias(usize),
    /// FFN down bias (`mlp_bias`).
    FfnDownBias(usize),
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
            TensorRole::AttnQkv(l) => format!("blk.{l}.attn_qkv.weight"),
            TensorRole::AttnQBias(l) => format!("blk.{l}.attn_q.bias"),
            TensorRole::AttnKBias(l) => format!("blk.{l}.attn_k.bias"),
            TensorRole::AttnVBias(l) => format!("blk.{l}.attn_v.bias"),
            TensorRole::AttnQNorm(l) => format!("blk.{l}.attn_q_norm.weight"),
            TensorRole::AttnKNorm(l) => format!("blk.{l}.attn_k_norm.weight"),
            TensorRole::AttnOutput(l) => format!("blk.{l}.attn_output.weight"),
            TensorRole::AttnOutputBias(l) => format!("blk.{l}.attn_output.bias"),
            TensorRole::AttnPostNorm(l) => format!("blk.{l}.post_attention_norm.weight"),
            TensorRole::FfnPreNorm(l) => format!("blk.{l}.ffn_norm.weight"),
            TensorRole::FfnPostNorm(l) => format!("blk.{l}.post_ffw_norm.weight"),
            TensorRole::FfnNorm(l) => format!("blk.{l}.ffn_norm.weight"),
            TensorRole::FfnGate(l) => format!("blk.{l}.ffn_gate.weight"),
            TensorRole::FfnUp(l) => format!("blk.{l}.ffn_up.weight"),
            TensorRole::FfnDown(l) => format!("blk.{l}.ffn_down.weight"),
            TensorRole::FfnGateUp(l) => format!("blk.{l}.ffn_gate_up.weight"),
            TensorRole::FfnGateBias(l) => format!("blk.{l}.ffn_gate.bias"),
            TensorRole::FfnUpBias(l) => format!("blk.{l}.ffn_up.bias"),
            TensorRole::FfnDownBias(l) => format!("blk.{l}.ffn_down.bias"),
            TensorRole::OutputNorm => "output_norm.weight".into(),
            TensorRole::Output => "output.weight".into(),
        }
    }

    /// The tensor's name in a GGUF file of architecture `arch`: Phi-3's converter
    /// writes the fused gate/up projection as `ffn_up`, of twice the width.
    pub fn gguf_name_in(self, arch: &str) -> String {
        match self {
            TensorRole::FfnGateUp(l) if arch == "phi3" => format!("blk.{l}.ffn_up.weight"),
            _ => self.gguf_name(),
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
            TensorRole::AttnQkv(l) => layer(l, "self_attn.qkv_proj.weight"),
            TensorRole::AttnQBias(l) => layer(l, "self_attn.q_proj.bias"),
            TensorRole::AttnKBias(l) => layer(l, "self_attn.k_proj.bias"),
            TensorRole::AttnVBias(l) => layer(l, "self_attn.v_proj.bias"),
            TensorRole::AttnQNorm(l) => layer(l, "self_attn.q_norm.weight"),
            TensorRole::AttnKNorm(l) => layer(l, "self_attn.k_norm.weight"),
            TensorRole::AttnOutput(l) => layer(l, "self_attn.o_proj.weight"),
            TensorRole::AttnOutputBias(l) => layer(l, "self_attn.o_proj.bias"),
            TensorRole::AttnPostNorm(l) => layer(l, "post_attention_layernorm.weight"),
            TensorRole::FfnPreNorm(l) => layer(l, "pre_feedforward_layernorm.weight"),
            TensorRole::FfnPostNorm(l) => layer(l, "post_feedforward_layernorm.weight"),
            TensorRole::FfnNorm(l) => layer(l, "post_attention_layernorm.weight"),
            TensorRole::FfnGate(l) => layer(l, "mlp.gate_proj.weight"),
            TensorRole::FfnUp(l) => layer(l, "mlp.up_proj.weight"),
            TensorRole::FfnDown(l) => layer(l, "mlp.down_proj.weight"),
            TensorRole::FfnGateUp(l) => layer(l, "mlp.gate_up_proj.weight"),
            TensorRole::FfnGateBias(l) => layer(l, "mlp.gate_proj.bias"),
            TensorRole::FfnUpBias(l) => layer(l, "mlp.up_proj.bias"),
            TensorRole::FfnDownBias(l) => layer(l, "mlp.down_proj.bias"),
            TensorRole::OutputNorm => "model.norm.weight".into(),
            TensorRole::Output => "lm_head.weight".into(),
        }
    }
}
