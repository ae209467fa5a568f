//! Text ⇄ token ids, built on the `tokenizers` crate.
//!
//! A [`Tokenizer`] comes either from the vocabulary stored in GGUF metadata
//! ([`Tokenizer::from_gguf_vocab`], matching llama.cpp's tokenization) or from a Hugging
//! Face `tokenizer.json` ([`Tokenizer::from_file`]). [`StreamDecoder`] turns a stream of
//! generated ids into valid UTF-8 text pieces.
//!
//! Plain text ([`Tokenizer::encode`]) gets the BOS/EOS the model asks for; a rendered
//! chat prompt ([`Tokenizer::encode_chat`]) gets none, since the template writes its
//! own, as transformers' `apply_chat_template` does.

mod gguf_vocab;
mod hf_specials;
mod stream;
#[cfg(test)]
mod tests;
mod token_bytes;

use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

pub(crate) use hf_specials::token_text;
pub use stream::StreamDecoder;
pub use token_bytes::TokenBytes;

/// Errors from building a tokenizer, encoding or decoding.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error("unknown tokenizer model {0:?} (supported: \"gpt2\", \"llama\")")]
    UnknownModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    #[error("unknown pre-tokenizer type {0:?}")]
    UnknownPre(String),
    /// The vocabulary arrays are inconsistent (lengths, special ids, merge targets).
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A merge rule is not of the form `"left right"`.
    #[error("merge rule #{index} {rule:?} is not \"left right\"")]
    BadMerge {
        /// Position of the rule in the merge list.
        index: usize,
        /// The rule as stored.
        rule: String,
    },
    /// A token id lies outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// The vocabulary size, added tokens included.
        vocab_size: usize,
    },
    /// A tokenizer file could not be read or parsed.
    #[error("cannot load tokenizer from {path}: {message}")]
    Load {
        /// The file that failed.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A key of a tokenizer configuration file is malformed, contradicts the
    /// tokenizer, or asks for something not implemented.
    #[error("{file}: {key}: {detail}")]
    Config {
        /// The configuration file.
        file: String,
        /// The key at fault.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The underlying `tokenizers` library reported an error.
    #[error("tokenizer error: {0}")]
    Backend(String),
}

/// A vocabulary's special ids, and the ids that [`Tokenizer::encode`] puts around the
/// text (the model's BOS/EOS policy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Specials {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Ids put before plain text (`[bos]` when the model adds BOS).
    pub prefix: Vec<u32>,
    /// Ids put after plain text (`[eos]` when the model adds EOS).
    pub suffix: Vec<u32>,
}

/// The tokenizer part of a GGUF file's metadata, as plain data (filled by the GGUF reader).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VocabSpec {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer family, e.g. `"smollm"` or `"llama-bpe"`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: the piece of every id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 6 byte; may be empty (all normal).
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores`: SentencePiece piece scores (required for `"llama"`).
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.merges`: BPE merges as `"left right"` (required for `"gpt2"`).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`: whether [`Tokenizer::encode`] prepends BOS.
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token`: whether [`Tokenizer::encode`] appends EOS.
    pub add_eos: bool,
    /// `tokenizer.ggml.add_space_prefix`: whether a `"llama"` vocabulary puts `▁` before
    /// the text (llama.cpp's default, `None`, is yes).
    pub add_space_prefix: Option<bool>,
}

/// Converts a `tokenizers` error into ours.
fn backend(e: tokenizers::Error) -> TokenizerError {
    TokenizerError::Backend(e.to_string())
}

/// Parses a `tokenizer.json` with the `tokenizers` crate, which panics (`expect`) on
/// some malformed input: text that is not JSON inside a decoder, a `Precompiled`
/// normalizer whose fields do not parse. Both are checked first, so they get an error
/// naming the problem; any other panic inside the crate is caught and reported too.
fn parse_tokenizer_json(path: &Path) -> Result<tokenizers::Tokenizer, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not valid JSON: {e}"))?;
    check_precompiled(&value)?;
    let parsed = std::panic::catch_unwind(|| text.parse::<tokenizers::Tokenizer>());
    match parsed {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(panic) => Err(format!(
            "the tokenizers library failed on it: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic")
        )),
    }
}

/// Every `{"type": "Precompiled", ...}` object in the file must parse as one.
fn check_precompiled(value: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("Precompiled") {
                serde_json::from_value::<tokenizers::normalizers::Precompiled>(value.clone())
                    .map_err(|e| format!("Precompiled normalizer: {e}"))?;
            }
            map.values().try_for_each(check_precompiled)
        }
        Value::Array(items) => items.iter().try_for_each(check_precompiled),
        _ => Ok(()),
    }
}

/// A text tokenizer with llama.cpp-compatible special-token handling.
pub struct Tokenizer {
    /// The one vocabulary; whether control tokens written in the input become their ids
    /// is a flag of `tokenizers`, set per call under the lock (a second copy of the
    /// vocabulary for plain text would cost ~10 MB of resident memory).
    inner: Mutex<tokenizers::Tokenizer>,
    /// Ids, added tokens included: cached, as `tokenizers` rebuilds its whole vocabulary
    /// map to count it (once per decoded token otherwise).
    vocab_size: usize,
    specials: Specials,
}

