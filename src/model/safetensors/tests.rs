//! Round trips and hostile inputs for safetensors files and model directories.

use std::path::Path;

use half::{bf16, f16};

use super::*;
use crate::backend::SharedBytes;
use crate::graph::{DType, Shape};

fn host(dtype: DType, dims: &[usize], bytes: Vec<u8>) -> HostTensor {
    HostTensor::new(dtype, Shape::new(dims), SharedBytes::from_vec(bytes)).unwrap()
}

fn sample() -> Vec<(&'static str, HostTensor)> {
    let f32s: Vec<u8> = (0..6)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let f16s: Vec<u8> = (0..4)
        .flat_map(|i| f16::from_f32(i as f32).to_le_bytes())
        .collect();
    let bf16s: Vec<u8> = (0..3)
        .flat_map(|i| bf16::from_f32(-(i as f32)).to_le_bytes())
        .collect();
    vec![
        ("model.embed_tokens.weight", host(DType::F32, &[2, 3], f32s)),
        ("model.norm.weight", host(DType::F16, &[4], f16s)),
        ("lm_head.weight", host(DType::BF16, &[3, 1], bf16s)),
        ("scalar", host(DType::F32, &[], 7f32.to_le_bytes().to_vec())),
        ("empty", host(DType::F32, &[0, 4], vec![])),
    ]
}

fn write_config(dir: &Path) {
    let config = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 576, "num_hidden_layers": 30, "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16"}"#;
    std::fs::write(dir.join(CONFIG_FILE), config).unwrap();
}

fn refs<'a>(tensors: &'a [(&'static str, HostTensor)]) -> Vec<(&'static str, &'a HostTensor)> {
    tensors.iter().map(|(n, t)| (*n, t)).collect()
}

fn assert_same(model: &HfModel, tensors: &[(&str, HostTensor)]) {
    for (name, want) in tensors {
        let got = model.tensor(name).unwrap();
        assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{name}");
        assert_eq!(got.data.as_bytes(), want.data.as_bytes(), "{name}");
    }
    assert_eq!(model.tensor_names().count(), tensors.len());
}

#[test]
fn single_file_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let tensors = sample();
    write_safetensors(dir.path().join(SINGLE_FILE), &refs(&tensors)).unwrap();
    let model = HfModel::open(dir.path()).unwrap();
    assert_same(&model, &tensors);
    let c = model.config();
    assert_eq!(c.architectures, ["LlamaForCausalLM"]);
    assert_eq!(
        (c.hidden_size, c.num_hidden_layers, c.vocab_size),
        (Some(576), Some(30), None)
    );
    assert_eq!(c.tie_word_embeddings, Some(true));
    assert_eq!(model.raw_config()["torch_dtype"], "bfloat16");
    assert!(matches!(
        model.tensor("nope"),
        Err(ModelError::MissingTensor { .. })
    ));
}

#[test]
fn sharded_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let tensors = sample();
    let (a, b) = tensors.split_at(2);
    write_safetensors(
        dir.path().join("model-00001-of-00002.safetensors"),
        &refs(a),
    )
    .unwrap();
    write_safetensors(
        dir.path().join("model-00002-of-00002.safetensors"),
        &refs(b),
    )
    .unwrap();
    let map: BTreeMap<_, _> = tensors
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            (
                *n,
                format!("model-0000{}-of-00002.safetensors", 1 + usize::from(i >= 2)),
            )
        })
        .collect();
    let index = serde_json::json!({"metadata": {"total_size": 1}, "weight_map": map});
    std::fs::write(dir.path().join(INDEX_FILE), index.to_string()).unwrap();
    let model = HfModel::open(dir.path()).unwrap();
    assert_same(&model, &tensors);
}

#[test]
fn sharded_index_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let tensors = sample();
    write_safetensors(dir.path().join("s.safetensors"), &refs(&tensors[..1])).unwrap();
    let index = |name: &str, shard: &str| {
        let json = serde_json::json!({"weight_map": {name: shard}}).to_string();
        std::fs::write(dir.path().join(INDEX_FILE), json).unwrap();
        HfModel::open(dir.path()).unwrap_err().to_string()
    };
    assert!(index("x", "../s.safetensors").contains("plain file name"));
    assert!(index("x", "/etc/passwd").contains("plain file name"));
    assert!(index("x", "s.safetensors").contains("\"x\" not found"));
    assert!(index("x", "missing.safetensors").contains("missing.safetensors"));
}

