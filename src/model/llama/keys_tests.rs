//! The key tables are disjoint and cover real configs; every unsupported variant of a
//! config or GGUF file is refused with its key and value named.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::backend::{HostTensor, SharedBytes};
use crate::graph::{DType, Shape};
use crate::model::gguf::{write_gguf, GgufFile, Value as GgufValue};
use crate::model::llama::{LlamaConfig, TensorRole};
use crate::model::safetensors::{write_safetensors, HfModel};

/// Every key of the configs of SmolLM2, Llama 3.1/3.2, Qwen2.5, Qwen3 and Mistral
/// (transformers 4 and 5 layouts) as their hubs publish them.
const REAL_HF_KEYS: &[&str] = &[
    "architectures",
    "attention_bias",
    "attention_dropout",
    "bos_token_id",
    "eos_token_id",
    "head_dim",
    "hidden_act",
    "hidden_size",
    "initializer_range",
    "intermediate_size",
    "is_llama_config",
    "layer_types",
    "max_position_embeddings",
    "max_window_layers",
    "mlp_bias",
    "model_type",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "pad_token_id",
    "pretraining_tp",
    "rms_norm_eps",
    "rope_interleaved",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "sliding_window",
    "tie_word_embeddings",
    "torch_dtype",
    "dtype",
    "transformers.js_config",
    "transformers_version",
    "use_cache",
    "use_sliding_window",
    "vocab_size",
    "hidden_activation",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "sliding_window_pattern",
    "_sliding_window_pattern",
    "rope_local_base_freq",
    "use_bidirectional_attention",
    "cache_implementation",
];

fn in_exactly_one(key: &str, a: &[KeyRule], b: &[KeyRule]) -> bool {
    let count = |t: &[KeyRule]| t.iter().filter(|(k, _)| *k == key).count();
    count(a) + count(b) == 1
}

#[test]
fn every_key_is_in_exactly_one_table() {
    for (key, _) in HF_IMPLEMENTED.iter().chain(HF_IGNORED) {
        assert!(in_exactly_one(key, HF_IMPLEMENTED, HF_IGNORED), "{key}");
    }
    for key in REAL_HF_KEYS {
        assert!(in_exactly_one(key, HF_IMPLEMENTED, HF_IGNORED), "{key}");
    }
    for (key, _) in GGUF_IMPLEMENTED.iter().chain(GGUF_IGNORED) {
        assert!(in_exactly_one(key, GGUF_IMPLEMENTED, GGUF_IGNORED), "{key}");
    }
    for (key, archs) in HF_ARCH_ONLY {
        assert!(in_exactly_one(key, HF_IMPLEMENTED, &[]), "{key}");
        assert!(!archs.is_empty(), "{key}");
    }
    for (key, archs) in GGUF_ARCH_ONLY {
        assert!(in_exactly_one(key, GGUF_IMPLEMENTED, &[]), "{key}");
        assert!(!archs.is_empty(), "{key}");
    }
    for (prefix, _) in GGUF_IGNORED_PREFIXES {
        assert!(prefix.ends_with('.'), "{prefix}");
    }
    let generic = HF_DEFAULT_ONLY
        .iter()
        .map(|(k, _, _)| k)
        .chain(HF_GENERATION);
    for key in generic {
        let listed = HF_IMPLEMENTED
            .iter()
            .chain(HF_IGNORED)
            .any(|(k, _)| k == key);
        assert!(!listed, "{key}");
        let in_default_only = HF_DEFAULT_ONLY.iter().filter(|(k, _, _)| k == key);
        let in_generation = HF_GENERATION.iter().filter(|k| *k == key);
        assert_eq!(in_default_only.count() + in_generation.count(), 1, "{key}");
    }
    for (namespace, _) in GGUF_READ_NAMESPACES {
        let prefix = format!("{namespace}.");
        assert!(
            !GGUF_IGNORED_PREFIXES.iter().any(|(p, _)| *p == prefix),
            "{namespace}"
        );
        assert!(!GGUF_ARCHITECTURES.contains(namespace), "{namespace}");
    }
}

