//! The value types the GGUF spec (and llama.cpp's converter) give the keys we read.
//!
//! A key of the wrong type must not fall back to a default: a `tokenizer.ggml.scores`
//! stored as integers or an `add_bos_token` stored as `u8` would otherwise change the
//! tokenization without a word. [`check`] runs when the file is opened, so every later
//! getter sees values of the documented type.

use super::metadata::Metadata;
use super::value::{Array, Value};
use crate::model::ModelError;

/// The type a key must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// An unsigned integer of any width (the spec says `uint32` or `uint64`).
    Uint,
    /// An unsigned integer, or one per layer (llama.cpp's per-layer arrays).
    UintOrPerLayer,
    /// `float32` (a `float64` is narrowed, which changes nothing in practice).
    Float,
    /// `bool`.
    Bool,
    /// A string.
    Str,
    /// An array of strings.
    StrArray,
    /// An array of `float32`.
    F32Array,
    /// An array of `int32`.
    I32Array,
    /// An array of `uint8`.
    U8Array,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Uint => "an unsigned integer",
            Kind::UintOrPerLayer => "an unsigned integer or an array of them (one per layer)",
            Kind::Float => "a float",
            Kind::Bool => "a bool",
            Kind::Str => "a string",
            Kind::StrArray => "an array of strings",
            Kind::F32Array => "an array of f32",
            Kind::I32Array => "an array of i32",
            Kind::U8Array => "an array of u8",
        }
    }

    fn accepts(self, value: &Value) -> bool {
        let unsigned = |v: &Value| {
            matches!(
                v,
                Value::U8(_) | Value::U16(_) | Value::U32(_) | Value::U64(_)
            )
        };
        match (self, value) {
            (Kind::Uint, v) => unsigned(v),
            (Kind::UintOrPerLayer, Value::Array(a)) => matches!(
                a,
                Array::U8(_) | Array::U16(_) | Array::U32(_) | Array::U64(_)
            ),
            (Kind::UintOrPerLayer, v) => unsigned(v),
            (Kind::Float, v) => matches!(v, Value::F32(_) | Value::F64(_)),
            (Kind::Bool, v) => matches!(v, Value::Bool(_)),
            (Kind::Str, v) => matches!(v, Value::Str(_)),
            (Kind::StrArray, v) => matches!(v, Value::Array(Array::Str(_))),
            (Kind::F32Array, v) => matches!(v, Value::Array(Array::F32(_))),
            (Kind::I32Array, v) => matches!(v, Value::Array(Array::I32(_))),
            (Kind::U8Array, v) => matches!(v, Value::Array(Array::U8(_))),
        }
    }
}

/// Keys outside any architecture, with their types.
const GLOBAL_KEYS: &[(&str, Kind)] = &[
    ("general.architecture", Kind::Str),
    ("general.alignment", Kind::Uint),
    ("general.quantization_version", Kind::Uint),
    ("general.file_type", Kind::Uint),
    ("tokenizer.ggml.model", Kind::Str),
    ("tokenizer.ggml.pre", Kind::Str),
    ("tokenizer.ggml.tokens", Kind::StrArray),
    ("tokenizer.ggml.scores", Kind::F32Array),
    ("tokenizer.ggml.token_type", Kind::I32Array),
    ("tokenizer.ggml.token_type_count", Kind::Uint),
    ("tokenizer.ggml.merges", Kind::StrArray),
    ("tokenizer.ggml.added_tokens", Kind::StrArray),
    ("tokenizer.ggml.bos_token_id", Kind::Uint),
    ("tokenizer.ggml.eos_token_id", Kind::Uint),
    ("tokenizer.ggml.eot_token_id", Kind::Uint),
    ("tokenizer.ggml.eom_token_id", Kind::Uint),
    ("tokenizer.ggml.unknown_token_id", Kind::Uint),
    ("tokenizer.ggml.seperator_token_id", Kind::Uint),
    ("tokenizer.ggml.padding_token_id", Kind::Uint),
    ("tokenizer.ggml.mask_token_id", Kind::Uint),
    ("tokenizer.ggml.add_bos_token", Kind::Bool),
    ("tokenizer.ggml.add_eos_token", Kind::Bool),
    ("tokenizer.ggml.add_sep_token", Kind::Bool),
    ("tokenizer.ggml.add_space_prefix", Kind::Bool),
    ("tokenizer.ggml.remove_extra_whitespaces", Kind::Bool),
    ("tokenizer.ggml.precompiled_charsmap", Kind::U8Array),
    ("tokenizer.chat_template", Kind::Str),
    ("tokenizer.chat_templates", Kind::StrArray),
    ("tokenizer.huggingface.json", Kind::Str),
];