#[test]
fn directory_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = HfModel::open(dir.path()).unwrap_err();
    assert!(
        matches!(&err, ModelError::Io { path, .. } if path.ends_with(CONFIG_FILE)),
        "{err}"
    );
    write_config(dir.path());
    let err = HfModel::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(SINGLE_FILE) && err.contains(INDEX_FILE),
        "{err}"
    );
    std::fs::write(dir.path().join(CONFIG_FILE), "{not json").unwrap();
    assert!(matches!(
        HfModel::open(dir.path()),
        Err(ModelError::Format { .. })
    ));
}

/// Writes a file with `header` as its JSON header and `data_len` zero data bytes.
fn raw_file(header_len: u64, header: &str, data_len: usize) -> Result<SafetensorsFile, ModelError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.safetensors");
    let mut bytes = header_len.to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + data_len, 0);
    std::fs::write(&path, bytes).unwrap();
    SafetensorsFile::open(&path)
}

fn raw(header: &str, data_len: usize) -> Result<SafetensorsFile, ModelError> {
    raw_file(header.len() as u64, header, data_len)
}

fn fails(result: Result<SafetensorsFile, ModelError>, needle: &str) -> ModelError {
    let err = result.expect_err("hostile file was accepted");
    assert!(err.to_string().contains(needle), "{err} lacks {needle:?}");
    err
}

#[test]
fn hostile_header_length() {
    fails(raw_file(u64::MAX, "{}", 0), "header length");
    fails(raw_file(MAX_HEADER_BYTES + 1, "{}", 0), "header length");
    fails(raw_file(3, "{}", 0), "header length");
    fails(raw_file(2, "[]", 0), "not a JSON object");
    fails(raw_file(2, "{", 8), "not a JSON object");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.safetensors");
    std::fs::write(&path, [1, 2, 3]).unwrap();
    fails(SafetensorsFile::open(&path), "truncated");
    let ok = raw(r#"{"__metadata__": {"format": "pt"}}"#, 0).unwrap();
    assert_eq!(ok.tensors().count(), 0);
}

#[test]
fn hostile_offsets() {
    let t = |shape: &str, offsets: &str| {
        format!(r#"{{"t": {{"dtype": "F32", "shape": {shape}, "data_offsets": {offsets}}}}}"#)
    };
    fails(raw(&t("[4]", "[0, 16]"), 8), "outside");
    fails(raw(&t("[4]", "[16, 0]"), 32), "outside");
    fails(raw(&t("[4]", "[0, 18446744073709551615]"), 16), "outside");
    fails(raw(&t("[4]", "[0, 12]"), 16), "needs 16");
    fails(
        raw(&t("[4294967296, 4294967296, 4294967296]", "[0, 16]"), 16),
        "too large",
    );
    fails(raw(&t("[1,1,1,1,1,1,1,1,1]", "[0, 4]"), 4), "dimensions");
    fails(raw(&t("[-1]", "[0, 4]"), 4), "\"t\"");
    fails(raw(r#"{"t": {"dtype": "F32"}}"#, 4), "\"t\"");
    let two = r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}"#;
    fails(raw(two, 12), "overlap");
    assert_eq!(
        raw(&t("[4]", "[4, 20]"), 20)
            .unwrap()
            .tensor("t")
            .unwrap()
            .data
            .as_bytes()
            .len(),
        16
    );
}

#[test]
fn unknown_dtype_is_named() {
    let header = r#"{"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}"#;
    let err = fails(raw(header, 8), "I64");
    assert!(err.to_string().contains("\"ids\""), "{err}");
    assert!(matches!(err, ModelError::Unsupported { .. }));
}

#[test]
fn writer_rejects_block_formats() {
    let dir = tempfile::tempdir().unwrap();
    let q = host(DType::Q8_0, &[32], vec![0; 34]);
    let err = write_safetensors(dir.path().join("q.safetensors"), &[("q", &q)]).unwrap_err();
    assert!(matches!(err, ModelError::Unsupported { .. }), "{err}");
}
