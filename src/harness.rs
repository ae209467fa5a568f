//! Fuzz harnesses: one function per `cargo fuzz` target in `fuzz/`, each feeding
//! arbitrary bytes to one of the parsers that read untrusted input (model files,
//! `config.json`, `tokenizer.json`, chat templates, request bodies).
//!
//! Every harness must return for any input — never panic, never allocate without bound,
//! never take over a second — and ignores the errors the parsers return: a clear error
//! is the right answer to bad input. `fuzz/fuzz_targets/*.rs` call these under
//! libFuzzer; `tests/fuzz_corpus.rs` runs them over the committed corpus and every
//! past crash (`fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`) as ordinary
//! tests. [`write_seed_ggufs`] writes the GGUF seeds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, BackendSet, HostTensor, SharedBytes};
use crate::graph::DType;
use crate::model::chat_template::{ChatTemplate, Message};
use crate::model::gguf::{self, GgufFile, Value};
use crate::model::llama::{LlamaConfig, TensorRole};
use crate::model::safetensors::{HfModel, SafetensorsFile, CONFIG_FILE, SINGLE_FILE};
use crate::model::tokenizer::Tokenizer;
use crate::model::{Model, ModelError};
use crate::server::api::{self, Kind};

/// A fuzz target: its name (the `fuzz/fuzz_targets/` file and corpus directory) and
/// its harness.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order `scripts/fuzz.sh` runs them.
pub const TARGETS: [Target; 6] = [
    ("gguf", gguf),
    ("safetensors", safetensors),
    ("hf_config", hf_config),
    ("tokenizer", tokenizer),
    ("chat_template", chat_template),
    ("server_request", server_request),
];

/// Context (positions) of the runner the `gguf` harness steps a model with.
pub const GGUF_CONTEXT: usize = 64;

/// Texts the `tokenizer` and `gguf` harnesses encode.
const TEXTS: [&str; 5] = [
    "Hello, world! 123",
    "  spaces\tand\nnewlines  ",
    "héllo 🦀 ünïcode 日本語",
    "<|im_start|>user\nhi<|im_end|>\n<s></s>",
    "",
];

