//! Hostile request parameters, table-driven: huge, zero, negative, fractional and
//! wrongly typed `max_tokens`, `temperature`, `top_p`, `n`, `stop`, `logprobs`,
//! `top_logprobs`, `seed`, `messages` and `prompt`, NaN and out-of-range numbers in
//! the JSON itself, and nesting deep enough to overflow a naive parser's stack. Each
//! gets its 4xx (or, for a valid extreme, a 200) within seconds, with an OpenAI error
//! body naming the parameter, and the server keeps serving: it answers `/health`
//! after every case and a normal completion at the end.

mod server_support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use server_support::{get, post, request, Server};

/// Context of the test server.
const CTX: usize = 256;

/// Longest one hostile request may take (a 1 MB prompt is tokenized in full).
const LIMIT: Duration = Duration::from_secs(20);

const CHAT: &str = "/v1/chat/completions";
const TEXT: &str = "/v1/completions";

/// A chat body of one short user message plus `extra`'s fields.
fn chat(extra: Value) -> Vec<u8> {
    let mut body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    body.to_string().into_bytes()
}

/// A completion body of a short prompt plus `extra`'s fields.
fn text(extra: Value) -> Vec<u8> {
    let mut body = json!({"prompt": "Hi", "max_tokens": 1});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    body.to_string().into_bytes()
}

