//! Round-trip tests for the GGUF reader and writer, and a check against a real model.

use half::f16;

use super::*;
use crate::backend::SharedBytes;
use crate::graph::{DType, Shape};

fn host(dtype: DType, dims: &[usize], bytes: Vec<u8>) -> HostTensor {
    HostTensor::new(dtype, Shape::new(dims), SharedBytes::from_vec(bytes)).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sample_metadata() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::Str("llama".into())),
        ("llama.block_count", Value::U64(2)),
        ("llama.context_length", Value::U32(128)),
        ("llama.rope.freq_base", Value::F64(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("general.small", Value::U8(7)),
        ("general.neg", Value::I8(-3)),
        ("general.u16", Value::U16(600)),
        ("general.i16", Value::I16(-600)),
        ("general.i32", Value::I32(-70000)),
        ("general.i64", Value::I64(-5)),
        ("general.flag", Value::Bool(true)),
        (
            "tokenizer.ggml.tokens",
            Value::Array(Array::Str(vec!["<s>".into(), "héllo".into(), "".into()])),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(vec![3, 1, 1])),
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(Array::F32(vec![0.0, -1.5, 2.25])),
        ),
        ("general.u64s", Value::Array(Array::U64(vec![1, 2]))),
        ("general.f64s", Value::Array(Array::F64(vec![0.5]))),
        (
            "general.bools",
            Value::Array(Array::Bool(vec![true, false])),
        ),
        ("general.bytes", Value::Array(Array::U8(vec![1, 2, 3]))),
        ("general.i8s", Value::Array(Array::I8(vec![-1]))),
        ("general.u16s", Value::Array(Array::U16(vec![9]))),
        ("general.i16s", Value::Array(Array::I16(vec![-9]))),
        (
            "general.u32s",
            Value::Array(Array::U32(vec![4_000_000_000])),
        ),
        ("general.i64s", Value::Array(Array::I64(vec![-1, 1]))),
        (
            "general.nested",
            Value::Array(Array::Array(vec![
                Array::U8(vec![1]),
                Array::Str(vec!["x".into()]),
                Array::Array(vec![]),
            ])),
        ),
        ("general.alignment", Value::U32(64)),
    ]
}

fn sample_tensors() -> Vec<(&'static str, HostTensor)> {
    let f16s: Vec<u8> = (0..6)
        .flat_map(|i| f16::from_f32(i as f32).to_le_bytes())
        .collect();
    vec![
        (
            "token_embd.weight",
            host(DType::Q8_0, &[3, 64], pattern(3 * 2 * 34, 1)),
        ),
        (
            "blk.0.attn_q.weight",
            host(DType::Q4_1, &[2, 32], pattern(2 * 20, 2)),
        ),
        ("output_norm.weight", host(DType::F32, &[5], pattern(20, 3))),
        ("blk.0.ffn.weight", host(DType::F16, &[2, 3], f16s)),
        (
            "blk.0.k.weight",
            host(DType::Q6K, &[1, 256], pattern(210, 4)),
        ),
        (
            "blk.0.bf.weight",
            host(DType::BF16, &[2, 1, 1, 3], pattern(12, 5)),
        ),
    ]
}

/// Writes the sample model into a temp dir and returns the dir (kept alive) and path.
pub(super) fn sample_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let tensors = sample_tensors();
    let refs: Vec<_> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    write_gguf(&path, &sample_metadata(), &refs).unwrap();
    (dir, path)
}

