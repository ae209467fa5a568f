//! Reading a Llama-family model's hyper-parameters from GGUF metadata or from a
//! Hugging Face `config.json`, with every missing or inconsistent value named.

use std::path::Path;

use super::{LlamaConfig, RopeParams};
use crate::graph::RopeMode;
use crate::model::gguf::GgufFile;
use crate::model::safetensors::HfModel;
use crate::model::ModelError;

/// Architectures traced as Llama: the same block, differing in biases and RoPE layout.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "mistral", "qwen2"];

impl LlamaConfig {
    /// The hyper-parameters in a GGUF file's metadata (`{arch}.block_count`, ...).
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig, ModelError> {
        let arch = file.architecture()?.to_string();
        check_architecture(file.path(), &arch)?;
        let meta = file.metadata();
        let key = |name: &str| format!("{arch}.{name}");
        let get = |name: &str| meta.get_u32(&key(name)).map(|v| v as usize);
        let d_model = get("embedding_length")?;
        let n_heads = get("attention.head_count")?;
        let n_kv_heads = get("attention.head_count_kv").unwrap_or(n_heads);
        let head_dim = match get("attention.key_length") {
            Ok(v) => v,
            Err(_) => d_model / n_heads.max(1),
        };
        let vocab_size = file
            .tensor_info("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or_else(|| config_error(file.path(), "the file has no token_embd.weight"))?;
        let freq_scale = match meta.get_str(&key("rope.scaling.type")) {
            Ok("linear") => 1.0 / meta.get_f32(&key("rope.scaling.factor"))?,
            Ok("none") | Err(_) => 1.0,
            Ok(other) => {
                return Err(config_error(
                    file.path(),
                    &format!("RoPE scaling {other:?} is not supported (only linear)"),
                ))
            }
        };
        // The GGUF converter permutes llama/mistral q/k rows for adjacent-pair RoPE;
        // qwen2 keeps HF's layout and so rotates NeoX-style.
        let mode = if arch == "qwen2" {
            RopeMode::Neox
        } else {
            RopeMode::Normal
        };
        let config = LlamaConfig {
            n_layers: get("block_count")?,
            d_model,
            d_ffn: get("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size,
            context_length: get("context_length")?,
            rms_eps: meta.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            rope: RopeParams {
                mode,
                n_rot: get("rope.dimension_count").unwrap_or(head_dim) as u32,
                freq_base: meta.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
                freq_scale,
            },
            architecture: arch,
        };
        config.validate(file.path())
    }

    /// The hyper-parameters in a Hugging Face `config.json`.
    pub fn from_hf(model: &HfModel) -> Result<LlamaConfig, ModelError> {
        let c = model.config();
        let path = model.dir();
        let arch = c.model_type.clone().unwrap_or_default();
        check_architecture(path, &arch)?;
        let need = |v: Option<usize>, name: &str| {
            v.ok_or_else(|| config_error(path, &format!("config.json has no {name}")))
        };
        let d_model = need(c.hidden_size, "hidden_size")?;
        let n_heads = need(c.num_attention_heads, "num_attention_heads")?;
        let head_dim = c.head_dim.unwrap_or(d_model / n_heads.max(1));
        let config = LlamaConfig {
            n_layers: need(c.num_hidden_layers, "num_hidden_layers")?,
            d_model,
            d_ffn: need(c.intermediate_size, "intermediate_size")?,
            n_heads,
            n_kv_heads: c.num_key_value_heads.unwrap_or(n_heads),
            head_dim,
            vocab_size: need(c.vocab_size, "vocab_size")?,
            context_length: c.max_position_embeddings.unwrap_or(2048),
            rms_eps: c.rms_norm_eps.unwrap_or(1e-6) as f32,
            rope: RopeParams {
                mode: RopeMode::Neox,
                n_rot: head_dim as u32,
                freq_base: c.rope_theta.unwrap_or(10_000.0) as f32,
                freq_scale: 1.0,
            },
            architecture: arch,
        };
        config.validate(path)
    }

    fn validate(self, path: &Path) -> Result<LlamaConfig, ModelError> {
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
        Ok(self)
    }
}

fn check_architecture(path: &Path, arch: &str) -> Result<(), ModelError> {
    if SUPPORTED_ARCHITECTURES.contains(&arch) {
        return Ok(());
    }
    Err(ModelError::Unsupported {
        path: path.to_path_buf(),
        detail: format!(
            "architecture {arch:?} (supported: {})",
            SUPPORTED_ARCHITECTURES.join(", ")
        ),
    })
}

fn config_error(path: &Path, detail: &str) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}
