//! Reads OpenAI request bodies field by field, so that every missing field, wrong type
//! and bad value gets a 400 naming the field, as OpenAI answers.

use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::fields;
pub(crate) use super::reply::Kind;
use super::shapes;
pub(crate) use super::shapes::Format;
use crate::model::chat_template::Message;

/// Roles the chat endpoint accepts; `developer` (OpenAI's newer name) counts as system.
const ROLES: [&str; 5] = ["system", "user", "assistant", "developer", "tool"];

/// Most stop strings a request may give.
const MAX_STOP_STRINGS: usize = 16;

/// Longest stop string, in bytes: far past any delimiter a client uses, short enough
/// that matching it against every token's text stays cheap.
pub(crate) const MAX_STOP_BYTES: usize = 4096;

/// Most messages a chat request may hold: more than any context this server runs
/// holds once each message's template tokens are counted.
pub(crate) const MAX_MESSAGES: usize = 4096;

/// Most choices (`n`) one request may ask for.
pub(crate) const MAX_CHOICES: usize = 16;

/// Most prompts one completion request may list (each a job of `n` choices).
pub(crate) const MAX_PROMPTS: usize = 16;

/// Most alternatives a chat request's `top_logprobs` may ask for (OpenAI's limit).
const MAX_TOP_LOGPROBS: i64 = 20;

/// Most alternatives a completion request's `logprobs` may ask for (OpenAI's limit).
const MAX_LEGACY_LOGPROBS: i64 = 5;

/// The top-level object of a request body.
pub(crate) type Body = Map<String, Value>;

/// Parses a body as a JSON object.
pub(crate) fn parse_body(bytes: &[u8]) -> Result<Body, ApiError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid(
            "invalid_request",
            None,
            "The request body must be a JSON object.",
        )),
        Err(e) => Err(ApiError::invalid(
            "invalid_json",
            None,
            format!("We could not parse the JSON body of your request: {e}."),
        )),
    }
}

/// Largest `top_k` (a vocabulary is smaller).
const MAX_TOP_K: i64 = 1 << 20;

/// Largest magnitude of `frequency_penalty` and `presence_penalty` (OpenAI's range).
const MAX_PENALTY: f64 = 2.0;

/// Largest magnitude of a `logit_bias` value (OpenAI's range).
const MAX_LOGIT_BIAS: f64 = 100.0;

/// Sampling and stopping settings common to both completion endpoints.
#[derive(Debug, Clone, Default)]
pub(crate) struct Params {
    /// The `model` field, when present.
    pub model: Option<String>,
    /// Softmax temperature (OpenAI's default is 1).
    pub temperature: f32,
    /// Nucleus sampling mass (1 = off).
    pub top_p: f32,
    /// Most tokens to generate, when given.
    pub max_tokens: Option<usize>,
    /// The field `max_tokens` came from (`max_tokens` or `max_completion_tokens`), for
    /// errors about its value.
    pub max_tokens_field: &'static str,
    /// Texts that end the generation.
    pub stop: Vec<String>,
    /// Random seed, when given.
    pub seed: Option<u64>,
    /// Whether to answer with Server-Sent Events.
    pub stream: bool,
    /// `stream_options.include_usage`: send a last chunk with the token counts.
    pub include_usage: bool,
    /// How many choices to generate for the prompt.
    pub n: usize,
    /// When log-probabilities are asked for: how many alternatives per token.
    pub logprobs: Option<usize>,
    /// vLLM's `top_k`: keep the `k` most likely tokens (0 = off; -1 is read as 0).
    pub top_k: usize,
    /// vLLM's `min_p`: drop tokens less likely than this times the most likely (0 = off).
    pub min_p: f32,
    /// vLLM's `repetition_penalty` over the recent tokens (1 = off).
    pub repetition_penalty: f32,
    /// Subtracted per time a token was generated (0 = off).
    pub frequency_penalty: f32,
    /// Subtracted once from every generated token (0 = off).
    pub presence_penalty: f32,
    /// `(token id, bias)` added to those tokens' logits; ids are checked against the
    /// vocabulary by the caller, which knows it.
    pub logit_bias: Vec<(u32, f32)>,
    /// vLLM's `ignore_eos`: end tokens do not stop the generation.
    pub ignore_eos: bool,
    /// What shape the reply's text takes (`response_format`, `guided_json`, ...).
    pub format: Format,
    /// A completion's `echo`: the reply's text (and log-probabilities) start with the
    /// prompt's.
    pub echo: bool,
    /// A chat's `tools`, `tool_choice` and `parallel_tool_calls`, when tools are given.
    pub tools: Option<super::tools::Tools>,
}

