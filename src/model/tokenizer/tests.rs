//! Unit tests over tiny synthetic vocabularies.

use super::*;

/// GPT-2's byte → printable character table.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut extra = 0;
    (0u32..256)
        .map(|b| {
            let c = if printable.contains(&b) {
                b
            } else {
                extra += 1;
                255 + extra
            };
            char::from_u32(c).unwrap()
        })
        .collect()
}

/// Ids: 0 `<|endoftext|>`, 1 `<|im_start|>`, 2 `<|im_end|>`, 3 `<tool>` (user-defined),
/// 4..260 the bytes, then merged pieces.
fn gpt2_spec(pre: &str) -> VocabSpec {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"]
        .map(String::from)
        .to_vec();
    let mut token_types = vec![3, 3, 3, 4];
    tokens.extend(byte_chars().iter().map(|c| c.to_string()));
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "1 2",
    ];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    token_types.resize(tokens.len(), 1);
    VocabSpec {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens,
        token_types,
        merges: merges.map(String::from).to_vec(),
        bos: Some(1),
        eos: Some(2),
        ..VocabSpec::default()
    }
}

fn id_of(spec: &VocabSpec, piece: &str) -> u32 {
    spec.tokens.iter().position(|t| t == piece).unwrap() as u32
}

#[test]
fn gpt2_applies_merges_and_byte_level() {
    let spec = gpt2_spec("gpt2");
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let ids = tk.encode("hello world", false).unwrap();
    assert_eq!(ids, vec![id_of(&spec, "hello"), id_of(&spec, "Ġworld")]);
    assert_eq!(tk.decode(&ids, false).unwrap(), "hello world");
    assert_eq!(tk.vocab_size(), spec.tokens.len());
    assert_eq!((tk.bos(), tk.eos()), (Some(1), Some(2)));
}

#[test]
fn control_tokens_parse_only_with_special() {
    let spec = gpt2_spec("smollm");
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let text = "<|im_start|>hello<|im_end|>";
    let ids = tk.encode(text, true).unwrap();
    assert_eq!(ids, vec![1, id_of(&spec, "hello"), 2]);
    let plain = tk.encode(text, false).unwrap();
    assert!(!plain.contains(&1) && !plain.contains(&2), "{plain:?}");
    assert_eq!(tk.decode(&plain, false).unwrap(), text);
    assert_eq!(tk.decode(&ids, true).unwrap(), "hello");
    assert_eq!(tk.decode(&ids, false).unwrap(), text);
    assert_eq!(tk.token_to_piece(1).unwrap(), "<|im_start|>");
}

#[test]
fn user_defined_tokens_always_parse() {
    let spec = gpt2_spec("smollm");
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    for special in [false, true] {
        let ids = tk.encode("<tool>hello", special).unwrap();
        assert_eq!(ids, vec![3, id_of(&spec, "hello")]);
    }
}

#[test]
fn smollm_splits_digits_but_gpt2_does_not() {
    let smollm = gpt2_spec("smollm");
    let digit = |d: &str| id_of(&smollm, d);
    let tk = Tokenizer::from_gguf_vocab(&smollm).unwrap();
    assert_eq!(
        tk.encode("123", false).unwrap(),
        vec![digit("1"), digit("2"), digit("3")]
    );
    let gpt2 = Tokenizer::from_gguf_vocab(&gpt2_spec("gpt2")).unwrap();
    assert_eq!(
        gpt2.encode("123", false).unwrap(),
        vec![digit("12"), digit("3")]
    );
}

#[test]
fn every_named_pre_type_builds() {
    for pre in ["gpt2", "smollm", "llama3", "llama-bpe", "qwen2", "default"] {
        let tk = Tokenizer::from_gguf_vocab(&gpt2_spec(pre)).unwrap();
        let ids = tk.encode("hello world", false).unwrap();
        assert_eq!(tk.decode(&ids, false).unwrap(), "hello world", "pre {pre}");
    }
}

