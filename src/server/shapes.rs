//! The request fields that hold a reply to a shape, in the forms clients send them:
//! OpenAI's `response_format` (chat), vLLM's `guided_json`, `guided_regex`,
//! `guided_choice`, `guided_grammar` and `structured_outputs`, and llama-server's
//! `json_schema`; each compiled here, so that what the engine does not implement is a
//! 400 naming the field. llama-server's GBNF `grammar` is refused by name.

use serde_json::{Map, Value};

use super::api::{Body, Kind};
use super::error::ApiError;
use super::fields;
use crate::decode::constraint::{Grammar, GrammarError};

/// What shape a reply's text takes.
#[derive(Clone, Debug, Default)]
pub(crate) enum Format {
    /// Free text.
    #[default]
    Text,
    /// A text the grammar takes, asked for by request field `param`.
    Constrained {
        /// The field that asked (named by an error compiling it for the model).
        param: &'static str,
        /// What the reply is held to.
        grammar: Grammar,
    },
}

/// The 400 for a grammar in request field `param` that the engine does not compile.
pub(crate) fn unsupported_grammar(param: &str, e: &GrammarError) -> ApiError {
    ApiError::invalid(
        "unsupported_parameter",
        Some(param),
        format!("Unsupported parameter: '{param}' is not supported by this server: {e}."),
    )
}

/// The fields that may each hold a reply to a shape (`response_format` only on chat);
/// at most one of them may ask for one.
const FIELDS: [&str; 7] = [
    "response_format",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
    "json_schema",
];

/// The shape a `kind` request asks for, from whichever one of [`FIELDS`] it gives.
pub(crate) fn format(body: &Body, kind: Kind) -> Result<Format, ApiError> {
    let mut found = Format::Text;
    let mut by: Option<&str> = None;
    for field in FIELDS {
        let format = match (field, body.get(field)) {
            (_, None | Some(Value::Null)) => continue,
            ("response_format", Some(_)) if kind == Kind::Text => continue,
            ("response_format", Some(_)) => response_format(body)?,
            ("structured_outputs", Some(value)) => structured_outputs(value)?,
            (field, Some(value)) => field_format(field, value)?,
        };
        if let Format::Constrained { .. } = format {
            if let Some(first) = by {
                return Err(ApiError::bad_value(
                    field,
                    format!("'{field}' and '{first}' both ask for a shape of the reply; give one."),
                ));
            }
            by = Some(field);
            found = format;
        }
    }
    Ok(found)
}

/// A JSON Schema given as a JSON object or as the text of one (vLLM takes both).
fn schema_value(param: &'static str, value: &Value) -> Result<Value, ApiError> {
    match value {
        Value::String(text) => serde_json::from_str(text).map_err(|e| {
            ApiError::bad_value(param, format!("'{param}' is not a JSON Schema: {e}."))
        }),
        Value::Object(_) | Value::Bool(_) => Ok(value.clone()),
        _ => Err(ApiError::wrong_type(param, "a JSON Schema (an object)")),
    }
}

/// A string field's text.
fn text<'a>(param: &str, value: &'a Value) -> Result<&'a str, ApiError> {
    value
        .as_str()
        .ok_or_else(|| ApiError::wrong_type(param, "a string"))
}

/// The shape of one of the fields that carry a schema, a regex, choices or a grammar.
fn field_format(param: &'static str, value: &Value) -> Result<Format, ApiError> {
    let compiled = match param {
        "guided_json" | "json_schema" | "structured_outputs.json" => {
            Grammar::json_schema(&schema_value(param, value)?)
        }
        "guided_regex" | "structured_outputs.regex" => Grammar::regex(text(param, value)?),
        "guided_choice" | "structured_outputs.choice" => {
            let choices = value
                .as_array()
                .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<&str>>>())
                .ok_or_else(|| ApiError::wrong_type(param, "an array of strings"))?;
            Grammar::choice(&choices)
        }
        _ => {
            let grammar = text(param, value)?;
            // GBNF (llama.cpp's, and vLLM's xgrammar backend's) writes rules with `::=`;
            // Lark with `:`. No converter is built in.
            if grammar.contains("::=") {
                return Err(ApiError::invalid(
                    "unsupported_parameter",
                    Some(param),
                    format!("Unsupported parameter: '{param}' holds a GBNF grammar, which this server does not take; write it in Lark syntax (rule: ...)."),
                ));
            }
            Grammar::lark(grammar)
        }
    };
    compiled
        .map(|grammar| Format::Constrained { param, grammar })
        .map_err(|e| unsupported_grammar(param, &e))
}

/// vLLM's `structured_outputs`: one of `json`, `regex`, `choice`, `grammar`, or
/// `json_object: true`.
fn structured_outputs(value: &Value) -> Result<Format, ApiError> {
    const PARAM: &str = "structured_outputs";
    let Value::Object(spec) = value else {
        return Err(ApiError::wrong_type(PARAM, "an object"));
    };
    fields::check_keys(
        spec,
        PARAM,
        &["json", "regex", "choice", "grammar", "json_object"],
    )?;
    let given: Vec<(&String, &Value)> = spec.iter().filter(|(_, v)| !v.is_null()).collect();
    let (key, value) = match given[..] {
        [] => return Ok(Format::Text),
        [one] => one,
        _ => {
            return Err(ApiError::bad_value(
                PARAM,
                "'structured_outputs' may ask for one shape (json, regex, choice, grammar or json_object).",
            ))
        }
    };
    match (key.as_str(), value) {
        ("json_object", Value::Bool(true)) => Ok(Format::Constrained {
            param: "structured_outputs.json_object",
            grammar: Grammar::any_object(),
        }),
        ("json_object", Value::Bool(false)) => Ok(Format::Text),
        ("json_object", _) => Err(ApiError::wrong_type(
            "structured_outputs.json_object",
            "a boolean",
        )),
        ("json", value) => field_format("structured_outputs.json", value),
        ("regex", value) => field_format("structured_outputs.regex", value),
        ("choice", value) => field_format("structured_outputs.choice", value),
        (_, value) => field_format("structured_outputs.grammar", value),
    }
}

