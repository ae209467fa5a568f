//! Reading a Llama-family model's hyper-parameters from GGUF metadata the way
//! llama.cpp's loader reads the files its converter writes, with every missing,
//! inconsistent or unsupported value named. Where the GGUF format has no key for a
//! Hugging Face setting (Gemma's `query_pre_attn_scalar`, Gemma 3's sliding pattern),
//! the value is llama.cpp's, since that is what the file means wherever it is run.

use std::path::Path;

use super::config::{check_architecture, config_error, unsupported_tensor};
use super::keys::{self, unsupported, KeySource};
use super::trace::check_tensors_used;
use super::{Family, FfnActivation, LlamaConfig, RopeParams};
use crate::graph::{DType, RopeMode};
use crate::model::gguf::{GgufFile, Metadata};
use crate::model::ModelError;

/// GGUF `general.architecture` values traced as Llama.
pub const GGUF_ARCHITECTURES: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
];

/// Llama 3.1 RoPE frequency factors (`θᵢ / factorᵢ`).
pub const GGUF_ROPE_FREQS: &str = "rope_freqs.weight";

/// Phi-3 longrope factors within the original context, and past it (unused: the
/// context is capped at the original length, as for Hugging Face checkpoints).
const GGUF_ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";
const GGUF_ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";

/// llama.cpp's defaults when a Gemma 2 file lacks the keys.
const GEMMA2_WINDOW: u32 = 4096;
const GEMMA2_ATTN_SOFTCAP: f32 = 50.0;
const GEMMA2_FINAL_SOFTCAP: f32 = 30.0;
/// llama.cpp's RoPE base of Gemma 3's sliding layers without `rope.freq_base_swa`.
const GEMMA3_LOCAL_BASE: f32 = 10_000.0;

