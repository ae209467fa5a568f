//! OpenAI tool calling on `/v1/chat/completions` (decisions 165–169): reads `tools`,
//! `tool_choice` and `parallel_tool_calls` (every tool's parameter schema compiled, so
//! one the engine cannot hold a reply to is a 400 naming the tool), makes the grammar a
//! reply is held to in the model's [`ToolFormat`], prepares the conversation for a
//! template without tool support, and turns a reply's text back into OpenAI
//! `tool_calls`.

use serde_json::{json, Value};

use super::api::Body;
use super::error::ApiError;
use super::shapes::unsupported_grammar;
use super::tool_format::{generic_prompt, Mode, Parsed, ToolFormat};
use crate::decode::constraint::Grammar;
use crate::model::chat_template::Message;
use crate::model::tokenizer::Tokenizer;

/// Most tools one request may list.
const MAX_TOOLS: usize = 128;

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// No call: the tools are not shown and the reply is text.
    None,
    /// Text or calls, as the model chooses.
    Auto,
    /// One or more calls.
    Required,
    /// A call of this function.
    Named(String),
}

/// A request's tools and what it asks of them.
#[derive(Clone, Debug)]
pub(crate) struct Tools {
    /// The tools as the request lists them (the template's `tools`).
    pub list: Value,
    /// Each tool's name and parameter schema.
    pub schemas: Vec<(String, Value)>,
    /// `tool_choice` (default `auto`).
    pub choice: Choice,
    /// `parallel_tool_calls` (default true): whether a reply may make several calls.
    pub parallel: bool,
}

/// A function name as OpenAI allows them: 1 to 64 of `a-z A-Z 0-9 _ -`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`; `None` when no tools are
/// given (then `tool_choice` may only be `none` and `parallel_tool_calls` is moot).
pub(crate) fn read(body: &Body) -> Result<Option<Tools>, ApiError> {
    let list = match body.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => Some(list),
        Some(_) => return Err(ApiError::wrong_type("tools", "an array")),
    };
    let parallel = match body.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::wrong_type("parallel_tool_calls", "a boolean")),
    };
    let Some(list) = list else {
        return match body.get("tool_choice") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s == "none" => Ok(None),
            Some(_) => Err(ApiError::bad_value(
                "tool_choice",
                "tool_choice is only allowed when tools are given.",
            )),
        };
    };
    if list.is_empty() || list.len() > MAX_TOOLS {
        return Err(ApiError::bad_value(
            "tools",
            format!(
                "tools must list 1 to {MAX_TOOLS} tools, got {}.",
                list.len()
            ),
        ));
    }
    let mut schemas: Vec<(String, Value)> = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let (name, parameters) = tool_schema(i, tool)?;
        if schemas.iter().any(|(n, _)| *n == name) {
            return Err(ApiError::bad_value(
                &format!("tools[{i}].function.name"),
                format!("Two tools are named '{name}'."),
            ));
        }
        schemas.push((name, parameters));
    }
    let choice = match body.get("tool_choice") {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::bad_value(
                    "tool_choice",
                    format!("Unknown tool_choice '{other}': expected none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}."),
                ))
            }
        },
        Some(Value::Object(named)) => {
            super::fields::check_keys(named, "tool_choice", &["type", "function"])?;
            if named.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::bad_value(
                    "tool_choice.type",
                    "tool_choice.type must be 'function'.",
                ));
            }
            let name = named
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::missing("tool_choice.function.name"))?;
            if !schemas.iter().any(|(n, _)| n == name) {
                return Err(ApiError::bad_value(
                    "tool_choice.function.name",
                    format!("tool_choice names '{name}', which is not among the tools."),
                ));
            }
            Choice::Named(name.to_string())
        }
        Some(_) => {
            return Err(ApiError::wrong_type(
                "tool_choice",
                "a string (none, auto, required) or a named function object",
            ))
        }
    };
    Ok(Some(Tools {
        list: Value::Array(list.clone()),
        schemas,
        choice,
        parallel,
    }))
}

/// Tool `i`'s name and parameter schema, checked: a function tool whose schema the
/// engine compiles.
fn tool_schema(i: usize, tool: &Value) -> Result<(String, Value), ApiError> {
    let at = |field: &str| format!("tools[{i}]{field}");
    let Value::Object(tool) = tool else {
        return Err(ApiError::wrong_type(&at(""), "an object"));
    };
    super::fields::check_keys(tool, &at(""), &["type", "function"])?;
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(other) => {
            let param = at(".type");
            return Err(ApiError::invalid(
                "unsupported_parameter",
                Some(&param),
                format!("Unsupported parameter: '{param}' is '{other}'; only 'function' tools are supported."),
            ));
        }
        None => return Err(ApiError::missing(&at(".type"))),
    }
    let Some(Value::Object(function)) = tool.get("function") else {
        return Err(ApiError::missing(&at(".function")));
    };
    super::fields::check_keys(
        function,
        &at(".function"),
        &["name", "description", "parameters", "strict"],
    )?;
    let name = match function.get("name") {
        Some(Value::String(name)) if valid_name(name) => name.clone(),
        Some(Value::String(name)) => {
            return Err(ApiError::bad_value(
                &at(".function.name"),
                format!("Function name {name:?} must be 1 to 64 letters, digits, '_' or '-'."),
            ))
        }
        Some(_) => return Err(ApiError::wrong_type(&at(".function.name"), "a string")),
        None => return Err(ApiError::missing(&at(".function.name"))),
    };
    if let Some(d) = function.get("description") {
        if !d.is_string() && !d.is_null() {
            return Err(ApiError::wrong_type(
                &at(".function.description"),
                "a string",
            ));
        }
    }
    if let Some(s) = function.get("strict") {
        if !s.is_boolean() && !s.is_null() {
            return Err(ApiError::wrong_type(&at(".function.strict"), "a boolean"));
        }
    }
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(ApiError::wrong_type(
                &at(".function.parameters"),
                "an object",
            ))
        }
    };
    // Arguments are a JSON object: a schema that allows anything else is held to one.
    let mut held = parameters.clone();
    if held.get("type").is_none() {
        held["type"] = "object".into();
    }
    Grammar::json_schema(&held).map_err(|e| {
        let param = at(".function.parameters");
        ApiError::invalid(
            "unsupported_parameter",
            Some(&param),
            format!("Unsupported parameter: '{param}', the parameter schema of tool '{name}', is not supported: {e}."),
        )
    })?;
    Ok((name, held))
}

