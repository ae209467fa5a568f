//! Property tests of the loaders against hostile files: a small valid GGUF model (with
//! its tokenizer) and a small Hugging Face directory, mutated at random (64-bit and
//! 32-bit fields overwritten with huge or boundary values, bytes flipped, the file cut
//! short), never make `Model::open` panic (this test profile checks arithmetic
//! overflow, so an unchecked size computation panics) and never allocate more than
//! `LIMIT_BASE` plus `LIMIT_PER_FILE_BYTE` times the file's size at once: every count
//! and length is checked against the file before anything is allocated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use switchyard::backend::{HostTensor, SharedBytes};
use switchyard::graph::DType;
use switchyard::model::gguf::{write_gguf, Array, Value};
use switchyard::model::Model;

/// Bytes any load may hold at once regardless of the file.
const LIMIT_BASE: usize = 64 << 20;
/// Further bytes allowed per byte of the file (metadata strings, tokenizer tables).
const LIMIT_PER_FILE_BYTE: usize = 16;

/// Counts live heap bytes and their peak (this test binary has a single test, so no
/// other test allocates concurrently).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The largest peak any mutated file reached, for the report.
static WORST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const VOCAB: usize = 64;
const D: usize = 32;
const F: usize = 64;

fn f32_tensor(shape: &[usize], seed: usize) -> HostTensor {
    let n: usize = shape.iter().product();
    let bytes = (0..n)
        .flat_map(|i| (((i * 7919 + seed) % 97) as f32 / 97.0 - 0.5).to_le_bytes())
        .collect();
    HostTensor::new(
        DType::F32,
        shape.to_vec().into(),
        SharedBytes::from_vec(bytes),
    )
    .unwrap()
}