const D: usize = 32;
const H: usize = 4;
const DH: usize = 8;
const F: usize = 48;
const VOCAB: usize = 40;

fn tensor(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let bytes = (0..n)
        .flat_map(|i| ((i % 7) as f32 * 0.01).to_le_bytes())
        .collect();
    HostTensor::new(DType::F32, Shape::new(shape), SharedBytes::from_vec(bytes)).unwrap()
}

/// Roles and shapes of a one-layer model.
fn roles() -> Vec<(TensorRole, Vec<usize>)> {
    vec![
        (TensorRole::TokenEmbedding, vec![VOCAB, D]),
        (TensorRole::OutputNorm, vec![D]),
        (TensorRole::AttnNorm(0), vec![D]),
        (TensorRole::AttnQ(0), vec![H * DH, D]),
        (TensorRole::AttnK(0), vec![H * DH, D]),
        (TensorRole::AttnV(0), vec![H * DH, D]),
        (TensorRole::AttnOutput(0), vec![D, H * DH]),
        (TensorRole::FfnNorm(0), vec![D]),
        (TensorRole::FfnGate(0), vec![F, D]),
        (TensorRole::FfnUp(0), vec![F, D]),
        (TensorRole::FfnDown(0), vec![D, F]),
    ]
}

fn base_config() -> serde_json::Map<String, serde_json::Value> {
    let json = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": 1,
        "num_attention_heads": H, "num_key_value_heads": H, "vocab_size": VOCAB,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": true, "torch_dtype": "float32", "hidden_act": "silu"
    });
    json.as_object().unwrap().clone()
}

/// Writes a one-layer HF directory with `config` and extra tensors, then reads its
/// configuration.
fn hf(
    dir: &Path,
    config: &serde_json::Map<String, serde_json::Value>,
    extra: &[(&str, Vec<usize>)],
) -> Result<LlamaConfig, ModelError> {
    let mut tensors: Vec<(String, HostTensor)> = roles()
        .into_iter()
        .map(|(r, s)| (r.hf_name(), tensor(&s)))
        .collect();
    tensors.extend(extra.iter().map(|(n, s)| (n.to_string(), tensor(s))));
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(dir.join("model.safetensors"), &refs).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::Value::Object(config.clone()).to_string(),
    )
    .unwrap();
    LlamaConfig::from_hf(&HfModel::open(dir).unwrap())
}

fn refused_hf(changes: serde_json::Value, want: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config();
    for (k, v) in changes.as_object().unwrap() {
        config.insert(k.clone(), v.clone());
    }
    let err = hf(dir.path(), &config, &[]).expect_err(want).to_string();
    assert!(err.contains(want), "{err} lacks {want:?}");
}

#[test]
fn the_base_config_loads() {
    let dir = tempfile::tempdir().unwrap();
    let config = hf(dir.path(), &base_config(), &[]).unwrap();
    assert!(config.tie_embeddings);
    assert_eq!(config.rope.inv_freq, None);
}

/// The generic `PretrainedConfig` fields that change a causal LM's output load at
/// their defaults (and null) and are refused by name at any other value.
#[test]
fn generic_fields_away_from_their_defaults_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config();
    for (key, neutral, _) in HF_DEFAULT_ONLY {
        let default = match neutral {
            Neutral::False => serde_json::json!(false),
            Neutral::Empty => serde_json::json!({}),
        };
        for value in [default, serde_json::Value::Null] {
            config.insert(key.to_string(), value);
            hf(dir.path(), &config, &[]).unwrap();
        }
    }
    let cases = [
        (
            serde_json::json!({"pruned_heads": {"0": [1, 2]}}),
            r#"unsupported: config.json pruned_heads = {"0":[1,2]}"#,
        ),
        (
            serde_json::json!({"is_encoder_decoder": true}),
            "unsupported: config.json is_encoder_decoder = true",
        ),
        (
            serde_json::json!({"add_cross_attention": true}),
            "unsupported: config.json add_cross_attention = true",
        ),
    ];
    assert_eq!(cases.len(), HF_DEFAULT_ONLY.len());
    for (changes, want) in cases {
        refused_hf(changes, want);
    }
}

