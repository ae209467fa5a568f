//! The one place that says which configuration keys Switchyard reads. Every key of a
//! `config.json` or of a GGUF file's metadata is either implemented (read, with its
//! value checked), known not to change the computation (at any value, or at its default
//! only), or a GGUF key in a namespace no reader uses (read past and logged, as
//! llama.cpp does); any other key is refused by name and value, so a checkpoint never
//! runs as something it is not.

use std::path::Path;

use super::gguf_config::GGUF_ARCHITECTURES;
use crate::model::gguf::Metadata;
use crate::model::ModelError;

/// A key and what it does (implemented) or why it does not matter (ignored).
pub type KeyRule = (&'static str, &'static str);

/// Top-level `config.json` keys that are read and change the computation.
pub const HF_IMPLEMENTED: &[KeyRule] = &[
    ("model_type", "selects the architecture's tracer"),
    ("hidden_size", "residual width"),
    ("intermediate_size", "feed-forward width"),
    ("num_hidden_layers", "number of blocks"),
    ("num_attention_heads", "query heads"),
    (
        "num_key_value_heads",
        "key/value heads (grouped-query attention)",
    ),
    ("head_dim", "per-head width when not hidden_size / heads"),
    ("vocab_size", "rows of the embedding"),
    ("max_position_embeddings", "trained context length"),
    ("rms_norm_eps", "RMSNorm epsilon"),
    ("rope_theta", "RoPE frequency base"),
    (
        "rope_scaling",
        "RoPE scaling: none, linear, dynamic, yarn, llama3 or longrope",
    ),
    (
        "rope_parameters",
        "transformers 5 RoPE block: theta and scaling",
    ),
    (
        "partial_rotary_factor",
        "fraction of each head rotated (Phi-3; 1.0 elsewhere)",
    ),
    ("rope_interleaved", "adjacent-pair RoPE (false only)"),
    (
        "hidden_act",
        "feed-forward activation: silu, gelu (erf) or gelu_pytorch_tanh",
    ),
    (
        "attention_bias",
        "q/k/v/o biases: every bias tensor present is applied",
    ),
    (
        "mlp_bias",
        "gate/up/down biases: every bias tensor present is applied",
    ),
    (
        "tie_word_embeddings",
        "output head is the embedding (lm_head ignored)",
    ),
    ("sliding_window", "attention window of sliding layers"),
    (
        "use_sliding_window",
        "Qwen2/Qwen3: whether sliding_window applies",
    ),
    (
        "max_window_layers",
        "Qwen2/Qwen3: layers from here on slide",
    ),
    (
        "layer_types",
        "per-layer full_attention / sliding_attention",
    ),
    ("use_mrope", "multimodal RoPE (false only)"),
    (
        "hidden_activation",
        "Gemma's feed-forward activation (tanh GELU)",
    ),
    (
        "query_pre_attn_scalar",
        "Gemma: attention scale is its inverse square root",
    ),
    (
        "attn_logit_softcapping",
        "Gemma 2: attention scores soft-capped",
    ),
    ("final_logit_softcapping", "Gemma 2: logits soft-capped"),
    (
        "sliding_window_pattern",
        "Gemma 3: every n-th layer attends fully",
    ),
    ("rope_local_base_freq", "Gemma 3: RoPE θ of sliding layers"),
    (
        "use_bidirectional_attention",
        "Gemma 3: bidirectional attention (false only)",
    ),
    (
        "original_max_position_embeddings",
        "Phi-3: pre-training length of longrope (context capped there)",
    ),
];

/// Implemented keys that only some architectures read; in any other architecture's
/// config a value other than null or false is refused, since transformers would
/// ignore it there and the checkpoint's author probably meant something else.
pub const HF_ARCH_ONLY: &[(&str, &[&str])] = &[
    ("hidden_activation", GEMMA),
    ("query_pre_attn_scalar", GEMMA),
    ("attn_logit_softcapping", GEMMA),
    ("final_logit_softcapping", GEMMA),
    ("sliding_window_pattern", GEMMA),
    ("rope_local_base_freq", GEMMA),
    ("use_bidirectional_attention", GEMMA),
    ("use_sliding_window", QWEN),
    ("max_window_layers", QWEN),
    ("original_max_position_embeddings", &["phi3"]),
];

