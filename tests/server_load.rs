//! `switchyard serve` under load and at its edges, on loopback only: 32 concurrent
//! streaming clients against `--max-queue 8` (each accepted stream complete and unmixed,
//! the rest 429 with `Retry-After`, `/health` answering throughout), a client that
//! disconnects mid-stream cancels its generation, and SIGTERM ends streams and exits 0.
//! Every loop is bounded in count and time; each test stops its own server.

mod server_support;

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use server_support::{chat, get, metric, post, read_stream, send, Server};

/// One server at a time: the machine has few cores and the tests measure behaviour
/// under a known load.
static SERIAL: Mutex<()> = Mutex::new(());

const CLIENTS: usize = 32;
const MAX_QUEUE: usize = 8;
const MAX_TOKENS: u32 = 6;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn prompt(i: usize) -> String {
    format!("Client {i} here. Repeat the number {i} and say something about it.")
}

#[test]
fn thirty_two_streaming_clients_against_a_queue_of_eight() {
    let _serial = serial();
    let server = Server::start(&["--max-queue", &MAX_QUEUE.to_string(), "--ctx", "256"]);
    let addr = server.addr;

    // /health is polled throughout; each answer must come quickly and say ok.
    let stop = Arc::new(AtomicBool::new(false));
    let health = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            let mut polls = 0;
            while !stop.load(Ordering::SeqCst) && polls < 3000 {
                let started = Instant::now();
                let response = get(addr, "/health");
                assert_eq!(response.status, 200, "{}", response.text());
                slowest = slowest.max(started.elapsed());
                polls += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (polls, slowest)
        })
    };

    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            std::thread::spawn(move || {
                let response = post(
                    addr,
                    "/v1/chat/completions",
                    &chat(&prompt(i), MAX_TOKENS, true),
                );
                (i, response)
            })
        })
        .collect();
    let mut accepted = Vec::new();
    let mut rejected = 0;
    for client in clients {
        let (i, response) = client.join().expect("a client thread");
        match response.status {
            200 => {
                assert_eq!(response.header("content-type"), Some("text/event-stream"));
                let streamed = read_stream(&response.text());
                let id = &streamed.ids[0];
                assert!(streamed.ids.iter().all(|x| x == id), "one id per stream");
                assert!(
                    matches!(streamed.finish_reason.as_deref(), Some("stop" | "length")),
                    "{streamed:?}"
                );
                accepted.push((i, streamed));
            }
            429 => {
                assert_eq!(response.json()["error"]["code"], "queue_full");
                let retry = response.header("retry-after").expect("Retry-After");
                assert!(retry.parse::<u64>().is_ok(), "{retry}");
                rejected += 1;
            }
            other => panic!("client {i}: unexpected {other}: {}", response.text()),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (polls, slowest) = health.join().expect("the health thread");
    assert!(polls >= 1);
    assert!(slowest < Duration::from_secs(5), "/health took {slowest:?}");
    assert_eq!(accepted.len() + rejected, CLIENTS);
    assert!(
        accepted.len() >= MAX_QUEUE && rejected >= 1,
        "{} accepted, {rejected} rejected",
        accepted.len()
    );

    // Each accepted stream holds exactly its own prompt's text: the non-streamed answer.
    let mut ids: Vec<&String> = accepted.iter().map(|(_, s)| &s.ids[0]).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), accepted.len(), "stream ids are distinct");
    for (i, streamed) in &accepted {
        let whole = post(
            addr,
            "/v1/chat/completions",
            &chat(&prompt(*i), MAX_TOKENS, false),
        );
        assert_eq!(whole.status, 200, "{}", whole.text());
        let text = whole.json()["choices"][0]["message"]["content"].clone();
        assert_eq!(text, json!(streamed.text), "client {i}'s stream");
    }

    assert_eq!(get(addr, "/health").status, 200);
    let metrics = get(addr, "/metrics").text();
    let too_many = "switchyard_requests_total{endpoint=\"/v1/chat/completions\",status=\"429\"}";
    assert_eq!(
        metric(&metrics, too_many),
        Some(rejected as f64),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "switchyard_queue_depth"), Some(0.0));
    assert_eq!(
        metric(&metrics, "switchyard_kv_positions_free"),
        None,
        "no KV budget, no free-positions gauge"
    );
    assert_eq!(metric(&metrics, "switchyard_requests_running"), Some(0.0));
    let ttft = metric(&metrics, "switchyard_time_to_first_token_seconds_count");
    assert_eq!(ttft, Some(2.0 * accepted.len() as f64), "{metrics}");
    // Every step that ran a sequence was timed, and took some time.
    let timed = metric(&metrics, "switchyard_step_duration_seconds_count").unwrap();
    let steps = metric(&metrics, "switchyard_steps_total").unwrap();
    assert!(
        timed >= 1.0 && timed <= steps,
        "{timed} timed of {steps} steps"
    );
    assert!(metric(&metrics, "switchyard_step_duration_seconds_sum").unwrap() > 0.0);
}