/// A step without logits (a prompt chunk before the last) ends at the last layer's
/// attention: no `logits_row` input, no output, neither the head nor the last output
/// projection and FFN read; with logits, those run on the logits rows only.
#[test]
fn a_step_without_logits_ends_at_the_last_attention() {
    use crate::graph::{eliminate_dead_code, Op};
    use crate::model::llama::trace_batch;
    let dir = tempfile::tempdir().unwrap();
    let config = hf(dir.path(), &base_config(), &[]).unwrap();
    let model = HfModel::open(dir.path()).unwrap();
    let reads = |graph: &crate::graph::Graph, name: &str| {
        let weight = |n: &crate::graph::Node| matches!(&n.op, Op::Weight { name: w } if w == name);
        graph.nodes().iter().any(weight)
    };
    let inputs = |graph: &crate::graph::Graph| {
        let names = graph.nodes().iter().filter_map(|n| match &n.op {
            Op::Input { name } => Some(name.clone()),
            _ => None,
        });
        names.collect::<Vec<_>>()
    };
    let kv_only = eliminate_dead_code(&trace_batch(&config, &model, 8, 0).unwrap());
    assert!(kv_only.outputs().is_empty());
    assert!(!inputs(&kv_only).contains(&"logits_row".to_string()));
    let attention = |g: &crate::graph::Graph| {
        g.nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Attention { .. }))
            .count()
    };
    assert_eq!(attention(&kv_only), 1);
    for unread in [
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
    ] {
        assert!(!reads(&kv_only, unread), "{unread}");
    }
    let full = eliminate_dead_code(&trace_batch(&config, &model, 8, 1).unwrap());
    assert_eq!(full.outputs().len(), 1);
    assert!(reads(&full, "model.layers.0.mlp.down_proj.weight"));
    // The output projection's input is one gathered row, not the eight.
    let o_proj = full.nodes().iter().find(|n| {
        matches!(n.op, Op::MatMul)
            && reads_node(&full, n.inputs[1], "model.layers.0.self_attn.o_proj.weight")
    });
    let rows = full.node(o_proj.unwrap().inputs[0]).shape.dims()[0];
    assert_eq!(rows, 1);
}

/// Whether node `id` of `graph` is the weight `name`.
fn reads_node(graph: &crate::graph::Graph, id: crate::graph::ValueId, name: &str) -> bool {
    matches!(&graph.node(id).op, crate::graph::Op::Weight { name: w } if w == name)
}

#[test]
fn every_unsupported_hf_variant_is_refused_by_key_and_value() {
    let cases = [
        (
            serde_json::json!({"rope_scaling": {"type": "su", "factor": 4.0}}),
            r#"unsupported: config.json rope_scaling.type = "su""#,
        ),
        (
            serde_json::json!({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0, "beta_fast": 8}}),
            r#"config.json rope_scaling.beta_fast = 8"#,
        ),
        (
            serde_json::json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "truncate": "yes"}}),
            r#"config.json rope_parameters.truncate = "yes""#,
        ),
        (
            serde_json::json!({"hidden_act": "gelu_fast"}),
            r#"config.json hidden_act = "gelu_fast""#,
        ),
        (
            serde_json::json!({"hidden_act": "relu"}),
            r#"config.json hidden_act = "relu""#,
        ),
        (
            serde_json::json!({"partial_rotary_factor": 0.5}),
            "config.json partial_rotary_factor = 0.5",
        ),
        (
            serde_json::json!({"rope_interleaved": true}),
            "config.json rope_interleaved = true",
        ),
        (
            serde_json::json!({"use_mrope": true}),
            "config.json use_mrope = true",
        ),
        (
            serde_json::json!({"final_logit_softcapping": 30.0}),
            "config.json final_logit_softcapping = 30.0",
        ),
        (
            serde_json::json!({"quantization_config": {"quant_method": "gptq"}}),
            "config.json quantization_config = {",
        ),
        (
            serde_json::json!({"query_pre_attn_scalar": 144}),
            "config.json query_pre_attn_scalar = 144",
        ),
        (
            serde_json::json!({"use_sliding_window": true}),
            "config.json use_sliding_window = true",
        ),
        (
            serde_json::json!({"model_type": "gemma2", "hidden_act": "gelu_pytorch_tanh",
                "use_bidirectional_attention": true}),
            "config.json use_bidirectional_attention = true",
        ),
        (
            serde_json::json!({"model_type": "gemma2", "hidden_act": "silu"}),
            r#"config.json hidden_act = "silu""#,
        ),
        (
            serde_json::json!({"sliding_window": 16}),
            "config.json sliding_window = 16",
        ),
        (
            serde_json::json!({"attention_bias": "yes"}),
            r#"config.json attention_bias = "yes""#,
        ),
        (
            serde_json::json!({"model_type": "mixtral"}),
            "unsupported: architecture \"mixtral\"",
        ),
    ];
    for (changes, want) in cases {
        refused_hf(changes, want);
    }
}

