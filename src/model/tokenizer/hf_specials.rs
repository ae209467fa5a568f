//! Special tokens of a Hugging Face tokenizer directory: BOS/EOS/PAD from
//! `tokenizer_config.json`, and the ids that plain encoding adds around the text, taken
//! from `tokenizer.json`'s post-processor.
//!
//! The reference is transformers 5, which adds exactly what the post-processor adds
//! (Llama 3's `TemplateProcessing` puts `<|begin_of_text|>` first; a `ByteLevel` one adds
//! nothing) and no longer reads `add_bos_token`/`add_eos_token`. transformers 4 let those
//! flags rebuild the post-processor of Llama and Gemma tokenizers, so a checkpoint whose
//! flags contradict its post-processor means different prompts to the two versions: it
//! is refused, naming the key.

use std::path::Path;

use serde_json::Value;

use super::{Specials, TokenizerError};

/// Text whose tokens the post-processor probe looks for; any vocabulary encodes it to
/// at least one id (byte-level BPE and byte fallback cover every byte).
const PROBE: &str = "a";

/// The special tokens of a `tokenizer.json` (already loaded as `tk`) and the
/// `tokenizer_config.json` next to it (`Value::Null` when there is none).
pub(super) fn specials(
    tk: &tokenizers::Tokenizer,
    config: &Value,
    config_path: &Path,
) -> Result<Specials, TokenizerError> {
    let id = |key: &str| -> Result<Option<u32>, TokenizerError> {
        match token_text(config, key).map_err(|detail| bad(config_path, key, detail))? {
            None => Ok(None),
            Some(text) => tk.token_to_id(&text).map(Some).ok_or_else(|| {
                bad(
                    config_path,
                    key,
                    format!("{text:?} is not in the vocabulary"),
                )
            }),
        }
    };
    let (bos, eos, pad) = (id("bos_token")?, id("eos_token")?, id("pad_token")?);
    let (prefix, suffix) = added_by_post_processor(tk)?;
    let flag = |key: &str| match &config[key] {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        other => Err(bad(
            config_path,
            key,
            format!("expected a bool, found {other}"),
        )),
    };
    let checks = [
        ("add_bos_token", "first", bos, prefix.first()),
        ("add_eos_token", "last", eos, suffix.last()),
    ];
    for (key, position, special, added) in checks {
        let Some(wanted) = flag(key)? else { continue };
        let adds = special.is_some() && special.as_ref() == added;
        if wanted != adds {
            return Err(bad(
                config_path,
                key,
                format!(
                    "is {wanted}, but tokenizer.json's post-processor {} the token {} \
                     (ids added: {prefix:?} before, {suffix:?} after); transformers 4 and 5 \
                     disagree on such a checkpoint, so it is refused",
                    if adds { "adds" } else { "does not add" },
                    match special {
                        Some(id) => format!("{id} {position}"),
                        None => "(none is set)".into(),
                    },
                ),
            ));
        }
    }
    Ok(Specials {
        bos,
        eos,
        pad,
        prefix,
        suffix,
    })
}

/// The text of special token `key` (`bos_token`, ...): a string or an `AddedToken`
/// object's `content`; `None` when absent or null.
pub(crate) fn token_text(config: &Value, key: &str) -> Result<Option<String>, String> {
    match &config[key] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err("an AddedToken object without a string \"content\"".into()),
        },
        other => Err(format!(
            "expected a string or an AddedToken object, found {other}"
        )),
    }
}

/// The ids the post-processor puts before and after a single sequence, found by
/// encoding [`PROBE`] with and without special tokens.
fn added_by_post_processor(
    tk: &tokenizers::Tokenizer,
) -> Result<(Vec<u32>, Vec<u32>), TokenizerError> {
    let encode = |add: bool| {
        tk.encode(PROBE, add)
            .map(|e| e.get_ids().to_vec())
            .map_err(super::backend)
    };
    let (plain, full) = (encode(false)?, encode(true)?);
    let at = (0..=full.len().saturating_sub(plain.len()))
        .find(|&i| full[i..].starts_with(&plain))
        .filter(|_| !plain.is_empty());
    match at {
        Some(i) => Ok((full[..i].to_vec(), full[i + plain.len()..].to_vec())),
        None => Err(TokenizerError::Backend(format!(
            "tokenizer.json's post-processor rewrites the text's own ids ({PROBE:?}: \
             {plain:?} becomes {full:?}), which is not supported"
        ))),
    }
}

fn bad(path: &Path, key: &str, detail: String) -> TokenizerError {
    TokenizerError::Config {
        file: path.display().to_string(),
        key: key.to_owned(),
        detail,
    }
}
