//! Checks that a GGUF file's hyper-parameter metadata agrees with its tensor shapes,
//! before anything is allocated for the model.
//!
//! A file whose `embedding_length`, `feed_forward_length`, head counts, `block_count`
//! or vocabulary contradict its tensors would otherwise fail deep inside tracing, or
//! worse, run with a silently wrong size. Every failure names the metadata key, the
//! tensor and both numbers. The shape rules are those of llama.cpp's Llama-family
//! layout (the converter's tensor names, shapes written outermost first here).

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::metadata::Metadata;
use super::value::Value;
use super::{GgufFile, TensorInfo};
use crate::model::ModelError;
use crate::step::PREFILL_CHUNK;

/// Bytes per cached key or value element in the widest KV cache (f32).
const KV_ELEM_BYTES: usize = 4;

/// One expected dimension: its value and where the value comes from.
#[derive(Clone, Debug)]
struct Dim {
    value: usize,
    /// The metadata key (or product of keys) the value comes from, for messages.
    source: String,
}

impl Dim {
    fn key(key: &str, value: usize) -> Dim {
        Dim {
            value,
            source: format!("{key} = {value}"),
        }
    }

    /// `self × other`, named after both factors; `None` on overflow.
    fn times(&self, other: &Dim) -> Option<Dim> {
        Some(Dim {
            value: self.value.checked_mul(other.value)?,
            source: format!("{} × {}", self.source, other.source),
        })
    }

    /// `self + other`, named after both terms; `None` on overflow.
    fn plus(&self, other: &Dim) -> Option<Dim> {
        Some(Dim {
            value: self.value.checked_add(other.value)?,
            source: format!("({}) + ({})", self.source, other.source),
        })
    }
}

/// The hyper-parameters of one layer, as the metadata gives them.
struct Layer {
    n_head: Dim,
    n_head_kv: Dim,
    n_ff: Dim,
}

/// The metadata dimensions the tensor shapes depend on.
struct Dims {
    path: PathBuf,
    arch: String,
    n_embd: Dim,
    n_layer: usize,
    layers: Vec<Layer>,
    key_length: Dim,
    value_length: Dim,
    n_rot: Dim,
    vocab: Option<Dim>,
}

/// Checks every metadata dimension against the tensors that depend on it, the layer
/// count against the `blk.N` tensors present, the vocabulary against the embedding and
/// output rows, and that the KV cache for the whole context has a representable size.
pub fn check_dimensions(file: &GgufFile) -> Result<(), ModelError> {
    let dims = Dims::read(file.metadata(), file.tensors().len())?;
    let err = |key: &str, detail: String| ModelError::Metadata {
        path: file.path().to_owned(),
        key: key.to_owned(),
        detail,
    };
    let block_key = format!("{}.block_count", dims.arch);
    let mut layers_seen = BTreeSet::new();
    for info in file.tensors() {
        let Some((layer, rest)) = split_layer(&info.name) else {
            check_global(file, &dims, info)?;
            continue;
        };
        if layer >= dims.n_layer {
            return Err(err(
                &block_key,
                format!(
                    "is {}, but the file has tensor {:?} of layer {layer}",
                    dims.n_layer, info.name
                ),
            ));
        }
        layers_seen.insert(layer);
        if let Some(want) = dims.layer_shape(rest, layer)? {
            compare(file, info, &want)?;
        }
    }
    if let Some(missing) = (0..dims.n_layer).find(|l| !layers_seen.contains(l)) {
        return Err(err(
            &block_key,
            format!(
                "is {}, but the file has no tensors for layer {missing} (blk.{missing}.*)",
                dims.n_layer
            ),
        ));
    }
    check_kv_size(file, &dims)
}