impl Params {
    /// Reads the sampling and output fields of a `kind` request body, after refusing
    /// the fields it does not implement.
    pub fn parse(body: &Body, kind: Kind) -> Result<Params, ApiError> {
        fields::check_request(body, kind)?;
        let model = opt_str(body, "model")?;
        let temperature = opt_f64(body, "temperature")?.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::bad_value(
                "temperature",
                format!("temperature must be between 0 and 2, got {temperature}."),
            ));
        }
        let top_p = opt_f64(body, "top_p")?.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&top_p) {
            return Err(ApiError::bad_value(
                "top_p",
                format!("top_p must be between 0 and 1, got {top_p}."),
            ));
        }
        // Chat's newer name for the same limit; `max_tokens` wins when both are given,
        // and an error names the field the value came from.
        let (limit_field, max_tokens) = match opt_int(body, "max_tokens")? {
            Some(n) => ("max_tokens", Some(n)),
            None => (
                "max_completion_tokens",
                opt_int(body, "max_completion_tokens")?,
            ),
        };
        let echo = opt_bool(body, "echo")?.unwrap_or(false);
        let stream = opt_bool(body, "stream")?.unwrap_or(false);
        let max_tokens = match max_tokens {
            // With `echo`, 0 scores the prompt and generates nothing, as OpenAI allows.
            Some(0) if echo => Some(0),
            Some(n) if n <= 0 => {
                return Err(ApiError::bad_value(
                    limit_field,
                    format!("{limit_field} must be at least 1, got {n}."),
                ))
            }
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            None => None,
        };
        let seed = match body.get("seed") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .or_else(|| v.as_i64().map(|s| s as u64))
                    .ok_or_else(|| ApiError::wrong_type("seed", "an integer"))?,
            ),
        };
        let n = opt_int(body, "n")?.unwrap_or(1);
        if !(1..=MAX_CHOICES as i64).contains(&n) {
            return Err(ApiError::bad_value(
                "n",
                format!("n must be between 1 and {MAX_CHOICES}, got {n}."),
            ));
        }
        if let Some(best_of) = opt_int(body, "best_of")? {
            if best_of != n {
                return Err(ApiError::invalid(
                    "unsupported_parameter",
                    Some("best_of"),
                    format!("best_of other than n ({n}) is not supported, got {best_of}."),
                ));
            }
        }
        let top_k = match opt_int(body, "top_k")?.unwrap_or(0) {
            -1 => 0,
            k if (0..=MAX_TOP_K).contains(&k) => k as usize,
            k => {
                return Err(ApiError::bad_value(
                    "top_k",
                    format!("top_k must be -1 (off) or between 0 and {MAX_TOP_K}, got {k}."),
                ))
            }
        };
        let min_p = opt_f64(body, "min_p")?.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(ApiError::bad_value(
                "min_p",
                format!("min_p must be between 0 and 1, got {min_p}."),
            ));
        }
        let repetition_penalty = opt_f64(body, "repetition_penalty")?.unwrap_or(1.0);
        if !(repetition_penalty > 0.0 && repetition_penalty <= 10.0) {
            return Err(ApiError::bad_value(
                "repetition_penalty",
                format!(
                    "repetition_penalty must be above 0 and at most 10, got {repetition_penalty}."
                ),
            ));
        }
        let penalty = |key: &'static str| -> Result<f32, ApiError> {
            let value = opt_f64(body, key)?.unwrap_or(0.0);
            if !(-MAX_PENALTY..=MAX_PENALTY).contains(&value) {
                return Err(ApiError::bad_value(
                    key,
                    format!("{key} must be between -{MAX_PENALTY} and {MAX_PENALTY}, got {value}."),
                ));
            }
            Ok(value as f32)
        };
        let include_usage = match body.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(Value::Object(o)) => opt_bool(o, "include_usage")?.unwrap_or(false),
            Some(_) => return Err(ApiError::wrong_type("stream_options", "an object")),
        };
        Ok(Params {
            model,
            temperature: temperature as f32,
            top_p: top_p as f32,
            max_tokens,
            max_tokens_field: limit_field,
            stop: stop_strings(body)?,
            seed,
            stream,
            include_usage,
            n: n as usize,
            logprobs: match kind {
                Kind::Chat => chat_logprobs(body)?,
                Kind::Text => legacy_logprobs(body)?,
            },
            top_k,
            min_p: min_p as f32,
            repetition_penalty: repetition_penalty as f32,
            frequency_penalty: penalty("frequency_penalty")?,
            presence_penalty: penalty("presence_penalty")?,
            logit_bias: logit_bias(body)?,
            ignore_eos: opt_bool(body, "ignore_eos")?.unwrap_or(false),
            format: shapes::format(body, kind)?,
            echo,
            tools: match kind {
                Kind::Chat => super::tools::read(body)?,
                Kind::Text => None,
            },
        })
    }
}