#[test]
fn unknown_pre_and_model_are_named_errors() {
    let err = Tokenizer::from_gguf_vocab(&gpt2_spec("martian")).unwrap_err();
    assert!(err.to_string().contains("martian"), "{err}");
    let mut spec = gpt2_spec("gpt2");
    spec.model = "klingon".into();
    let err = Tokenizer::from_gguf_vocab(&spec).unwrap_err();
    assert!(err.to_string().contains("klingon"), "{err}");
}

#[test]
fn inconsistent_vocab_is_an_error() {
    let mut spec = gpt2_spec("gpt2");
    spec.merges.push("nomerge".into());
    let err = Tokenizer::from_gguf_vocab(&spec).unwrap_err();
    assert!(matches!(err, TokenizerError::BadMerge { .. }), "{err}");
    let mut spec = gpt2_spec("gpt2");
    spec.bos = Some(100_000);
    assert!(Tokenizer::from_gguf_vocab(&spec).is_err());
    let mut spec = gpt2_spec("gpt2");
    spec.token_types.pop();
    assert!(Tokenizer::from_gguf_vocab(&spec).is_err());
}

#[test]
fn bos_eos_only_when_requested() {
    let mut spec = gpt2_spec("gpt2");
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    assert_eq!(tk.encode("hello", false).unwrap().len(), 1);
    spec.add_bos = true;
    spec.add_eos = true;
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let hello = id_of(&spec, "hello");
    assert_eq!(tk.encode("hello", false).unwrap(), vec![1, hello, 2]);
}

#[test]
fn decode_rejects_out_of_range_ids() {
    let tk = Tokenizer::from_gguf_vocab(&gpt2_spec("gpt2")).unwrap();
    let err = tk.decode(&[5, 1_000_000], false).unwrap_err();
    assert!(matches!(
        err,
        TokenizerError::TokenOutOfRange { id: 1_000_000, .. }
    ));
}

#[test]
fn stream_decoder_waits_for_whole_characters() {
    let tk = Tokenizer::from_gguf_vocab(&gpt2_spec("gpt2")).unwrap();
    let ids = tk.encode("hé€ world", false).unwrap();
    let mut stream = tk.stream_decoder(false);
    let mut pieces = Vec::new();
    for &id in &ids {
        if let Some(piece) = stream.push(id).unwrap() {
            pieces.push(piece);
        }
    }
    assert_eq!(stream.finish().unwrap(), None);
    assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
    assert_eq!(pieces.concat(), "hé€ world");
    assert!(pieces.contains(&"é".to_string()), "{pieces:?}");
}

#[test]
fn stream_decoder_finish_flushes_partial_bytes() {
    let tk = Tokenizer::from_gguf_vocab(&gpt2_spec("gpt2")).unwrap();
    let ids = tk.encode("é", false).unwrap();
    let mut stream = tk.stream_decoder(false);
    assert_eq!(stream.push(ids[0]).unwrap(), None);
    assert_eq!(stream.finish().unwrap().as_deref(), Some("\u{FFFD}"));
}

/// A SentencePiece-style vocabulary: `<unk>`, `<s>`, `</s>`, 256 byte tokens, pieces.
fn llama_spec() -> VocabSpec {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut token_types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        token_types.push(6);
        scores.push(0.0);
    }
    let pieces = [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("w", -2.0),
        ("r", -2.0),
        ("d", -2.0),
        ("ll", -3.0),
        ("he", -4.0),
        ("hell", -5.0),
        ("hello", -6.0),
        ("▁hello", -7.0),
        ("or", -8.0),
        ("▁w", -9.0),
        ("▁wor", -10.0),
    ];
    for (piece, score) in pieces {
        tokens.push(piece.into());
        token_types.push(1);
        scores.push(score);
    }
    VocabSpec {
        model: "llama".into(),
        tokens,
        token_types,
        scores,
        bos: Some(1),
        eos: Some(2),
        add_bos: true,
        ..VocabSpec::default()
    }
}

