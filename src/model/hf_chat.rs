//! The chat side of a Hugging Face model directory: its chat template and the token ids
//! that end a generation, read as transformers 5 reads them.
//!
//! * The template is `chat_template.jinja` when present (transformers saves it there
//!   and prefers it), else `tokenizer_config.json`'s `chat_template`: a string, or a
//!   list of `{name, template}` of which the one named `default` is used.
//! * Generation stops at every id of `generation_config.json`'s `eos_token_id` (an int
//!   or a list), or of `config.json`'s when there is no generation config (transformers
//!   derives the generation config from it), and at the tokenizer's EOS.

use std::path::Path;

use serde_json::Value;

use super::ModelError;

/// The chat template source of the model in `dir`, if it has one.
pub(super) fn template_source(
    dir: &Path,
    tokenizer_config: &Value,
) -> Result<Option<String>, ModelError> {
    let jinja = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&jinja) {
        Ok(text) => return Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(ModelError::io(jinja, e)),
    }
    let config_path = dir.join("tokenizer_config.json");
    let bad = |detail: String| config_key_error(&config_path, "chat_template", detail);
    match &tokenizer_config["chat_template"] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Array(list) => {
            let named = |item: &Value| item["name"].as_str() == Some("default");
            let default = list.iter().find(|item| named(item)).ok_or_else(|| {
                bad("a list of templates without one named \"default\"".to_string())
            })?;
            match &default["template"] {
                Value::String(s) => Ok(Some(s.clone())),
                other => Err(bad(format!(
                    "the \"default\" entry's template is {other}, not a string"
                ))),
            }
        }
        other => Err(bad(format!(
            "expected a string or a list of named templates, found {other}"
        ))),
    }
}

/// The ids that end a generation for the model in `dir`: the generation config's (or
/// the model config's) `eos_token_id`, then the tokenizer's EOS; each below `n_vocab`.
pub(super) fn stop_ids(
    dir: &Path,
    tokenizer_eos: Option<u32>,
    n_vocab: usize,
) -> Result<Vec<u32>, ModelError> {
    let generation = dir.join("generation_config.json");
    let source = if generation.exists() {
        generation
    } else {
        dir.join("config.json")
    };
    let mut ids = match std::fs::read_to_string(&source) {
        Ok(text) => {
            let json: Value = serde_json::from_str(&text)
                .map_err(|e| ModelError::format(&source, e.to_string()))?;
            eos_ids(&source, &json["eos_token_id"], n_vocab)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(ModelError::io(source, e)),
    };
    ids.extend(tokenizer_eos.filter(|id| !ids.contains(id)));
    Ok(ids)
}

/// `eos_token_id` as an int, a list of ints, or null.
fn eos_ids(path: &Path, value: &Value, n_vocab: usize) -> Result<Vec<u32>, ModelError> {
    let one = |v: &Value| -> Result<u32, ModelError> {
        v.as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .filter(|&id| (id as usize) < n_vocab)
            .ok_or_else(|| {
                config_key_error(
                    path,
                    "eos_token_id",
                    format!("{v} is not an id in the {n_vocab}-token vocabulary"),
                )
            })
    };
    let mut ids = Vec::new();
    match value {
        Value::Null => {}
        Value::Array(list) => {
            for v in list {
                let id = one(v)?;
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        v => ids.push(one(v)?),
    }
    Ok(ids)
}

fn config_key_error(path: &Path, key: &str, detail: String) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        detail: format!("{key}: {detail}"),
    }
}