/// `logit_bias`: an object from token ids (as decimal strings, OpenAI's form) to biases
/// between -100 and 100.
fn logit_bias(body: &Body) -> Result<Vec<(u32, f32)>, ApiError> {
    let map = match body.get("logit_bias") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(ApiError::wrong_type("logit_bias", "an object")),
    };
    map.iter()
        .map(|(key, value)| {
            let id = key.parse::<u32>().map_err(|_| {
                ApiError::bad_value(
                    "logit_bias",
                    format!("logit_bias keys must be token ids (non-negative integers), got {key:?}."),
                )
            })?;
            match value.as_f64() {
                Some(bias) if (-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(&bias) => {
                    Ok((id, bias as f32))
                }
                _ => Err(ApiError::bad_value(
                    "logit_bias",
                    format!(
                        "logit_bias values must be numbers between -{MAX_LOGIT_BIAS} and {MAX_LOGIT_BIAS}, got {value} for token {id}."
                    ),
                )),
            }
        })
        .collect()
}

/// A chat request's `logprobs` (a boolean) and `top_logprobs` (0 to 20, only with
/// `logprobs: true`).
fn chat_logprobs(body: &Body) -> Result<Option<usize>, ApiError> {
    let wanted = opt_bool(body, "logprobs")?.unwrap_or(false);
    match opt_int(body, "top_logprobs")? {
        Some(k) if !(0..=MAX_TOP_LOGPROBS).contains(&k) => Err(ApiError::bad_value(
            "top_logprobs",
            format!("top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {k}."),
        )),
        Some(_) if !wanted => Err(ApiError::bad_value(
            "top_logprobs",
            "top_logprobs requires logprobs to be true.",
        )),
        k => Ok(wanted.then(|| k.unwrap_or(0) as usize)),
    }
}

/// A completion request's `logprobs`: how many alternatives per token (0 to 5).
fn legacy_logprobs(body: &Body) -> Result<Option<usize>, ApiError> {
    match opt_int(body, "logprobs")? {
        Some(k) if !(0..=MAX_LEGACY_LOGPROBS).contains(&k) => Err(ApiError::bad_value(
            "logprobs",
            format!("logprobs must be between 0 and {MAX_LEGACY_LOGPROBS}, got {k}."),
        )),
        k => Ok(k.map(|k| k as usize)),
    }
}

