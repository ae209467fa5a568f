//! Builds a `tokenizers` pipeline from the vocabulary stored in GGUF metadata.
//!
//! Two GGUF tokenizer models are supported, mirroring llama.cpp:
//! * `"gpt2"`: byte-level BPE over the stored merges; the pre-tokenizer regexes are
//!   picked from `tokenizer.ggml.pre` exactly as llama.cpp's `llama-vocab.cpp` does.
//! * `"llama"`: SentencePiece-style BPE. GGUF stores scores but no merges, so merges are
//!   derived from the scores (a merge's priority is the score of the merged piece), with
//!   the `▁` whitespace marker, a leading `▁` (unless `tokenizer.ggml.add_space_prefix`
//!   is false) and `<0xXX>` byte fallback.

use std::collections::HashSet;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, Sequence as NormSequence};
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::{TokenizerError, VocabSpec};

/// GGUF token type of a normal vocabulary piece.
const TYPE_NORMAL: i32 = 1;
/// GGUF token type of the unknown token.
const TYPE_UNKNOWN: i32 = 2;
/// GGUF token type of a control token (`<|im_start|>`, `<s>`): parsed only on request.
const TYPE_CONTROL: i32 = 3;
/// GGUF token type of a user-defined token: always parsed as one token.
const TYPE_USER_DEFINED: i32 = 4;

/// The GPT-2 pre-tokenizer regex as llama.cpp writes it.
const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// llama.cpp's case-insensitive-contraction rewrite of the Llama 3 regex.
const LLAMA3_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The Qwen2 regex: the Llama 3 one with single digits.
const QWEN2_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The regex chain for a `tokenizer.ggml.pre` value, applied in order (each splits the
/// pieces of the previous one), and whether merges are ignored for whole-word hits.
fn pre_regexes(pre: Option<&str>) -> Result<(Vec<&'static str>, bool), TokenizerError> {
    Ok(match pre {
        None | Some("default") => (
            vec![
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_RE,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            false,
        ),
        Some("gpt2" | "gpt-2" | "mpt" | "olmo" | "jais") => (vec![GPT2_RE], false),
        // smollm, starcoder & co: digits are split one by one, then the GPT-2 regex.
        Some("smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone") => {
            (vec![r"\p{N}", GPT2_RE], false)
        }
        Some("llama3" | "llama-v3" | "llama-bpe" | "dbrx" | "smaug-bpe") => (vec![LLAMA3_RE], true),
        Some("qwen2" | "deepseek-r1-qwen" | "stablelm2") => (vec![QWEN2_RE], false),
        Some(other) => return Err(TokenizerError::UnknownPre(other.to_string())),
    })
}

/// Checks the per-token arrays and special ids for consistency.
fn validate(spec: &VocabSpec) -> Result<(), TokenizerError> {
    let n = spec.tokens.len();
    if n == 0 {
        return Err(TokenizerError::InvalidVocab("no tokens".into()));
    }
    if !spec.token_types.is_empty() && spec.token_types.len() != n {
        return Err(TokenizerError::InvalidVocab(format!(
            "{} token types for {n} tokens",
            spec.token_types.len()
        )));
    }
    for (name, id) in [("bos", spec.bos), ("eos", spec.eos), ("pad", spec.pad)] {
        if let Some(id) = id.filter(|&id| id as usize >= n) {
            return Err(TokenizerError::InvalidVocab(format!(
                "{name} id {id} is outside the {n}-token vocabulary"
            )));
        }
    }
    Ok(())
}

/// The GGUF type of token `id` (normal when the file has no type array).
fn token_type(spec: &VocabSpec, id: usize) -> i32 {
    spec.token_types.get(id).copied().unwrap_or(TYPE_NORMAL)
}

/// Maps every piece to its id; a duplicated piece keeps its first id (with a warning).
fn vocab_map(spec: &VocabSpec) -> Vocab {
    let mut vocab = Vocab::default();
    for (id, piece) in spec.tokens.iter().enumerate() {
        if vocab.contains_key(piece) {
            log::warn!("duplicate vocabulary piece {piece:?} at id {id}; keeping the first");
        } else {
            vocab.insert(piece.clone(), id as u32);
        }
    }
    vocab
}

/// Control and user-defined tokens, registered so that they match as whole tokens.
fn added_tokens(spec: &VocabSpec) -> Vec<AddedToken> {
    spec.tokens
        .iter()
        .enumerate()
        .filter_map(|(id, piece)| match token_type(spec, id) {
            TYPE_CONTROL => Some(AddedToken::from(piece.clone(), true)),
            TYPE_USER_DEFINED => Some(AddedToken::from(piece.clone(), false).normalized(false)),
            _ => None,
        })
        .collect()
}

/// Builds the parse-specials tokenizer for a GGUF vocabulary.
pub(super) fn build(spec: &VocabSpec) -> Result<tokenizers::Tokenizer, TokenizerError> {
    validate(spec)?;
    let mut tk = match spec.model.as_str() {
        "gpt2" => build_gpt2(spec)?,
        "llama" => build_llama(spec)?,
        other => return Err(TokenizerError::UnknownModel(other.to_string())),
    };
    let added = added_tokens(spec);
    let (special, plain): (Vec<_>, Vec<_>) = added.into_iter().partition(|t| t.special);
    tk.add_special_tokens(&special);
    tk.add_tokens(&plain);
    Ok(tk)
}

/// Byte-level BPE over the stored merges with the `pre`-selected regex chain.
fn build_gpt2(spec: &VocabSpec) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let (regexes, ignore_merges) = pre_regexes(spec.pre.as_deref())?;
    let merges = spec
        .merges
        .iter()
        .enumerate()
        .map(|(index, rule)| match rule.split_once(' ') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
            _ => Err(TokenizerError::BadMerge {
                index,
                rule: rule.clone(),
            }),
        })
        .collect::<Result<Merges, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab_map(spec), merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| TokenizerError::InvalidVocab(e.to_string()))?;
    let mut steps = Vec::with_capacity(regexes.len() + 1);
    for re in regexes {
        let split = Split::new(
            SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Backend(format!("pre-tokenizer regex {re:?}: {e}")))?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, false, false,
    )));
    let mut tk = tokenizers::Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(PreSequence::new(steps)));
    tk.with_decoder(Some(ByteLevel::new(false, false, false)));
    Ok(tk)
}

