//! Checks the tokenizer and chat template against llama.cpp's reference outputs.
//!
//! The tokenizer checks use the real SmolLM2 vocabulary, read from the default model,
//! which the project's own code fetches and caches (`model::fetch`).

use serde_json::Value;
use switchyard::model::chat_template::{ChatTemplate, Message};
use switchyard::model::tokenizer::Tokenizer;
use switchyard::model::{fetch, Model};

const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/reference/smollm2-135m-q4_1.llamacpp.json"
);

/// SmolLM2-135M-Instruct's `tokenizer.chat_template`.
const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fn reference() -> Value {
    let text = std::fs::read_to_string(REFERENCE).expect("reference JSON is committed");
    serde_json::from_str(&text).expect("reference JSON parses")
}

/// The default model's tokenizer, built from its GGUF metadata.
fn real_tokenizer() -> Option<Tokenizer> {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    Some(
        Model::open(&path)
            .expect("the default model opens")
            .tokenizer,
    )
}

fn ids(v: &Value) -> Vec<u32> {
    let list = v.as_array().expect("id list");
    list.iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn smollm2_token_ids_match_llama_cpp() {
    let Some(tk) = real_tokenizer() else { return };
    let reference = reference();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    let tokenize_only = reference["tokenize_only"].as_array().unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let inputs = tokenize_only
        .iter()
        .map(|c| (c, &c["token_ids"]))
        .chain(cases.iter().map(|c| (c, &c["prompt_token_ids"])));
    for (case, expected) in inputs {
        let text = case["text"].as_str().unwrap();
        let special = case["special"].as_bool().unwrap();
        let got = tk.encode(text, special).unwrap();
        checked += 1;
        if got != ids(expected) {
            mismatches.push(format!("{text:?}: got {got:?}, want {:?}", ids(expected)));
        }
    }
    eprintln!(
        "{} of {checked} token-id lists match",
        checked - mismatches.len()
    );
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn smollm2_pieces_and_greedy_text_match_llama_cpp() {
    let Some(tk) = real_tokenizer() else { return };
    assert_eq!(
        (tk.bos(), tk.eos(), tk.vocab_size()),
        (Some(1), Some(2), 49152)
    );
    for case in reference()["cases"].as_array().unwrap() {
        for top in case["last_position_top10"].as_array().unwrap() {
            let id = top["id"].as_u64().unwrap() as u32;
            assert_eq!(
                tk.token_to_piece(id).unwrap(),
                top["piece"].as_str().unwrap()
            );
        }
        let greedy = ids(&case["greedy_token_ids"]);
        let want = case["greedy_text"].as_str().unwrap();
        assert_eq!(tk.decode(&greedy, false).unwrap(), want);
        let mut stream = tk.stream_decoder(false);
        let mut text = String::new();
        for &id in &greedy {
            text.extend(stream.push(id).unwrap());
        }
        text.extend(stream.finish().unwrap());
        assert_eq!(text, want, "streamed text of case {}", case["name"]);
    }
}

#[test]
fn smollm2_chat_template_matches_reference_prompt() {
    let reference = reference();
    let chat = reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "chat")
        .expect("chat case");
    let messages: Vec<Message> = serde_json::from_value(chat["messages"].clone()).unwrap();
    let template = ChatTemplate::new(SMOLLM2_TEMPLATE, "<|im_start|>", "<|im_end|>").unwrap();
    let add = chat["add_generation_prompt"].as_bool().unwrap();
    let rendered = template.render(&messages, add).unwrap();
    assert_eq!(rendered, chat["text"].as_str().unwrap());
}
