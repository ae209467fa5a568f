//! Switchyard against Hugging Face transformers on tiny random-weight models, one per
//! architecture and config variant (`scripts/make-hf-fixtures.py` wrote the fixtures:
//! configs, weight seeds, token ids and transformers' float64 logits). Each test
//! regenerates the weights bit-exactly from the seeds, writes a model directory, loads
//! it the way a user would, and checks the prompt's token ids, the top-10 logits (f32
//! KV cache within 1e-2, f16 within 3e-2: measured 4e-5 and 0.028, the f16 rounding of
//! keys and values) and the argmax wherever transformers' top-1 margin is at least 0.5,
//! at the last prompt position and 8 teacher-forced positions. The same again for
//! each fixture's GGUF conversion by llama.cpp's converter
//! (`scripts/make-gguf-fixtures.py` stored its metadata and per-tensor recipes), except
//! those whose config the format cannot express (`"gguf": {"skip": reason}`).
//! `--nocapture` prints each fixture's largest deviation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet, HostTensor, KvDType, SharedBytes};
use switchyard::graph::DType;
use switchyard::model::gguf::{write_gguf, Array, Value as GgufValue};
use switchyard::model::safetensors::write_safetensors;
use switchyard::model::Model;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
const MIN_MARGIN: f64 = 0.5;
/// Top-10 logit tolerance with an f32 KV cache.
const F32_KV_TOLERANCE: f32 = 1e-2;
/// With an f16 one: its rounding of keys and values alone gives up to 0.028.
const F16_KV_TOLERANCE: f32 = 3e-2;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf_fixtures")
}

fn fnv1a64(text: &str) -> u64 {
    text.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

/// Element `i` of a tensor: splitmix64 of `seed + (i + 1)·GOLDEN`, top 24 bits, mapped
/// to `(u / 2²⁴ − 0.5)·2·scale + offset` in f64 and rounded to f32 (as the script does).
fn generate(seed: u64, n: usize, scale: f64, offset: f64) -> Vec<f32> {
    (1..=n as u64)
        .map(|i| {
            let mut z = seed.wrapping_add(i.wrapping_mul(GOLDEN));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let u = (z >> 40) as f64 / (1u64 << 24) as f64 - 0.5;
            (u * (2.0 * scale) + offset) as f32
        })
        .collect()
}

/// The fixture's Hugging Face tensors, regenerated from their seeds: name, shape
/// (outermost first) and values.
fn hf_tensors(fixture: &Value) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let seed = fixture["seed"].as_u64().unwrap();
    fixture["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_string();
            let shape = dims(&t["shape"]);
            let n = shape.iter().product();
            let (scale, offset) = (t["scale"].as_f64().unwrap(), t["offset"].as_f64().unwrap());
            let values = generate(fnv1a64(&name) ^ seed, n, scale, offset);
            (name, shape, values)
        })
        .collect()
}