#[test]
fn llama_merges_by_score_with_space_prefix() {
    let spec = llama_spec();
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let ids = tk.encode("hello world", false).unwrap();
    let expect: Vec<u32> = ["<s>", "▁hello", "▁wor", "l", "d"]
        .iter()
        .map(|p| id_of(&spec, p))
        .collect();
    assert_eq!(ids, expect);
    assert_eq!(tk.decode(&ids, true).unwrap(), "hello world");
}

#[test]
fn llama_byte_fallback_round_trips() {
    let spec = llama_spec();
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let ids = tk.encode("hé", false).unwrap();
    let expect: Vec<u32> = ["<s>", "▁", "h", "<0xC3>", "<0xA9>"]
        .iter()
        .map(|p| id_of(&spec, p))
        .collect();
    assert_eq!(ids, expect);
    assert_eq!(tk.decode(&ids, true).unwrap(), "hé");
    let mut stream = tk.stream_decoder(true);
    let pieces: Vec<Option<String>> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(pieces.last().unwrap().as_deref(), Some("é"));
    assert_eq!(pieces[3], None);
}

#[test]
fn llama_requires_scores() {
    let mut spec = llama_spec();
    spec.scores.pop();
    let err = Tokenizer::from_gguf_vocab(&spec).unwrap_err();
    assert!(err.to_string().contains("scores"), "{err}");
}

#[test]
fn from_file_loads_tokenizer_json_and_config() {
    let spec = gpt2_spec("smollm");
    let built = gguf_vocab::build(&spec).unwrap();
    let dir = std::env::temp_dir().join(format!("switchyard-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("tokenizer.json");
    built.save(&json, false).unwrap();
    // The saved tokenizer has no post-processor, so nothing is added to plain text.
    let config = r#"{"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
                     "add_bos_token": false}"#;
    std::fs::write(dir.join("tokenizer_config.json"), config).unwrap();
    let tk = Tokenizer::from_file(&json).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((tk.bos(), tk.eos()), (Some(1), Some(2)));
    let hello = id_of(&spec, "hello");
    assert_eq!(tk.encode("<|im_end|>hello", true).unwrap(), vec![2, hello]);
    let err = Tokenizer::from_file(dir.join("missing.json")).unwrap_err();
    assert!(err.to_string().contains("missing.json"), "{err}");
}

#[test]
fn llama_without_space_prefix_neither_prepends_nor_strips() {
    let mut spec = llama_spec();
    spec.add_space_prefix = Some(false);
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let ids = tk.encode("hello world", false).unwrap();
    let expect: Vec<u32> = ["<s>", "hello", "▁wor", "l", "d"]
        .iter()
        .map(|p| id_of(&spec, p))
        .collect();
    assert_eq!(ids, expect);
    assert_eq!(tk.decode(&ids[1..], true).unwrap(), "hello world");
    let ids = tk.encode(" hello", false).unwrap();
    assert_eq!(ids[1], id_of(&spec, "▁hello"));
    assert_eq!(tk.decode(&ids[1..], true).unwrap(), " hello");
}

#[test]
fn gguf_bos_and_eos_policy() {
    let mut spec = gpt2_spec("gpt2");
    spec.add_bos = true;
    spec.add_eos = true;
    spec.pad = Some(0);
    let tk = Tokenizer::from_gguf_vocab(&spec).unwrap();
    let hello = id_of(&spec, "hello");
    assert_eq!(tk.encode("hello", false).unwrap(), vec![1, hello, 2]);
    assert_eq!(tk.encode_chat("<|im_start|>hello").unwrap(), vec![1, hello]);
    assert_eq!(tk.specials().pad, Some(0));
    spec.bos = None;
    let err = Tokenizer::from_gguf_vocab(&spec).unwrap_err();
    assert!(err.to_string().contains("add_bos_token"), "{err}");
    let mut spec = gpt2_spec("gpt2");
    spec.pad = Some(100_000);
    let err = Tokenizer::from_gguf_vocab(&spec).unwrap_err();
    assert!(err.to_string().contains("pad id 100000"), "{err}");
}