const GEMMA: &[&str] = &["gemma2", "gemma3_text"];
const QWEN: &[&str] = &["qwen2", "qwen3"];

/// Top-level `config.json` keys known not to change the computation.
pub const HF_IGNORED: &[KeyRule] = &[
    (
        "architectures",
        "model class name; model_type selects the tracer",
    ),
    ("torch_dtype", "weights keep their stored dtype"),
    ("dtype", "transformers 5 name of torch_dtype"),
    ("transformers_version", "writer's version"),
    ("transformers.js_config", "settings of another runtime"),
    ("_name_or_path", "where the checkpoint came from"),
    ("use_cache", "Switchyard always caches keys and values"),
    ("bos_token_id", "tokenizer side (special tokens)"),
    ("eos_token_id", "tokenizer side (stop tokens)"),
    ("pad_token_id", "tokenizer side (padding)"),
    ("initializer_range", "training-time initialisation"),
    ("attention_dropout", "dropout is off at inference"),
    ("hidden_dropout", "dropout is off at inference"),
    ("embd_pdrop", "dropout is off at inference"),
    ("resid_pdrop", "dropout is off at inference"),
    (
        "attention_probs_dropout_prob",
        "dropout is off at inference",
    ),
    (
        "pretraining_tp",
        "tensor-parallel split used in training; same math",
    ),
    ("is_llama_config", "marker written by some exporters"),
    ("output_attentions", "debug output of transformers"),
    ("output_hidden_states", "debug output of transformers"),
    ("return_dict", "transformers API setting"),
    ("is_decoder", "always a decoder"),
    ("model_name", "informational name"),
    (
        "cache_implementation",
        "transformers' cache class; Switchyard keeps every position",
    ),
    (
        "_sliding_window_pattern",
        "written beside layer_types, which decides",
    ),
    (
        "chunk_size_feed_forward",
        "feed-forward computed in chunks: the same values",
    ),
    ("id2label", "class names of a classification head"),
    ("label2id", "class names of a classification head"),
    ("problem_type", "loss of a classification head"),
    ("finetuning_task", "informational"),
    (
        "task_specific_params",
        "settings of transformers' pipelines",
    ),
    ("prefix", "text transformers' pipelines prepend"),
    ("tokenizer_class", "tokenizer side (tokenizer.json decides)"),
    ("sep_token_id", "tokenizer side (separator)"),
    (
        "decoder_start_token_id",
        "encoder-decoder generation (is_encoder_decoder decides)",
    ),
    (
        "tie_encoder_decoder",
        "acts only between an encoder and a decoder (is_encoder_decoder decides)",
    ),
    (
        "cross_attention_hidden_size",
        "acts only with add_cross_attention",
    ),
    (
        "torchscript",
        "tracing mode: the tied head is cloned, the same values",
    ),
    (
        "use_bfloat16",
        "TensorFlow-era flag; weights keep their stored dtype",
    ),
    ("tf_legacy_loss", "training loss of the TensorFlow models"),
];

/// Generation defaults that full `config.json` dumps of transformers 4 carry, at
/// any value: they set what transformers' `generate()` does when a caller says
/// nothing, not the logits; Switchyard samples as each request says.
pub const HF_GENERATION: &[&str] = &[
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
];

/// The value at which a [`HF_DEFAULT_ONLY`] field changes nothing (null too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neutral {
    /// `false`.
    False,
    /// An empty object, `{}`.
    Empty,
}

impl Neutral {
    /// Whether `value` is this neutral value or null.
    pub fn holds(self, value: &serde_json::Value) -> bool {
        value.is_null()
            || match self {
                Neutral::False => value == &serde_json::Value::Bool(false),
                Neutral::Empty => value.as_object().is_some_and(|o| o.is_empty()),
            }
    }
}

