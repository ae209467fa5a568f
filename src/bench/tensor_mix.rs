//! What a model's weights are made of and how many of their bytes one decode step
//! reads: the tensor-type mix `switchyard bench --json` records, and the numerator of
//! the achieved read bandwidth it prints for `tgN` (weight bytes per token × tok/s).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::llama::{LlamaConfig, TensorRole, WeightInfo};

/// Tensors and bytes of one weight dtype.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DTypeShare {
    /// The dtype's name (`q4_1`, `f16`, `f32`).
    pub dtype: String,
    /// Tensors stored in it.
    pub tensors: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// A model's weights by dtype, and the weight bytes a decode step reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorMix {
    /// One entry per dtype present, by name.
    pub dtypes: Vec<DTypeShare>,
    /// Bytes of every weight tensor.
    pub total_bytes: u64,
    /// Weight bytes one single-token decode step reads: every tensor once, except the
    /// token embedding, of which one row is read — unless the output head is tied to
    /// it, when it is read whole as the head. KV-cache reads are not included.
    pub decode_read_bytes: u64,
}

impl TensorMix {
    /// The mix of `weights` for a model of `config`'s shape; roles the model lacks
    /// (biases, an untied head) are skipped.
    pub fn of(config: &LlamaConfig, weights: &dyn WeightInfo) -> TensorMix {
        let mut roles = vec![
            TensorRole::TokenEmbedding,
            TensorRole::OutputNorm,
            TensorRole::Output,
        ];
        for l in 0..config.n_layers {
            roles.extend([
                TensorRole::AttnNorm(l),
                TensorRole::AttnQ(l),
                TensorRole::AttnK(l),
                TensorRole::AttnV(l),
                TensorRole::AttnQkv(l),
                TensorRole::AttnQBias(l),
                TensorRole::AttnKBias(l),
                TensorRole::AttnVBias(l),
                TensorRole::AttnQNorm(l),
                TensorRole::AttnKNorm(l),
                TensorRole::AttnOutput(l),
                TensorRole::AttnOutputBias(l),
                TensorRole::AttnPostNorm(l),
                TensorRole::FfnPreNorm(l),
                TensorRole::FfnPostNorm(l),
                TensorRole::FfnNorm(l),
                TensorRole::FfnGate(l),
                TensorRole::FfnUp(l),
                TensorRole::FfnDown(l),
                TensorRole::FfnGateUp(l),
                TensorRole::FfnGateBias(l),
                TensorRole::FfnUpBias(l),
                TensorRole::FfnDownBias(l),
            ]);
        }
        let tied = weights.info(TensorRole::Output).is_none();
        let mut by_dtype: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        let (mut total, mut read) = (0u64, 0u64);
        // Two roles may name one tensor (Gemma's pre-FFN norm is `ffn_norm` in GGUF).
        let mut seen = std::collections::HashSet::new();
        for role in roles {
            let Some((dtype, shape)) = weights.info(role) else {
                continue;
            };
            if !seen.insert(weights.name(role)) {
                continue;
            }
            let bytes = dtype.bytes_for(shape.numel()).unwrap_or(0) as u64;
            let entry = by_dtype.entry(dtype.name().to_string()).or_default();
            entry.0 += 1;
            entry.1 += bytes;
            total += bytes;
            read += match role {
                TensorRole::TokenEmbedding if !tied => bytes / shape.rows().max(1) as u64,
                _ => bytes,
            };
        }
        TensorMix {
            dtypes: by_dtype
                .into_iter()
                .map(|(dtype, (tensors, bytes))| DTypeShare {
                    dtype,
                    tensors,
                    bytes,
                })
                .collect(),
            total_bytes: total,
            decode_read_bytes: read,
        }
    }

    /// Achieved weight-read bandwidth in GB/s (10⁹ bytes) at `tok_s` decode steps per
    /// second.
    pub fn decode_gb_s(&self, tok_s: f64) -> f64 {
        self.decode_read_bytes as f64 * tok_s / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, RopeMode, Shape};
    use crate::model::llama::{Family, FfnActivation, RopeParams};

    /// Two layers: f16 projections, f32 norms, a q4_0 embedding, head tied or not.
    struct Fake {
        tied: bool,
    }

    impl WeightInfo for Fake {
        fn info(&self, role: TensorRole) -> Option<(DType, Shape)> {
            match role {
                TensorRole::TokenEmbedding => Some((DType::Q4_0, Shape::new([100, 64]))),
                TensorRole::Output if self.tied => None,
                TensorRole::Output => Some((DType::F16, Shape::new([100, 64]))),
                TensorRole::AttnNorm(_) | TensorRole::FfnNorm(_) | TensorRole::OutputNorm => {
                    Some((DType::F32, Shape::new([64])))
                }
                TensorRole::AttnQBias(_) | TensorRole::AttnKBias(_) | TensorRole::AttnVBias(_) => {
                    None
                }
                TensorRole::AttnQ(_)
                | TensorRole::AttnK(_)
                | TensorRole::AttnV(_)
                | TensorRole::AttnOutput(_)
                | TensorRole::FfnGate(_)
                | TensorRole::FfnUp(_)
                | TensorRole::FfnDown(_) => Some((DType::F16, Shape::new([64, 64]))),
                _ => None,
            }
        }

        fn name(&self, role: TensorRole) -> String {
            role.gguf_name()
        }
    }

    fn config() -> LlamaConfig {
        LlamaConfig {
            architecture: "llama".into(),
            family: Family::Llama,
            n_layers: 2,
            d_model: 64,
            d_ffn: 64,
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 64,
            vocab_size: 100,
            context_length: 16,
            windows: Vec::new(),
            rms_eps: 1e-5,
            rope: RopeParams {
                mode: RopeMode::Normal,
                n_rot: 64,
                freq_base: 1e4,
                freq_scale: 1.0,
                inv_freq: None,
                attn_factor: 1.0,
            },
            rope_local: None,
            attn_scale: 0.125,
            attn_softcap: None,
            final_softcap: None,
            embed_scale: None,
            norm_plus_one: false,
            activation: FfnActivation::Silu,
            tie_embeddings: false,
        }
    }

    #[test]
    fn counts_bytes_per_dtype_and_what_decode_reads() {
        // Per layer: 7 f16 matrices of 64·64·2 = 8192 bytes, two f32 norms of 256.
        let embd = 100 * 64 / 32 * 18; // 3600 bytes of q4_0
        let untied = TensorMix::of(&config(), &Fake { tied: false });
        let f16 = 2 * 7 * 8192 + 100 * 64 * 2;
        let f32 = 5 * 256;
        assert_eq!(
            untied.dtypes,
            vec![
                DTypeShare {
                    dtype: "f16".into(),
                    tensors: 15,
                    bytes: f16
                },
                DTypeShare {
                    dtype: "f32".into(),
                    tensors: 5,
                    bytes: f32
                },
                DTypeShare {
                    dtype: "q4_0".into(),
                    tensors: 1,
                    bytes: embd
                },
            ]
        );
        assert_eq!(untied.total_bytes, f16 + f32 + embd);
        assert_eq!(untied.decode_read_bytes, f16 + f32 + embd / 100);
        let tied = TensorMix::of(&config(), &Fake { tied: true });
        assert_eq!(tied.decode_read_bytes, 2 * 7 * 8192 + f32 + embd);
        assert!((tied.decode_gb_s(1000.0) - tied.decode_read_bytes as f64 * 1e-6).abs() < 1e-9);
    }
}
