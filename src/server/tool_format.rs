//! The ways a model writes tool calls (decision 165): which one a chat template uses,
//! the grammar that holds a reply to it, and reading the calls back out of the text.
//!
//! * [`ToolFormat::Hermes`] (Qwen2.5/3, Hermes): `<tool_call>\n{"name": …, "arguments":
//!   {…}}\n</tool_call>`, one block per call.
//! * [`ToolFormat::Llama3`] (Llama 3.1/3.2): the reply is one JSON object `{"name": …,
//!   "parameters": {…}}`, after an optional `<|python_tag|>`.
//! * [`ToolFormat::Mistral`]: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}`.
//! * [`ToolFormat::Generic`], for a template that does not read `tools` (the default
//!   SmolLM2): the tools are described in a system message and the reply is a JSON
//!   object, `{"tool_calls": [{"name", "arguments"}, …]}` to call or `{"response": "…"}`
//!   to answer.

use serde_json::{json, Value};

/// How a model writes tool calls, decided from its chat template's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolFormat {
    /// `<tool_call>…</tool_call>` blocks.
    Hermes,
    /// A bare JSON object with `name` and `parameters`.
    Llama3,
    /// `[TOOL_CALLS]` and a JSON array.
    Mistral,
    /// No tool support in the template: a system message and a JSON reply.
    Generic,
}

/// One tool call read from a reply.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParsedCall {
    /// The function's name.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Value,
}

/// A reply read back: its text (without the calls) and its calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Parsed {
    /// What the model said besides the calls (`None` when nothing).
    pub content: Option<String>,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
}

/// What the grammar of a reply allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Text, or text and then calls: the call grammar starts at the format's trigger.
    Auto,
    /// Calls only (`required` or a named function).
    Required,
}

impl ToolFormat {
    /// The format a template's source implies: by the markers it writes, and generic when
    /// it does not read `tools` at all or writes none of the known markers.
    pub fn detect(source: &str) -> ToolFormat {
        if !source.contains("tools") {
            ToolFormat::Generic
        } else if source.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if source.contains("<|start_header_id|>") && source.contains("parameters") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// How the server log names the format.
    pub fn describe(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "Hermes/Qwen (<tool_call> blocks, tools rendered by the chat template)",
            ToolFormat::Llama3 => "Llama 3.x (a JSON object with \"name\" and \"parameters\", tools rendered by the chat template)",
            ToolFormat::Mistral => "Mistral ([TOOL_CALLS] and a JSON array, tools rendered by the chat template)",
            ToolFormat::Generic => "generic (the chat template does not read tools: they are described in a system message and the reply is a JSON object)",
        }
    }