/// The `messages` of a chat request, checked and flattened to text.
pub(crate) fn messages(body: &Body) -> Result<Vec<Message>, ApiError> {
    let list = match body.get("messages") {
        None | Some(Value::Null) => return Err(ApiError::missing("messages")),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::wrong_type("messages", "an array")),
    };
    if list.is_empty() {
        return Err(ApiError::bad_value(
            "messages",
            "messages must hold at least one message.",
        ));
    }
    if list.len() > MAX_MESSAGES {
        return Err(ApiError::bad_value(
            "messages",
            format!(
                "messages holds {} messages; at most {MAX_MESSAGES} are supported.",
                list.len()
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, item)| message(i, item))
        .collect()
}

fn message(i: usize, item: &Value) -> Result<Message, ApiError> {
    let at = |field: &str| format!("messages[{i}].{field}");
    let Value::Object(obj) = item else {
        return Err(ApiError::wrong_type(&format!("messages[{i}]"), "an object"));
    };
    fields::check_message(i, obj)?;
    let role = match obj.get("role") {
        None | Some(Value::Null) => return Err(ApiError::missing(&at("role"))),
        Some(Value::String(role)) => role.as_str(),
        Some(_) => return Err(ApiError::wrong_type(&at("role"), "a string")),
    };
    if !ROLES.contains(&role) {
        return Err(ApiError::bad_value(
            &at("role"),
            format!("Unknown role '{role}': expected system, user, assistant, developer or tool."),
        ));
    }
    let content = match obj.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => text_parts(&at("content"), parts)?,
        Some(_) => {
            return Err(ApiError::wrong_type(
                &at("content"),
                "a string or an array of text parts",
            ))
        }
    };
    let role = if role == "developer" { "system" } else { role };
    let mut message = Message::new(role, content);
    match obj.get("tool_call_id") {
        None | Some(Value::Null) if role == "tool" => {
            return Err(ApiError::missing(&at("tool_call_id")))
        }
        None | Some(Value::Null) => {}
        Some(Value::String(id)) if role == "tool" => message.tool_call_id = Some(id.clone()),
        Some(Value::String(_)) => {
            return Err(ApiError::bad_value(
                &at("tool_call_id"),
                "Only a message of role 'tool' carries a tool_call_id.",
            ))
        }
        Some(_) => return Err(ApiError::wrong_type(&at("tool_call_id"), "a string")),
    }
    match obj.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(calls)) if calls.is_empty() => {}
        Some(Value::Array(calls)) if role == "assistant" => {
            let calls = calls
                .iter()
                .enumerate()
                .map(|(j, call)| tool_call(&at(&format!("tool_calls[{j}]")), call))
                .collect::<Result<Vec<Value>, ApiError>>()?;
            message.tool_calls = Some(Value::Array(calls));
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::bad_value(
                &at("tool_calls"),
                "Only a message of role 'assistant' carries tool_calls.",
            ))
        }
        Some(_) => return Err(ApiError::wrong_type(&at("tool_calls"), "an array")),
    }
    Ok(message)
}

/// An assistant message's earlier tool call, as templates read it: `{"id", "type":
/// "function", "function": {"name", "arguments"}}` with `arguments` (a JSON text in the
/// request) parsed to its object, as chat templates expect.
fn tool_call(param: &str, call: &Value) -> Result<Value, ApiError> {
    let Value::Object(obj) = call else {
        return Err(ApiError::wrong_type(param, "an object"));
    };
    fields::check_keys(obj, param, &["id", "type", "function"])?;
    if obj
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("function")
        != "function"
    {
        return Err(ApiError::bad_value(
            &format!("{param}.type"),
            "Only tool calls of type 'function' are supported.",
        ));
    }
    let id = match obj.get("id") {
        Some(Value::String(id)) => id.clone(),
        _ => return Err(ApiError::missing(&format!("{param}.id"))),
    };
    let Some(Value::Object(function)) = obj.get("function") else {
        return Err(ApiError::missing(&format!("{param}.function")));
    };
    fields::check_keys(
        function,
        &format!("{param}.function"),
        &["name", "arguments"],
    )?;
    let name = match function.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => return Err(ApiError::missing(&format!("{param}.function.name"))),
    };
    let arguments = match function.get("arguments") {
        Some(Value::String(text)) => serde_json::from_str::<Value>(text).map_err(|e| {
            ApiError::bad_value(
                &format!("{param}.function.arguments"),
                format!("The arguments are not JSON: {e}."),
            )
        })?,
        Some(Value::Object(args)) => Value::Object(args.clone()),
        _ => {
            return Err(ApiError::wrong_type(
                &format!("{param}.function.arguments"),
                "a JSON text",
            ))
        }
    };
    Ok(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
}

