//! Tests of the tool-call formats: detection, each format's grammar (fed byte by byte
//! through the engine's checker) and reading calls back.

use super::*;
use crate::decode::constraint::Grammar;

fn tools() -> Vec<(String, Value)> {
    vec![
        (
            "get_weather".into(),
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}),
        ),
        (
            "add".into(),
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": false}),
        ),
    ]
}

/// Whether `format`'s grammar in `mode` accepts `text` whole.
fn accepts(format: ToolFormat, mode: Mode, parallel: bool, text: &str) -> bool {
    let lark = format.grammar(&tools(), mode, parallel, "\"[TOOL_CALLS]\"");
    let grammar = Grammar::lark(&lark).unwrap_or_else(|e| panic!("{lark}: {e}"));
    grammar
        .checker()
        .unwrap()
        .check(text.as_bytes())
        .unwrap()
        .accepted()
}

#[test]
fn detects_the_format_from_the_template() {
    assert_eq!(
        ToolFormat::detect("{% for m in messages %}{{ m.content }}{% endfor %}"),
        ToolFormat::Generic
    );
    let hermes = "{% if tools %}<tools>{% for t in tools %}{{ t|tojson }}{% endfor %}</tools>\
                  <tool_call>{% endif %}";
    assert_eq!(ToolFormat::detect(hermes), ToolFormat::Hermes);
    let llama = "{% if tools %}<|start_header_id|>user{{ '\"parameters\"' }}{% endif %}";
    assert_eq!(ToolFormat::detect(llama), ToolFormat::Llama3);
    let mistral = "{% if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]";
    assert_eq!(ToolFormat::detect(mistral), ToolFormat::Mistral);
    // Reads tools, but writes no marker we know: generic.
    assert_eq!(
        ToolFormat::detect("{{ tools }}{{ messages }}"),
        ToolFormat::Generic
    );
}

#[test]
fn hermes_grammars_hold_calls_to_the_schemas() {
    let one =
        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>";
    let two = format!(
        "{one}\n<tool_call>\n{{\"name\":\"add\",\"arguments\":{{\"a\":1,\"b\":2}}}}\n</tool_call>"
    );
    assert!(accepts(ToolFormat::Hermes, Mode::Required, true, one));
    assert!(accepts(ToolFormat::Hermes, Mode::Required, true, &two));
    assert!(!accepts(ToolFormat::Hermes, Mode::Required, false, &two));
    assert!(!accepts(ToolFormat::Hermes, Mode::Required, true, "Hello"));
    let bad = "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":\"x\",\"b\":2}}\n</tool_call>";
    assert!(!accepts(ToolFormat::Hermes, Mode::Required, true, bad));
    let unknown = "<tool_call>\n{\"name\":\"rm\",\"arguments\":{}}\n</tool_call>";
    assert!(!accepts(ToolFormat::Hermes, Mode::Required, true, unknown));
    // Auto: free text, or text and then calls held to the schemas.
    assert!(accepts(
        ToolFormat::Hermes,
        Mode::Auto,
        true,
        "Just text, <b>fine</b>."
    ));
    assert!(accepts(ToolFormat::Hermes, Mode::Auto, true, ""));
    assert!(accepts(ToolFormat::Hermes, Mode::Auto, true, one));
    assert!(accepts(
        ToolFormat::Hermes,
        Mode::Auto,
        true,
        &format!("Let me look.\n{two}")
    ));
    assert!(!accepts(
        ToolFormat::Hermes,
        Mode::Auto,
        true,
        &format!("Sure {bad}")
    ));
    assert!(!accepts(
        ToolFormat::Hermes,
        Mode::Auto,
        true,
        "<tool_call>\nnot json"
    ));
}

#[test]
fn llama_mistral_and_generic_grammars() {
    let call = "{\"name\":\"add\",\"parameters\":{\"a\":1,\"b\":2}}";
    assert!(accepts(ToolFormat::Llama3, Mode::Required, true, call));
    assert!(!accepts(
        ToolFormat::Llama3,
        Mode::Required,
        true,
        "{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}"
    ));
    assert!(accepts(ToolFormat::Llama3, Mode::Auto, true, call));
    assert!(accepts(
        ToolFormat::Llama3,
        Mode::Auto,
        true,
        "The answer is 3."
    ));
    assert!(!accepts(
        ToolFormat::Llama3,
        Mode::Auto,
        true,
        "{\"name\":\"add\"}"
    ));

    let calls = "[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}},{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}]";
    assert!(accepts(ToolFormat::Mistral, Mode::Required, true, calls));
    assert!(!accepts(ToolFormat::Mistral, Mode::Required, false, calls));
    assert!(accepts(ToolFormat::Mistral, Mode::Auto, true, calls));
    assert!(accepts(
        ToolFormat::Mistral,
        Mode::Auto,
        true,
        "No tools needed."
    ));

    let generic = "{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}]}";
    assert!(accepts(ToolFormat::Generic, Mode::Required, true, generic));
    assert!(!accepts(
        ToolFormat::Generic,
        Mode::Required,
        true,
        "{\"response\":\"hi\"}"
    ));
    assert!(accepts(
        ToolFormat::Generic,
        Mode::Auto,
        true,
        "{\"response\":\"hi\"}"
    ));
    assert!(accepts(ToolFormat::Generic, Mode::Auto, true, generic));
}

#[test]
fn calls_are_read_back() {
    let text = "Checking.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}\n</tool_call>";
    let parsed = ToolFormat::Hermes.parse(text).unwrap();
    assert_eq!(parsed.content.as_deref(), Some("Checking."));
    assert_eq!(parsed.calls.len(), 2);
    assert_eq!(parsed.calls[0].name, "add");
    assert_eq!(parsed.calls[0].arguments, json!({"a": 1, "b": 2}));
    assert_eq!(parsed.calls[1].arguments, json!({"city": "Rome"}));
    assert_eq!(ToolFormat::Hermes.parse("plain"), None);
    assert_eq!(
        ToolFormat::Hermes.parse("<tool_call>\n{\"name\":\"add\""),
        None
    );

    let parsed = ToolFormat::Llama3
        .parse("<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}")
        .unwrap();
    assert_eq!(parsed.calls[0].arguments, json!({"a": 1, "b": 2}));
    assert_eq!(ToolFormat::Llama3.parse("The sum is 3."), None);

    let parsed = ToolFormat::Mistral
        .parse("[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}]")
        .unwrap();
    assert_eq!(parsed.calls[0].name, "add");

    let parsed = ToolFormat::Generic
        .parse("{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}]}")
        .unwrap();
    assert_eq!(parsed.calls[0].name, "add");
    let parsed = ToolFormat::Generic
        .parse("{\"response\":\"Hi there\"}")
        .unwrap();
    assert_eq!(parsed.content.as_deref(), Some("Hi there"));
    assert!(parsed.calls.is_empty());
}