/// Keys under `{general.architecture}.`, with their types.
const ARCH_KEYS: &[(&str, Kind)] = &[
    ("vocab_size", Kind::Uint),
    ("context_length", Kind::Uint),
    ("embedding_length", Kind::Uint),
    ("block_count", Kind::Uint),
    ("feed_forward_length", Kind::UintOrPerLayer),
    ("use_parallel_residual", Kind::Bool),
    ("tensor_data_layout", Kind::Str),
    ("expert_count", Kind::Uint),
    ("expert_used_count", Kind::Uint),
    ("attention.head_count", Kind::UintOrPerLayer),
    ("attention.head_count_kv", Kind::UintOrPerLayer),
    ("attention.key_length", Kind::Uint),
    ("attention.value_length", Kind::Uint),
    ("attention.max_alibi_bias", Kind::Float),
    ("attention.clamp_kqv", Kind::Float),
    ("attention.layer_norm_epsilon", Kind::Float),
    ("attention.layer_norm_rms_epsilon", Kind::Float),
    ("attention.sliding_window", Kind::Uint),
    ("attn_logit_softcapping", Kind::Float),
    ("final_logit_softcapping", Kind::Float),
    ("rope.dimension_count", Kind::Uint),
    ("rope.freq_base", Kind::Float),
    ("rope.scale_linear", Kind::Float),
    ("rope.scaling.type", Kind::Str),
    ("rope.scaling.factor", Kind::Float),
    ("rope.scaling.attn_factor", Kind::Float),
    ("rope.scaling.original_context_length", Kind::Uint),
    ("rope.scaling.finetuned", Kind::Bool),
];

/// Checks every key of a known name against the type the spec gives it; the error
/// names the key, the type it must have and the type it has.
pub(super) fn check(metadata: &Metadata) -> Result<(), ModelError> {
    let arch = match metadata.get("general.architecture") {
        Some(Value::Str(a)) => Some(a.as_str()),
        _ => None,
    };
    for (key, value) in metadata.iter() {
        let Some(kind) = kind_of(key, arch) else {
            continue;
        };
        if !kind.accepts(value) {
            return Err(ModelError::Metadata {
                path: metadata.path().to_owned(),
                key: key.to_owned(),
                detail: format!(
                    "the GGUF spec makes it {}, but the file stores {}",
                    kind.describe(),
                    describe_value(value)
                ),
            });
        }
    }
    Ok(())
}

/// The type `key` must have, when it is a key we know.
fn kind_of(key: &str, arch: Option<&str>) -> Option<Kind> {
    let global = GLOBAL_KEYS.iter().find(|(k, _)| *k == key);
    let in_arch = || {
        let rest = key.strip_prefix(arch?)?.strip_prefix('.')?;
        ARCH_KEYS.iter().find(|(k, _)| *k == rest)
    };
    global.or_else(in_arch).map(|&(_, kind)| kind)
}

/// "a u8", "an array of 3 i32", for error messages.
fn describe_value(value: &Value) -> String {
    match value {
        Value::Array(a) => format!("an array of {} {}", a.len(), element_name(a)),
        v => format!("a {}", v.type_name()),
    }
}

fn element_name(a: &Array) -> &'static str {
    match a {
        Array::U8(_) => "u8",
        Array::I8(_) => "i8",
        Array::U16(_) => "u16",
        Array::I16(_) => "i16",
        Array::U32(_) => "u32",
        Array::I32(_) => "i32",
        Array::U64(_) => "u64",
        Array::I64(_) => "i64",
        Array::F32(_) => "f32",
        Array::F64(_) => "f64",
        Array::Bool(_) => "bool",
        Array::Str(_) => "string",
        Array::Array(_) => "array",
    }
}
