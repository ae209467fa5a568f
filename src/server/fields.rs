//! Which request fields the server reads, which it may ignore because they cannot change
//! what is generated, and which it refuses by name: a field that would change the
//! result and is not implemented is a 400 naming it (unless it holds its neutral value),
//! and so is a field OpenAI does not define, as OpenAI answers it.

use serde_json::{Map, Value};

use super::error::ApiError;
use super::reply::Kind;

/// Fields both endpoints read (`top_k`, `min_p`, `repetition_penalty` and `ignore_eos`
/// are vLLM's and llama-server's sampling extensions, which OpenAI does not define; the
/// `guided_*` fields and `structured_outputs` vLLM's structured output, `json_schema`
/// llama-server's).
const READ: [&str; 24] = [
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "top_k",
    "min_p",
    "repetition_penalty",
    "ignore_eos",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
    "json_schema",
];

/// Fields only the chat endpoint reads.
const READ_CHAT: [&str; 6] = [
    "messages",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
];

/// Fields only the completions endpoint reads (`best_of` when it equals `n`).
const READ_TEXT: [&str; 3] = ["prompt", "best_of", "echo"];

/// Fields that cannot change the generated tokens (bookkeeping, storage, caching and
/// latency hints): accepted and ignored.
const IGNORED: [&str; 8] = [
    "user",
    "metadata",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prediction",
];

/// Fields of the chat endpoint that change the result and are not implemented, with
/// the neutral value each may hold.
const UNSUPPORTED_CHAT: [(&str, Neutral); 7] = [
    ("grammar", Neutral::EmptyString),
    ("functions", Neutral::Null),
    ("function_call", Neutral::Null),
    ("modalities", Neutral::TextModality),
    ("audio", Neutral::Null),
    ("reasoning_effort", Neutral::Null),
    ("web_search_options", Neutral::Null),
];

/// Fields of the completions endpoint that change the result and are not implemented
/// (`grammar` is llama-server's GBNF, which has no converter here).
const UNSUPPORTED_TEXT: [(&str, Neutral); 2] = [
    ("suffix", Neutral::EmptyString),
    ("grammar", Neutral::EmptyString),
];

/// Fields of a chat message that change the prompt and are not implemented (`role`,
/// `content`, `tool_calls` and `tool_call_id` are read).
const UNSUPPORTED_MESSAGE: [(&str, Neutral); 4] = [
    ("name", Neutral::Null),
    ("function_call", Neutral::Null),
    ("audio", Neutral::Null),
    ("refusal", Neutral::Null),
];

/// The value an unimplemented field may hold because it asks for nothing; null always
/// counts as absent.
#[derive(Clone, Copy)]
enum Neutral {
    Null,
    EmptyString,
    /// `["text"]`.
    TextModality,
}

impl Neutral {
    fn holds(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) => true,
            (Neutral::EmptyString, Value::String(s)) => s.is_empty(),
            (Neutral::TextModality, Value::Array(a)) => {
                a.len() == 1 && a[0].as_str() == Some("text")
            }
            _ => false,
        }
    }
}

/// Refuses the first field of a `kind` request body that is unknown, or known but not
/// implemented and not neutral.
pub(crate) fn check_request(body: &Map<String, Value>, kind: Kind) -> Result<(), ApiError> {
    let (own, unsupported): (&[&str], &[(&str, Neutral)]) = match kind {
        Kind::Chat => (&READ_CHAT, &UNSUPPORTED_CHAT),
        Kind::Text => (&READ_TEXT, &UNSUPPORTED_TEXT),
    };
    for (key, value) in body {
        let key = key.as_str();
        if READ.contains(&key) || own.contains(&key) || IGNORED.contains(&key) {
            continue;
        }
        check_field(key, key, value, unsupported)?;
    }
    Ok(())
}