impl LlamaConfig {
    /// The hyper-parameters in a GGUF file's metadata (`{arch}.block_count`, ...).
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig, ModelError> {
        let path = file.path();
        let arch = file.architecture()?.to_string();
        check_architecture(path, &arch, GGUF_ARCHITECTURES)?;
        let meta = file.metadata();
        let read_past = keys::check_gguf_keys(path, &arch, meta)?;
        if !read_past.is_empty() {
            log::warn!(
                "{}: read past GGUF metadata in namespaces no reader uses: {}",
                path.display(),
                read_past.join(", ")
            );
        }
        let read = Read {
            path,
            meta,
            arch: &arch,
        };
        for name in ["expert_count", "expert_used_count"] {
            if let Some(n) = meta.get(&read.key(name)).and_then(|v| v.as_integer()) {
                if n != 0 {
                    return Err(read.refuse(name, &n));
                }
            }
        }
        let d_model = read.u32("embedding_length")?;
        let n_heads = read.u32("attention.head_count")?;
        let n_kv_heads = read.u32("attention.head_count_kv").unwrap_or(n_heads);
        let head_dim = read
            .u32("attention.key_length")
            .unwrap_or(d_model / n_heads.max(1));
        if let Ok(v) = read.u32("attention.value_length") {
            if v != head_dim {
                return Err(read.refuse("attention.value_length", &v));
            }
        }
        let vocab_size = file
            .tensor_info("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or_else(|| config_error(path, "the file has no token_embd.weight"))?;
        if let Ok(v) = read.u32("vocab_size") {
            if v != vocab_size {
                return Err(read.refuse("vocab_size", &v));
            }
        }
        let n_layers = read.u32("block_count")?;
        let family = if arch.starts_with("gemma") {
            Family::Gemma
        } else {
            Family::Llama
        };
        let rope = read.rope(file, head_dim)?;
        let mut context_length = read.u32("context_length")?;
        if file.tensor_info(GGUF_ROPE_FACTORS_LONG).is_some() {
            // longrope is exact up to its pre-training length only.
            let original = read.u32("rope.scaling.original_context_length")?;
            context_length = context_length.min(original);
        }
        let windows = read.windows(n_layers)?;
        let local_base = read.positive_if_set("rope.freq_base_swa")?;
        let rope_local = match (arch.as_str(), local_base) {
            ("gemma3", base) if windows.iter().any(Option::is_some) => Some(RopeParams {
                freq_base: base.unwrap_or(GEMMA3_LOCAL_BASE),
                freq_scale: 1.0,
                inv_freq: None,
                attn_factor: 1.0,
                ..rope.clone()
            }),
            ("gemma2", Some(freq_base)) => Some(RopeParams {
                freq_base,
                ..rope.clone()
            }),
            _ => None,
        };
        let gemma = family == Family::Gemma;
        let config = LlamaConfig {
            n_layers,
            d_model,
            d_ffn: read.u32("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size,
            context_length,
            windows: Vec::new(),
            rms_eps: meta.get_f32(&read.key("attention.layer_norm_rms_epsilon"))?,
            rope,
            rope_local,
            attn_scale: gemma_attn_scale(&arch, n_layers, d_model, n_heads, head_dim),
            attn_softcap: match arch.as_str() {
                "gemma2" => Some(read.positive("attn_logit_softcapping", GEMMA2_ATTN_SOFTCAP)?),
                _ => None,
            },
            final_softcap: match arch.as_str() {
                "gemma2" => Some(read.positive("final_logit_softcapping", GEMMA2_FINAL_SOFTCAP)?),
                "gemma3" => read.positive_if_set("final_logit_softcapping")?,
                _ => None,
            },
            embed_scale: gemma.then(|| (d_model as f64).sqrt() as f32),
            activation: if gemma {
                FfnActivation::GeluTanh
            } else {
                FfnActivation::Silu
            },
            tie_embeddings: file.tensor_info("output.weight").is_none(),
            norm_plus_one: false,
            family,
            architecture: arch.clone(),
        };
        let mut config = config.validate(path)?;
        config.windows = windows;
        let names = file.tensors().iter().map(|t| t.name.as_str());
        let consumed = |name: &str| {
            matches!(
                name,
                GGUF_ROPE_FREQS | GGUF_ROPE_FACTORS_SHORT | GGUF_ROPE_FACTORS_LONG
            )
        };
        check_tensors_used(&config, file, names, &consumed)
            .map_err(|detail| unsupported_tensor(path, detail))?;
        Ok(config)
    }
}

/// The attention scale llama.cpp gives Gemma files (the GGUF has no key for
/// `query_pre_attn_scalar`): `(d_model / heads)^-½` for the 27B models, recognised by
/// their block count (46 for Gemma 2, 62 for Gemma 3), else `head_dim^-½`, which
/// is also every other architecture's.
fn gemma_attn_scale(
    arch: &str,
    n_layers: usize,
    d_model: usize,
    n_heads: usize,
    head_dim: usize,
) -> f32 {
    let is_27b = matches!((arch, n_layers), ("gemma2", 46) | ("gemma3", 62));
    let scalar = if is_27b {
        d_model / n_heads.max(1)
    } else {
        head_dim
    };
    1.0 / (scalar as f32).sqrt()
}

/// Typed reads of `{arch}.` keys, each error naming the key.
struct Read<'a> {
    path: &'a Path,
    meta: &'a Metadata,
    arch: &'a str,
}

impl Read<'_> {
    fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.arch)
    }

    fn refuse(&self, name: &str, value: &dyn std::fmt::Display) -> ModelError {
        unsupported(self.path, KeySource::Gguf, &self.key(name), value)
    }

    fn u32(&self, name: &str) -> Result<usize, ModelError> {
        self.meta.get_u32(&self.key(name)).map(|v| v as usize)
    }

    /// A positive finite float, or `None` when the key is absent.
    fn positive_if_set(&self, name: &str) -> Result<Option<f32>, ModelError> {
        if self.meta.get(&self.key(name)).is_none() {
            return Ok(None);
        }
        let value = self.meta.get_f32(&self.key(name))?;
        if value.is_finite() && value > 0.0 {
            Ok(Some(value))
        } else {
            Err(self.refuse(name, &value))
        }
    }

    /// [`Self::positive_if_set`], `default` when the key is absent.
    fn positive(&self, name: &str, default: f32) -> Result<f32, ModelError> {
        Ok(self.positive_if_set(name)?.unwrap_or(default))
    }

    /// The rotary embedding: llama/mistral rotate adjacent pairs (the converter
    /// permuted their q/k rows); the others keep Hugging Face's layout and rotate
    /// NeoX-style. Band-wise frequencies come as `rope_freqs.weight` (Llama 3.1) or
    /// `rope_factors_short.weight` with an attention factor (Phi-3 longrope).
    fn rope(&self, file: &GgufFile, head_dim: usize) -> Result<RopeParams, ModelError> {
        let freq_scale = match self.meta.get_str(&self.key("rope.scaling.type")) {
            Ok("linear") => 1.0 / self.meta.get_f32(&self.key("rope.scaling.factor"))?,
            Ok("none") | Err(_) => 1.0,
            Ok(other) => return Err(self.refuse("rope.scaling.type", &format!("{other:?}"))),
        };
        if !(freq_scale.is_finite() && freq_scale > 0.0) {
            return Err(self.refuse("rope.scaling.factor", &(1.0 / freq_scale)));
        }
        let mode = if matches!(self.arch, "llama" | "mistral") {
            RopeMode::Normal
        } else {
            RopeMode::Neox
        };
        let n_rot = self.u32("rope.dimension_count").unwrap_or(head_dim);
        let freq_base = self
            .meta
            .get_f32(&self.key("rope.freq_base"))
            .unwrap_or(10_000.0);
        let factors = [GGUF_ROPE_FREQS, GGUF_ROPE_FACTORS_SHORT]
            .into_iter()
            .find(|name| file.tensor_info(name).is_some());
        let inv_freq = match factors {
            Some(name) => Some(inv_freq(file, name, freq_base, freq_scale, n_rot)?),
            None => None,
        };
        if file.tensor_info(GGUF_ROPE_FACTORS_LONG).is_some()
            && factors != Some(GGUF_ROPE_FACTORS_SHORT)
        {
            return Err(config_error(
                self.path,
                &format!("{GGUF_ROPE_FACTORS_LONG} without {GGUF_ROPE_FACTORS_SHORT}"),
            ));
        }
        // The factor scales cos and sin only with longrope's tables; anywhere else a
        // value other than 1 would be ignored, so it is refused.
        let attn_factor = self.positive("rope.scaling.attn_factor", 1.0)?;
        if attn_factor != 1.0 && factors != Some(GGUF_ROPE_FACTORS_SHORT) {
            return Err(self.refuse("rope.scaling.attn_factor", &attn_factor));
        }
        Ok(RopeParams {
            mode,
            n_rot: n_rot as u32,
            freq_base,
            freq_scale,
            inv_freq,
            attn_factor,
        })
    }

    /// Each layer's attention window as llama.cpp assigns them: Gemma 2 slides every
    /// even layer (window 4096 by default), Gemma 3 five of every six when the file
    /// has a window. Phi-3 slides every layer by `attention.sliding_window` (0: none),
    /// as transformers does; llama.cpp turns Phi-3's window off and warns that results
    /// may suffer, and past the window it would compute something else than the model.
    fn windows(&self, n_layers: usize) -> Result<Vec<Option<u32>>, ModelError> {
        let window = match self.meta.get(&self.key("attention.sliding_window")) {
            None => None,
            Some(_) => Some(self.meta.get_u32(&self.key("attention.sliding_window"))?),
        };
        let (window, pattern) = match self.arch {
            "gemma2" => (Some(window.unwrap_or(GEMMA2_WINDOW)), 2),
            "gemma3" => (window, 6),
            "phi3" => (window, 1),
            _ => (None, 1),
        };
        let window = window.filter(|&w| w > 0);
        Ok((0..n_layers)
            .map(|layer| window.filter(|_| pattern == 1 || layer % pattern < pattern - 1))
            .collect())
    }
}