    /// The key a call's arguments go under.
    fn arguments_key(self) -> &'static str {
        match self {
            ToolFormat::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// The JSON Schema of one call to one of `tools` (`(name, parameters)`), in this
    /// format's keys; the name comes first.
    pub fn call_schema(self, tools: &[(String, Value)]) -> Value {
        let key = self.arguments_key();
        let branches: Vec<Value> = tools
            .iter()
            .map(|(name, parameters)| {
                json!({
                    "type": "object",
                    "properties": {"name": {"const": name}, key: parameters},
                    "required": ["name", key],
                    "additionalProperties": false,
                })
            })
            .collect();
        match branches.len() {
            1 => branches.into_iter().next().expect("one branch"),
            _ => json!({ "anyOf": branches }),
        }
    }

    /// The Lark grammar a reply is held to: calls to `tools` in this format, one or
    /// (`parallel`) several; in [`Mode::Auto`] text may come instead, and the call
    /// grammar takes over at the format's trigger. `mistral_marker` is how the grammar
    /// names `[TOOL_CALLS]` (a special token `<[id]>`, or the literal text).
    pub fn grammar(
        self,
        tools: &[(String, Value)],
        mode: Mode,
        parallel: bool,
        mistral_marker: &str,
    ) -> String {
        let json = |mut schema: Value| {
            schema["x-guidance"] = json!({
                "whitespace_flexible": false, "item_separator": ",", "key_separator": ":",
            });
            format!("%json {schema}")
        };
        let call = json(self.call_schema(tools));
        let more = if parallel { " (\"\\n\" call)*" } else { "" };
        let mut array = json!({"type": "array", "items": self.call_schema(tools), "minItems": 1});
        if !parallel {
            array["maxItems"] = 1.into();
        }
        match (self, mode) {
            (ToolFormat::Hermes, Mode::Required) => format!(
                "start: call{more}\ncall: \"<tool_call>\\n\" body\nbody: {call} \"\\n</tool_call>\"\n"
            ),
            // Free text that never writes the trigger, or text up to it (a lazy lexeme:
            // it ends where the trigger does) and then the calls.
            (ToolFormat::Hermes, Mode::Auto) => format!(
                "start: TEXT | pre body{more}\n\
                 TEXT: /(?s:.*)/ & ~/(?s:.*<tool_call>.*)/\n\
                 pre[lazy]: /(?s:.*)<tool_call>\\n/\n\
                 call: \"<tool_call>\\n\" body\n\
                 body: {call} \"\\n</tool_call>\"\n"
            ),
            (ToolFormat::Llama3, Mode::Required) => format!("start: {call}\n"),
            // A call starts with the reply's first byte, `{`; text starts otherwise.
            (ToolFormat::Llama3, Mode::Auto) => {
                format!("start: TEXT | {call}\nTEXT: /([^{{](?s:.*))?/\n")
            }
            (ToolFormat::Mistral, Mode::Required) => {
                format!("start: {mistral_marker} {}\n", json(array))
            }
            // A special-token marker is never text, so text and calls part at once.
            (ToolFormat::Mistral, Mode::Auto) if mistral_marker.starts_with('<') => format!(
                "start: TEXT | {mistral_marker} {}\nTEXT: /(?s:.*)/\n",
                json(array)
            ),
            (ToolFormat::Mistral, Mode::Auto) => format!(
                "start: TEXT | pre {}\n\
                 TEXT: /(?s:.*)/ & ~/(?s:.*\\[TOOL_CALLS\\].*)/\n\
                 pre[lazy]: /(?s:.*)\\[TOOL_CALLS\\]/\n",
                json(array)
            ),
            (ToolFormat::Generic, mode) => {
                format!("start: {}\n", json(self.generic_schema(tools, mode, parallel)))
            }
        }
    }

    /// The generic format's reply schema: `{"tool_calls": [call, …]}` (one call unless
    /// `parallel`), or in [`Mode::Auto`] also `{"response": "…"}`.
    pub fn generic_schema(self, tools: &[(String, Value)], mode: Mode, parallel: bool) -> Value {
        let mut calls = json!({"type": "array", "items": self.call_schema(tools), "minItems": 1});
        if !parallel {
            calls["maxItems"] = 1.into();
        }
        let call = json!({
            "type": "object",
            "properties": {"tool_calls": calls},
            "required": ["tool_calls"],
            "additionalProperties": false,
        });
        match mode {
            Mode::Required => call,
            Mode::Auto => json!({"anyOf": [call, {
                "type": "object",
                "properties": {"response": {"type": "string"}},
                "required": ["response"],
                "additionalProperties": false,
            }]}),
        }
    }

    /// Reads a reply's calls; `None` when the text holds no complete call in this
    /// format (it is then plain content).
    pub fn parse(self, text: &str) -> Option<Parsed> {
        match self {
            ToolFormat::Hermes => parse_hermes(text),
            ToolFormat::Llama3 => {
                let body = text.trim_start();
                let body = body.strip_prefix("<|python_tag|>").unwrap_or(body).trim();
                let call = one_call(&serde_json::from_str(body).ok()?, self.arguments_key())
                    .or_else(|| one_call(&serde_json::from_str(body).ok()?, "arguments"))?;
                Some(Parsed {
                    content: None,
                    calls: vec![call],
                })
            }
            ToolFormat::Mistral => {
                let (before, after) = match text.find("[TOOL_CALLS]") {
                    Some(at) => (&text[..at], &text[at + "[TOOL_CALLS]".len()..]),
                    // The marker is a special token some decoders leave out of the text.
                    None if text.trim_start().starts_with("[{") => ("", text),
                    None => return None,
                };
                let list: Value = serde_json::from_str(after.trim()).ok()?;
                let calls = list
                    .as_array()?
                    .iter()
                    .map(|c| one_call(c, "arguments"))
                    .collect::<Option<Vec<_>>>()?;
                (!calls.is_empty()).then(|| Parsed {
                    content: non_empty(before),
                    calls,
                })
            }
            ToolFormat::Generic => {
                let reply: Value = serde_json::from_str(text.trim()).ok()?;
                if let Some(response) = reply.get("response").and_then(Value::as_str) {
                    return Some(Parsed {
                        content: Some(response.to_string()),
                        calls: Vec::new(),
                    });
                }
                let calls = reply
                    .get("tool_calls")?
                    .as_array()?
                    .iter()
                    .map(|c| one_call(c, "arguments"))
                    .collect::<Option<Vec<_>>>()?;
                (!calls.is_empty()).then_some(Parsed {
                    content: None,
                    calls,
                })
            }
        }
    }
}

/// `text` trimmed, or `None` when that is empty.
fn non_empty(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// A `{"name": "…", key: {…}}` object as a call.
fn one_call(value: &Value, key: &str) -> Option<ParsedCall> {
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = value.get(key)?;
    arguments.is_object().then(|| ParsedCall {
        name,
        arguments: arguments.clone(),
    })
}

/// Hermes blocks: text before the first `<tool_call>` is content; each block holds one
/// call; an unclosed or unreadable block makes the whole reply plain text.
fn parse_hermes(text: &str) -> Option<Parsed> {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let first = text.find(OPEN)?;
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(after) = rest.trim_start().strip_prefix(OPEN) {
        let end = after.find(CLOSE)?;
        let call: Value = serde_json::from_str(after[..end].trim()).ok()?;
        calls.push(one_call(&call, "arguments")?);
        rest = &after[end + CLOSE.len()..];
    }
    if !rest.trim().is_empty() {
        return None;
    }
    Some(Parsed {
        content: non_empty(&text[..first]),
        calls,
    })
}

/// The system message the generic format adds: the tools and the reply's two forms.
pub(crate) fn generic_prompt(tools: &Value, mode: Mode, parallel: bool) -> String {
    let list: Vec<Value> = tools
        .as_array()
        .map(|t| t.iter().map(|t| t["function"].clone()).collect())
        .unwrap_or_default();
    let listed = serde_json::to_string_pretty(&list).unwrap_or_default();
    let calls = match parallel {
        true => "one or more calls",
        false => "exactly one call",
    };
    let mut text = format!(
        "You can call these tools (JSON Schema of each one's arguments under \"parameters\"):\n{listed}\n\n\
         To call tools, reply with a JSON object holding {calls}: \
         {{\"tool_calls\": [{{\"name\": \"<tool name>\", \"arguments\": {{<arguments>}}}}]}}"
    );
    match mode {
        Mode::Required => text.push_str("\nYou must call a tool."),
        Mode::Auto => text
            .push_str("\nTo answer without a tool, reply with {\"response\": \"<your answer>\"}."),
    }
    text
}

#[cfg(test)]
#[path = "tool_format_tests.rs"]
mod tests;