/// Refuses the first field of chat message `i` that is unknown, or known but not
/// implemented and not neutral.
pub(crate) fn check_message(i: usize, message: &Map<String, Value>) -> Result<(), ApiError> {
    for (key, value) in message {
        if ["role", "content", "tool_calls", "tool_call_id"].contains(&key.as_str()) {
            continue;
        }
        check_field(
            &format!("messages[{i}].{key}"),
            key,
            value,
            &UNSUPPORTED_MESSAGE,
        )?;
    }
    Ok(())
}

fn check_field(
    param: &str,
    key: &str,
    value: &Value,
    unsupported: &[(&str, Neutral)],
) -> Result<(), ApiError> {
    match unsupported.iter().find(|(name, _)| *name == key) {
        Some((_, neutral)) if neutral.holds(value) => Ok(()),
        Some(_) => Err(ApiError::invalid(
            "unsupported_parameter",
            Some(param),
            format!("Unsupported parameter: '{param}' is not supported by this server yet."),
        )),
        None => Err(unknown(param)),
    }
}

/// Refuses the first key of the object at `path` that is not in `known` (the fields
/// of a nested object the server reads, such as `response_format`'s).
pub(crate) fn check_keys(
    object: &Map<String, Value>,
    path: &str,
    known: &[&str],
) -> Result<(), ApiError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(other) => Err(unknown(&format!("{path}.{other}"))),
        None => Ok(()),
    }
}

/// A 400 `unknown_parameter` naming `param`, as OpenAI answers a field it does not
/// define.
fn unknown(param: &str) -> ApiError {
    ApiError::invalid(
        "unknown_parameter",
        Some(param),
        format!("Unknown parameter: '{param}'."),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(kind: Kind, body: Value) -> Result<(), (&'static str, Option<String>)> {
        check_request(body.as_object().unwrap(), kind).map_err(|e| (e.code, e.param))
    }

    #[test]
    fn unimplemented_fields_are_refused_unless_neutral() {
        let refused = |kind, body: Value, param: &str| {
            assert_eq!(
                check(kind, body),
                Err(("unsupported_parameter", Some(param.to_string())))
            );
        };
        refused(Kind::Chat, json!({"functions": []}), "functions");
        refused(
            Kind::Chat,
            json!({"function_call": "auto"}),
            "function_call",
        );
        refused(Kind::Text, json!({"suffix": "end"}), "suffix");

        let neutral = json!({
            "tools": null, "response_format": {"type": "text"}, "modalities": ["text"],
            "user": "u", "store": false,
        });
        assert_eq!(check(Kind::Chat, neutral), Ok(()));
        let read = json!({"logit_bias": {"1": 5}, "frequency_penalty": 1, "presence_penalty": 1});
        assert_eq!(check(Kind::Chat, read.clone()), Ok(()));
        assert_eq!(check(Kind::Text, read), Ok(()));
        let text = json!({"echo": false, "suffix": "", "best_of": 1});
        assert_eq!(check(Kind::Text, text), Ok(()));
    }

    #[test]
    fn unknown_fields_and_the_other_endpoints_fields_are_refused() {
        let unknown = |kind, body: Value, param: &str| {
            assert_eq!(
                check(kind, body),
                Err(("unknown_parameter", Some(param.to_string())))
            );
        };
        unknown(Kind::Chat, json!({"mirostat": 2}), "mirostat");
        unknown(Kind::Chat, json!({"prompt": "x"}), "prompt");
        unknown(Kind::Text, json!({"messages": []}), "messages");
        unknown(Kind::Text, json!({"top_logprobs": 2}), "top_logprobs");
        unknown(Kind::Text, json!({"tools": []}), "tools");
        let format = json!({"response_format": {"type": "json_object"}});
        unknown(Kind::Text, format, "response_format");
        let message = json!({"role": "user", "content": "x", "name": "bob"});
        let error = check_message(2, message.as_object().unwrap()).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[2].name"));
        let message =
            json!({"role": "assistant", "content": "x", "tool_calls": [], "refusal": null});
        assert!(check_message(0, message.as_object().unwrap()).is_ok());
    }
}
