//! Hostile GGUF files whose metadata contradicts their tensors, whose keys have the
//! wrong type, or whose sizes overflow: each is refused with the key, the tensor and
//! both numbers named.

use super::*;
use crate::backend::SharedBytes;
use crate::graph::{DType, Shape};

const D: usize = 8;
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 4;
const FF: usize = 12;
const LAYERS: usize = 2;
const VOCAB: usize = 6;

/// A small Llama-family model description that tests mutate before writing.
struct Model {
    metadata: Vec<(&'static str, Value)>,
    tensors: Vec<(String, Vec<usize>)>,
}

impl Model {
    /// A consistent model: every metadata dimension matches every tensor.
    fn valid() -> Model {
        let tokens = (0..VOCAB).map(|i| format!("t{i}")).collect();
        let metadata = vec![
            ("general.architecture", Value::Str("llama".into())),
            ("llama.block_count", Value::U32(LAYERS as u32)),
            ("llama.embedding_length", Value::U32(D as u32)),
            ("llama.feed_forward_length", Value::U32(FF as u32)),
            ("llama.attention.head_count", Value::U32(HEADS as u32)),
            ("llama.attention.head_count_kv", Value::U32(KV_HEADS as u32)),
            ("llama.context_length", Value::U32(64)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
            ("tokenizer.ggml.model", Value::Str("gpt2".into())),
            ("tokenizer.ggml.tokens", Value::Array(Array::Str(tokens))),
        ];
        let mut tensors = vec![
            ("token_embd.weight".to_string(), vec![VOCAB, D]),
            ("output_norm.weight".to_string(), vec![D]),
            ("output.weight".to_string(), vec![VOCAB, D]),
        ];
        for l in 0..LAYERS {
            let t = |name: &str, dims: Vec<usize>| (format!("blk.{l}.{name}"), dims);
            tensors.extend([
                t("attn_norm.weight", vec![D]),
                t("attn_q.weight", vec![HEADS * HEAD_DIM, D]),
                t("attn_k.weight", vec![KV_HEADS * HEAD_DIM, D]),
                t("attn_v.weight", vec![KV_HEADS * HEAD_DIM, D]),
                t("attn_output.weight", vec![D, HEADS * HEAD_DIM]),
                t("attn_q.bias", vec![HEADS * HEAD_DIM]),
                t("ffn_norm.weight", vec![D]),
                t("ffn_gate.weight", vec![FF, D]),
                t("ffn_up.weight", vec![FF, D]),
                t("ffn_down.weight", vec![D, FF]),
            ]);
        }
        Model { metadata, tensors }
    }

    fn set(mut self, key: &'static str, value: Value) -> Model {
        self.metadata.retain(|(k, _)| *k != key);
        self.metadata.push((key, value));
        self
    }

    fn shape(mut self, name: &str, dims: &[usize]) -> Model {
        let t = self.tensors.iter_mut().find(|(n, _)| n == name).unwrap();
        t.1 = dims.to_vec();
        self
    }

    fn without(mut self, prefix: &str) -> Model {
        self.tensors.retain(|(n, _)| !n.starts_with(prefix));
        self
    }

    fn with_tensor(mut self, name: &str, dims: &[usize]) -> Model {
        self.tensors.push((name.to_string(), dims.to_vec()));
        self
    }

    /// Writes the file and opens it, then checks the dimensions.
    fn check(&self) -> Result<(), ModelError> {
        let dir = tempfile::tempdir().unwrap();
        check_dimensions(&GgufFile::open(self.write(dir.path()))?)
    }

    /// Writes the file into `dir`; returns its path.
    fn write(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("m.gguf");
        let hosts: Vec<(String, HostTensor)> = self
            .tensors
            .iter()
            .map(|(name, dims)| {
                let bytes = vec![0u8; dims.iter().product::<usize>() * 4];
                let t = HostTensor::new(
                    DType::F32,
                    Shape::new(dims.clone()),
                    SharedBytes::from_vec(bytes),
                );
                (name.clone(), t.unwrap())
            })
            .collect();
        let refs: Vec<(&str, &HostTensor)> = hosts.iter().map(|(n, t)| (n.as_str(), t)).collect();
        write_gguf(&path, &self.metadata, &refs).unwrap();
        path
    }
}

/// Checks that `model` is refused with an error containing every one of `needles`.
fn refused(model: Model, needles: &[&str]) {
    let err = model
        .check()
        .expect_err("an inconsistent file was accepted");
    let text = err.to_string();
    for needle in needles {
        assert!(text.contains(needle), "{text:?} lacks {needle:?}");
    }
}

#[test]
fn a_consistent_model_passes() {
    Model::valid().check().unwrap();
    // Per-layer arrays, an explicit key length and a vocab_size that agree also pass.
    Model::valid()
        .set(
            "llama.feed_forward_length",
            Value::Array(Array::U32(vec![FF as u32; LAYERS])),
        )
        .set("llama.attention.key_length", Value::U32(HEAD_DIM as u32))
        .set("llama.vocab_size", Value::U32(VOCAB as u32))
        .check()
        .unwrap();
}

#[test]
fn embedding_length_must_match_every_tensor_that_uses_it() {
    refused(
        Model::valid().set("llama.embedding_length", Value::U32(16)),
        &["llama.embedding_length", "token_embd.weight", "16", "[6×8]"],
    );
    refused(
        Model::valid().shape("output_norm.weight", &[10]),
        &["llama.embedding_length = 8", "output_norm.weight", "[10]"],
    );
    refused(
        Model::valid().shape("blk.1.attn_norm.weight", &[4, 2]),
        &["blk.1.attn_norm.weight", "1 dimensions are expected"],
    );
}

#[test]
fn feed_forward_length_must_match_the_ffn_tensors() {
    refused(
        Model::valid().set("llama.feed_forward_length", Value::U32(16)),
        &[
            "llama.feed_forward_length",
            "blk.0.ffn_gate.weight",
            "16",
            "[12×8]",
        ],
    );
    refused(
        Model::valid().shape("blk.1.ffn_down.weight", &[D, 10]),
        &[
            "llama.feed_forward_length = 12",
            "blk.1.ffn_down.weight",
            "is 10",
        ],
    );
    refused(
        Model::valid().set(
            "llama.feed_forward_length",
            Value::Array(Array::U32(vec![FF as u32, 20])),
        ),
        &["llama.feed_forward_length[1] = 20", "blk.1.ffn_gate.weight"],
    );
    refused(
        Model::valid().set(
            "llama.feed_forward_length",
            Value::Array(Array::U32(vec![FF as u32; 3])),
        ),
        &["llama.feed_forward_length", "3 entries", "block_count is 2"],
    );
}

#[test]
fn head_counts_times_key_length_must_match_attention() {
    refused(
        Model::valid()
            .set("llama.attention.head_count", Value::U32(4))
            .set("llama.attention.key_length", Value::U32(HEAD_DIM as u32)),
        &[
            "llama.attention.head_count = 4 × llama.attention.key_length = 4",
            "blk.0.attn_q.weight",
            "[8×8]",
            "makes it 16",
        ],
    );
    // Without key_length the head size follows embedding_length / head_count.
    refused(
        Model::valid().set("llama.attention.head_count", Value::U32(4)),
        &["(llama.embedding_length = 8) / 4", "blk.0.attn_k.weight"],
    );
    refused(
        Model::valid().set("llama.attention.head_count_kv", Value::U32(2)),
        &[
            "llama.attention.head_count_kv = 2",
            "blk.0.attn_k.weight",
            "is 4",
        ],
    );
    refused(
        Model::valid().set("llama.attention.key_length", Value::U32(8)),
        &[
            "llama.attention.key_length = 8",
            "blk.0.attn_q.weight",
            "16",
        ],
    );
    refused(
        Model::valid().shape("blk.0.attn_q.bias", &[6]),
        &["llama.attention.head_count", "blk.0.attn_q.bias", "is 6"],
    );
    refused(
        Model::valid().set("llama.attention.head_count", Value::U32(0)),
        &["llama.attention.head_count", "is 0"],
    );
}

#[test]
fn block_count_must_match_the_layers_present() {
    refused(
        Model::valid().set("llama.block_count", Value::U32(1)),
        &["llama.block_count", "is 1", "blk.1.", "layer 1"],
    );
    refused(
        Model::valid().without("blk.1."),
        &["llama.block_count", "is 2", "no tensors for layer 1"],
    );
    refused(
        Model::valid().set("llama.block_count", Value::U32(u32::MAX)),
        &["llama.block_count", "is 4294967295", "has 23 tensors"],
    );
}

#[test]
fn vocabulary_must_match_embedding_and_output_rows() {
    let seven = (0..7).map(|i| format!("t{i}")).collect();
    refused(
        Model::valid().set("tokenizer.ggml.tokens", Value::Array(Array::Str(seven))),
        &[
            "tokenizer.ggml.tokens",
            "7 entries",
            "token_embd.weight",
            "[6×8]",
        ],
    );
    refused(
        Model::valid().shape("output.weight", &[5, D]),
        &[
            "tokenizer.ggml.tokens has 6 entries",
            "output.weight",
            "[5×8]",
        ],
    );
    refused(
        Model::valid().set("llama.vocab_size", Value::U32(7)),
        &[
            "llama.vocab_size",
            "is 7",
            "tokenizer.ggml.tokens has 6 entries",
        ],
    );
    // Without a vocabulary in the metadata, the output rows must match the embedding's.
    let mut no_tokens = Model::valid().shape("output.weight", &[5, D]);
    no_tokens
        .metadata
        .retain(|(k, _)| !k.starts_with("tokenizer."));
    refused(
        no_tokens,
        &["token_embd.weight has 6 rows", "output.weight", "[5×8]"],
    );
}

#[test]
fn kv_cache_size_overflow_is_refused() {
    // Layer 0 holds only a norm, so no attention tensor constrains the head sizes.
    let mut model = Model::valid()
        .without("blk.")
        .with_tensor("blk.0.attn_norm.weight", &[D]);
    model = model
        .set("llama.block_count", Value::U32(1))
        .set("llama.context_length", Value::U32(1 << 31))
        .set("llama.attention.head_count", Value::U32(1 << 20))
        .set("llama.attention.head_count_kv", Value::U32(1 << 20))
        .set("llama.attention.key_length", Value::U32(1 << 20));
    refused(
        model,
        &[
            "llama.context_length",
            "KV cache",
            "2147483648 positions",
            "overflows",
        ],
    );
}

#[test]
fn width_products_that_overflow_are_refused() {
    // q + k + v rows of a fused projection: 3 × (2³² − 1)² does not fit in 64 bits.
    let max = Value::U32(u32::MAX);
    let model = Model::valid()
        .without("blk.")
        .with_tensor("blk.0.attn_qkv.weight", &[12, D])
        .set("llama.block_count", Value::U32(1))
        .set("llama.attention.head_count", max.clone())
        .set("llama.attention.head_count_kv", max.clone())
        .set("llama.attention.key_length", max.clone())
        .set("llama.attention.value_length", max);
    refused(
        model,
        &[
            "llama.attention.head_count",
            "fused QKV",
            "blk.0.attn_qkv.weight",
            "overflows",
        ],
    );
}

#[test]
fn keys_of_the_wrong_type_are_refused_naming_the_key() {
    let cases: Vec<(&'static str, Value, &str)> = vec![
        (
            "tokenizer.ggml.tokens",
            Value::Array(Array::I32(vec![1; VOCAB])),
            "an array of 6 i32",
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(Array::F64(vec![0.0; VOCAB])),
            "an array of 6 f64",
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(Array::U32(vec![1; VOCAB])),
            "an array of 6 u32",
        ),
        (
            "tokenizer.ggml.merges",
            Value::Array(Array::I32(vec![])),
            "an array of 0 i32",
        ),
        ("tokenizer.ggml.bos_token_id", Value::I32(1), "a i32"),
        (
            "tokenizer.ggml.eos_token_id",
            Value::Str("2".into()),
            "a string",
        ),
        ("tokenizer.ggml.add_bos_token", Value::U8(1), "a u8"),
        ("tokenizer.chat_template", Value::U32(0), "a u32"),
        ("llama.rope.freq_base", Value::Str("1e4".into()), "a string"),
        ("llama.embedding_length", Value::F32(8.0), "a f32"),
        ("llama.attention.key_length", Value::I64(4), "a i64"),
    ];
    for (key, value, found) in cases {
        let err = Model::valid().set(key, value).check().unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ModelError::Metadata { .. })
                && text.contains(key)
                && text.contains(found),
            "{key}: {text}"
        );
    }
}

