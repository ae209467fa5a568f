//! BOS/EOS/PAD, chat prompts and stop ids of Hugging Face tokenizer directories,
//! checked against the ids transformers gives for the same files
//! (`tests/data/special_tokens/`, made by `scripts/make-special-token-fixtures.py`).

use std::path::PathBuf;

use serde_json::Value;

use super::chat_template::{ChatTemplate, Message};
use super::hf_chat;
use super::tokenizer::{token_text, Tokenizer, TokenizerError};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/special_tokens")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn config(name: &str) -> Value {
    let path = fixtures().join(name).join("tokenizer_config.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The case's chat prompt, rendered with its template and tokenized as a chat.
fn chat_ids(name: &str, tk: &Tokenizer, messages: &[Message]) -> Vec<u32> {
    let dir = fixtures().join(name);
    let config = config(name);
    let text = |key: &str| token_text(&config, key).unwrap().unwrap_or_default();
    let source = hf_chat::template_source(&dir, &config).unwrap().unwrap();
    let template = ChatTemplate::new(&source, &text("bos_token"), &text("eos_token")).unwrap();
    let prompt = template.render(messages, true).unwrap();
    tk.encode_chat(&prompt).unwrap()
}

#[test]
fn prompts_chats_and_stop_ids_match_transformers() {
    let expected = expected();
    let prompt = expected["prompt"].as_str().unwrap();
    let messages: Vec<Message> = serde_json::from_value(expected["messages"].clone()).unwrap();
    let cases = expected["cases"].as_object().unwrap();
    let mut checked = 0;
    for name in ["llama3", "llama2", "plain", "bos_eos"] {
        let case = &cases[name];
        let dir = fixtures().join(name);
        let tk = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        assert_eq!(
            tk.encode(prompt, false).unwrap(),
            ids(&case["prompt_ids"]),
            "{name}: plain prompt"
        );
        let chat = chat_ids(name, &tk, &messages);
        assert_eq!(chat, ids(&case["chat_ids"]), "{name}: chat prompt");
        assert_eq!(
            chat.iter().filter(|&&id| Some(id) == tk.bos()).count(),
            1,
            "{name}: exactly one BOS"
        );
        let mut stops = ids(&case["generation_eos"]);
        stops.extend(tk.eos().filter(|id| !stops.contains(id)));
        let got = hf_chat::stop_ids(&dir, tk.eos(), tk.vocab_size()).unwrap();
        assert_eq!(got, stops, "{name}: stop ids");
        assert_eq!(
            tk.specials().pad,
            case["pad_id"].as_u64().map(|p| p as u32),
            "{name}: pad"
        );
        checked += 1;
    }
    assert_eq!(checked, 4);
}

#[test]
fn llama3_bos_comes_only_from_the_post_processor() {
    let tk = Tokenizer::from_file(fixtures().join("llama3/tokenizer.json")).unwrap();
    assert!(config("llama3").get("add_bos_token").is_none());
    assert_eq!(tk.specials().prefix, vec![0]);
    assert!(tk.specials().suffix.is_empty());
    // A plain prompt that writes BOS itself still gets the model's BOS, as in
    // transformers; only chat prompts are left alone.
    assert_eq!(tk.encode("<s>", true).unwrap(), vec![0, 0]);
    assert_eq!(tk.encode_chat("<s>").unwrap(), vec![0]);
}

#[test]
fn flags_that_contradict_the_post_processor_are_refused() {
    let err = Tokenizer::from_file(fixtures().join("contradiction/tokenizer.json")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TokenizerError::Config { .. }), "{err:?}");
    assert!(text.contains("add_bos_token"), "{text}");
    assert!(text.contains("does not add"), "{text}");
}

/// Copies fixture `name` into a temporary directory and lets `edit` change its
/// tokenizer_config.json, for variants that must be refused.
fn edited(name: &str, edit: impl FnOnce(&mut Value)) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixtures().join(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    let mut config = config(name);
    edit(&mut config);
    let path = tmp.path().join("tokenizer_config.json");
    std::fs::write(path, serde_json::to_string(&config).unwrap()).unwrap();
    let dir = tmp.path().to_path_buf();
    (tmp, dir)
}

#[test]
fn malformed_special_token_keys_are_named() {
    let cases: [(&str, Value, &str); 5] = [
        ("bos_token", serde_json::json!(5), "bos_token"),
        (
            "eos_token",
            serde_json::json!("<nope>"),
            "not in the vocabulary",
        ),
        (
            "pad_token",
            serde_json::json!({"lstrip": false}),
            "pad_token",
        ),
        ("add_eos_token", serde_json::json!("yes"), "add_eos_token"),
        ("add_eos_token", serde_json::json!(true), "add_eos_token"),
    ];
    for (key, value, needle) in cases {
        let (_tmp, dir) = edited("llama3", |c| c[key] = value.clone());
        let err = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap_err();
        assert!(err.to_string().contains(needle), "{key}: {err}");
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
}

#[test]
fn chat_template_lists_and_bad_eos_ids_are_handled() {
    let (_tmp, dir) = edited("llama3", |c| {
        c["chat_template"] = serde_json::json!([
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "plain"},
        ]);
    });
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let source = hf_chat::template_source(&dir, &config).unwrap();
    assert_eq!(source.as_deref(), Some("plain"));
    let no_default = serde_json::json!({"chat_template": [{"name": "x", "template": "y"}]});
    let err = hf_chat::template_source(&dir, &no_default).unwrap_err();
    assert!(err.to_string().contains("chat_template"), "{err}");
    for bad in ["\"2\"", "[1, -1]", "[100000]"] {
        let json = format!("{{\"eos_token_id\": {bad}}}");
        std::fs::write(dir.join("generation_config.json"), json).unwrap();
        let err = hf_chat::stop_ids(&dir, None, 300).unwrap_err();
        assert!(err.to_string().contains("eos_token_id"), "{bad}: {err}");
    }
}