impl Dims {
    /// Reads the dimensions; `n_tensors` bounds `block_count` (every layer has a
    /// tensor) before anything is allocated per layer.
    fn read(meta: &Metadata, n_tensors: usize) -> Result<Dims, ModelError> {
        let arch = meta.get_str("general.architecture")?.to_owned();
        let key = |name: &str| format!("{arch}.{name}");
        let scalar = |name: &str| -> Result<Dim, ModelError> {
            let k = key(name);
            Ok(Dim::key(&k, meta.get_u32(&k)? as usize))
        };
        let n_embd = scalar("embedding_length")?;
        let n_layer = meta.get_u32(&key("block_count"))? as usize;
        if n_layer == 0 || n_layer > n_tensors {
            return Err(ModelError::Metadata {
                path: meta.path().to_owned(),
                key: key("block_count"),
                detail: format!("is {n_layer}, but the file has {n_tensors} tensors"),
            });
        }
        let n_head_key = key("attention.head_count");
        let heads = per_layer(meta, &n_head_key, n_layer)?;
        let heads_kv = match meta.get(&key("attention.head_count_kv")) {
            Some(_) => per_layer(meta, &key("attention.head_count_kv"), n_layer)?,
            None => heads.clone(),
        };
        let ffs = per_layer(meta, &key("feed_forward_length"), n_layer)?;
        let layers = (0..n_layer)
            .map(|l| Layer {
                n_head: heads[l].clone(),
                n_head_kv: heads_kv[l].clone(),
                n_ff: ffs[l].clone(),
            })
            .collect();
        // llama.cpp's default head size: embedding_length / head_count of layer 0.
        let default_head = || -> Result<Dim, ModelError> {
            let h = heads.first().map_or(0, |d| d.value);
            if h == 0 {
                return Err(ModelError::Metadata {
                    path: meta.path().to_owned(),
                    key: n_head_key.clone(),
                    detail: "is 0".into(),
                });
            }
            Ok(Dim {
                value: n_embd.value / h,
                source: format!(
                    "({}) / {h} (no {})",
                    n_embd.source,
                    key("attention.key_length")
                ),
            })
        };
        let key_length = match meta.get(&key("attention.key_length")) {
            Some(_) => scalar("attention.key_length")?,
            None => default_head()?,
        };
        let value_length = match meta.get(&key("attention.value_length")) {
            Some(_) => scalar("attention.value_length")?,
            None => default_head()?,
        };
        let n_rot = match meta.get(&key("rope.dimension_count")) {
            Some(_) => scalar("rope.dimension_count")?,
            None => key_length.clone(),
        };
        let vocab = match meta.get("tokenizer.ggml.tokens") {
            Some(_) => {
                let n = meta.get_str_array("tokenizer.ggml.tokens")?.len();
                Some(Dim {
                    value: n,
                    source: format!("tokenizer.ggml.tokens has {n} entries"),
                })
            }
            None => match meta.get(&key("vocab_size")) {
                Some(_) => Some(scalar("vocab_size")?),
                None => None,
            },
        };
        if let (Some(v), Some(_)) = (&vocab, meta.get(&key("vocab_size"))) {
            let declared = scalar("vocab_size")?;
            if declared.value != v.value {
                return Err(ModelError::Metadata {
                    path: meta.path().to_owned(),
                    key: key("vocab_size"),
                    detail: format!("is {}, but {}", declared.value, v.source),
                });
            }
        }
        Ok(Dims {
            path: meta.path().to_owned(),
            arch,
            n_embd,
            n_layer,
            layers,
            key_length,
            value_length,
            n_rot,
            vocab,
        })
    }

