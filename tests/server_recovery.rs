//! Panic recovery through the real binary: `SWITCHYARD_FAULT=cpu:panic:N` makes the
//! CPU's `N`th partition run panic (in the prefill for N = 1, in decode later). The
//! request in that step gets a 500, `/metrics` counts the panic, and the next requests
//! (the same prompt, whose prefix the cache had taken, and another) get exactly what a
//! fresh server gives them; a panic while an echoed prompt is scored fails that request
//! alone.

mod server_support;

use serde_json::Value;
use server_support::{chat, get, metric, post, Server};

const FIRST: &str = "Name three fruits.";
const OTHER: &str = "What is the capital of Italy?";

fn reply(server: &Server, content: &str) -> (u16, Value) {
    let response = post(
        server.addr,
        "/v1/chat/completions",
        &chat(content, 12, false),
    );
    let status = response.status;
    (status, response.json())
}

fn text(body: &Value) -> String {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content in {body}"))
        .to_string()
}

#[test]
fn a_panicking_step_fails_its_request_and_the_next_ones_match_a_fresh_server() {
    let args = ["--backends", "cpu", "--ctx", "512"];
    let fresh = Server::start(&args);
    let expected = [text(&reply(&fresh, FIRST).1), text(&reply(&fresh, OTHER).1)];
    drop(fresh);
    for n in ["1", "3", "7"] {
        let fault = format!("cpu:panic:{n}");
        let server = Server::start_with_env(&args, &[("SWITCHYARD_FAULT", &fault)]);
        let (status, body) = reply(&server, FIRST);
        assert_eq!(status, 500, "{fault}: {body}");
        assert!(body.to_string().contains("panicked"), "{fault}: {body}");
        for (prompt, want) in [FIRST, OTHER].iter().zip(&expected) {
            let (status, body) = reply(&server, prompt);
            assert_eq!(status, 200, "{fault}: {body}");
            assert_eq!(&text(&body), want, "{fault}: {prompt}");
        }
        let metrics = get(server.addr, "/metrics").text();
        assert_eq!(
            metric(&metrics, "switchyard_step_panics_total"),
            Some(1.0),
            "{fault}"
        );
        let log = server.log.lock().unwrap().clone();
        assert!(log.contains("panicked"), "{fault}: {log}");
    }
}

#[test]
fn a_panic_while_scoring_an_echoed_prompt_fails_that_request_alone() {
    let args = ["--backends", "cpu", "--ctx", "512"];
    let body = serde_json::json!({"prompt": "The capital of France is", "max_tokens": 3,
                                  "echo": true, "logprobs": 1, "temperature": 0});
    let fresh = Server::start(&args);
    let expected = post(fresh.addr, "/v1/completions", &body).json();
    drop(fresh);
    // The first partition run is the prompt's scoring pass.
    let server = Server::start_with_env(&args, &[("SWITCHYARD_FAULT", "cpu:panic:1")]);
    let failed = post(server.addr, "/v1/completions", &body);
    assert_eq!(failed.status, 500, "{}", failed.text());
    assert!(failed.text().contains("panicked"), "{}", failed.text());
    let again = post(server.addr, "/v1/completions", &body);
    assert_eq!(again.status, 200, "{}", again.text());
    let again = again.json();
    assert_eq!(again["choices"], expected["choices"]);
    let metrics = get(server.addr, "/metrics").text();
    assert_eq!(metric(&metrics, "switchyard_step_panics_total"), Some(1.0));
}
