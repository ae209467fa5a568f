//! Reading a Llama-family model's hyper-parameters from a Hugging Face `config.json`
//! (GGUF metadata: `gguf_config.rs`), with every missing, inconsistent or unsupported
//! value named. Which keys exist at all is decided in [`super::keys`].

use std::path::Path;

use serde_json::{Map, Value};

use super::gemma::{activation, GemmaExtras};
use super::keys::{self, unsupported, KeySource};
use super::rope::HfRope;
use super::trace::check_tensors_used;
use super::{Family, LlamaConfig, RopeParams};
use crate::graph::RopeMode;
use crate::model::safetensors::HfModel;
use crate::model::ModelError;

/// Hugging Face `model_type`s traced as Llama: the same block, differing in biases, q/k norms
/// (Qwen3) and RoPE layout.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "phi3",
];

/// transformers' default sliding-layer pattern for Gemma 3 (five sliding, one full).
const GEMMA3_SLIDING_PATTERN: usize = 6;

/// transformers' default Gemma attention window.
const GEMMA_SLIDING_WINDOW: u32 = 4096;

/// transformers' default `max_window_layers` for Qwen2 and Qwen3.
const QWEN_MAX_WINDOW_LAYERS: usize = 28;

impl LlamaConfig {
    /// The hyper-parameters in a Hugging Face `config.json`.
    pub fn from_hf(model: &HfModel) -> Result<LlamaConfig, ModelError> {
        let path = model.dir();
        let c = model.config();
        let arch = c.model_type.clone().unwrap_or_default();
        check_architecture(path, &arch, SUPPORTED_ARCHITECTURES)?;
        let raw = model.raw_config();
        keys::check_hf_keys(path, &arch, raw)?;
        let o = raw
            .as_object()
            .ok_or_else(|| config_error(path, "config.json is not a JSON object"))?;
        let need = |v: Option<usize>, name: &str| {
            v.ok_or_else(|| config_error(path, &format!("config.json has no {name}")))
        };
        let refuse = |name: &str| unsupported(path, KeySource::ConfigJson, name, &o[name]);
        let is = |name: &str, want: &Value| o.get(name).is_none_or(|v| v.is_null() || v == want);
        for flag in ["rope_interleaved", "use_mrope"] {
            if !is(flag, &Value::Bool(false)) {
                return Err(refuse(flag));
            }
        }
        for flag in [
            "attention_bias",
            "mlp_bias",
            "tie_word_embeddings",
            "use_sliding_window",
        ] {
            if o.get(flag).is_some_and(|v| !v.is_boolean()) {
                return Err(refuse(flag));
            }
        }
        let family = if arch.starts_with("gemma") {
            Family::Gemma
        } else {
            Family::Llama
        };
        let activation = activation(path, family, o)?;
        let d_model = need(c.hidden_size, "hidden_size")?;
        let n_heads = need(c.num_attention_heads, "num_attention_heads")?;
        let head_dim = c.head_dim.unwrap_or(d_model / n_heads.max(1));
        let n_layers = need(c.num_hidden_layers, "num_hidden_layers")?;
        let max_positions = c.max_position_embeddings.unwrap_or(2048);
        let (rope, rope_local) = if arch == "gemma3_text" {
            let (full, sliding) = HfRope::read_per_layer_type(path, o, max_positions)?;
            (full, Some(sliding))
        } else {
            (HfRope::read(path, o, max_positions)?, None)
        };
        // Only Phi-3 rotates part of each head (transformers' Llama would not run).
        if rope.partial != 1.0 && arch != "phi3" {
            let value = o
                .get("partial_rotary_factor")
                .cloned()
                .unwrap_or(rope.partial.into());
            return Err(unsupported(
                path,
                KeySource::ConfigJson,
                "partial_rotary_factor",
                &value,
            ));
        }
        // longrope is exact up to its pre-training length only.
        let context_length = rope
            .max_exact_positions()
            .map_or(max_positions, |m| m.min(max_positions));
        let rope_params = |rope: &HfRope| -> Result<RopeParams, ModelError> {
            let n_rot = rope.n_rot(head_dim);
            Ok(RopeParams {
                mode: RopeMode::Neox,
                n_rot: n_rot as u32,
                freq_base: rope.theta as f32,
                freq_scale: rope.freq_scale(),
                inv_freq: rope.inv_freq(path, n_rot)?,
                attn_factor: rope.attn_factor(),
            })
        };
        let gemma = match family {
            Family::Gemma => Some(GemmaExtras::read(path, &arch, o, d_model)?),
            Family::Llama => None,
        };
        let config = LlamaConfig {
            n_layers,
            d_model,
            d_ffn: need(c.intermediate_size, "intermediate_size")?,
            n_heads,
            n_kv_heads: c.num_key_value_heads.unwrap_or(n_heads),
            head_dim,
            vocab_size: need(c.vocab_size, "vocab_size")?,
            context_length,
            windows: Vec::new(),
            rms_eps: c.rms_norm_eps.unwrap_or(1e-6) as f32,
            rope: rope_params(&rope)?,
            rope_local: rope_local.as_ref().map(rope_params).transpose()?,
            attn_scale: match &gemma {
                Some(g) => g.attn_scale,
                None => 1.0 / (head_dim as f32).sqrt(),
            },
            attn_softcap: gemma.as_ref().and_then(|g| g.attn_softcap),
            final_softcap: gemma.as_ref().and_then(|g| g.final_softcap),
            embed_scale: gemma.as_ref().map(|g| g.embed_scale),
            activation,
            // transformers' defaults: Gemma ties, the others do not.
            tie_embeddings: c.tie_word_embeddings.unwrap_or(family == Family::Gemma),
            norm_plus_one: family == Family::Gemma,
            family,
            architecture: arch,
        };
        let mut config = config.validate(path)?;
        config.windows = sliding_windows(path, &config.architecture, o, n_layers)?;
        // transformers ties an lm_head away, and older checkpoints carry RoPE tables
        // it recomputes.
        let unused_ok = |name: &str| {
            (config.tie_embeddings && name == "lm_head.weight")
                || name.ends_with(".rotary_emb.inv_freq")
        };
        check_tensors_used(&config, model, model.tensor_names(), &unused_ok)
            .map_err(|detail| unsupported_tensor(path, detail))?;
        Ok(config)
    }