/// Reads from a streamed response until `needle` has arrived (bounded by the socket's
/// read timeout and a byte budget), returning what was read.
fn read_until(stream: &mut std::net::TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) && seen.len() < 1 << 20 {
        let n = stream.read(&mut buf).expect("reads");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn a_client_that_disconnects_cancels_its_generation() {
    let _serial = serial();
    let server = Server::start(&["--max-queue", "2"]);
    let addr = server.addr;
    let body =
        json!({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": true});
    let mut stream = send(addr, "POST", "/v1/completions", body.to_string().as_bytes());
    let seen = read_until(&mut stream, "\"text\":\"");
    assert!(seen.contains("200 OK"), "{seen}");
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(60);
    let cancelled = "switchyard_generations_total{reason=\"cancelled\"}";
    loop {
        let metrics = get(addr, "/metrics").text();
        if metric(&metrics, cancelled) == Some(1.0) {
            let generated = metric(&metrics, "switchyard_completion_tokens_total").unwrap();
            assert!(generated < 100.0, "{generated} tokens before stopping");
            break;
        }
        assert!(Instant::now() < deadline, "not cancelled: {metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The engine is free again: the next request is served.
    let next = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(next.status, 200, "{}", next.text());
}

#[test]
fn sigterm_ends_open_streams_and_exits_zero() {
    let _serial = serial();
    let mut server = Server::start(&["--max-queue", "2"]);
    let addr = server.addr;
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
                      "max_tokens": 400, "stream": true});
    let mut stream = send(
        addr,
        "POST",
        "/v1/chat/completions",
        body.to_string().as_bytes(),
    );
    let mut seen = read_until(&mut stream, "\"content\":\"");
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
    let mut rest = String::new();
    stream.read_to_string(&mut rest).expect("the stream ends");
    seen.push_str(&rest);
    let body = &seen[seen.find("\r\n\r\n").unwrap() + 4..];
    assert!(body.contains("shutting_down"), "{body}");
    assert!(body.contains("data: [DONE]"), "{body}");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still accepting"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log.lock().unwrap().contains("switchyard: stopped") {
        assert!(Instant::now() < deadline, "{}", server.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// With `--kv-memory` holding about two requests, 64 streaming clients all complete
/// with their own text (requests wait for KV room in the queue), one that could never
/// fit gets a 400 naming the budget, and the KV gauges return to zero.
#[test]
fn a_small_kv_budget_queues_requests_and_every_one_completes() {
    let _serial = serial();
    // 23 040 bytes per position for the default model: 2 MiB hold 91 positions.
    let server = Server::start(&["--kv-memory", "2", "--max-queue", "80", "--ctx", "512"]);
    let addr = server.addr;
    let too_big = post(addr, "/v1/chat/completions", &chat("Hi", 200, false));
    assert_eq!(too_big.status, 400, "{}", too_big.text());
    assert!(too_big.text().contains("--kv-memory"), "{}", too_big.text());

    let clients: Vec<_> = (0..64)
        .map(|i| {
            std::thread::spawn(move || {
                let body = chat(&format!("Say {i}."), MAX_TOKENS, true);
                (i, post(addr, "/v1/chat/completions", &body))
            })
        })
        .collect();
    let mut streams = Vec::new();
    for client in clients {
        let (i, response) = client.join().expect("a client thread");
        assert_eq!(response.status, 200, "client {i}: {}", response.text());
        streams.push((i, read_stream(&response.text())));
    }
    for (i, streamed) in &streams {
        assert!(
            matches!(streamed.finish_reason.as_deref(), Some("stop" | "length")),
            "client {i}: {streamed:?}"
        );
        let whole = post(
            addr,
            "/v1/chat/completions",
            &chat(&format!("Say {i}."), MAX_TOKENS, false),
        );
        let text = whole.json()["choices"][0]["message"]["content"].clone();
        assert_eq!(text, json!(streamed.text), "client {i}'s stream");
    }
    // The engine publishes its gauges after the step whose events ended the last
    // responses, so a client may read /metrics a moment before they settle.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let metrics = loop {
        let metrics = get(addr, "/metrics").text();
        let settled = metric(&metrics, "switchyard_kv_positions_reserved") == Some(0.0);
        if settled || std::time::Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(
        metric(&metrics, "switchyard_kv_positions_reserved"),
        Some(0.0)
    );
    // 2 MiB over the default model's 23 040 bytes a position (30 layers × 3 KV heads ×
    // 64 dimensions × keys and values × 2 bytes of f16): 91 positions, all free again.
    assert_eq!(
        metric(&metrics, "switchyard_kv_positions_free"),
        Some(((2 << 20) / 23_040) as f64)
    );
    assert_eq!(metric(&metrics, "switchyard_requests_running"), Some(0.0));
    let batch = metric(&metrics, "switchyard_step_sequences_total").unwrap()
        / metric(&metrics, "switchyard_steps_total").unwrap();
    assert!(
        batch <= 3.0,
        "mean batch {batch} under a two-request budget"
    );
}