/// A directory of its own for one harness call, removed (with what it holds) on drop.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> Option<Scratch> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("switchyard-fuzz-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Scratch { dir })
    }

    /// Writes `data` to `name` in the directory and returns its path.
    fn write(&self, name: &str, data: &[u8]) -> Option<PathBuf> {
        let path = self.dir.join(name);
        std::fs::write(&path, data).ok()?;
        Some(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Splits `data` at the first `sep` byte: (before, after), or (all, empty).
fn split_at_byte(data: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == sep) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// `data` as a GGUF file: the header, metadata (every key read through its typed
/// getters), tensor infos and layout, the Llama-family consistency checks and the
/// vocabulary; when it opens as a model, one prefill and one decode step on the CPU.
pub fn gguf(data: &[u8]) {
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let Some(path) = scratch.write("model.gguf", data) else {
        return;
    };
    let Ok(file) = GgufFile::open(&path) else {
        return;
    };
    let meta = file.metadata();
    for (key, value) in meta.iter() {
        let _ = (value.type_name(), value.as_integer());
        let _ = (meta.get_u32(key), meta.get_f32(key), meta.get_bool(key));
        let _ = (meta.get_str(key), meta.get_str_array(key));
        let _ = (meta.get_i32_array(key), meta.get_f32_array(key));
    }
    let _ = file.architecture();
    for info in file.tensors() {
        let _ = file.tensor(&info.name);
    }
    let _ = gguf::check_dimensions(&file);
    let _ = LlamaConfig::from_gguf(&file);
    if let Ok(spec) = gguf::vocab_spec(meta) {
        let _ = gguf::stop_ids(meta, spec.tokens.len());
    }
    drop(file);
    let Ok(model) = Model::open(&path) else {
        return;
    };
    step_once(model);
}

/// Tokenizes a short chat (through the model's template when it has one) and runs it
/// as one prefill and one decode step on a one-thread CPU backend.
fn step_once(model: Model) {
    let text = match &model.chat_template {
        Some(template) => template
            .render(&[Message::new("user", "Hi there")], true)
            .unwrap_or_default(),
        None => TEXTS[0].to_string(),
    };
    let mut prompt = model.tokenizer.encode(&text, true).unwrap_or_default();
    let _ = model.tokenizer.decode(&prompt, false);
    prompt.truncate(8);
    if prompt.is_empty() {
        prompt.push(0);
    }
    let Some(cpu) = shared_cpu() else {
        return;
    };
    let Ok(backends) = BackendSet::new(vec![cpu]) else {
        return;
    };
    let mut runner = model.runner(backends, GGUF_CONTEXT);
    let Ok(mut seq) = runner.new_sequence() else {
        return;
    };
    let Ok(logits) = runner.forward(&mut seq, &prompt) else {
        return;
    };
    let next = crate::backend::cpu::argmax(&logits).map_or(0, |i| i as u32);
    let _ = runner.forward(&mut seq, &[next]);
}

/// One one-thread CPU backend for every input. A thread pool made and dropped per input
/// leaves its worker exiting on its own after the input returns; LeakSanitizer once
/// caught such a thread's destructor list half-freed (a false leak, 1 in 118,634 runs).
fn shared_cpu() -> Option<Arc<dyn Backend>> {
    static CPU: OnceLock<Option<Arc<dyn Backend>>> = OnceLock::new();
    CPU.get_or_init(|| {
        CpuBackend::new(Some(1))
            .ok()
            .map(|cpu| Arc::new(cpu) as Arc<dyn Backend>)
    })
    .clone()
}

/// `data` as a `.safetensors` file: the header and every tensor's range.
pub fn safetensors(data: &[u8]) {
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let Some(path) = scratch.write(SINGLE_FILE, data) else {
        return;
    };
    let Ok(file) = SafetensorsFile::open(&path) else {
        return;
    };
    for (name, meta) in file.tensors() {
        let _ = (file.tensor_meta(name), meta.shape.rank());
        let _ = file.tensor(name);
    }
}

/// An empty safetensors file: an 8-byte header length and `{}`.
const EMPTY_SAFETENSORS: &[u8] = b"\x02\0\0\0\0\0\0\0{}";

/// `data` as a Hugging Face directory's `config.json` (beside an empty
/// `model.safetensors`), read into the Llama-family hyper-parameters.
pub fn hf_config(data: &[u8]) {
    let Some(scratch) = Scratch::new() else {
        return;
    };
    if scratch.write(CONFIG_FILE, data).is_none()
        || scratch.write(SINGLE_FILE, EMPTY_SAFETENSORS).is_none()
    {
        return;
    }
    let Ok(model) = HfModel::open(&scratch.dir) else {
        return;
    };
    let _ = LlamaConfig::from_hf(&model);
}

/// `data` as `tokenizer.json` (up to the first `0xFF` byte, which JSON text cannot
/// hold) and `tokenizer_config.json` (the rest, when there is a `0xFF`); a tokenizer
/// that loads encodes [`TEXTS`] with and without special tokens and decodes them back,
/// whole and streamed.
pub fn tokenizer(data: &[u8]) {
    let (json, config) = split_at_byte(data, 0xFF);
    let Some(scratch) = Scratch::new() else {
        return;
    };
    let Some(path) = scratch.write("tokenizer.json", json) else {
        return;
    };
    if data.contains(&0xFF) && scratch.write("tokenizer_config.json", config).is_none() {
        return;
    }
    let Ok(tk) = Tokenizer::from_file(&path) else {
        return;
    };
    exercise_tokenizer(&tk);
}

/// Encodes and decodes [`TEXTS`] every way the crate does.
fn exercise_tokenizer(tk: &Tokenizer) {
    let _ = (tk.bos(), tk.eos(), tk.specials(), tk.vocab_size());
    for text in TEXTS {
        for special in [false, true] {
            let Ok(ids) = tk.encode(text, special) else {
                continue;
            };
            let _ = tk.decode(&ids, special);
            let mut stream = tk.stream_decoder(special);
            for &id in &ids {
                let _ = stream.push(id);
            }
            let _ = stream.finish();
        }
        if let Ok(ids) = tk.encode_chat(text) {
            for &id in &ids {
                let _ = tk.token_to_piece(id);
            }
        }
    }
    let n = u32::try_from(tk.vocab_size()).unwrap_or(u32::MAX);
    let _ = tk.decode(&[0, n.saturating_sub(1), n], false);
}

/// Roles the `chat_template` harness picks from (`tool` is refused by name).
const CHAT_ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// `data` as a chat template (up to the first NUL byte) and a conversation (the rest,
/// one message per NUL-separated part, whose first byte picks the role, at most 64); the
/// template compiles and renders the conversation, with the generation prompt when the
/// input's length is odd.
pub fn chat_template(data: &[u8]) {
    /// Most messages one input makes (see below).
    const FUZZ_MESSAGES: usize = 64;
    let (source, rest) = split_at_byte(data, 0);
    let source = String::from_utf8_lossy(source);
    let Ok(template) = ChatTemplate::new(&source, "<s>", "</s>") else {
        return;
    };
    let messages: Vec<Message> = if rest.is_empty() {
        vec![Message::new("user", "Hello")]
    } else {
        // A render's cost is bounded by its fuel, which grows by 500 per message; the
        // cap keeps that bound (not the conversation's length) what an input explores,
        // and a full-budget render under the fuzzer's instrumentation inside its 1 s.
        rest.split(|&b| b == 0)
            .take(FUZZ_MESSAGES)
            .map(|part| match part.split_first() {
                Some((&role, content)) => Message::new(
                    CHAT_ROLES[role as usize % CHAT_ROLES.len()],
                    String::from_utf8_lossy(content),
                ),
                None => Message::new("user", ""),
            })
            .collect()
    };
    // One render per input (its length's parity picks the mode): a render that spends
    // its whole fuel takes ~0.4 s under the fuzzer's instrumentation, two would come
    // near the 1 s limit; both modes are still covered across inputs.
    let _ = template.render(&messages, data.len() % 2 == 1);
}

/// `data` as a request body, read as both endpoints read it: the JSON object, the
/// refused and unknown fields, the sampling parameters, then a chat's `messages` and
/// a completion's prompts; errors are rendered as the response body would be.
pub fn server_request(data: &[u8]) {
    let body = match api::parse_body(data) {
        Ok(body) => body,
        Err(e) => {
            let _ = e.body();
            return;
        }
    };
    for kind in [Kind::Chat, Kind::Text] {
        if let Err(e) = api::Params::parse(&body, kind) {
            let _ = e.body();
        }
    }
    if let Err(e) = api::messages(&body) {
        let _ = e.body();
    }
    if let Err(e) = api::prompts(&body) {
        let _ = e.body();
    }
}

/// Dimensions of the seed models: vocabulary, width, heads, KV heads, head width,
/// feed-forward width.
const SEED_DIMS: (usize, usize, usize, usize, usize, usize) = (64, 16, 2, 1, 8, 32);

/// Writes the GGUF seed corpus into `dir`: `tiny_llama_spm.gguf` (a one-layer Llama
/// with a SentencePiece-style vocabulary, F32 weights) and `tiny_llama_bpe.gguf` (the
/// same with a byte-level BPE vocabulary, F16 projections and a ChatML template).
/// Both are a few KB, load with [`Model::open`] and step. Deterministic, so that
/// `tests/fuzz_corpus.rs` can check the committed seeds are current.
pub fn write_seed_ggufs(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let (vocab, ..) = SEED_DIMS;
    let spm_tokens: Vec<String> = ["<unk>", "<s>", "</s>", "▁", "▁H", "▁a", "e", "l", "o"]
        .into_iter()
        .map(String::from)
        .chain((9..vocab).map(|i| format!("▁x{i}")))
        .collect();
    let mut spm_types = vec![1i32; vocab];
    spm_types[..3].copy_from_slice(&[2, 3, 3]);
    let spm_meta = vec![
        ("tokenizer.ggml.model", Value::Str("llama".into())),
        ("tokenizer.ggml.tokens", str_array(&spm_tokens)),
        (
            "tokenizer.ggml.scores",
            Value::Array(gguf::Array::F32((0..vocab).map(|i| -(i as f32)).collect())),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(gguf::Array::I32(spm_types)),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ];
    let mut bpe_tokens: Vec<String> = ["<|im_start|>", "<|im_end|>", "Ġ", "Ġt", "Hi", "Ċ"]
        .into_iter()
        .map(String::from)
        .collect();
    let letters = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .map(String::from);
    bpe_tokens.extend(letters.filter(|l| l != "Hi").take(vocab - bpe_tokens.len()));
    let mut bpe_types = vec![1i32; vocab];
    bpe_types[..2].copy_from_slice(&[3, 3]);
    let bpe_meta = vec![
        ("tokenizer.ggml.model", Value::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Value::Str("smollm".into())),
        ("tokenizer.ggml.tokens", str_array(&bpe_tokens)),
        (
            "tokenizer.ggml.merges",
            str_array(&["Ġ t".to_string(), "H i".to_string()]),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(gguf::Array::I32(bpe_types)),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(0)),
        ("tokenizer.ggml.eos_token_id", Value::U32(1)),
        (
            "tokenizer.chat_template",
            Value::Str(
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + \
                 message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if \
                 add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
                    .into(),
            ),
        ),
    ];
    let mut written = Vec::new();
    for (name, vocab_meta, dtype) in [
        ("tiny_llama_spm.gguf", spm_meta, DType::F32),
        ("tiny_llama_bpe.gguf", bpe_meta, DType::F16),
    ] {
        let path = dir.join(name);
        write_seed(&path, vocab_meta, dtype)?;
        written.push(path);
    }
    Ok(written)
}

fn str_array(items: &[String]) -> Value {
    Value::Array(gguf::Array::Str(items.to_vec()))
}

/// Writes one seed model: the architecture keys, `vocab_meta`, and a one-layer Llama
/// whose 2-D weights are `dtype`.
fn write_seed(path: &Path, vocab_meta: Vec<(&str, Value)>, dtype: DType) -> Result<(), ModelError> {
    let (vocab, d, h, hkv, dh, f) = SEED_DIMS;
    let mut metadata = vec![
        ("general.architecture", Value::Str("llama".into())),
        ("llama.block_count", Value::U32(1)),
        ("llama.embedding_length", Value::U32(d as u32)),
        ("llama.feed_forward_length", Value::U32(f as u32)),
        ("llama.attention.head_count", Value::U32(h as u32)),
        ("llama.attention.head_count_kv", Value::U32(hkv as u32)),
        ("llama.context_length", Value::U32(128)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
    ];
    metadata.extend(vocab_meta);
    let shapes = [
        (TensorRole::TokenEmbedding, vec![vocab, d]),
        (TensorRole::OutputNorm, vec![d]),
        (TensorRole::AttnNorm(0), vec![d]),
        (TensorRole::AttnQ(0), vec![h * dh, d]),
        (TensorRole::AttnK(0), vec![hkv * dh, d]),
        (TensorRole::AttnV(0), vec![hkv * dh, d]),
        (TensorRole::AttnOutput(0), vec![d, h * dh]),
        (TensorRole::FfnNorm(0), vec![d]),
        (TensorRole::FfnGate(0), vec![f, d]),
        (TensorRole::FfnUp(0), vec![f, d]),
        (TensorRole::FfnDown(0), vec![d, f]),
    ];
    let mut state = 0x5EED_u32;
    let mut tensors = Vec::new();
    for (role, shape) in shapes {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let u = (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                if shape.len() == 1 {
                    1.0 + 0.2 * u
                } else {
                    0.5 * u
                }
            })
            .collect();
        let (dtype, bytes): (DType, Vec<u8>) = match (shape.len(), dtype) {
            (2, DType::F16) => (
                DType::F16,
                values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect(),
            ),
            _ => (
                DType::F32,
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        };
        let tensor = HostTensor::new(dtype, shape.into(), SharedBytes::from_vec(bytes))
            .map_err(|e| ModelError::format(path, e.to_string()))?;
        tensors.push((role.gguf_name(), tensor));
    }
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    gguf::write_gguf(path, &metadata, &refs)
}