/// A body with `raw` spliced in as the value of `field` (JSON that `serde_json::json!`
/// cannot write, such as `NaN`).
fn raw_chat(field: &str, raw: &str) -> Vec<u8> {
    format!(r#"{{"messages": [{{"role": "user", "content": "Hi"}}], "{field}": {raw}}}"#)
        .into_bytes()
}

/// One case: endpoint, body, expected status, and the `param` the error names (for
/// a 200, nothing is checked beyond the status).
struct Case {
    name: String,
    path: &'static str,
    body: Vec<u8>,
    status: u16,
    param: Option<&'static str>,
}

fn case(
    name: impl Into<String>,
    path: &'static str,
    body: Vec<u8>,
    status: u16,
    param: Option<&'static str>,
) -> Case {
    Case {
        name: name.into(),
        path,
        body,
        status,
        param,
    }
}

fn cases() -> Vec<Case> {
    let huge = json!(u64::MAX);
    let mut cases = Vec::new();
    // max_tokens: huge, zero, negative, fractional, strings and other types.
    for (label, value) in [
        ("u64::MAX", huge.clone()),
        ("i64::MAX", json!(i64::MAX)),
        ("CTX + 1", json!(CTX + 1)),
        ("0", json!(0)),
        ("-1", json!(-1)),
        ("i64::MIN", json!(i64::MIN)),
    ] {
        let body = chat(json!({"max_tokens": value}));
        cases.push(case(
            format!("max_tokens {label}"),
            CHAT,
            body,
            400,
            Some("max_tokens"),
        ));
    }
    for value in [
        json!(2.5),
        json!(1e30),
        json!("8"),
        json!(true),
        json!([8]),
        json!({"n": 8}),
    ] {
        let body = text(json!({"max_tokens": value}));
        cases.push(case(
            format!("max_tokens {value}"),
            TEXT,
            body,
            400,
            Some("max_tokens"),
        ));
    }
    for value in [json!(0), huge.clone()] {
        let body = raw_chat("max_completion_tokens", &value.to_string());
        let name = format!("max_completion_tokens {value}");
        cases.push(case(name, CHAT, body, 400, Some("max_completion_tokens")));
    }
    // temperature, top_p, top_k, min_p, repetition_penalty: NaN-like strings,
    // negatives, huge values.
    for value in [
        json!("NaN"),
        json!("nan"),
        json!("Infinity"),
        json!("-inf"),
        json!(-1),
        json!(-1e-9),
        json!(2.0001),
        json!(1e308),
    ] {
        let body = chat(json!({"temperature": value}));
        cases.push(case(
            format!("temperature {value}"),
            CHAT,
            body,
            400,
            Some("temperature"),
        ));
    }
    for value in [
        json!(1.5),
        json!(-0.1),
        json!(1e308),
        json!(-1e308),
        json!("0.5"),
    ] {
        let body = chat(json!({"top_p": value}));
        cases.push(case(
            format!("top_p {value}"),
            CHAT,
            body,
            400,
            Some("top_p"),
        ));
    }
    for (field, value) in [
        ("top_k", huge.clone()),
        ("top_k", json!(-2)),
        ("min_p", json!(-1)),
        ("min_p", json!(1e308)),
        ("repetition_penalty", json!(1e308)),
        ("repetition_penalty", json!(-1)),
    ] {
        let mut extra = json!({});
        extra[field] = value.clone();
        let name = format!("{field} {value}");
        cases.push(case(name, CHAT, chat(extra), 400, Some(field)));
    }
    // NaN and an out-of-range exponent are not JSON at all: the body is refused.
    cases.push(case(
        "temperature NaN literal",
        CHAT,
        raw_chat("temperature", "NaN"),
        400,
        None,
    ));
    cases.push(case(
        "temperature 1e400",
        CHAT,
        raw_chat("temperature", "1e400"),
        400,
        None,
    ));
    // n: zero, past the limit, huge, negative, wrong types.
    for value in [
        json!(0),
        json!(17),
        huge.clone(),
        json!(-1),
        json!(2.0),
        json!("2"),
    ] {
        let body = chat(json!({"n": value}));
        cases.push(case(format!("n {value}"), CHAT, body, 400, Some("n")));
    }
    // stop: too many strings, one 1 MB string, wrong element types.
    let many: Vec<String> = (0..10_000).map(|i| format!("s{i}")).collect();
    cases.push(case(
        "stop 10 000 strings",
        CHAT,
        chat(json!({"stop": many})),
        400,
        Some("stop"),
    ));
    let long = "x".repeat(1_000_000);
    cases.push(case(
        "stop of 1 MB",
        CHAT,
        chat(json!({"stop": long})),
        400,
        Some("stop"),
    ));
    cases.push(case(
        "stop [[1 MB]]",
        TEXT,
        text(json!({"stop": [long]})),
        400,
        Some("stop"),
    ));
    for value in [json!([1]), json!([["a"]]), json!({"a": "b"})] {
        let body = chat(json!({"stop": value}));
        cases.push(case(format!("stop {value}"), CHAT, body, 400, Some("stop")));
    }
    // logprobs and top_logprobs: huge, negative, wrong types, per endpoint.
    for value in [huge.clone(), json!(21), json!(-1), json!(1.5)] {
        let body = chat(json!({"logprobs": true, "top_logprobs": value}));
        let name = format!("top_logprobs {value}");
        cases.push(case(name, CHAT, body, 400, Some("top_logprobs")));
    }
    for value in [json!("yes"), json!(3), json!([true])] {
        let body = chat(json!({"logprobs": value}));
        cases.push(case(
            format!("chat logprobs {value}"),
            CHAT,
            body,
            400,
            Some("logprobs"),
        ));
    }
    for value in [json!(true), json!("5"), huge.clone(), json!(-1), json!(6)] {
        let body = text(json!({"logprobs": value}));
        cases.push(case(
            format!("text logprobs {value}"),
            TEXT,
            body,
            400,
            Some("logprobs"),
        ));
    }
    // seed: any 64-bit integer is a seed (OpenAI's type is a signed integer); a
    // fraction, a string or a number past 64 bits is not.
    for value in [json!(-1), json!(i64::MIN), huge.clone()] {
        let body = text(json!({"seed": value, "temperature": 1}));
        cases.push(case(format!("seed {value}"), TEXT, body, 200, None));
    }
    for value in [json!(1.5), json!(1e30), json!("1")] {
        let body = text(json!({"seed": value}));
        cases.push(case(format!("seed {value}"), TEXT, body, 400, Some("seed")));
    }
    let past_64_bits = br#"{"prompt": "Hi", "seed": 99999999999999999999999}"#.to_vec();
    cases.push(case(
        "seed past 64 bits",
        TEXT,
        past_64_bits,
        400,
        Some("seed"),
    ));
    // messages: empty, too many, far too many (past the body limit), wrong types.
    let message = json!({"role": "user", "content": "x"});
    let body = json!({"messages": []}).to_string().into_bytes();
    cases.push(case("messages []", CHAT, body, 400, Some("messages")));
    let body = json!({"messages": vec![message.clone(); 4097]})
        .to_string()
        .into_bytes();
    cases.push(case("messages × 4097", CHAT, body, 400, Some("messages")));
    let body = json!({"messages": vec![message; 100_000]})
        .to_string()
        .into_bytes();
    cases.push(case("messages × 100 000", CHAT, body, 413, None));
    for (value, param) in [
        (json!("hi"), "messages"),
        (json!(5), "messages"),
        (json!({"role": "user"}), "messages"),
        (json!([1]), "messages[0]"),
        (json!([[]]), "messages[0]"),
        (
            json!([{"role": ["user"], "content": "x"}]),
            "messages[0].role",
        ),
        (
            json!([{"role": "user", "content": {"a": 1}}]),
            "messages[0].content",
        ),
        (
            json!([{"role": "user", "content": [{"type": "image_url"}]}]),
            "messages[0].content",
        ),
    ] {
        let body = json!({"messages": value}).to_string().into_bytes();
        cases.push(case(
            format!("messages {value}"),
            CHAT,
            body,
            400,
            Some(param),
        ));
    }
    // prompt: a 1 MB text (tokenized, then too long), lists, wrong types, token ids
    // that are negative, past the vocabulary or past u32, more prompts than allowed.
    let prose = "the quick brown fox jumps over the lazy dog ".repeat(22_000);
    let body = json!({"prompt": prose, "max_tokens": 1})
        .to_string()
        .into_bytes();
    cases.push(case("prompt of 1 MB", TEXT, body, 400, Some("prompt")));
    let list: Vec<&str> = vec!["hi"; 100_000];
    let body = json!({"prompt": list}).to_string().into_bytes();
    cases.push(case("prompt × 100 000", TEXT, body, 400, Some("prompt")));
    for value in [
        json!([]),
        json!(5),
        json!({"text": "hi"}),
        json!([1, -2, 3]),
        json!([1, 4_294_967_296u64]),
        json!(vec!["a"; 17]),
        json!([[1], []]),
        json!([1, 2_000_000_000]),
        json!(vec![7; 100_000]),
    ] {
        let body = json!({"prompt": value}).to_string().into_bytes();
        cases.push(case(
            format!("prompt {value}"),
            TEXT,
            body,
            400,
            Some("prompt"),
        ));
    }
    // Nesting deep enough to overflow a recursive parser's stack.
    let deep = format!(
        "{{\"prompt\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    cases.push(case(
        "prompt nested 100 000 deep",
        TEXT,
        deep.into_bytes(),
        400,
        None,
    ));
    cases
}