#[test]
fn an_unused_tensor_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [("model.layers.0.self_attn.rotary_emb.inv_freq", vec![DH / 2])];
    hf(dir.path(), &base_config(), &extra).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let extra = [("model.layers.0.mlp.experts.0.weight", vec![D])];
    let err = hf(dir.path(), &base_config(), &extra)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"model.layers.0.mlp.experts.0.weight\" is not used"),
        "{err}"
    );
    // Untied, the head must exist; tied, an lm_head is transformers' to drop.
    let mut untied = base_config();
    untied.insert("tie_word_embeddings".into(), false.into());
    let err = hf(dir.path(), &untied, &[]).unwrap_err().to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
    let head = [("lm_head.weight", vec![VOCAB, D])];
    assert!(!hf(dir.path(), &untied, &head).unwrap().tie_embeddings);
    assert!(
        hf(dir.path(), &base_config(), &head)
            .unwrap()
            .tie_embeddings
    );
}

#[test]
fn sliding_windows_follow_transformers_per_model_type() {
    let dir = tempfile::tempdir().unwrap();
    let with = |pairs: serde_json::Value| {
        let mut config = base_config();
        for (k, v) in pairs.as_object().unwrap() {
            config.insert(k.clone(), v.clone());
        }
        hf(dir.path(), &config, &[]).map(|c| c.windows)
    };
    let mistral = serde_json::json!({"model_type": "mistral", "sliding_window": 16});
    assert_eq!(with(mistral).unwrap(), [Some(16)]);
    let off = serde_json::json!({"model_type": "qwen2", "sliding_window": 16,
        "use_sliding_window": false, "max_window_layers": 0});
    assert_eq!(with(off).unwrap(), [None]);
    let on = serde_json::json!({"model_type": "qwen2", "sliding_window": 16,
        "use_sliding_window": true, "max_window_layers": 0});
    assert_eq!(with(on).unwrap(), [Some(16)]);
    let later = serde_json::json!({"model_type": "qwen2", "sliding_window": 16,
        "use_sliding_window": true, "max_window_layers": 1});
    assert_eq!(with(later).unwrap(), [None]);
    let typed = serde_json::json!({"model_type": "qwen3", "sliding_window": 16,
        "use_sliding_window": true, "layer_types": ["sliding_attention"]});
    assert_eq!(with(typed).unwrap(), [Some(16)]);
    let full = serde_json::json!({"model_type": "qwen3", "sliding_window": 16,
        "use_sliding_window": true, "layer_types": ["full_attention"]});
    assert_eq!(with(full).unwrap(), [None]);
    let bad = serde_json::json!({"model_type": "qwen3", "layer_types": ["chunked"]});
    let err = with(bad).unwrap_err().to_string();
    assert!(
        err.contains("config.json layer_types = [\"chunked\"]"),
        "{err}"
    );
}

fn gguf(dir: &Path, extra: &[(&str, GgufValue)]) -> Result<LlamaConfig, ModelError> {
    gguf_with(dir, extra, Vec::new())
}