fn dims(shape: &Value) -> Vec<usize> {
    shape
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

fn f32_tensor(shape: Vec<usize>, values: &[f32]) -> HostTensor {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    HostTensor::new(DType::F32, shape.into(), SharedBytes::from_vec(bytes)).unwrap()
}

/// Writes the fixture's model directory (config, weights, tokenizer) under `dir`.
fn write_model(fixture: &Value, dir: &Path) -> PathBuf {
    let tensors: Vec<(String, HostTensor)> = hf_tensors(fixture)
        .into_iter()
        .map(|(name, shape, values)| (name, f32_tensor(shape, &values)))
        .collect();
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(dir.join("model.safetensors"), &refs).unwrap();
    std::fs::write(dir.join("config.json"), fixture["config"].to_string()).unwrap();
    std::fs::copy(
        fixtures_dir().join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    dir.to_path_buf()
}

/// Llama's converter permutes q/k rows for adjacent-pair RoPE: within each of
/// `heads` row blocks, row `2j + k` of the file is row `k·half + j` of the checkpoint.
fn permute_rows(values: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    let cols = values.len() / rows;
    let per_head = rows / heads;
    let half = per_head / 2;
    let mut out = Vec::with_capacity(values.len());
    for h in 0..heads {
        for j in 0..half {
            for k in 0..2 {
                let src = h * per_head + k * half + j;
                out.extend_from_slice(&values[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// A metadata value from the fixture's `[type, value]` (gguf-py's type names).
fn gguf_value(kind: &str, value: &Value) -> GgufValue {
    let strings = || {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    match kind {
        "string" => GgufValue::Str(value.as_str().unwrap().to_string()),
        "uint32" => GgufValue::U32(value.as_u64().unwrap() as u32),
        "int32" => GgufValue::I32(value.as_i64().unwrap() as i32),
        "float32" => GgufValue::F32(value.as_f64().unwrap() as f32),
        "bool" => GgufValue::Bool(value.as_bool().unwrap()),
        "array[string]" => GgufValue::Array(Array::Str(strings())),
        "array[int32]" => GgufValue::Array(Array::I32(
            value
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap() as i32)
                .collect(),
        )),
        other => panic!("GGUF metadata type {other} in a fixture"),
    }
}

/// Writes the fixture's llama.cpp conversion as `dir/model.gguf`: the converter's
/// metadata and tensor order, each tensor rebuilt by its recipe (which the script
/// checked bit for bit against the converter's output).
fn write_gguf_model(fixture: &Value, dir: &Path) -> PathBuf {
    write_gguf_model_with(fixture, dir, &[])
}

/// [`write_gguf_model`] with `extra` metadata appended.
fn write_gguf_model_with(fixture: &Value, dir: &Path, extra: &[(&str, GgufValue)]) -> PathBuf {
    let gguf = &fixture["gguf"];
    let hf: std::collections::HashMap<String, (Vec<usize>, Vec<f32>)> = hf_tensors(fixture)
        .into_iter()
        .map(|(name, shape, values)| (name, (shape, values)))
        .collect();
    let mut metadata: Vec<(String, GgufValue)> = Vec::new();
    for m in gguf["metadata"].as_array().unwrap() {
        let key = m[0].as_str().unwrap().to_string();
        metadata.push((key, gguf_value(m[1].as_str().unwrap(), &m[2])));
    }
    let shared = std::fs::read_to_string(fixtures_dir().join("gguf_tokenizer.json")).unwrap();
    let shared: Value = serde_json::from_str(&shared).unwrap();
    for (key, entry) in shared.as_object().unwrap() {
        metadata.push((
            key.clone(),
            gguf_value(entry[0].as_str().unwrap(), &entry[1]),
        ));
    }
    let mut tensors = Vec::new();
    for t in gguf["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap().to_string();
        let mut shape = dims(&t["shape"]);
        shape.reverse();
        let source = || &hf[t["from"].as_str().unwrap()].1;
        let values: Vec<f32> = match t["op"].as_str().unwrap() {
            "copy" => source().clone(),
            "add_one" => source().iter().map(|v| v + 1.0).collect(),
            "permute" => {
                let heads = t["heads"].as_u64().unwrap() as usize;
                permute_rows(source(), shape[0], heads)
            }
            "values" => t["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect(),
            other => panic!("{name}: unknown recipe {other}"),
        };
        tensors.push((name, f32_tensor(shape, &values)));
    }
    let meta: Vec<(&str, GgufValue)> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .chain(extra.iter().cloned())
        .collect();
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let path = dir.join("model.gguf");
    write_gguf(&path, &meta, &refs).unwrap();
    path
}

fn cpu() -> BackendSet {
    BackendSet::new(vec![
        Arc::new(CpuBackend::new(Some(2)).unwrap()) as Arc<dyn Backend>
    ])
    .unwrap()
}

fn argmax(logits: &[f32]) -> usize {
    logits
        .iter()
        .enumerate()
        .fold(
            (0, f32::MIN),
            |best, (i, &v)| if v > best.1 { (i, v) } else { best },
        )
        .0
}

/// Compares one position's logits with transformers' top 10 and margin; returns the
/// largest top-10 deviation.
fn check_position(what: &str, ours: &[f32], want: &Value, tolerance: f32) -> Result<f32, String> {
    let top10 = want["top10"].as_array().unwrap();
    let mut worst = 0f32;
    for pair in top10 {
        let (id, logit) = (
            pair[0].as_u64().unwrap() as usize,
            pair[1].as_f64().unwrap(),
        );
        let diff = (ours[id] - logit as f32).abs();
        worst = worst.max(diff);
        if diff > tolerance {
            return Err(format!(
                "{what}: logit of token {id} is {} vs transformers' {logit} (diff {diff})",
                ours[id]
            ));
        }
    }
    let best = top10[0][0].as_u64().unwrap() as usize;
    if want["margin"].as_f64().unwrap() >= MIN_MARGIN && argmax(ours) != best {
        return Err(format!(
            "{what}: argmax {} vs transformers' {best}",
            argmax(ours)
        ));
    }
    Ok(worst)
}

/// How a fixture's model reaches Switchyard.
#[derive(Clone, Copy, Debug)]
enum Format {
    /// The Hugging Face directory transformers ran.
    Hf,
    /// llama.cpp's GGUF conversion of it.
    Gguf,
}

/// Runs every prompt of one fixture with a `kv` cache; returns the largest top-10
/// deviation, or the first mismatch.
fn run_fixture(
    fixture: &Value,
    format: Format,
    kv: KvDType,
    tolerance: f32,
) -> Result<f32, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = match format {
        Format::Hf => write_model(fixture, dir.path()),
        Format::Gguf => write_gguf_model(fixture, dir.path()),
    };
    compare_model(fixture, &path, kv, tolerance)
}

/// Runs every prompt of `fixture` on the model at `path` (see [`run_fixture`]).
fn compare_model(fixture: &Value, path: &Path, kv: KvDType, tolerance: f32) -> Result<f32, String> {
    let model = Model::open(path).map_err(|e| e.to_string())?;
    let mut runner = model.runner(cpu(), 128).with_kv_dtype(kv);
    let forced: Vec<u32> = fixture["forced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let mut worst = 0f32;
    for (p, prompt) in fixture["prompts"].as_array().unwrap().iter().enumerate() {
        let text = prompt["text"].as_str().unwrap();
        let want_ids: Vec<u32> = prompt["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let ids = model
            .tokenizer
            .encode(text, false)
            .map_err(|e| e.to_string())?;
        if ids != want_ids {
            return Err(format!(
                "prompt {p}: ids {ids:?} vs transformers' {want_ids:?}"
            ));
        }
        let positions = prompt["positions"].as_array().unwrap();
        let mut seq = runner.new_sequence().unwrap();
        let logits = runner.forward(&mut seq, &ids).map_err(|e| e.to_string())?;
        let last = check_position(
            &format!("prompt {p} last"),
            &logits,
            &positions[0],
            tolerance,
        )?;
        worst = worst.max(last);
        for (i, &token) in forced.iter().enumerate() {
            let logits = runner
                .forward(&mut seq, &[token])
                .map_err(|e| e.to_string())?;
            let what = format!("prompt {p} forced {i}");
            worst = worst.max(check_position(
                &what,
                &logits,
                &positions[i + 1],
                tolerance,
            )?);
        }
    }
    Ok(worst)
}

fn fixtures() -> Vec<(String, Value)> {
    let mut all: Vec<(String, Value)> = std::fs::read_dir(fixtures_dir())
        .expect("tests/data/hf_fixtures: run scripts/make-hf-fixtures.py")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p.ends_with("tokenizer.json")
                && !p.ends_with("gguf_tokenizer.json")
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).unwrap())
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn check_all(format: Format, kv: KvDType, tolerance: f32) {
    let all = fixtures();
    assert!(all.len() >= 10, "only {} fixtures", all.len());
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, fixture) in &all {
        if let (Format::Gguf, Some(reason)) = (format, fixture["gguf"]["skip"].as_str()) {
            eprintln!("{name}: no GGUF comparison ({reason})");
            continue;
        }
        checked += 1;
        match run_fixture(fixture, format, kv, tolerance) {
            Ok(worst) => {
                eprintln!("{name} ({format:?}, {kv:?} KV): top-10 logits within {worst:.5}")
            }
            Err(e) => failures.push(format!("{name} ({format:?}): {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked >= 10,
        "only {checked} fixtures compared as {format:?}"
    );
}

#[test]
fn every_fixture_matches_transformers_with_an_f32_kv_cache() {
    check_all(Format::Hf, KvDType::F32, F32_KV_TOLERANCE);
}

#[test]
fn every_fixture_matches_transformers_with_an_f16_kv_cache() {
    check_all(Format::Hf, KvDType::F16, F16_KV_TOLERANCE);
}

/// Every fixture llama.cpp's converter can express, converted by it, matches
/// transformers' logits as the Hugging Face directory does.
#[test]
fn every_gguf_conversion_matches_transformers_with_an_f32_kv_cache() {
    check_all(Format::Gguf, KvDType::F32, F32_KV_TOLERANCE);
}

#[test]
fn every_gguf_conversion_matches_transformers_with_an_f16_kv_cache() {
    check_all(Format::Gguf, KvDType::F16, F16_KV_TOLERANCE);
}

/// A Phi-3 GGUF's `rope.scaling.attn_factor` acts only with longrope's factor tables:
/// beside them it is applied (the `phi3_longrope` fixture), without them a value other
/// than 1 would change nothing and is refused by name.
#[test]
fn a_gguf_attention_factor_without_longrope_factors_is_refused() {
    let fixture = fixtures()
        .into_iter()
        .find(|(name, _)| name == "phi3_window")
        .expect("phi3_window fixture")
        .1;
    let dir = tempfile::tempdir().unwrap();
    let extra = [("phi3.rope.scaling.attn_factor", GgufValue::F32(1.5))];
    let path = write_gguf_model_with(&fixture, dir.path(), &extra);
    let err = Model::open(&path).err().expect("refused").to_string();
    assert!(
        err.contains("GGUF metadata phi3.rope.scaling.attn_factor = 1.5"),
        "{err}"
    );
    let one = [("phi3.rope.scaling.attn_factor", GgufValue::F32(1.0))];
    Model::open(&write_gguf_model_with(&fixture, dir.path(), &one)).unwrap();
}

/// Every supported architecture has a fixture whose `config.json` is a full dump:
/// every generic field of transformers 5's `PretrainedConfig().to_dict()` and of
/// transformers 4's, at its default, with which transformers ran the model; the
/// Hugging Face directory matches its logits.
#[test]
fn a_full_config_dump_of_every_architecture_matches_transformers() {
    const GENERIC: &[&str] = &[
        "output_hidden_states",
        "return_dict",
        "dtype",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "id2label",
        "label2id",
        "problem_type",
        "torchscript",
        "pruned_heads",
        "add_cross_attention",
        "tie_encoder_decoder",
        "cross_attention_hidden_size",
        "use_bfloat16",
        "tf_legacy_loss",
        "finetuning_task",
        "tokenizer_class",
        "prefix",
        "sep_token_id",
        "decoder_start_token_id",
        "task_specific_params",
        "architectures",
        "temperature",
        "num_beams",
    ];
    let all = fixtures();
    for arch in switchyard::model::llama::SUPPORTED_ARCHITECTURES {
        let (name, fixture) = all
            .iter()
            .find(|(name, f)| name.starts_with("full_dump_") && f["config"]["model_type"] == *arch)
            .unwrap_or_else(|| panic!("no full config dump of {arch}"));
        for key in GENERIC {
            assert!(fixture["config"].get(key).is_some(), "{name} lacks {key}");
        }
        let worst = run_fixture(fixture, Format::Hf, KvDType::F32, F32_KV_TOLERANCE)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("{name}: top-10 logits within {worst:.5}");
    }
}

/// GGUF metadata in a namespace no reader uses is read past, as llama.cpp does: the
/// file loads and computes what transformers computes.
#[test]
fn a_gguf_key_in_a_namespace_no_reader_uses_is_read_past() {
    let fixture = fixtures()
        .into_iter()
        .find(|(name, _)| name == "llama_base")
        .expect("llama_base fixture")
        .1;
    let dir = tempfile::tempdir().unwrap();
    let extra = [(
        "hostile.array_bool",
        GgufValue::Array(Array::Bool(vec![true, false, true])),
    )];
    let path = write_gguf_model_with(&fixture, dir.path(), &extra);
    compare_model(&fixture, &path, KvDType::F32, F32_KV_TOLERANCE).unwrap();
}

/// The weight generator matches the script's: splitmix64's published first output
/// for seed 0 (`0xE220A8397B1DCDAF`) gives these top 24 bits.
#[test]
fn the_generator_is_splitmix64() {
    let u = ((0xE220_A839_7B1D_CDAFu64 >> 40) as f64 / (1u64 << 24) as f64 - 0.5) as f32;
    assert_eq!(generate(0, 1, 0.5, 0.0), [u]);
    assert_eq!(fnv1a64(""), 0xCBF2_9CE4_8422_2325);
    assert_eq!(fnv1a64("a"), 0xAF63_DC4C_8601_EC8C);
}
