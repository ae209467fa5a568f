//! `switchyard serve` answers every bad request with the right 4xx and an OpenAI-style
//! error body, and keeps serving: malformed JSON, missing fields, wrong types, an
//! unknown model, bad `max_tokens`, `n` or log-probability settings, parameters it does
//! not implement or know, a prompt longer than the context, an unknown role, an
//! oversized body, unknown paths and methods, and garbage on the socket; with an API
//! key, 401 for a request without it.

mod server_support;

use std::io::{Read, Write};

use serde_json::{json, Value};
use server_support::{connect, get, metric, post, request, request_with, Server};

/// Context of the test server: small, so that a prompt can overflow it cheaply.
const CTX: usize = 64;

/// Asserts the status and the error body's `type`, `code` and `param`.
fn assert_error(response: &server_support::Response, status: u16, code: &str, param: Option<&str>) {
    let body = response.json();
    assert_eq!(response.status, status, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], code, "{body}");
    assert_eq!(
        error["param"],
        param.map_or(Value::Null, Value::from),
        "{body}"
    );
    let expected_type = if status == 429 {
        "rate_limit_error"
    } else if status >= 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    assert_eq!(error["type"], expected_type, "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{body}"
    );
}

fn user(content: &str) -> Value {
    json!([{"role": "user", "content": content}])
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let server = Server::start(&["--ctx", &CTX.to_string(), "--max-queue", "2"]);
    let addr = server.addr;
    let chat = "/v1/chat/completions";
    let raw = |path: &str, body: &[u8]| request(addr, "POST", path, body);

    // Malformed JSON, a body that is not an object, bytes that are not UTF-8.
    assert_error(&raw(chat, b"{\"messages\": ["), 400, "invalid_json", None);
    assert_error(&raw(chat, b"[1, 2]"), 400, "invalid_request", None);
    assert_error(&raw(chat, b"\xff\xfe{}"), 400, "invalid_json", None);
    assert_error(&raw(chat, b""), 400, "invalid_json", None);

    // Missing fields.
    let missing = post(addr, chat, &json!({"max_tokens": 4}));
    assert_error(
        &missing,
        400,
        "missing_required_parameter",
        Some("messages"),
    );
    let missing = post(addr, "/v1/completions", &json!({"max_tokens": 4}));
    assert_error(&missing, 400, "missing_required_parameter", Some("prompt"));
    let no_role = post(addr, chat, &json!({"messages": [{"content": "hi"}]}));
    assert_error(
        &no_role,
        400,
        "missing_required_parameter",
        Some("messages[0].role"),
    );

    // Wrong types.
    let cases = [
        (json!({"messages": "hi"}), "messages"),
        (
            json!({"messages": user("hi"), "temperature": "hot"}),
            "temperature",
        ),
        (
            json!({"messages": user("hi"), "max_tokens": "8"}),
            "max_tokens",
        ),
        (
            json!({"messages": user("hi"), "max_tokens": 2.5}),
            "max_tokens",
        ),
        (json!({"messages": user("hi"), "stream": "yes"}), "stream"),
        (json!({"messages": user("hi"), "stop": 7}), "stop"),
        (json!({"messages": user("hi"), "seed": "s"}), "seed"),
        (json!({"messages": user("hi"), "model": 3}), "model"),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": 1, "content": "x"}]}),
            "messages[0].role",
        ),
    ];
    for (body, param) in cases {
        assert_error(&post(addr, chat, &body), 400, "invalid_type", Some(param));
    }
    let prompt_type = post(addr, "/v1/completions", &json!({"prompt": {"a": 1}}));
    assert_error(&prompt_type, 400, "invalid_type", Some("prompt"));

    // An unknown model; the served id and no model at all are accepted (checked below).
    let unknown = post(
        addr,
        chat,
        &json!({"model": "gpt-4o", "messages": user("hi")}),
    );
    assert_error(&unknown, 404, "model_not_found", Some("model"));
    assert_error(
        &get(addr, "/v1/models/gpt-4o"),
        404,
        "model_not_found",
        Some("model"),
    );

    // max_tokens ≤ 0 or beyond the context, out-of-range sampling values.
    for n in [0, -5] {
        let body = json!({"messages": user("hi"), "max_tokens": n});
        assert_error(
            &post(addr, chat, &body),
            400,
            "invalid_value",
            Some("max_tokens"),
        );
    }
    let beyond = json!({"messages": user("hi"), "max_tokens": CTX + 1});
    assert_error(
        &post(addr, chat, &beyond),
        400,
        "invalid_value",
        Some("max_tokens"),
    );
    let hot = json!({"messages": user("hi"), "temperature": 2.5});
    assert_error(
        &post(addr, chat, &hot),
        400,
        "invalid_value",
        Some("temperature"),
    );
    let top_p = json!({"messages": user("hi"), "top_p": 1.5});
    assert_error(
        &post(addr, chat, &top_p),
        400,
        "invalid_value",
        Some("top_p"),
    );
    // vLLM's sampling extensions are read, so out-of-range values are refused by name.
    for (field, value) in [
        ("top_k", json!(-2)),
        ("min_p", json!(1.5)),
        ("repetition_penalty", json!(0)),
        ("ignore_eos", json!("yes")),
    ] {
        let mut body = json!({"messages": user("hi")});
        body[field] = value;
        let response = post(addr, chat, &body);
        assert_eq!(response.status, 400, "{field}: {}", response.text());
        assert_eq!(response.json()["error"]["param"], field);
    }

    // n and log-probability settings out of range, or on the wrong endpoint.
    let completions = "/v1/completions";
    let out_of_range = [
        (chat, json!({"messages": user("hi"), "n": 17}), "n"),
        (chat, json!({"messages": user("hi"), "n": 0}), "n"),
        (completions, json!({"prompt": "hi", "n": 17}), "n"),
        (
            chat,
            json!({"messages": user("hi"), "top_logprobs": 2}),
            "top_logprobs",
        ),
        (
            chat,
            json!({"messages": user("hi"), "logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (
            completions,
            json!({"prompt": "hi", "logprobs": 6}),
            "logprobs",
        ),
    ];
    for (path, body, param) in out_of_range {
        let response = post(addr, path, &body);
        assert_error(&response, 400, "invalid_value", Some(param));
    }
    let wrong_shape = [
        (
            chat,
            json!({"messages": user("hi"), "logprobs": 3}),
            "logprobs",
        ),
        (
            completions,
            json!({"prompt": "hi", "logprobs": true}),
            "logprobs",
        ),
    ];
    for (path, body, param) in wrong_shape {
        let response = post(addr, path, &body);
        assert_error(&response, 400, "invalid_type", Some(param));
    }

    // Parameters that would change the result and are not implemented are refused by
    // name (unless they hold their neutral value), and so are unknown ones.
    let unique =
        json!({"type": "object", "properties": {"d": {"type": "array", "uniqueItems": true}}});
    let unsupported = [
        (
            chat,
            json!({"tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (
            chat,
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": unique}}]}),
            "tools[0].function.parameters",
        ),
        (chat, json!({"functions": [{"name": "f"}]}), "functions"),
        (chat, json!({"function_call": "auto"}), "function_call"),
        (
            chat,
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema":
                {"type": "object", "properties": {"d": {"type": "array", "uniqueItems": true}}}}}}),
            "response_format.json_schema.schema",
        ),
        (chat, json!({"modalities": ["text", "audio"]}), "modalities"),
        (chat, json!({"reasoning_effort": "low"}), "reasoning_effort"),
        (completions, json!({"suffix": "end"}), "suffix"),
        (completions, json!({"best_of": 3}), "best_of"),
    ];
    for (path, extra, param) in unsupported {
        let mut body = if path == chat {
            json!({"messages": user("hi")})
        } else {
            json!({"prompt": "hi"})
        };
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let response = post(addr, path, &body);
        assert_error(&response, 400, "unsupported_parameter", Some(param));
        assert!(
            response.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(param),
            "{}",
            response.text()
        );
    }
    let named = json!({"messages": [{"role": "user", "content": "hi", "name": "bob"}]});
    let response = post(addr, chat, &named);
    assert_error(
        &response,
        400,
        "unsupported_parameter",
        Some("messages[0].name"),
    );
    let unknown = [
        (
            chat,
            json!({"messages": user("hi"), "mirostat": 2}),
            "mirostat",
        ),
        (
            chat,
            json!({"messages": user("hi"), "prompt": "x"}),
            "prompt",
        ),
        (
            completions,
            json!({"prompt": "hi", "typical_p": 0.5}),
            "typical_p",
        ),
        (
            completions,
            json!({"prompt": "hi", "top_logprobs": 2}),
            "top_logprobs",
        ),
    ];
    for (path, body, param) in unknown {
        let response = post(addr, path, &body);
        assert_error(&response, 400, "unknown_parameter", Some(param));
    }

    // A prompt longer than the context, and one that fits but leaves no room.
    let long = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let body = json!({"prompt": long, "max_tokens": 1});
    let too_long = post(addr, "/v1/completions", &body);
    assert_error(&too_long, 400, "context_length_exceeded", Some("prompt"));
    let body = json!({"messages": user(&long[..120]), "max_tokens": CTX - 4});
    let no_room = post(addr, chat, &body);
    assert_error(&no_room, 400, "context_length_exceeded", Some("messages"));

    // An unknown role, an empty conversation.
    let body = json!({"messages": [{"role": "wizard", "content": "hi"}]});
    let role = post(addr, chat, &body);
    assert_error(&role, 400, "invalid_value", Some("messages[0].role"));
    assert!(role.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("wizard"));
    let empty = post(addr, chat, &json!({"messages": []}));
    assert_error(&empty, 400, "invalid_value", Some("messages"));

    // An oversized body (over 1 MiB), unknown paths and methods.
    let big = format!(r#"{{"prompt": "{}"}}"#, "a".repeat(1_100_000));
    let oversized = raw("/v1/completions", big.as_bytes());
    assert_error(&oversized, 413, "request_too_large", None);
    assert_error(&get(addr, "/v1/nothing"), 404, "not_found", None);
    assert_error(&get(addr, chat), 405, "method_not_allowed", None);

    // Garbage instead of HTTP, and a connection closed mid-request.
    let mut socket = connect(addr);
    socket.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = socket.read_to_end(&mut reply);
    let mut socket = connect(addr);
    socket
        .write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro")
        .unwrap();
    drop(socket);

    // Still serving: the served id, and no model field, both work.
    let models = get(addr, "/v1/models").json();
    let id = models["data"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(get(addr, &format!("/v1/models/{id}")).status, 200);
    for model in [json!(id), Value::Null] {
        // Neutral values of unimplemented parameters and bookkeeping fields are accepted.
        let body = json!({"model": model, "prompt": "The capital of France is", "max_tokens": 2,
                          "temperature": 0, "echo": false, "logit_bias": {}, "user": "test"});
        let ok = post(addr, "/v1/completions", &body);
        assert_eq!(ok.status, 200, "{}", ok.text());
        let ok = ok.json();
        assert_eq!(ok["object"], "text_completion");
        assert_eq!(ok["usage"]["completion_tokens"], 2);
        assert_eq!(ok["model"], id.as_str());
    }
    let health = get(addr, "/health");
    assert_eq!(
        (health.status, health.json()),
        (200, json!({"status": "ok"}))
    );
    let metrics = get(addr, "/metrics").text();
    let bad = metric(
        &metrics,
        "switchyard_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}",
    );
    assert!(bad.is_some_and(|n| n >= 20.0), "{metrics}");
    let too_big = metric(
        &metrics,
        "switchyard_requests_total{endpoint=\"/v1/completions\",status=\"413\"}",
    );
    assert_eq!(too_big, Some(1.0), "{metrics}");
    assert_eq!(
        metric(&metrics, "switchyard_prompt_tokens_total"),
        Some(10.0),
        "only the two good requests reached the engine: {metrics}"
    );

    // vLLM's extensions act: ignore_eos runs to max_tokens past an end token, and
    // top_k = 1 samples what greedy decoding picks.
    let ask = |extra: Value| {
        let mut body = json!({"messages": user("Hi"), "max_tokens": 24, "seed": 3});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let response = post(addr, chat, &body);
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()
    };
    let greedy = ask(json!({"temperature": 0}));
    assert_eq!(greedy["choices"][0]["finish_reason"], "stop", "{greedy}");
    let endless = ask(json!({"temperature": 0, "ignore_eos": true}));
    assert_eq!(endless["choices"][0]["finish_reason"], "length");
    assert_eq!(endless["usage"]["completion_tokens"], 24);
    let top1 = ask(json!({"temperature": 1.0, "top_k": 1}));
    assert_eq!(
        top1["choices"][0]["message"]["content"],
        greedy["choices"][0]["message"]["content"]
    );
}

#[test]
fn an_api_key_guards_the_api_and_a_served_name_replaces_the_files() {
    let server = Server::start_with_env(
        &["--served-model-name", "gpt-local", "--max-queue", "4"],
        &[("SWITCHYARD_API_KEY", "sk-test-key")],
    );
    let addr = server.addr;
    let body = json!({"model": "gpt-local", "messages": user("hi"), "max_tokens": 2,
                      "temperature": 0});
    let call = |path: &str, body: &Value, key: Option<&str>| {
        let bearer = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("Authorization", b.as_str()))
            .collect();
        let (method, bytes) = match body {
            Value::Null => ("GET", Vec::new()),
            _ => ("POST", body.to_string().into_bytes()),
        };
        request_with(addr, method, path, &bytes, &headers)
    };
    let chat = "/v1/chat/completions";
    assert_error(&call(chat, &body, None), 401, "invalid_api_key", None);
    assert_error(
        &call(chat, &body, Some("sk-test-ke")),
        401,
        "invalid_api_key",
        None,
    );
    assert_error(
        &call("/v1/models", &Value::Null, None),
        401,
        "invalid_api_key",
        None,
    );
    let ok = call(chat, &body, Some("sk-test-key"));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["model"], "gpt-local");
    let models = call("/v1/models", &Value::Null, Some("sk-test-key")).json();
    assert_eq!(models["data"][0]["id"], "gpt-local");
    let mut other = body.clone();
    other["model"] = json!("SmolLM2-135M-Instruct.Q4_1");
    assert_error(
        &call(chat, &other, Some("sk-test-key")),
        404,
        "model_not_found",
        Some("model"),
    );
    // Probes and scrapers need no key.
    assert_eq!(get(addr, "/health").status, 200);
    let metrics = get(addr, "/metrics");
    assert_eq!(metrics.status, 200);
    let refused = metric(
        &metrics.text(),
        "switchyard_requests_total{endpoint=\"/v1/chat/completions\",status=\"401\"}",
    );
    assert_eq!(refused, Some(2.0), "{}", metrics.text());

    // A key that cannot travel in a header is refused before the model loads.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--port", "0", "--api-key", "two words"])
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--api-key: an API key takes printable ASCII"),
        "{stderr}"
    );
}
