//! Panic recovery through the real binary: `SWITCHYARD_FAULT=cpu:panic:N` makes the
//! CPU's `N`th partition run panic (in the prefill for N = 1, in decode later). The
//! request in that step gets a 500, `/metrics` counts the panic, and the next requests
//! (the same prompt, whose prefix the cache had taken, and another) get exactly what a
//! fresh server gives them; a panic while an echoed prompt is scored fails that request
//! alone. A bug of ours in one request's step (`cpu:bug:tokens=ID`, an id only that
//! prompt holds) fails that request alone with a 500, while the requests beside it get
//! what a fresh server gives them.

mod server_support;

use serde_json::{json, Value};
use server_support::{chat, get, metric, post, Server};
use switchyard::model::{fetch, Model};

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

#[test]
fn a_bug_in_one_requests_step_fails_that_request_alone() {
    let prompts = [
        "The longest rivers of the world are",
        "The sky is blue because",
        "A short poem about a zebra:",
        "Counting from one: 1, 2,",
    ];
    let model = Model::open(&fetch::default_model_path(false).unwrap()).unwrap();
    let encoded: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| model.tokenizer.encode(p, true).unwrap())
        .collect();
    let poison = *encoded[2]
        .iter()
        .find(|t| [0, 1, 3].iter().all(|&j| !encoded[j].contains(t)))
        .expect("the poem's prompt has a token of its own");
    let body = |p: &str| json!({"prompt": p, "max_tokens": 8, "temperature": 0});
    let args = ["--backends", "cpu", "--ctx", "512", "--parallel", "4"];
    let fresh = Server::start(&args);
    let expected: Vec<Value> = prompts
        .iter()
        .map(|p| post(fresh.addr, "/v1/completions", &body(p)).json()["choices"].clone())
        .collect();
    drop(fresh);
    let fault = format!("cpu:bug:tokens={poison}");
    let server = Server::start_with_env(&args, &[("SWITCHYARD_FAULT", &fault)]);
    let addr = server.addr;
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let body = body(p);
            std::thread::spawn(move || post(addr, "/v1/completions", &body))
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        let response = handle.join().unwrap();
        if i == 2 {
            assert_eq!(response.status, 500, "{}", response.text());
            let body = response.json();
            assert_eq!(body["error"]["code"], "internal_error", "{body}");
            assert!(body.to_string().contains("injected"), "{body}");
        } else {
            assert_eq!(response.status, 200, "request {i}: {}", response.text());
            assert_eq!(response.json()["choices"], expected[i], "request {i}");
        }
    }
}