/// `response_format`: absent, null or `{"type": "text"}` is free text; `json_object`
/// one JSON object; `json_schema` a JSON text matching `json_schema.schema`.
fn response_format(body: &Body) -> Result<Format, ApiError> {
    let format: &Map<String, Value> = match body.get("response_format") {
        None | Some(Value::Null) => return Ok(Format::Text),
        Some(Value::Object(format)) => format,
        Some(_) => return Err(ApiError::wrong_type("response_format", "an object")),
    };
    match format.get("type") {
        Some(Value::String(kind)) if kind == "text" || kind == "json_object" => {
            fields::check_keys(format, "response_format", &["type"])?;
            Ok(match kind.as_str() {
                "text" => Format::Text,
                _ => Format::Constrained {
                    param: "response_format",
                    grammar: Grammar::any_object(),
                },
            })
        }
        Some(Value::String(kind)) if kind == "json_schema" => {
            fields::check_keys(format, "response_format", &["type", "json_schema"])?;
            let param = "response_format.json_schema";
            let spec = match format.get("json_schema") {
                Some(Value::Object(spec)) => spec,
                None | Some(Value::Null) => return Err(ApiError::missing(param)),
                Some(_) => return Err(ApiError::wrong_type(param, "an object")),
            };
            fields::check_keys(spec, param, &["name", "description", "schema", "strict"])?;
            let param = "response_format.json_schema.schema";
            let schema = spec.get("schema").ok_or_else(|| ApiError::missing(param))?;
            Grammar::json_schema(schema)
                .map(|grammar| Format::Constrained { param, grammar })
                .map_err(|e| unsupported_grammar(param, &e))
        }
        Some(Value::String(kind)) => Err(ApiError::bad_value(
            "response_format.type",
            format!("response_format.type must be 'text', 'json_object' or 'json_schema', got '{kind}'."),
        )),
        _ => Err(ApiError::missing("response_format.type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Body {
        serde_json::from_str(text).unwrap()
    }

    /// Each field's shape compiles, and the texts it takes are what it says.
    #[test]
    fn every_field_gives_its_shape() {
        for (text, kind, takes, refuses) in [
            (
                r#"{"guided_json": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}"#,
                Kind::Text,
                r#"{"a":1}"#,
                r#"{"a":"x"}"#,
            ),
            (
                r#"{"guided_json": "{\"type\": \"integer\"}"}"#,
                Kind::Chat,
                "12",
                "1.5",
            ),
            (
                r#"{"json_schema": {"type": "array", "items": {"type": "boolean"}}}"#,
                Kind::Text,
                "[true,false]",
                "[1]",
            ),
            (r#"{"guided_regex": "[0-9]{3}"}"#, Kind::Chat, "123", "12a"),
            (
                r#"{"guided_choice": ["red", "green"]}"#,
                Kind::Text,
                "green",
                "blue",
            ),
            (
                r#"{"guided_grammar": "start: \"a\"+"}"#,
                Kind::Chat,
                "aaa",
                "ab",
            ),
            (
                r#"{"structured_outputs": {"choice": ["x", "y"]}}"#,
                Kind::Chat,
                "y",
                "z",
            ),
            (
                r#"{"structured_outputs": {"json_object": true}}"#,
                Kind::Text,
                "{}",
                "[]",
            ),
            (
                r#"{"response_format": {"type": "json_object"}, "guided_json": null}"#,
                Kind::Chat,
                "{}",
                "1",
            ),
        ] {
            let Format::Constrained { grammar, .. } = format(&body(text), kind).unwrap() else {
                panic!("{text}: no shape");
            };
            let checker = grammar.checker().unwrap();
            assert!(
                checker.check(takes.as_bytes()).unwrap().accepted(),
                "{text} {takes}"
            );
            assert!(
                !checker.check(refuses.as_bytes()).unwrap().accepted(),
                "{text} {refuses}"
            );
        }
        assert!(matches!(
            format(&body("{}"), Kind::Chat).unwrap(),
            Format::Text
        ));
    }

    /// Two shapes at once, a GBNF grammar, a wrong type, and what the engine does not
    /// implement are refused naming the field.
    #[test]
    fn refusals_name_the_field() {
        for (text, param, says) in [
            (
                r#"{"guided_regex": "a", "guided_choice": ["b"]}"#,
                "guided_choice",
                "give one",
            ),
            (
                r#"{"guided_grammar": "root ::= \"a\""}"#,
                "guided_grammar",
                "GBNF",
            ),
            (
                r#"{"guided_choice": [1]}"#,
                "guided_choice",
                "array of strings",
            ),
            (r#"{"guided_choice": []}"#, "guided_choice", "at least one"),
            (
                r#"{"guided_json": {"type": "array", "uniqueItems": true}}"#,
                "guided_json",
                "uniqueItems",
            ),
            (r#"{"guided_regex": "("}"#, "guided_regex", ""),
            (r#"{"json_schema": 5}"#, "json_schema", "JSON Schema"),
            (
                r#"{"structured_outputs": {"regex": "a", "choice": ["a"]}}"#,
                "structured_outputs",
                "one shape",
            ),
            (
                r#"{"structured_outputs": {"yaml": "a"}}"#,
                "structured_outputs.yaml",
                "",
            ),
        ] {
            let e = format(&body(text), Kind::Chat).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{text}");
            assert!(e.message.contains(says), "{text}: {}", e.message);
        }
    }
}