/// Joins the `text` of content parts; other part types are refused.
fn text_parts(param: &str, parts: &[Value]) -> Result<String, ApiError> {
    let mut text = String::new();
    for part in parts {
        match (part.get("type"), part.get("text")) {
            (Some(Value::String(kind)), Some(Value::String(t))) if kind == "text" => {
                text.push_str(t)
            }
            _ => {
                return Err(ApiError::bad_value(
                    param,
                    format!(
                        "{param}: only content parts of type 'text' with a string 'text' are \
                         supported."
                    ),
                ))
            }
        }
    }
    Ok(text)
}

/// The prompts of a completion request: a string or token ids (one prompt), or a list
/// of strings or of token-id lists (up to [`MAX_PROMPTS`]).
pub(crate) fn prompts(body: &Body) -> Result<Vec<Prompt>, ApiError> {
    let forms = "prompt must be a string, token ids, or a list of strings or of token-id lists.";
    let list = match body.get("prompt") {
        None | Some(Value::Null) => return Err(ApiError::missing("prompt")),
        Some(Value::String(text)) => return Ok(vec![Prompt::Text(text.clone())]),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::wrong_type("prompt", "a string")),
    };
    if let [Value::Number(_), ..] = list.as_slice() {
        return Ok(vec![token_ids(list)?]);
    }
    if list.is_empty() || list.len() > MAX_PROMPTS {
        return Err(ApiError::bad_value(
            "prompt",
            format!(
                "prompt must list 1 to {MAX_PROMPTS} prompts, got {}.",
                list.len()
            ),
        ));
    }
    list.iter()
        .map(|item| match item {
            Value::String(text) => Ok(Prompt::Text(text.clone())),
            Value::Array(ids) => token_ids(ids),
            _ => Err(ApiError::bad_value("prompt", forms)),
        })
        .collect()
}

/// A completion's prompt: text to tokenize, or token ids to use as they are (what
/// evaluation harnesses send, so that scores are of exactly their tokens).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Prompt {
    /// Text, tokenized as plain text (the model's BOS added when it adds one).
    Text(String),
    /// Token ids, used verbatim (checked against the vocabulary by the caller).
    Ids(Vec<u32>),
}

/// A non-empty list of token ids.
fn token_ids(list: &[Value]) -> Result<Prompt, ApiError> {
    if list.is_empty() {
        return Err(ApiError::bad_value("prompt", "The prompt is empty."));
    }
    list.iter()
        .map(|v| {
            v.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    ApiError::bad_value(
                        "prompt",
                        format!("prompt token ids must be non-negative integers, got {v}."),
                    )
                })
        })
        .collect::<Result<Vec<u32>, ApiError>>()
        .map(Prompt::Ids)
}

/// The `stop` strings: a string or a list of at most [`MAX_STOP_STRINGS`], each at most
/// [`MAX_STOP_BYTES`] long.
fn stop_strings(body: &Body) -> Result<Vec<String>, ApiError> {
    let stops: Vec<String> = match body.get("stop") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(list)) if list.len() > MAX_STOP_STRINGS => Err(ApiError::bad_value(
            "stop",
            format!("At most {MAX_STOP_STRINGS} stop strings are supported."),
        )),
        Some(Value::Array(list)) => list
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::wrong_type("stop", "a string or a list of strings"))
            })
            .collect(),
        Some(_) => Err(ApiError::wrong_type(
            "stop",
            "a string or a list of strings",
        )),
    }?;
    if let Some(long) = stops.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad_value(
            "stop",
            format!(
                "A stop string is {} bytes long; at most {MAX_STOP_BYTES} are supported.",
                long.len()
            ),
        ));
    }
    Ok(stops)
}

fn opt_str(body: &Body, key: &str) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::wrong_type(key, "a string")),
    }
}

fn opt_f64(body: &Body, key: &str) -> Result<Option<f64>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(ApiError::wrong_type(key, "a number")),
    }
}

fn opt_int(body: &Body, key: &str) -> Result<Option<i64>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(_)) => Ok(Some(i64::MAX)),
            _ => Err(ApiError::wrong_type(key, "an integer")),
        },
        Some(_) => Err(ApiError::wrong_type(key, "an integer")),
    }
}