/// A one-layer Llama GGUF with a 64-token SentencePiece-style vocabulary.
fn write_gguf_model(path: &Path) {
    let tokens: Vec<String> = (0..VOCAB)
        .map(|i| match i {
            0 => "<unk>".into(),
            1 => "<s>".into(),
            2 => "</s>".into(),
            _ => format!("▁t{i}"),
        })
        .collect();
    let metadata = [
        ("general.architecture", Value::Str("llama".into())),
        ("llama.block_count", Value::U32(1)),
        ("llama.embedding_length", Value::U32(D as u32)),
        ("llama.feed_forward_length", Value::U32(F as u32)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.attention.head_count_kv", Value::U32(2)),
        ("llama.context_length", Value::U32(128)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
        ("tokenizer.ggml.model", Value::Str("llama".into())),
        ("tokenizer.ggml.tokens", Value::Array(Array::Str(tokens))),
        (
            "tokenizer.ggml.scores",
            Value::Array(Array::F32((0..VOCAB).map(|i| -(i as f32)).collect())),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(
                (0..VOCAB).map(|i| if i < 3 { 3 } else { 1 }).collect(),
            )),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ];
    let kv = D / 2;
    let mut tensors = vec![
        ("token_embd.weight".to_string(), f32_tensor(&[VOCAB, D], 1)),
        ("output_norm.weight".to_string(), f32_tensor(&[D], 2)),
    ];
    for (name, shape) in [
        ("attn_norm", vec![D]),
        ("attn_q", vec![D, D]),
        ("attn_k", vec![kv, D]),
        ("attn_v", vec![kv, D]),
        ("attn_output", vec![D, D]),
        ("ffn_norm", vec![D]),
        ("ffn_gate", vec![F, D]),
        ("ffn_up", vec![F, D]),
        ("ffn_down", vec![D, F]),
    ] {
        let seed = tensors.len();
        tensors.push((format!("blk.0.{name}.weight"), f32_tensor(&shape, seed)));
    }
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_gguf(path, &metadata, &refs).unwrap();
}

/// A Hugging Face directory: `config.json`, `tokenizer.json` (copied from the test
/// data) and one `model.safetensors` with the same one-layer model.
fn write_hf_model(dir: &Path) -> Vec<u8> {
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": D,
        "intermediate_size": F,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf_fixtures");
    std::fs::copy(fixtures.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let kv = D / 2;
    let mut shapes = vec![
        ("model.embed_tokens.weight".to_string(), vec![VOCAB, D]),
        ("model.norm.weight".to_string(), vec![D]),
    ];
    for (name, shape) in [
        ("input_layernorm", vec![D]),
        ("self_attn.q_proj", vec![D, D]),
        ("self_attn.k_proj", vec![kv, D]),
        ("self_attn.v_proj", vec![kv, D]),
        ("self_attn.o_proj", vec![D, D]),
        ("post_attention_layernorm", vec![D]),
        ("mlp.gate_proj", vec![F, D]),
        ("mlp.up_proj", vec![F, D]),
        ("mlp.down_proj", vec![D, F]),
    ] {
        shapes.push((format!("model.layers.0.{name}.weight"), shape));
    }
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, shape) in &shapes {
        let n: usize = shape.iter().product();
        let start = data.len();
        data.extend((0..n).flat_map(|i| ((i % 13) as f32 / 13.0).to_le_bytes()));
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::Value::Object(header).to_string().into_bytes();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(&header);
    file.extend(&data);
    file
}

/// One mutation: where (a fraction of the file), what, and the value written.
#[derive(Clone, Debug)]
enum Mutation {
    U64(f64, u64),
    U32(f64, u32),
    Flip(f64, u8),
    Cut(f64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let big64 = prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX / 2),
        Just(1u64 << 32),
        Just(1u64 << 40),
        Just(1u64 << 62),
        Just(0u64),
        any::<u64>(),
    ];
    let big32 = prop_oneof![
        Just(u32::MAX),
        Just(1u32 << 31),
        Just(0u32),
        Just(1u32 << 20),
        any::<u32>(),
    ];
    prop_oneof![
        (0.0..1.0f64, big64).prop_map(|(at, v)| Mutation::U64(at, v)),
        (0.0..1.0f64, big32).prop_map(|(at, v)| Mutation::U32(at, v)),
        (0.0..1.0f64, 1..=255u8).prop_map(|(at, v)| Mutation::Flip(at, v)),
        (0.0..1.0f64).prop_map(Mutation::Cut),
    ]
}

/// Mutations land in the first `head` bytes (headers and metadata) three times in four.
fn apply(bytes: &mut Vec<u8>, mutations: &[Mutation], head: usize) {
    for (i, m) in mutations.iter().enumerate() {
        let span = if i % 4 == 3 {
            bytes.len()
        } else {
            head.min(bytes.len())
        };
        let at = |f: f64| ((f * span as f64) as usize).min(bytes.len().saturating_sub(1));
        match *m {
            Mutation::U64(f, v) => {
                let at = at(f).min(bytes.len().saturating_sub(8));
                if bytes.len() >= 8 {
                    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            Mutation::U32(f, v) => {
                let at = at(f).min(bytes.len().saturating_sub(4));
                if bytes.len() >= 4 {
                    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            Mutation::Flip(f, v) => {
                if !bytes.is_empty() {
                    let at = at(f);
                    bytes[at] ^= v;
                }
            }
            Mutation::Cut(f) => bytes.truncate(at(f)),
        }
    }
}

/// Opens `path` as a model, catching panics; returns the outcome and the peak heap
/// bytes held above what was live before.
fn open_measured(path: &Path) -> (Result<Result<(), String>, String>, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Model::open(path).map(drop).map_err(|e| e.to_string())
    }))
    .map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    (outcome, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

fn check(path: &Path, file_len: usize, what: &str) -> Result<(), TestCaseError> {
    let (outcome, peak) = open_measured(path);
    let limit = LIMIT_BASE + LIMIT_PER_FILE_BYTE * file_len;
    WORST.fetch_max(peak, Ordering::Relaxed);
    prop_assert!(outcome.is_ok(), "{what}: panicked: {:?}", outcome.err());
    prop_assert!(
        peak <= limit,
        "{what}: peak allocation {peak} bytes over the limit {limit}"
    );
    Ok(())
}

#[test]
fn hostile_gguf_and_safetensors_files_never_panic_or_allocate_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("tiny.gguf");
    write_gguf_model(&gguf);
    let base = std::fs::read(&gguf).unwrap();
    let (outcome, peak) = open_measured(&gguf);
    assert_eq!(outcome, Ok(Ok(())), "the unmutated GGUF loads");
    assert!(peak < LIMIT_BASE, "{peak}");
    // The tensor data starts after the metadata; mutate mostly there.
    let head = base.len() - (VOCAB * D + 2 * D + 2 * D * D + D * D + 3 * D * F) * 4;

    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    let safetensors = write_hf_model(&hf);
    let st_path = hf.join("model.safetensors");
    std::fs::write(&st_path, &safetensors).unwrap();
    let (outcome, _) = open_measured(&hf);
    assert_eq!(outcome, Ok(Ok(())), "the unmutated HF directory loads");
    let st_head = 8 + u64::from_le_bytes(safetensors[..8].try_into().unwrap()) as usize;

    let cases = std::env::var("LOADER_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = proptest::collection::vec(mutation(), 1..4);
    let mutated = dir.path().join("mutated.gguf");
    runner
        .run(&strategy, |mutations| {
            let mut bytes = base.clone();
            apply(&mut bytes, &mutations, head);
            std::fs::write(&mutated, &bytes).unwrap();
            check(&mutated, bytes.len(), &format!("GGUF {mutations:?}"))
        })
        .unwrap();
    runner
        .run(&strategy, |mutations| {
            let mut bytes = safetensors.clone();
            apply(&mut bytes, &mutations, st_head);
            std::fs::write(&st_path, &bytes).unwrap();
            check(&hf, bytes.len(), &format!("safetensors {mutations:?}"))
        })
        .unwrap();
    eprintln!(
        "{cases} mutated GGUF files and {cases} mutated safetensors files: no panic, \
         largest peak allocation {} bytes",
        WORST.load(Ordering::Relaxed)
    );
}