#[test]
fn hostile_request_parameters_are_refused_by_name_and_the_server_keeps_serving() {
    let server = Server::start(&["--ctx", &CTX.to_string(), "--backends", "cpu"]);
    let addr = server.addr;
    let cases = cases();
    let mut failures = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    for case in &cases {
        let started = Instant::now();
        let response = request(addr, "POST", case.path, &case.body);
        let elapsed = started.elapsed();
        if elapsed > slowest.0 {
            slowest = (elapsed, case.name.clone());
        }
        let text = response.text();
        let shown: String = text.chars().take(400).collect();
        let mut wrong = Vec::new();
        if elapsed > LIMIT {
            wrong.push(format!("took {elapsed:?}"));
        }
        if response.status != case.status {
            wrong.push(format!(
                "status {} instead of {}",
                response.status, case.status
            ));
        } else if case.status != 200 {
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let error = &body["error"];
            if error["type"] != "invalid_request_error" {
                wrong.push("not an invalid_request_error".into());
            }
            if error["param"] != case.param.map_or(Value::Null, Value::from) {
                wrong.push(format!(
                    "param {} instead of {:?}",
                    error["param"], case.param
                ));
            }
            let message = error["message"].as_str().unwrap_or("");
            if message.is_empty()
                || case
                    .param
                    .is_some_and(|p| !message.contains(p.split('[').next().unwrap()))
            {
                wrong.push(format!("message {message:?} does not name the parameter"));
            }
        }
        let health = get(addr, "/health");
        if health.status != 200 {
            wrong.push(format!("then /health answered {}", health.status));
        }
        if !wrong.is_empty() {
            failures.push(format!("{}: {}\n  {shown}", case.name, wrong.join("; ")));
        }
    }
    eprintln!("slowest case: {} in {:?}", slowest.1, slowest.0);
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    // Still serving: a normal chat and a normal completion.
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                      "temperature": 0});
    let ok = post(addr, CHAT, &body);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(ok.json()["usage"]["completion_tokens"].as_u64().unwrap() >= 1);
    let body = json!({"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0});
    let ok = post(addr, TEXT, &body);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["usage"]["completion_tokens"], 2);
}