#[test]
fn tensor_names_longer_than_the_spec_allows_are_refused() {
    let at_limit = "n".repeat(MAX_NAME_BYTES);
    Model::valid().with_tensor(&at_limit, &[4]).check().unwrap();
    let long = "n".repeat(MAX_NAME_BYTES + 1);
    refused(
        Model::valid().with_tensor(&long, &[4]),
        &["tensor name", "65 bytes", "allows 64"],
    );
}

#[test]
fn the_loader_refuses_inconsistent_files_and_bad_stop_ids() {
    let dir = tempfile::tempdir().unwrap();
    let open = |m: Model| crate::model::Model::open(&m.write(dir.path()));
    let model = open(Model::valid().set("tokenizer.ggml.eos_token_id", Value::U32(5))).unwrap();
    assert_eq!(model.stop_ids, vec![5]);
    let err = open(Model::valid().shape("blk.1.ffn_up.weight", &[7, D]))
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("llama.feed_forward_length"),
        "{err}"
    );
    let bad_eot = Model::valid().set("tokenizer.ggml.eot_token_id", Value::U32(6));
    let err = open(bad_eot).err().unwrap();
    assert!(
        err.to_string().contains("tokenizer.ggml.eot_token_id"),
        "{err}"
    );
    let sep = Model::valid().set("tokenizer.ggml.add_sep_token", Value::Bool(true));
    let err = open(sep).err().unwrap();
    assert!(err.to_string().contains("add_sep_token"), "{err}");
}