/// A one-layer GGUF with `extra` metadata and `tensors` besides the Llama ones.
fn gguf_with(
    dir: &Path,
    extra: &[(&str, GgufValue)],
    more: Vec<(String, HostTensor)>,
) -> Result<LlamaConfig, ModelError> {
    let mut tensors: Vec<(String, HostTensor)> = roles()
        .into_iter()
        .map(|(r, s)| (r.gguf_name(), tensor(&s)))
        .collect();
    tensors.extend(more);
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut metadata: BTreeMap<&str, GgufValue> = [
        ("general.architecture", GgufValue::Str("llama".into())),
        ("general.name", GgufValue::Str("tiny".into())),
        ("llama.block_count", GgufValue::U32(1)),
        ("llama.embedding_length", GgufValue::U32(D as u32)),
        ("llama.feed_forward_length", GgufValue::U32(F as u32)),
        ("llama.attention.head_count", GgufValue::U32(H as u32)),
        ("llama.context_length", GgufValue::U32(64)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            GgufValue::F32(1e-5),
        ),
        ("tokenizer.ggml.model", GgufValue::Str("gpt2".into())),
    ]
    .into_iter()
    .collect();
    metadata.extend(extra.iter().cloned());
    let metadata: Vec<(&str, GgufValue)> = metadata.into_iter().collect();
    let path = dir.join("m.gguf");
    write_gguf(&path, &metadata, &refs).unwrap();
    LlamaConfig::from_gguf(&GgufFile::open(&path).unwrap())
}

#[test]
fn every_unsupported_gguf_variant_is_refused_by_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    gguf(dir.path(), &[]).unwrap();
    let cases = [
        (
            ("llama.rope.scaling.type", GgufValue::Str("yarn".into())),
            r#"unsupported: GGUF metadata llama.rope.scaling.type = "yarn""#,
        ),
        (
            ("llama.attn_logit_softcapping", GgufValue::F32(50.0)),
            "GGUF metadata llama.attn_logit_softcapping = 50",
        ),
        (
            ("llama.attention.sliding_window", GgufValue::U32(16)),
            "GGUF metadata llama.attention.sliding_window = 16",
        ),
        (
            ("llama.rope.freq_base_swa", GgufValue::F32(10.0)),
            "GGUF metadata llama.rope.freq_base_swa = 10",
        ),
        (
            ("llama.attention.sliding_window_pattern", GgufValue::U32(6)),
            "GGUF metadata llama.attention.sliding_window_pattern = 6",
        ),
        (
            ("llama.expert_count", GgufValue::U32(8)),
            "GGUF metadata llama.expert_count = 8",
        ),
        (
            ("llama.attention.value_length", GgufValue::U32(16)),
            "GGUF metadata llama.attention.value_length = 16",
        ),
        (
            ("clip.vision.image_size", GgufValue::U32(336)),
            "GGUF metadata clip.vision.image_size = 336",
        ),
    ];
    for ((key, value), want) in cases {
        let err = gguf(dir.path(), &[(key, value)]).unwrap_err().to_string();
        assert!(err.contains(want), "{err} lacks {want:?}");
    }
}

/// A key in a namespace no reader uses is read past (and returned to be logged), as
/// llama.cpp reads past it; one in a namespace a reader gives meaning is refused.
#[test]
fn gguf_keys_in_a_namespace_no_reader_uses_are_read_past() {
    let dir = tempfile::tempdir().unwrap();
    let bools = GgufValue::Array(crate::model::gguf::Array::Bool(vec![true, false]));
    let extra = [
        ("hostile.array_bool", bools),
        ("merge_tool.source", GgufValue::Str("a, b".into())),
    ];
    gguf(dir.path(), &extra).unwrap();
    let file = GgufFile::open(dir.path().join("m.gguf")).unwrap();
    let read_past = check_gguf_keys(file.path(), "llama", file.metadata()).unwrap();
    assert_eq!(read_past, ["hostile.array_bool", "merge_tool.source"]);
    let refused = [
        (
            "qwen2.context_length",
            "GGUF metadata qwen2.context_length = 64",
        ),
        ("split.count", "GGUF metadata split.count = 64"),
        (
            "adapter.lora.alpha",
            "GGUF metadata adapter.lora.alpha = 64",
        ),
    ];
    for (key, want) in refused {
        let err = gguf(dir.path(), &[(key, GgufValue::U32(64))]).unwrap_err();
        assert!(err.to_string().contains(want), "{err} lacks {want:?}");
    }
}