/// SentencePiece-style BPE: merges ranked by the score of the merged piece.
fn build_llama(spec: &VocabSpec) -> Result<tokenizers::Tokenizer, TokenizerError> {
    if spec.scores.len() != spec.tokens.len() {
        return Err(TokenizerError::InvalidVocab(format!(
            "{} scores for {} tokens",
            spec.scores.len(),
            spec.tokens.len()
        )));
    }
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab_map(spec), merges_from_scores(spec))
        .byte_fallback(true);
    let unk = (0..spec.tokens.len()).find(|&id| token_type(spec, id) == TYPE_UNKNOWN);
    if let Some(unk) = unk {
        builder = builder.unk_token(spec.tokens[unk].clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| TokenizerError::InvalidVocab(e.to_string()))?;
    let replace = |from: &str, to: &str| {
        Replace::new(from, to).map_err(|e| TokenizerError::Backend(e.to_string()))
    };
    // llama.cpp prepends the space marker unless the file says not to, and then drops
    // the leading space when decoding.
    let space_prefix = spec.add_space_prefix.unwrap_or(true);
    let mut normalizers = vec![NormalizerWrapper::Replace(replace(" ", "▁")?)];
    let mut decoders = vec![
        DecoderWrapper::Replace(replace("▁", " ")?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if space_prefix {
        normalizers.insert(0, NormalizerWrapper::Prepend(Prepend::new("▁".into())));
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    let normalizer = NormSequence::new(normalizers);
    let decoder = DecoderSequence::new(decoders);
    let mut tk = tokenizers::Tokenizer::new(bpe);
    tk.with_normalizer(Some(normalizer));
    tk.with_decoder(Some(decoder));
    Ok(tk)
}

/// Derives BPE merges from SentencePiece scores: every split of a normal piece into two
/// normal pieces is a merge, ordered by the merged piece's score (highest first), then
/// by its id, then by the split position.
fn merges_from_scores(spec: &VocabSpec) -> Merges {
    let normal: HashSet<&str> = spec
        .tokens
        .iter()
        .enumerate()
        .filter(|&(id, _)| token_type(spec, id) == TYPE_NORMAL)
        .map(|(_, piece)| piece.as_str())
        .collect();
    let mut ranked = Vec::new();
    for (id, piece) in spec.tokens.iter().enumerate() {
        if token_type(spec, id) != TYPE_NORMAL {
            continue;
        }
        for (pos, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(pos);
            if normal.contains(left) && normal.contains(right) {
                ranked.push((spec.scores[id], id, pos, left, right));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked
        .into_iter()
        .map(|(_, _, _, l, r)| (l.to_string(), r.to_string()))
        .collect()
}