#[test]
fn metadata_round_trips() {
    let (_dir, path) = sample_file();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.architecture().unwrap(), "llama");
    let md = f.metadata();
    for (key, value) in sample_metadata() {
        assert_eq!(md.get(key), Some(&value), "{key}");
    }
    assert_eq!(md.len(), sample_metadata().len());
    assert_eq!(md.get_u32("llama.block_count").unwrap(), 2);
    assert_eq!(md.get_u32("general.small").unwrap(), 7);
    assert_eq!(md.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert_eq!(
        md.get_str_array("tokenizer.ggml.tokens").unwrap()[1],
        "héllo"
    );
    assert_eq!(
        md.get_i32_array("tokenizer.ggml.token_type").unwrap(),
        vec![3, 1, 1]
    );
    assert_eq!(md.get_i32_array("general.bytes").unwrap(), vec![1, 2, 3]);
    assert_eq!(md.get_f32_array("general.f64s").unwrap(), vec![0.5]);
}

#[test]
fn metadata_getters_name_the_key() {
    let (_dir, path) = sample_file();
    let f = GgufFile::open(&path).unwrap();
    let md = f.metadata();
    let cases = [
        (md.get_u32("general.neg").unwrap_err(), "general.neg"),
        (md.get_u32("nope").unwrap_err(), "nope"),
        (
            md.get_str("llama.block_count").unwrap_err(),
            "llama.block_count",
        ),
        (md.get_f32("general.flag").unwrap_err(), "general.flag"),
        (
            md.get_i32_array("general.u32s").unwrap_err(),
            "general.u32s",
        ),
        (
            md.get_str_array("tokenizer.ggml.scores").unwrap_err(),
            "tokenizer.ggml.scores",
        ),
        (
            md.get_f32_array("general.bools").unwrap_err(),
            "general.bools",
        ),
    ];
    for (err, key) in cases {
        assert!(
            matches!(&err, ModelError::Metadata { key: k, .. } if k == key),
            "{err}"
        );
        assert!(err.to_string().contains(key), "{err}");
    }
}

#[test]
fn tensors_round_trip_zero_copy() {
    let (_dir, path) = sample_file();
    let f = GgufFile::open(&path).unwrap();
    let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    let expected = sample_tensors();
    assert_eq!(names, expected.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    for (name, want) in &expected {
        let info = f.tensor_info(name).unwrap();
        assert_eq!(info.offset % 64, 0);
        assert_eq!((f.data_start() + info.offset) % 64, 0);
        let got = f.tensor(name).unwrap();
        assert_eq!(got.dtype, want.dtype, "{name}");
        assert_eq!(got.shape, want.shape, "{name}");
        assert_eq!(got.data.as_bytes(), want.data.as_bytes(), "{name}");
    }
    let err = f.tensor("missing.weight").unwrap_err();
    assert!(matches!(err, ModelError::MissingTensor { ref name, .. } if name == "missing.weight"));
}

#[test]
fn default_alignment_is_32() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.gguf");
    let t = host(DType::F32, &[3], pattern(12, 9));
    let u = host(DType::F32, &[1], pattern(4, 8));
    write_gguf(&path, &[], &[("a", &t), ("b", &u)]).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.tensor_info("b").unwrap().offset, 32);
    assert_eq!(f.tensor("b").unwrap().data.as_bytes(), u.data.as_bytes());
    assert!(f.metadata().is_empty());
}

#[test]
fn writer_rejects_i32_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let t = host(DType::I32, &[1], vec![0; 4]);
    let err = write_gguf(dir.path().join("x.gguf"), &[], &[("ids", &t)]).unwrap_err();
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
}

/// Reads the default model (SmolLM2-135M-Instruct Q4_1), fetched by the project's code.
#[test]
fn real_default_model() {
    let path = crate::model::fetch::default_model_path(false).expect("fetching the default model");
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.metadata().get_u32("llama.block_count").unwrap(), 30);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.dtype, DType::Q8_0);
    assert_eq!(embd.shape, Shape::new([49152, 576]));
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.dtype, DType::Q4_1);
    assert_eq!(q.shape, Shape::new([576, 576]));
    assert_eq!(
        f.metadata()
            .get_str_array("tokenizer.ggml.tokens")
            .unwrap()
            .len(),
        49152
    );
    for t in f.tensors() {
        f.tensor(&t.name).unwrap();
    }
}