/// Generic transformers `PretrainedConfig` fields that full dumps carry at their
/// defaults, where they change nothing; any other value changes a causal LM's
/// output, which Switchyard does not compute, and is refused by name.
pub const HF_DEFAULT_ONLY: &[(&str, Neutral, &str)] = &[
    (
        "pruned_heads",
        Neutral::Empty,
        "attention heads removed from the layers",
    ),
    (
        "is_encoder_decoder",
        Neutral::False,
        "an encoder-decoder model, not a causal LM",
    ),
    (
        "add_cross_attention",
        Neutral::False,
        "cross-attention to an encoder in every block",
    ),
];

/// `{arch}.` GGUF metadata keys that are read and change the computation.
pub const GGUF_IMPLEMENTED: &[KeyRule] = &[
    ("context_length", "trained context length"),
    ("embedding_length", "residual width"),
    ("block_count", "number of blocks"),
    ("feed_forward_length", "feed-forward width"),
    ("attention.head_count", "query heads"),
    ("attention.head_count_kv", "key/value heads"),
    ("attention.key_length", "per-head width"),
    (
        "attention.value_length",
        "per-head width of values (must equal key_length)",
    ),
    ("attention.layer_norm_rms_epsilon", "RMSNorm epsilon"),
    ("rope.dimension_count", "rotated dimensions per head"),
    ("rope.freq_base", "RoPE frequency base"),
    (
        "rope.scaling.type",
        "RoPE scaling: none or linear (llama3 comes as rope_freqs)",
    ),
    ("rope.scaling.factor", "linear RoPE scaling factor"),
    (
        "rope.scaling.original_context_length",
        "Phi-3 longrope: the context is capped there (informational elsewhere)",
    ),
    (
        "rope.scaling.attn_factor",
        "Phi-3 longrope: multiplier of the rotated cos and sin",
    ),
    (
        "rope.freq_base_swa",
        "Gemma: RoPE base of sliding-window layers",
    ),
    (
        "attention.sliding_window",
        "Gemma, Phi-3: attention window of sliding layers (0: none)",
    ),
    (
        "attn_logit_softcapping",
        "Gemma 2: attention scores soft-capped",
    ),
    ("final_logit_softcapping", "Gemma: logits soft-capped"),
    (
        "vocab_size",
        "rows of the embedding (checked against token_embd)",
    ),
    ("expert_count", "mixture of experts (0 only)"),
    ("expert_used_count", "mixture of experts (0 only)"),
];

/// Implemented `{arch}.` GGUF keys that only some architectures read; llama.cpp
/// ignores them elsewhere, so anywhere else they are refused.
pub const GGUF_ARCH_ONLY: &[(&str, &[&str])] = &[
    ("rope.scaling.attn_factor", &["phi3"]),
    ("rope.freq_base_swa", GGUF_GEMMA),
    ("attention.sliding_window", &["gemma2", "gemma3", "phi3"]),
    ("attn_logit_softcapping", &["gemma2"]),
    ("final_logit_softcapping", GGUF_GEMMA),
];

const GGUF_GEMMA: &[&str] = &["gemma2", "gemma3"];

/// `{arch}.` GGUF metadata keys known not to change the computation.
pub const GGUF_IGNORED: &[KeyRule] = &[("rope.scaling.finetuned", "informational")];

/// GGUF key prefixes (outside `{arch}.`) known not to change the computation.
pub const GGUF_IGNORED_PREFIXES: &[KeyRule] = &[
    (
        "general.",
        "names, licence, file type and alignment (read by the reader)",
    ),
    (
        "tokenizer.",
        "vocabulary and special tokens (the tokenizer reads them)",
    ),
    (
        "quantize.",
        "how the file was quantized (importance matrix)",
    ),
];

/// Namespaces (a key's part before its first `.`) outside `{arch}.` and the ignored
/// prefixes that a reader gives meaning: a key there is refused, since it may be meant
/// to change the computation. So is one under another architecture of
/// [`GGUF_ARCHITECTURES`]. Keys in any other namespace are read past and logged, as
/// llama.cpp reads past them.
pub const GGUF_READ_NAMESPACES: &[KeyRule] = &[
    (
        "clip",
        "a vision encoder or projector: not a language model alone",
    ),
    ("split", "one shard of a model split over several files"),
    ("adapter", "a LoRA or control-vector adapter, not a model"),
];

