//! The tokenizer part of GGUF metadata: the vocabulary, its special ids and llama.cpp's
//! BOS/EOS policy, and the ids that end a generation.
//!
//! A key that is present is always read with its typed getter (a wrong type is an
//! error, never a silent default); an absent key takes llama.cpp's default. Keys that
//! would change the tokenization in a way this crate does not implement are refused.
//!
//! Keys known not to matter here: `remove_extra_whitespaces` and `precompiled_charsmap`
//! (llama.cpp reads them only for `"t5"`-style UGM vocabularies, refused as an unknown
//! model), `added_tokens` (unused by llama.cpp), `token_type_count` (BERT segment
//! types), and the separator, mask and fill-in-the-middle ids (no plain prompt or chat
//! uses them).

use super::metadata::Metadata;
use crate::model::tokenizer::VocabSpec;
use crate::model::ModelError;

/// `tokenizer.ggml.pre` values for which llama.cpp adds BOS when the file does not say
/// (its Llama 3 group, plus `tekken` and `chameleon`).
const BOS_BY_DEFAULT_PRE: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "tekken",
    "chameleon",
];

/// Keys naming ids that end a generation, as llama.cpp's end-of-generation set has them.
const STOP_KEYS: [&str; 3] = [
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
];

/// The vocabulary described by `meta`, with llama.cpp's defaults for absent flags:
/// a `"llama"` (SentencePiece) vocabulary adds BOS and a space prefix, a `"gpt2"` one
/// adds BOS only for the Llama 3 pre-tokenizer group; neither adds EOS.
pub fn vocab_spec(meta: &Metadata) -> Result<VocabSpec, ModelError> {
    let model = meta.get_str("tokenizer.ggml.model")?.to_string();
    let pre = optional(meta, "tokenizer.ggml.pre", Metadata::get_str)?.map(str::to_string);
    let id = |key: &str| optional(meta, key, Metadata::get_u32);
    let flag = |key: &str| optional(meta, key, Metadata::get_bool);
    if flag("tokenizer.ggml.add_sep_token")? == Some(true) {
        return Err(ModelError::unsupported(
            meta.path(),
            "tokenizer.ggml.add_sep_token = true (appending a separator token)",
        ));
    }
    let bos_by_default = match model.as_str() {
        "llama" => true,
        "gpt2" => pre
            .as_deref()
            .is_some_and(|p| BOS_BY_DEFAULT_PRE.contains(&p)),
        _ => false,
    };
    let add_space_prefix = match model.as_str() {
        // llama.cpp reads the flag only for SentencePiece-style vocabularies.
        "llama" => flag("tokenizer.ggml.add_space_prefix")?,
        _ => None,
    };
    Ok(VocabSpec {
        tokens: meta.get_str_array("tokenizer.ggml.tokens")?.to_vec(),
        token_types: optional(meta, "tokenizer.ggml.token_type", Metadata::get_i32_array)?
            .unwrap_or_default(),
        scores: optional(meta, "tokenizer.ggml.scores", Metadata::get_f32_array)?
            .unwrap_or_default(),
        merges: optional(meta, "tokenizer.ggml.merges", Metadata::get_str_array)?
            .map(<[String]>::to_vec)
            .unwrap_or_default(),
        bos: id("tokenizer.ggml.bos_token_id")?,
        eos: id("tokenizer.ggml.eos_token_id")?,
        pad: id("tokenizer.ggml.padding_token_id")?,
        add_bos: flag("tokenizer.ggml.add_bos_token")?.unwrap_or(bos_by_default),
        add_eos: flag("tokenizer.ggml.add_eos_token")?.unwrap_or(false),
        add_space_prefix,
        model,
        pre,
    })
}

/// The ids that end a generation: EOS, end-of-turn and end-of-message, when set; each
/// must lie in the `n_vocab`-token vocabulary.
pub fn stop_ids(meta: &Metadata, n_vocab: usize) -> Result<Vec<u32>, ModelError> {
    let mut ids = Vec::new();
    for key in STOP_KEYS {
        if let Some(id) = optional(meta, key, Metadata::get_u32)? {
            if id as usize >= n_vocab {
                return Err(ModelError::Metadata {
                    path: meta.path().to_owned(),
                    key: key.to_owned(),
                    detail: format!("id {id} is outside the {n_vocab}-token vocabulary"),
                });
            }
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// `get(meta, key)` when `key` is present, `None` when it is absent.
fn optional<'m, T>(
    meta: &'m Metadata,
    key: &str,
    get: impl Fn(&'m Metadata, &str) -> Result<T, ModelError>,
) -> Result<Option<T>, ModelError> {
    match meta.get(key) {
        None => Ok(None),
        Some(_) => get(meta, key).map(Some),
    }
}
