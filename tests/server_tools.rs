//! Tool calls on `/v1/chat/completions` (decisions 165–169), end to end on the default
//! model in the three forms the server knows how to write: generic (SmolLM2's own
//! template), Hermes/Qwen and Llama 3.x (the default model's weights with a
//! Qwen2.5-style or a Llama-3.1-style template from `tests/data/tool_templates`, given
//! by `--chat-template-file`).
//!
//! With the official `openai` Python client (tests/server_tools.py; skipped with a
//! message when python3 lacks `openai`, unless SWITCHYARD_REQUIRE_OPENAI=1): required,
//! named and single calls whose arguments match their schemas, the streamed form
//! reassembling to the same calls, `auto`, `none` and a follow-up turn. An agent
//! framework, `openai-agents` (tests/server_agents.py), completes one tool round trip
//! (skipped with a message when it is not installed). Without Python: the same calls
//! over plain HTTP, and the refusals.

mod server_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use server_support::{chunks, post, Server};

/// The template fixtures' folder.
const TEMPLATES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tool_templates");

/// Whether python3 imports `module`.
fn importable(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A server on the default model, with `template` (a file in [`TEMPLATES`]) in place of
/// its own when given; its log must name the tool-call form `form`.
fn server(template: Option<&str>, form: &str) -> Server {
    let path = template.map(|t| format!("{TEMPLATES}/{t}"));
    let mut flags = vec!["--parallel", "4", "--ctx", "2048"];
    if let Some(path) = &path {
        flags.extend(["--chat-template-file", path.as_str()]);
    }
    let server = Server::start(&flags);
    let log = server.log.lock().unwrap().clone();
    let line = log
        .lines()
        .find(|l| l.contains("tool calls:"))
        .unwrap_or_else(|| panic!("the log does not name the tool-call form:\n{log}"));
    assert!(line.to_lowercase().contains(form), "{line}");
    server
}

/// Runs `script` (in tests/) against `server` with `args`; its standard output.
fn run_script(script: &str, server: &Server, args: &[&str]) -> String {
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("python3")
        .arg(&path)
        .arg(format!("http://{}", server.addr))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let deadline = Instant::now() + Duration::from_secs(600);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tests/{script} did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tests/{script} failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log.lock().unwrap()
    );
    println!("{stdout}");
    stdout
}

/// Whether the `openai` client tests run: skipped with a message when it is missing,
/// unless SWITCHYARD_REQUIRE_OPENAI=1.
fn openai_or_skip(test: &str) -> bool {
    if importable("openai") {
        return true;
    }
    let required = std::env::var("SWITCHYARD_REQUIRE_OPENAI").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "SWITCHYARD_REQUIRE_OPENAI=1 but python3 cannot import openai"
    );
    eprintln!("SKIPPED {test}: python3 has no `openai` package (`python3 -m pip install openai`)");
    false
}

#[test]
fn openai_client_tool_calls_generic_form_on_the_default_model() {
    if openai_or_skip("openai_client_tool_calls_generic_form_on_the_default_model") {
        run_script("server_tools.py", &server(None, "generic"), &["generic"]);
    }
}

#[test]
fn openai_client_tool_calls_with_a_qwen25_template() {
    if openai_or_skip("openai_client_tool_calls_with_a_qwen25_template") {
        let server = server(Some("qwen2.5-style.jinja"), "hermes");
        run_script("server_tools.py", &server, &["hermes"]);
    }
}

#[test]
fn openai_client_tool_calls_with_a_llama31_template() {
    if openai_or_skip("openai_client_tool_calls_with_a_llama31_template") {
        let server = server(Some("llama3.1-style.jinja"), "llama 3");
        run_script("server_tools.py", &server, &["llama3"]);
    }
}

#[test]
fn an_agent_framework_completes_a_tool_round_trip() {
    if !importable("agents") || !importable("openai") {
        eprintln!(
            "SKIPPED an_agent_framework_completes_a_tool_round_trip: python3 cannot import \
             `agents` (`python3 -m pip install openai-agents`; scripts/test tries)"
        );
        return;
    }
    let out = run_script("server_agents.py", &server(None, "generic"), &[]);
    assert!(out.contains("openai-agents:"), "{out}");
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": false}}},
    ])
}