impl Clone for Tokenizer {
    fn clone(&self) -> Self {
        Self {
            inner: Mutex::new(self.lock().clone()),
            vocab_size: self.vocab_size,
            specials: self.specials.clone(),
        }
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("specials", &self.specials)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by GGUF metadata. Asking to add a BOS or EOS the
    /// vocabulary does not name is an error.
    pub fn from_gguf_vocab(spec: &VocabSpec) -> Result<Self, TokenizerError> {
        let special = gguf_vocab::build(spec)?;
        let added = |add: bool, id: Option<u32>, what: &str| match (add, id) {
            (false, _) => Ok(Vec::new()),
            (true, Some(id)) => Ok(vec![id]),
            (true, None) => Err(TokenizerError::InvalidVocab(format!(
                "tokenizer.ggml.add_{what}_token is true but there is no \
                 tokenizer.ggml.{what}_token_id"
            ))),
        };
        let specials = Specials {
            bos: spec.bos,
            eos: spec.eos,
            pad: spec.pad,
            prefix: added(spec.add_bos, spec.bos, "bos")?,
            suffix: added(spec.add_eos, spec.eos, "eos")?,
        };
        Ok(Self::assemble(special, specials))
    }

    /// Loads a Hugging Face `tokenizer.json`. Plain encoding adds what its
    /// post-processor adds (as transformers 5 does); BOS/EOS/PAD come from a
    /// `tokenizer_config.json` next to it when present. The file's truncation and
    /// padding settings are dropped, as transformers drops them unless asked.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let load_err = |p: &Path, message: String| TokenizerError::Load {
            path: p.display().to_string(),
            message,
        };
        let mut special = parse_tokenizer_json(path).map_err(|m| load_err(path, m))?;
        special
            .with_truncation(None)
            .map_err(|e| load_err(path, e.to_string()))?;
        special.with_padding(None);
        let config_path = path.with_file_name("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => {
                serde_json::from_str(&text).map_err(|e| load_err(&config_path, e.to_string()))?
            }
            Err(_) => serde_json::Value::Null,
        };
        let specials = hf_specials::specials(&special, &config, &config_path)?;
        Ok(Self::assemble(special, specials))
    }

    /// Stores the tokenizer with its special ids.
    fn assemble(special: tokenizers::Tokenizer, specials: Specials) -> Self {
        Self {
            vocab_size: special.get_vocab_size(true),
            inner: Mutex::new(special),
            specials,
        }
    }

    /// Encodes `text`. With `special`, control tokens written in the text (e.g.
    /// `<|im_start|>`) become their ids; without, they are tokenized as plain text.
    /// The model's [`Specials::prefix`] and [`Specials::suffix`] (BOS/EOS when it asks
    /// for them) are put around the text.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, TokenizerError> {
        let text_ids = self.encode_bare(text, special)?;
        let s = &self.specials;
        Ok([&s.prefix[..], &text_ids, &s.suffix[..]].concat())
    }

    /// Encodes a prompt rendered by a chat template: control tokens written in it become
    /// their ids, and nothing is added, so a template that writes `{{ bos_token }}`
    /// yields exactly one BOS (transformers' `apply_chat_template` tokenizes with
    /// `add_special_tokens=False` the same way).
    pub fn encode_chat(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_bare(text, true)
    }

    /// The text's own ids, nothing added.
    fn encode_bare(&self, text: &str, special: bool) -> Result<Vec<u32>, TokenizerError> {
        let mut tk = self.lock();
        tk.set_encode_special_tokens(!special);
        let encoding = tk.encode(text, false).map_err(backend)?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Decodes `ids` to text; `skip_special` drops control tokens such as `<|im_end|>`.
    /// Bytes that do not form valid UTF-8 are rendered as U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(TokenizerError::TokenOutOfRange { id, vocab_size });
        }
        self.lock().decode(ids, skip_special).map_err(backend)
    }

    /// The tokenizer; a panic elsewhere while it was held cannot corrupt it (every call
    /// sets what it needs), so a poisoned lock is taken over.
    fn lock(&self) -> std::sync::MutexGuard<'_, tokenizers::Tokenizer> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts an incremental decoder for streaming generated text.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }

    /// The text of one token as the decoder renders it on its own (specials included;
    /// a partial UTF-8 sequence shows as U+FFFD — use [`StreamDecoder`] for output).
    pub fn token_to_piece(&self, id: u32) -> Result<String, TokenizerError> {
        self.decode(&[id], false)
    }

    /// The beginning-of-sequence id, if the vocabulary has one.
    pub fn bos(&self) -> Option<u32> {
        self.specials.bos
    }

    /// The end-of-sequence id, if the vocabulary has one.
    pub fn eos(&self) -> Option<u32> {
        self.specials.eos
    }

    /// The special ids and the model's BOS/EOS policy.
    pub fn specials(&self) -> &Specials {
        &self.specials
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}