/// Llama 3.1 GGUF files carry `rope_freqs.weight`; ggml divides each pair's frequency
/// by its factor, and so must the table the tracer gets.
#[test]
fn gguf_rope_freqs_divide_each_frequency() {
    let dir = tempfile::tempdir().unwrap();
    let factors = [1.0f32, 2.0, 4.0, 8.0];
    let bytes = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
    let freqs = HostTensor::new(DType::F32, Shape::new([4]), SharedBytes::from_vec(bytes)).unwrap();
    let meta = [("llama.rope.freq_base", GgufValue::F32(500000.0))];
    let config = gguf_with(dir.path(), &meta, vec![("rope_freqs.weight".into(), freqs)]).unwrap();
    let table = config.rope.inv_freq.expect("a table");
    for (i, (got, f)) in table.iter().zip(factors).enumerate() {
        let want = 500000f64.powf(-2.0 * i as f64 / DH as f64) / f as f64;
        assert!(
            ((*got as f64) - want).abs() <= 1e-6 * want,
            "pair {i}: {got} vs {want}"
        );
    }
    let short = HostTensor::new(
        DType::F32,
        Shape::new([2]),
        SharedBytes::from_vec(vec![0; 8]),
    );
    let err = gguf_with(
        dir.path(),
        &[],
        vec![("rope_freqs.weight".into(), short.unwrap())],
    );
    assert!(err.unwrap_err().to_string().contains("rope_freqs.weight"));
}

/// Qwen3 GGUF files name the per-head norms `attn_q_norm` / `attn_k_norm`; the tracer
/// reads them (a Llama file with such tensors is not silently run without them).
#[test]
fn gguf_qwen3_head_norms_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let norms = vec![
        (TensorRole::AttnQNorm(0).gguf_name(), tensor(&[DH])),
        (TensorRole::AttnKNorm(0).gguf_name(), tensor(&[DH])),
    ];
    let qwen3: Vec<(&str, GgufValue)> = [
        ("general.architecture", GgufValue::Str("qwen3".into())),
        ("qwen3.block_count", GgufValue::U32(1)),
        ("qwen3.embedding_length", GgufValue::U32(D as u32)),
        ("qwen3.feed_forward_length", GgufValue::U32(F as u32)),
        ("qwen3.attention.head_count", GgufValue::U32(H as u32)),
        ("qwen3.context_length", GgufValue::U32(64)),
        (
            "qwen3.attention.layer_norm_rms_epsilon",
            GgufValue::F32(1e-6),
        ),
    ]
    .into_iter()
    .collect();
    // The helper also writes llama.* keys, which a qwen3 file must not have.
    let err = gguf_with(dir.path(), &qwen3, norms.clone());
    let err = err.unwrap_err().to_string();
    assert!(err.contains("GGUF metadata llama."), "{err}");
    let config =
        crate::model::llama::LlamaConfig::from_gguf(&qwen3_file(dir.path(), &qwen3, norms));
    let config = config.unwrap();
    assert_eq!(config.rope.mode, crate::graph::RopeMode::Neox);
    let graph = crate::model::llama::trace_step(
        &config,
        &GgufFile::open(dir.path().join("q.gguf")).unwrap(),
        1,
    )
    .unwrap();
    let reads_norm = graph.nodes().iter().any(|n| {
        matches!(&n.op, crate::graph::Op::Weight { name } if name == "blk.0.attn_q_norm.weight")
    });
    assert!(reads_norm);
}

/// Writes a GGUF of exactly `metadata` with the Llama tensors plus `more`.
fn qwen3_file(
    dir: &Path,
    metadata: &[(&str, GgufValue)],
    more: Vec<(String, HostTensor)>,
) -> GgufFile {
    let mut tensors: Vec<(String, HostTensor)> = roles()
        .into_iter()
        .map(|(r, s)| (r.gguf_name(), tensor(&s)))
        .collect();
    tensors.extend(more);
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let path = dir.join("q.gguf");
    write_gguf(&path, metadata, &refs).unwrap();
    GgufFile::open(&path).unwrap()
}