/// Where a refused key came from, for the error message.
#[derive(Clone, Copy, Debug)]
pub enum KeySource {
    /// A Hugging Face `config.json`.
    ConfigJson,
    /// GGUF metadata.
    Gguf,
}

impl KeySource {
    fn name(self) -> &'static str {
        match self {
            KeySource::ConfigJson => "config.json",
            KeySource::Gguf => "GGUF metadata",
        }
    }
}

/// The error for a key whose value is not supported:
/// `unsupported: config.json rope_scaling.type = "yarn"`.
pub fn unsupported(
    path: &Path,
    source: KeySource,
    key: &str,
    value: &dyn std::fmt::Display,
) -> ModelError {
    ModelError::Unsupported {
        path: path.to_path_buf(),
        detail: format!("{} {key} = {value}", source.name()),
    }
}

/// Refuses the first top-level key of `config` that is in no HF table, that
/// architecture `arch` does not read (see [`HF_ARCH_ONLY`]), or that is a
/// [`HF_DEFAULT_ONLY`] field away from its default.
pub fn check_hf_keys(
    path: &Path,
    arch: &str,
    config: &serde_json::Value,
) -> Result<(), ModelError> {
    use serde_json::Value::{Bool, Null};
    let Some(object) = config.as_object() else {
        return Err(ModelError::format(path, "config.json is not a JSON object"));
    };
    for (key, value) in object {
        let known = HF_IMPLEMENTED
            .iter()
            .chain(HF_IGNORED)
            .any(|(k, _)| k == key)
            || HF_GENERATION.contains(&key.as_str());
        let foreign = HF_ARCH_ONLY.iter().any(|(k, archs)| {
            k == key && !archs.contains(&arch) && !matches!(value, Null | Bool(false))
        });
        let refused = match HF_DEFAULT_ONLY.iter().find(|(k, _, _)| k == key) {
            Some((_, neutral, _)) => !neutral.holds(value),
            None => !known || foreign,
        };
        if refused {
            return Err(unsupported(path, KeySource::ConfigJson, key, value));
        }
    }
    Ok(())
}

/// Refuses the first GGUF metadata key that is neither `{arch}.` implemented or
/// ignored, nor under an ignored prefix, nor in a namespace no reader uses (see
/// [`GGUF_READ_NAMESPACES`]); returns the keys of that last kind, which are read past.
pub fn check_gguf_keys<'m>(
    path: &Path,
    arch: &str,
    meta: &'m Metadata,
) -> Result<Vec<&'m str>, ModelError> {
    let arch_prefix = format!("{arch}.");
    let mut read_past = Vec::new();
    for (key, value) in meta.iter() {
        let known = match key.strip_prefix(&arch_prefix) {
            Some(rest) => {
                GGUF_IMPLEMENTED
                    .iter()
                    .chain(GGUF_IGNORED)
                    .any(|(k, _)| *k == rest)
                    && !GGUF_ARCH_ONLY
                        .iter()
                        .any(|(k, archs)| *k == rest && !archs.contains(&arch))
            }
            None if GGUF_IGNORED_PREFIXES
                .iter()
                .any(|(p, _)| key.starts_with(p)) =>
            {
                true
            }
            None => {
                let namespace = key.split('.').next().unwrap_or(key);
                let read = GGUF_ARCHITECTURES.contains(&namespace)
                    || GGUF_READ_NAMESPACES.iter().any(|(n, _)| *n == namespace);
                if !read {
                    read_past.push(key);
                }
                !read
            }
        };
        if !known {
            return Err(unsupported(path, KeySource::Gguf, key, &value_text(value)));
        }
    }
    Ok(read_past)
}

/// A GGUF value as an error message shows it: scalars in full, arrays by length.
fn value_text(value: &crate::model::gguf::Value) -> String {
    use crate::model::gguf::Value;
    match value {
        Value::Str(s) => format!("{s:?}"),
        Value::Array(a) => format!("[{} items]", a.len()),
        Value::F32(v) => v.to_string(),
        Value::F64(v) => v.to_string(),
        Value::Bool(v) => v.to_string(),
        other => other.as_integer().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