/// Checks a reply's calls: each names a tool and its arguments parse and match it; the
/// calls as (name, arguments).
fn checked_calls(message: &Value) -> Vec<(String, Value)> {
    let calls = message["tool_calls"].as_array().expect("tool_calls");
    assert!(!calls.is_empty(), "{message}");
    calls
        .iter()
        .map(|call| {
            assert_eq!(call["type"], "function", "{call}");
            assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
            let name = call["function"]["name"].as_str().unwrap().to_string();
            let text = call["function"]["arguments"].as_str().expect("a JSON text");
            let args: Value = serde_json::from_str(text).expect("arguments parse");
            let fields: Vec<&String> = args.as_object().unwrap().keys().collect();
            match name.as_str() {
                "get_weather" => {
                    assert_eq!(fields, ["city"], "{args}");
                    assert!(args["city"].is_string());
                }
                "add" => {
                    assert_eq!(fields, ["a", "b"], "{args}");
                    assert!(args["a"].is_i64() && args["b"].is_i64(), "{args}");
                }
                other => panic!("a call of {other}"),
            }
            (name, args)
        })
        .collect()
}

#[test]
fn required_calls_parse_match_and_stream_the_same_over_http() {
    for (template, form) in [(None, "generic"), (Some("qwen2.5-style.jinja"), "hermes")] {
        let server = server(template, form);
        let body = json!({
            "messages": [{"role": "user", "content": "Add 2 and 3, and tell me the weather in Rome."}],
            "tools": tools(), "tool_choice": "required", "max_tokens": 120, "temperature": 0,
        });
        let whole = post(server.addr, "/v1/chat/completions", &body);
        assert_eq!(whole.status, 200, "{}", whole.text());
        let reply = whole.json();
        assert_eq!(
            reply["choices"][0]["finish_reason"], "tool_calls",
            "{reply}"
        );
        let calls = checked_calls(&reply["choices"][0]["message"]);

        let mut streamed_body = body.clone();
        streamed_body["stream"] = true.into();
        let streamed = post(server.addr, "/v1/chat/completions", &streamed_body);
        let mut joined: Vec<(String, String)> = Vec::new();
        let mut finish = None;
        for chunk in chunks(&streamed.text()) {
            let choice = &chunk["choices"][0];
            for piece in choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let index = piece["index"].as_u64().unwrap() as usize;
                if index == joined.len() {
                    assert_eq!(piece["type"], "function", "{piece}");
                    assert!(piece["id"].is_string(), "{piece}");
                    joined.push((
                        piece["function"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                if let Some(args) = piece["function"]["arguments"].as_str() {
                    joined[index].1.push_str(args);
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish = Some(reason.to_string());
            }
        }
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        let joined: Vec<(String, Value)> = joined
            .into_iter()
            .map(|(name, args)| (name, serde_json::from_str(&args).unwrap()))
            .collect();
        assert_eq!(joined, calls, "{form}");
    }
}

#[test]
fn tool_requests_the_server_cannot_honour_are_refused_by_name() {
    let server = Server::start(&["--parallel", "1"]);
    let refused = |extra: Value, param: &str, words: &str| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let reply = post(server.addr, "/v1/chat/completions", &body);
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(error["param"], param, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(words),
            "{error}"
        );
    };
    let unique = json!([{"type": "function", "function": {"name": "tags", "parameters": {
        "type": "object", "properties": {"t": {"type": "array", "uniqueItems": true}}}}}]);
    refused(
        json!({"tools": unique}),
        "tools[0].function.parameters",
        "tool 'tags'",
    );
    refused(
        json!({"tools": [{"type": "code_interpreter"}]}),
        "tools[0].type",
        "code_interpreter",
    );
    refused(
        json!({"tools": tools(), "tool_choice": "sometimes"}),
        "tool_choice",
        "sometimes",
    );
    refused(
        json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "rm"}}}),
        "tool_choice.function.name",
        "rm",
    );
    refused(json!({"tool_choice": "required"}), "tool_choice", "tools");
    refused(
        json!({"tools": tools(), "response_format": {"type": "json_object"}}),
        "response_format",
        "tools",
    );
    refused(
        json!({"messages": [{"role": "tool", "content": "5"}]}),
        "messages[0].tool_call_id",
        "tool_call_id",
    );
    refused(
        json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "add", "arguments": "{not json"}}]}]}),
        "messages[0].tool_calls[0].function.arguments",
        "not JSON",
    );
}