fn opt_bool(body: &Body, key: &str) -> Result<Option<bool>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::wrong_type(key, "a boolean")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Body {
        parse_body(text.as_bytes()).unwrap()
    }

    #[test]
    fn defaults_follow_openai() {
        let p = Params::parse(&body("{}"), Kind::Chat).unwrap();
        assert_eq!((p.temperature, p.top_p, p.stream), (1.0, 1.0, false));
        assert!(p.max_tokens.is_none() && p.stop.is_empty() && p.seed.is_none());
    }

    #[test]
    fn fields_are_read_and_checked() {
        let p = Params::parse(
            &body(
                r#"{"max_tokens": 5, "stop": ["a", "b"], "seed": -1, "stream": true,
                "stream_options": {"include_usage": true}, "temperature": 0}"#,
            ),
            Kind::Chat,
        )
        .unwrap();
        assert_eq!(p.max_tokens, Some(5));
        assert_eq!(p.stop, ["a", "b"]);
        assert_eq!(p.seed, Some(u64::MAX));
        assert!(p.stream && p.include_usage);
        let code = |text: &str| Params::parse(&body(text), Kind::Chat).unwrap_err().code;
        assert_eq!(code(r#"{"max_tokens": 0}"#), "invalid_value");
        assert_eq!(code(r#"{"max_tokens": 1.5}"#), "invalid_type");
        assert_eq!(code(r#"{"temperature": "hot"}"#), "invalid_type");
        assert_eq!(code(r#"{"temperature": 3}"#), "invalid_value");
        assert_eq!(code(r#"{"stop": 3}"#), "invalid_type");
        assert_eq!(code(r#"{"n": 0}"#), "invalid_value");
        assert_eq!(code(r#"{"n": 17}"#), "invalid_value");
        assert_eq!(code(r#"{"tools": []}"#), "invalid_value");
        assert_eq!(code(r#"{"functions": [{}]}"#), "unsupported_parameter");
        let param = |text: &str| Params::parse(&body(text), Kind::Chat).unwrap_err().param;
        let long = format!(r#"{{"stop": ["{}"]}}"#, "x".repeat(MAX_STOP_BYTES + 1));
        assert_eq!(param(&long).as_deref(), Some("stop"));
        let fits = format!(r#"{{"stop": "{}"}}"#, "x".repeat(MAX_STOP_BYTES));
        assert_eq!(
            Params::parse(&body(&fits), Kind::Chat).unwrap().stop[0].len(),
            4096
        );
        let newer = param(r#"{"max_completion_tokens": 0}"#);
        assert_eq!(newer.as_deref(), Some("max_completion_tokens"));
        let both = param(r#"{"max_tokens": -1, "max_completion_tokens": 5}"#);
        assert_eq!(both.as_deref(), Some("max_tokens"));
    }

    #[test]
    fn choices_and_logprobs() {
        let chat = |text: &str| Params::parse(&body(text), Kind::Chat);
        let text = |text: &str| Params::parse(&body(text), Kind::Text);
        let p = chat(r#"{"n": 16, "logprobs": true, "top_logprobs": 20}"#).unwrap();
        assert_eq!((p.n, p.logprobs), (16, Some(20)));
        assert_eq!(chat(r#"{"logprobs": true}"#).unwrap().logprobs, Some(0));
        assert_eq!(chat(r#"{"logprobs": false}"#).unwrap().logprobs, None);
        assert_eq!(text(r#"{"logprobs": 5}"#).unwrap().logprobs, Some(5));
        assert_eq!(text(r#"{"logprobs": 0}"#).unwrap().logprobs, Some(0));
        assert_eq!(text(r#"{"n": 3, "best_of": 3}"#).unwrap().n, 3);
        let refused = |result: Result<Params, ApiError>| {
            let e = result.unwrap_err();
            (e.code, e.param.unwrap_or_default())
        };
        let top_alone = refused(chat(r#"{"top_logprobs": 2}"#));
        assert_eq!(top_alone, ("invalid_value", "top_logprobs".into()));
        let top_many = refused(chat(r#"{"logprobs": true, "top_logprobs": 21}"#));
        assert_eq!(top_many, ("invalid_value", "top_logprobs".into()));
        let int_on_chat = refused(chat(r#"{"logprobs": 2}"#));
        assert_eq!(int_on_chat, ("invalid_type", "logprobs".into()));
        let legacy_many = refused(text(r#"{"logprobs": 6}"#));
        assert_eq!(legacy_many, ("invalid_value", "logprobs".into()));
        let bool_on_text = refused(text(r#"{"logprobs": true}"#));
        assert_eq!(bool_on_text, ("invalid_type", "logprobs".into()));
        let best_of = refused(text(r#"{"best_of": 2}"#));
        assert_eq!(best_of, ("unsupported_parameter", "best_of".into()));
    }

    #[test]
    fn penalties_and_logit_bias() {
        let parse = |text: &str| Params::parse(&body(text), Kind::Chat);
        let p = parse(
            r#"{"frequency_penalty": 0.5, "presence_penalty": -2,
                "logit_bias": {"42": -100, "7": 2.5}}"#,
        )
        .unwrap();
        assert_eq!((p.frequency_penalty, p.presence_penalty), (0.5, -2.0));
        let mut bias = p.logit_bias.clone();
        bias.sort_by_key(|&(id, _)| id);
        assert_eq!(bias, [(7, 2.5), (42, -100.0)]);
        let text = Params::parse(&body(r#"{"logit_bias": {"1": 1}}"#), Kind::Text).unwrap();
        assert_eq!(text.logit_bias, [(1, 1.0)]);
        let neutral = parse(r#"{"logit_bias": null, "frequency_penalty": null}"#).unwrap();
        assert!(neutral.logit_bias.is_empty() && neutral.frequency_penalty == 0.0);
        let refused = |text: &str| {
            let e = parse(text).unwrap_err();
            (e.code, e.param.unwrap_or_default())
        };
        let bad = |param: &str| ("invalid_value", param.to_string());
        assert_eq!(
            refused(r#"{"frequency_penalty": 2.5}"#),
            bad("frequency_penalty")
        );
        assert_eq!(
            refused(r#"{"presence_penalty": -3}"#),
            bad("presence_penalty")
        );
        assert_eq!(refused(r#"{"logit_bias": {"x": 1}}"#), bad("logit_bias"));
        assert_eq!(refused(r#"{"logit_bias": {"-1": 1}}"#), bad("logit_bias"));
        assert_eq!(refused(r#"{"logit_bias": {"1": 101}}"#), bad("logit_bias"));
        assert_eq!(refused(r#"{"logit_bias": {"1": "up"}}"#), bad("logit_bias"));
        let listed = refused(r#"{"logit_bias": [1]}"#);
        assert_eq!(listed, ("invalid_type", "logit_bias".into()));
    }

    #[test]
    fn echo_takes_max_tokens_0_and_stream() {
        let text = |t: &str| Params::parse(&body(t), Kind::Text);
        let p = text(r#"{"echo": true, "max_tokens": 0, "logprobs": 1}"#).unwrap();
        assert!(p.echo && p.max_tokens == Some(0));
        let zero = text(r#"{"max_tokens": 0}"#).unwrap_err();
        assert_eq!(zero.param.as_deref(), Some("max_tokens"));
        let streamed = text(r#"{"echo": true, "stream": true}"#).unwrap();
        assert!(streamed.echo && streamed.stream);
    }

    #[test]
    fn response_format() {
        let parse = |text: &str| Params::parse(&body(text), Kind::Chat);
        let json = parse(r#"{"response_format": {"type": "json_object"}}"#).unwrap();
        assert!(matches!(json.format, Format::Constrained { .. }));
        for plain in [
            "{}",
            r#"{"response_format": null}"#,
            r#"{"response_format": {"type": "text"}}"#,
        ] {
            assert!(
                matches!(parse(plain).unwrap().format, Format::Text),
                "{plain}"
            );
        }
        let schema = r#"{"response_format": {"type": "json_schema", "json_schema": {"name": "p",
            "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
            "required": ["a"], "additionalProperties": false}}}}"#;
        assert!(matches!(
            parse(schema).unwrap().format,
            Format::Constrained { .. }
        ));
        let refused = |text: &str| {
            let e = parse(text).unwrap_err();
            (e.code, e.param.unwrap_or_default())
        };
        let multiple = r#"{"response_format": {"type": "json_schema", "json_schema": {"name": "p",
            "schema": {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}}}}"#;
        let e = parse(multiple).unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            (
                "unsupported_parameter",
                Some("response_format.json_schema.schema")
            )
        );
        assert!(e.message.contains("uniqueItems"), "{}", e.message);
        let bare = refused(r#"{"response_format": {"type": "json_schema"}}"#);
        assert_eq!(
            bare,
            (
                "missing_required_parameter",
                "response_format.json_schema".into()
            )
        );
        let odd = refused(
            r#"{"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "x": 1}}}"#,
        );
        assert_eq!(
            odd,
            ("unknown_parameter", "response_format.json_schema.x".into())
        );
        let yaml = refused(r#"{"response_format": {"type": "yaml"}}"#);
        assert_eq!(yaml, ("invalid_value", "response_format.type".into()));
        let extra = refused(r#"{"response_format": {"type": "json_object", "strict": true}}"#);
        assert_eq!(
            extra,
            ("unknown_parameter", "response_format.strict".into())
        );
        let untyped = refused(r#"{"response_format": {}}"#);
        assert_eq!(
            untyped,
            ("missing_required_parameter", "response_format.type".into())
        );
    }

    #[test]
    fn messages_and_prompts() {
        let m = messages(&body(
            r#"{"messages": [{"role": "developer", "content": [{"type": "text", "text": "hi"}]}]}"#,
        ))
        .unwrap();
        assert_eq!(m, [Message::new("system", "hi")]);
        let err = |text: &str| messages(&body(text)).unwrap_err();
        assert_eq!(err("{}").code, "missing_required_parameter");
        assert_eq!(err(r#"{"messages": []}"#).code, "invalid_value");
        let many = |n: usize| {
            let list = vec![r#"{"role": "user", "content": "x"}"#; n].join(",");
            messages(&body(&format!(r#"{{"messages": [{list}]}}"#)))
        };
        assert_eq!(many(MAX_MESSAGES).unwrap().len(), MAX_MESSAGES);
        assert_eq!(many(MAX_MESSAGES + 1).unwrap_err().code, "invalid_value");
        let bad_role = err(r#"{"messages": [{"role": "wizard", "content": "x"}]}"#);
        assert_eq!(bad_role.param.as_deref(), Some("messages[0].role"));
        let prompts = |text: &str| super::prompts(&body(text));
        let text = |t: &str| Prompt::Text(t.into());
        assert_eq!(prompts(r#"{"prompt": ["x"]}"#).unwrap(), [text("x")]);
        assert_eq!(
            prompts(r#"{"prompt": ["x", "y"]}"#).unwrap(),
            [text("x"), text("y")]
        );
        let ids = Prompt::Ids(vec![5, 0, 7]);
        assert_eq!(
            prompts(r#"{"prompt": [5, 0, 7]}"#).unwrap(),
            std::slice::from_ref(&ids)
        );
        assert_eq!(
            prompts(r#"{"prompt": [[5, 0, 7]]}"#).unwrap(),
            std::slice::from_ref(&ids)
        );
        let two = prompts(r#"{"prompt": [[5, 0, 7], [1]]}"#).unwrap();
        assert_eq!(two, [ids, Prompt::Ids(vec![1])]);
        let many = serde_json::json!(vec!["x"; MAX_PROMPTS + 1]).to_string();
        for bad in [
            r#"[1, -2]"#,
            r#"[1, "x"]"#,
            r#"[[]]"#,
            r#"[]"#,
            r#"["a", 3]"#,
            many.as_str(),
        ] {
            let e = prompts(&format!(r#"{{"prompt": {bad}}}"#)).unwrap_err();
            assert_eq!(
                (e.code, e.param.as_deref()),
                ("invalid_value", Some("prompt")),
                "{bad}"
            );
        }
        assert_eq!(
            prompts(r#"{"prompt": 1}"#).unwrap_err().code,
            "invalid_type"
        );
        assert_eq!(parse_body(b"{").unwrap_err().code, "invalid_json");
        assert_eq!(parse_body(b"[1]").unwrap_err().code, "invalid_request");
    }
}