/// Inverse frequencies from `name`'s `n_rot / 2` factors, the way ggml applies them:
/// `θᵢ = pos · freq_scale · base^(-2i/n_rot) / factorᵢ`.
fn inv_freq(
    file: &GgufFile,
    name: &str,
    base: f32,
    freq_scale: f32,
    n_rot: usize,
) -> Result<Vec<f32>, ModelError> {
    let tensor = file.tensor(name)?;
    let factors: Vec<f32> = match tensor.dtype {
        DType::F32 => bytemuck::pod_collect_to_vec(tensor.data.as_bytes()),
        other => {
            return Err(config_error(
                file.path(),
                &format!("{name} is {other}, expected f32"),
            ))
        }
    };
    if factors.len() != n_rot / 2 || factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
        return Err(config_error(
            file.path(),
            &format!(
                "{name} must hold {} positive factors, has {}",
                n_rot / 2,
                factors.len()
            ),
        ));
    }
    Ok(factors
        .iter()
        .enumerate()
        .map(|(i, f)| freq_scale * base.powf(-2.0 * i as f32 / n_rot as f32) / f)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::gemma_attn_scale;

    /// The rule reproduces each released Gemma's `query_pre_attn_scalar` from its
    /// config.json: Gemma 2 2B/9B 256 (= head_dim), Gemma 2 27B 144 (4608 / 32),
    /// Gemma 3 1B 256, Gemma 3 27B 168 (5376 / 32).
    #[test]
    fn gemma_attention_scale_follows_the_released_configs() {
        let cases = [
            ("gemma2", 26, 2304, 8, 256, 256),
            ("gemma2", 42, 3584, 16, 256, 256),
            ("gemma2", 46, 4608, 32, 128, 144),
            ("gemma3", 26, 1152, 4, 256, 256),
            ("gemma3", 62, 5376, 32, 128, 168),
        ];
        for (arch, layers, d_model, heads, head_dim, scalar) in cases {
            let want = 1.0 / (scalar as f32).sqrt();
            let got = gemma_attn_scale(arch, layers, d_model, heads, head_dim);
            assert_eq!(got, want, "{arch} with {layers} blocks");
        }
    }
}