    /// The shape (outermost first) that per-layer tensor `blk.{layer}.{rest}` must
    /// have: `Ok(None)` for names without a rule, an error when a width overflows.
    fn layer_shape(&self, rest: &str, layer: usize) -> Result<Option<Vec<Dim>>, ModelError> {
        let l = &self.layers[layer];
        let d = || self.n_embd.clone();
        let overflow = |what: &str| ModelError::Metadata {
            path: self.path.clone(),
            key: key_of(&l.n_head.source),
            detail: format!("the {what} width of blk.{layer}.{rest} overflows"),
        };
        let q = || {
            l.n_head
                .times(&self.key_length)
                .ok_or_else(|| overflow("query"))
        };
        let k = || {
            l.n_head_kv
                .times(&self.key_length)
                .ok_or_else(|| overflow("key"))
        };
        let v = || {
            l.n_head_kv
                .times(&self.value_length)
                .ok_or_else(|| overflow("value"))
        };
        let o = || {
            l.n_head
                .times(&self.value_length)
                .ok_or_else(|| overflow("output"))
        };
        let ff = || {
            if self.arch == "phi3" && rest == "ffn_up.weight" {
                // Phi-3 fuses gate and up into one `ffn_up` of twice the width.
                let two = Dim {
                    value: 2,
                    source: "2".into(),
                };
                l.n_ff.times(&two).ok_or_else(|| overflow("feed-forward"))
            } else {
                Ok(l.n_ff.clone())
            }
        };
        Ok(Some(match rest {
            "attn_norm.weight"
            | "ffn_norm.weight"
            | "post_attention_norm.weight"
            | "post_ffw_norm.weight"
            | "attn_output.bias"
            | "ffn_down.bias" => vec![d()],
            "attn_q.weight" => vec![q()?, d()],
            "attn_k.weight" => vec![k()?, d()],
            "attn_v.weight" => vec![v()?, d()],
            "attn_qkv.weight" => {
                let fused = q()?.plus(&k()?).and_then(|x| x.plus(&v().ok()?));
                vec![fused.ok_or_else(|| overflow("fused QKV"))?, d()]
            }
            "attn_output.weight" => vec![d(), o()?],
            "attn_q.bias" => vec![q()?],
            "attn_k.bias" => vec![k()?],
            "attn_v.bias" => vec![v()?],
            "attn_q_norm.weight" | "attn_k_norm.weight" => vec![self.key_length.clone()],
            "ffn_gate.weight" | "ffn_up.weight" => vec![ff()?, d()],
            "ffn_down.weight" => vec![d(), ff()?],
            "ffn_gate.bias" | "ffn_up.bias" => vec![ff()?],
            _ => return Ok(None),
        }))
    }

    /// The shape a tensor outside the layers must have, or `None` without a rule.
    /// Without a vocabulary in the metadata, the embedding's rows stand for it.
    fn global_shape(&self, name: &str, embd_rows: Option<usize>) -> Option<Vec<Dim>> {
        let vocab = self.vocab.clone().or_else(|| {
            embd_rows.map(|n| Dim {
                value: n,
                source: format!("token_embd.weight has {n} rows"),
            })
        });
        match name {
            "output_norm.weight" => Some(vec![self.n_embd.clone()]),
            "token_embd.weight" | "output.weight" => Some(vec![vocab?, self.n_embd.clone()]),
            "rope_freqs.weight" => Some(vec![Dim {
                value: self.n_rot.value / 2,
                source: format!("({}) / 2", self.n_rot.source),
            }]),
            _ => None,
        }
    }
}

/// The values of a per-layer key: one scalar for every layer, or an array with one
/// entry per layer (llama.cpp's per-layer form).
fn per_layer(meta: &Metadata, key: &str, n_layer: usize) -> Result<Vec<Dim>, ModelError> {
    let bad = |detail: String| ModelError::Metadata {
        path: meta.path().to_owned(),
        key: key.to_owned(),
        detail,
    };
    match meta.get(key) {
        Some(Value::Array(a)) => {
            let ints = a
                .integers()
                .ok_or_else(|| bad("expected integers, one per layer".into()))?;
            if ints.len() != n_layer {
                return Err(bad(format!(
                    "has {} entries, but block_count is {n_layer}",
                    ints.len()
                )));
            }
            ints.iter()
                .enumerate()
                .map(|(l, &n)| {
                    let n = usize::try_from(n)
                        .map_err(|_| bad(format!("entry {l} ({n}) is not a size")))?;
                    Ok(Dim {
                        value: n,
                        source: format!("{key}[{l}] = {n}"),
                    })
                })
                .collect()
        }
        _ => {
            let n = meta.get_u32(key)? as usize;
            Ok(vec![Dim::key(key, n); n_layer])
        }
    }
}