impl Tools {
    /// What the reply's grammar allows, or `None` for `tool_choice: none` (free text).
    pub fn mode(&self) -> Option<Mode> {
        match self.choice {
            Choice::None => None,
            Choice::Auto => Some(Mode::Auto),
            Choice::Required | Choice::Named(_) => Some(Mode::Required),
        }
    }

    /// The tools a call may name: all, or the named one.
    fn callable(&self) -> Vec<(String, Value)> {
        match &self.choice {
            Choice::Named(name) => self
                .schemas
                .iter()
                .filter(|(n, _)| n == name)
                .cloned()
                .collect(),
            _ => self.schemas.clone(),
        }
    }

    /// The grammar a reply is held to in `format` over `tokenizer`'s vocabulary, or
    /// `None` for free text.
    pub fn grammar(
        &self,
        format: ToolFormat,
        tokenizer: &Tokenizer,
    ) -> Result<Option<Grammar>, ApiError> {
        let Some(mode) = self.mode() else {
            return Ok(None);
        };
        let marker = mistral_marker(tokenizer);
        let lark = format.grammar(&self.callable(), mode, self.parallel, &marker);
        Grammar::lark(&lark)
            .map(Some)
            .map_err(|e| unsupported_grammar("tools", &e))
    }

    /// The conversation as the template renders it, and the `tools` it gets: a
    /// template with tool support gets them as given (none for `tool_choice: none`); for
    /// the generic format the tools go into a system message and earlier calls and
    /// results become text the template can render.
    pub fn prepare(
        &self,
        format: ToolFormat,
        messages: Vec<Message>,
    ) -> (Vec<Message>, Option<Value>) {
        if format != ToolFormat::Generic {
            let tools = self.mode().map(|_| self.list.clone());
            return (messages, tools);
        }
        let mut messages = generic_history(messages);
        if let Some(mode) = self.mode() {
            let mut tools = self.list.clone();
            if let (Choice::Named(name), Some(list)) = (&self.choice, tools.as_array_mut()) {
                list.retain(|t| t["function"]["name"].as_str() == Some(name));
            }
            let prompt = generic_prompt(&tools, mode, self.parallel);
            match messages.first_mut() {
                Some(first) if first.role == "system" => {
                    first.content = format!("{}\n\n{prompt}", first.content);
                }
                _ => messages.insert(0, Message::new("system", prompt)),
            }
        }
        (messages, None)
    }
}

/// A conversation for a template without tool support: an assistant's calls become the
/// JSON reply the generic format writes, and a tool's result a user message holding
/// `{"tool_response": {"tool_call_id", "content"}}`.
pub(crate) fn generic_history(messages: Vec<Message>) -> Vec<Message> {
    messages
        .into_iter()
        .map(|m| match (m.role.as_str(), &m.tool_calls, &m.tool_call_id) {
            ("assistant", Some(calls), _) => {
                let calls: Vec<Value> = calls
                    .as_array()
                    .map(|list| {
                        list.iter()
                            .map(|c| json!({"name": c["function"]["name"], "arguments": c["function"]["arguments"]}))
                            .collect()
                    })
                    .unwrap_or_default();
                Message::new("assistant", json!({ "tool_calls": calls }).to_string())
            }
            ("tool", _, id) => {
                let response = json!({"tool_response": {"tool_call_id": id, "content": m.content}});
                Message::new("user", response.to_string())
            }
            _ => m,
        })
        .collect()
}

/// How a Mistral grammar names `[TOOL_CALLS]`: its special token by id when the
/// vocabulary has one, else the literal text.
fn mistral_marker(tokenizer: &Tokenizer) -> String {
    match tokenizer.encode_chat("[TOOL_CALLS]") {
        Ok(ids) if ids.len() == 1 && tokenizer.decode(&ids, true).is_ok_and(|t| t.is_empty()) => {
            format!("<[{}]>", ids[0])
        }
        _ => "\"[TOOL_CALLS]\"".into(),
    }
}

/// One choice's reply as a chat `message`: OpenAI `tool_calls` when the text holds
/// calls in `format` (the reason becomes `tool_calls`), else the text as content.
/// Call ids are `call_<reply>_<choice>_<n>`.
pub(crate) fn message(
    format: ToolFormat,
    text: &str,
    id_base: &str,
) -> (Value, Option<&'static str>) {
    match format.parse(text) {
        Some(Parsed { content, calls }) if !calls.is_empty() => {
            let calls: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(n, call)| {
                    json!({
                        "id": format!("call_{id_base}_{n}"),
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments.to_string()},
                    })
                })
                .collect();
            let message = json!({"role": "assistant", "content": content, "tool_calls": calls});
            (message, Some("tool_calls"))
        }
        Some(Parsed { content, .. }) => (
            json!({"role": "assistant", "content": content.unwrap_or_default()}),
            None,
        ),
        None => (json!({"role": "assistant", "content": text}), None),
    }
}