    pub(super) fn validate(self, path: &Path) -> Result<LlamaConfig, ModelError> {
        let sizes = [
            self.n_layers,
            self.d_model,
            self.d_ffn,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.vocab_size,
            self.context_length,
        ];
        if sizes.iter().any(|&s| s == 0 || s > 1 << 24) {
            return Err(config_error(
                path,
                &format!("implausible sizes in {self:?}"),
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(config_error(
                path,
                &format!(
                    "{} query heads do not group over {} KV heads",
                    self.n_heads, self.n_kv_heads
                ),
            ));
        }
        if self.rope.n_rot == 0
            || self.rope.n_rot as usize > self.head_dim
            || !self.rope.n_rot.is_multiple_of(2)
        {
            return Err(config_error(
                path,
                &format!(
                    "RoPE dimension {} does not fit head dim {}",
                    self.rope.n_rot, self.head_dim
                ),
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(config_error(
                path,
                &format!(
                    "RMSNorm epsilon {} is not a finite non-negative number",
                    self.rms_eps
                ),
            ));
        }
        Ok(self)
    }
}

/// Each layer's attention window, as transformers applies it: Mistral slides every
/// layer; Qwen2/Qwen3 only with `use_sliding_window`, from layer `max_window_layers`
/// on; `layer_types`, where given, names each layer. Llama has no sliding window, so
/// one there is refused.
fn sliding_windows(
    path: &Path,
    arch: &str,
    o: &Map<String, Value>,
    n_layers: usize,
) -> Result<Vec<Option<u32>>, ModelError> {
    let refuse = |name: &str| unsupported(path, KeySource::ConfigJson, name, &o[name]);
    let window = match o.get("sliding_window") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().and_then(|w| u32::try_from(w).ok()) {
            Some(w) if w > 0 => Some(w),
            _ => return Err(refuse("sliding_window")),
        },
    };
    let layer_types: Option<Vec<&str>> = match o.get("layer_types") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let names: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            match names {
                Some(names)
                    if names.len() == n_layers
                        && names
                            .iter()
                            .all(|t| matches!(*t, "full_attention" | "sliding_attention")) =>
                {
                    Some(names)
                }
                _ => return Err(refuse("layer_types")),
            }
        }
        Some(_) => return Err(refuse("layer_types")),
    };
    let qwen = matches!(arch, "qwen2" | "qwen3");
    let use_window = o.get("use_sliding_window").and_then(Value::as_bool) == Some(true);
    let from = o
        .get("max_window_layers")
        .and_then(Value::as_u64)
        .map_or(QWEN_MAX_WINDOW_LAYERS, |v| v as usize);
    // Gemma: every layer whose number is not a multiple of the pattern slides.
    let pattern = match arch {
        "gemma2" => 2,
        _ => o
            .get("sliding_window_pattern")
            .and_then(Value::as_u64)
            .map_or(GEMMA3_SLIDING_PATTERN, |v| v.max(1) as usize),
    };
    let gemma = arch.starts_with("gemma");
    // transformers' default window for Gemma when the key is absent.
    let window = match (gemma, o.get("sliding_window")) {
        (true, None) => Some(GEMMA_SLIDING_WINDOW),
        _ => window,
    };
    // Mistral and Phi-3 slide every layer when they have a window.
    let every = matches!(arch, "mistral" | "phi3");
    let slides: Vec<bool> = (0..n_layers)
        .map(|layer| match &layer_types {
            Some(types) => types[layer] == "sliding_attention",
            None if every => true,
            None if qwen => layer >= from,
            None if gemma => (layer + 1) % pattern != 0,
            None => false,
        })
        .collect();
    if !(every || qwen || gemma) && (slides.contains(&true) || window.is_some()) {
        let key = if window.is_some() {
            "sliding_window"
        } else {
            "layer_types"
        };
        return Err(refuse(key));
    }
    // transformers drops Qwen's window unless `use_sliding_window`, and a layer
    // typed sliding without a window attends to everything.
    let window = if qwen && !use_window { None } else { window };
    Ok(slides.iter().map(|&s| window.filter(|_| s)).collect())
}

pub(super) fn check_architecture(
    path: &Path,
    arch: &str,
    supported: &[&str],
) -> Result<(), ModelError> {
    if supported.contains(&arch) {
        return Ok(());
    }
    Err(ModelError::Unsupported {
        path: path.to_path_buf(),
        detail: format!(
            "architecture {arch:?} (supported: {})",
            supported.join(", ")
        ),
    })
}

pub(super) fn unsupported_tensor(path: &Path, detail: String) -> ModelError {
    ModelError::Unsupported {
        path: path.to_path_buf(),
        detail,
    }
}

pub(super) fn config_error(path: &Path, detail: &str) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}