/// `blk.{N}.{rest}` as `(N, rest)`; `None` for tensors outside the layers.
fn split_layer(name: &str) -> Option<(usize, &str)> {
    let (layer, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    Some((layer.parse().ok()?, rest))
}

/// Checks a tensor outside the layers against its rule.
fn check_global(file: &GgufFile, dims: &Dims, info: &TensorInfo) -> Result<(), ModelError> {
    let embd_rows = file
        .tensor_info("token_embd.weight")
        .map(|t| t.shape.dims()[0]);
    match dims.global_shape(&info.name, embd_rows) {
        Some(want) => compare(file, info, &want),
        None => Ok(()),
    }
}

/// Compares `info`'s shape with `want`, naming the key, the tensor and both numbers.
fn compare(file: &GgufFile, info: &TensorInfo, want: &[Dim]) -> Result<(), ModelError> {
    let got = info.shape.dims();
    let err = |key: String, detail: String| ModelError::Metadata {
        path: file.path().to_owned(),
        key,
        detail,
    };
    if got.len() != want.len() {
        let key = want.first().map_or_else(String::new, |d| key_of(&d.source));
        return Err(err(
            key,
            format!(
                "tensor {:?} has shape {}, but {} dimensions are expected",
                info.name,
                info.shape,
                want.len()
            ),
        ));
    }
    for (axis, (&g, w)) in got.iter().zip(want).enumerate() {
        if g != w.value {
            return Err(err(
                key_of(&w.source),
                format!(
                    "tensor {:?} has shape {} (dimension {axis} is {g}), but {} makes it {}",
                    info.name, info.shape, w.source, w.value
                ),
            ));
        }
    }
    Ok(())
}

/// The first metadata key named in a dimension's source, for the error's key field.
fn key_of(source: &str) -> String {
    let start = source.trim_start_matches('(');
    let end = start.find([' ', '[', ')']).unwrap_or(start.len());
    start[..end].to_owned()
}

/// Checks that the KV cache for the whole trained context (plus the padded prefill
/// chunk the runner adds) has a size `Vec` can hold, in the widest (f32) cache.
fn check_kv_size(file: &GgufFile, dims: &Dims) -> Result<(), ModelError> {
    let meta = file.metadata();
    let ctx_key = format!("{}.context_length", dims.arch);
    let ctx = meta.get_u32(&ctx_key)? as usize;
    let widest_kv = dims
        .layers
        .iter()
        .map(|l| l.n_head_kv.value)
        .max()
        .unwrap_or(0);
    let per_position = dims.key_length.value.checked_add(dims.value_length.value);
    let bytes = per_position
        .and_then(|p| {
            let capacity = ctx.checked_add(PREFILL_CHUNK)?;
            [dims.n_layer, widest_kv, p, KV_ELEM_BYTES]
                .into_iter()
                .try_fold(capacity, usize::checked_mul)
        })
        .filter(|&b| b <= isize::MAX as usize);
    match bytes {
        Some(_) => Ok(()),
        None => Err(ModelError::Metadata {
            path: file.path().to_owned(),
            key: ctx_key,
            detail: format!(
                "the KV cache for {ctx} positions × {} layers × {widest_kv} KV heads × \
                 ({} + {}) key and value dimensions × {KV_ELEM_BYTES} bytes overflows",
                dims.n_layer, dims.key_length.value, dims.value_length.value
            ),
        }),
    }
}
