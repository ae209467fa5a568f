//! The official `openai` Python client against `switchyard serve` (tests/server_openai.py):
//! chat with and without streaming (same text), a completion, the model list, `n`
//! choices, log-probabilities and errors. Skips with a message when python3 lacks
//! `openai`, unless SWITCHYARD_REQUIRE_OPENAI=1 (CI sets it through scripts/test), which
//! makes that a failure.
//!
//! Without Python: `logprobs` agree with `switchyard generate --top-logits` for the same
//! prompt, `n` choices are what `n` requests with seeds seed, seed + 1, … give, and
//! `logit_bias` and the frequency and presence penalties give what `generate`'s flags
//! give; `response_format` `json_object` replies parse as JSON objects and are what
//! `generate --json-object` writes.

mod server_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use server_support::{chunks, post, Server};
use switchyard::model::{fetch, Model};

/// Context of the servers and `generate` runs here.
const CTX: &str = "512";

fn openai_available() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_openai_python_client_chats_streams_and_completes() {
    if !openai_available() {
        let required = std::env::var("SWITCHYARD_REQUIRE_OPENAI").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SWITCHYARD_REQUIRE_OPENAI=1 but python3 cannot import openai; \
             run `python3 -m pip install openai` (scripts/test does)"
        );
        eprintln!(
            "SKIPPED the_openai_python_client_chats_streams_and_completes: python3 has no \
             `openai` package (`python3 -m pip install openai`, or run scripts/test)"
        );
        return;
    }
    let server = Server::start(&["--max-queue", "4"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/server_openai.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(format!("http://{}", server.addr))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tests/server_openai.py did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tests/server_openai.py failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log.lock().unwrap()
    );
    println!("{stdout}");
}

/// `switchyard generate --backends cpu --ctx CTX --temperature 0` with `args`, which
/// must succeed: its standard output.
fn generate_greedy(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "generate",
            "--backends",
            "cpu",
            "--ctx",
            CTX,
            "--temperature",
            "0",
        ])
        .args(args)
        .output()
        .expect("switchyard generate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// [`generate_greedy`]'s text, without the newline it ends with.
fn generate_text(args: &[&str]) -> String {
    let out = String::from_utf8(generate_greedy(args)).expect("UTF-8 text");
    out.trim_end_matches('\n').to_string()
}

/// `switchyard generate` of `prompt` on the CPU, greedy, `tokens` long, with every logit
/// of every step: the JSON report.
fn generate_every_logit(prompt: &str, chat: bool, tokens: usize) -> Value {
    let tokens = tokens.to_string();
    let mut args = vec!["--json", "--top-logits", "1000000", "-n", &tokens];
    if chat {
        args.push("--chat");
    }
    args.push(prompt);
    serde_json::from_slice(&generate_greedy(&args)).expect("a JSON report")
}

/// Per step of a `generate` report, `(id, log-softmax)` of every token, best first.
fn log_softmax_steps(report: &Value) -> Vec<Vec<(u32, f64)>> {
    report["top_logits"]
        .as_array()
        .expect("top_logits")
        .iter()
        .map(|step| {
            let logits: Vec<(u32, f64)> = step
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        t["id"].as_u64().unwrap() as u32,
                        t["logit"].as_f64().unwrap(),
                    )
                })
                .collect();
            let max = logits.iter().map(|l| l.1).fold(f64::NEG_INFINITY, f64::max);
            let norm = max + logits.iter().map(|l| (l.1 - max).exp()).sum::<f64>().ln();
            logits.into_iter().map(|(id, l)| (id, l - norm)).collect()
        })
        .collect()
}

/// Asserts that `logprob` is within 1e-4 of `expected`.
fn close(logprob: &Value, expected: f64, what: &str) {
    let got = logprob
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {logprob}"));
    assert!(
        (got - expected).abs() < 1e-4,
        "{what}: server {got}, generate {expected}"
    );
}

/// The expected log-probability of the alternative `token` at a step: the best of the
/// step's ids whose text is `token` (texts of partial characters can coincide).
fn alternative(model: &Model, step: &[(u32, f64)], token: &Value, rank: usize) -> f64 {
    let token = token.as_str().expect("a token text");
    step.iter()
        .take(rank + 8)
        .find(|(id, _)| model.tokenizer.token_to_piece(*id).unwrap() == token)
        .unwrap_or_else(|| panic!("{token:?} is not among generate's best at rank {rank}"))
        .1
}

#[test]
fn logprobs_agree_with_generate_top_logits_for_the_same_prompt() {
    let model = Model::open(&fetch::default_model_path(false).unwrap()).unwrap();
    let piece = |id: u32| model.tokenizer.token_to_piece(id).unwrap();
    let server = Server::start(&["--backends", "cpu", "--ctx", CTX, "--max-queue", "4"]);
    let question = "What is the capital of France?";
    const TOKENS: usize = 8;

    // Chat: logprobs with the 20 best alternatives, whole and streamed.
    let body = json!({
        "messages": [{"role": "user", "content": question}],
        "max_tokens": TOKENS, "temperature": 0, "logprobs": true, "top_logprobs": 20,
    });
    let whole = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(whole.status, 200, "{}", whole.text());
    let whole = whole.json();
    let content = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs.content")
        .clone();
    let report = generate_every_logit(question, true, TOKENS);
    let steps = log_softmax_steps(&report);
    let ids: Vec<u32> = report["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(content.len(), ids.len(), "one entry per generated token");
    for (i, (entry, &id)) in content.iter().zip(&ids).enumerate() {
        let step = &steps[i];
        assert_eq!(entry["token"], piece(id), "step {i}");
        let bytes: Vec<u8> = serde_json::from_value(entry["bytes"].clone()).unwrap();
        assert_eq!(bytes, piece(id).into_bytes(), "step {i}");
        let expected = step.iter().find(|t| t.0 == id).unwrap().1;
        close(&entry["logprob"], expected, &format!("step {i}"));
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 20, "step {i}");
        close(&top[0]["logprob"], step[0].1, &format!("step {i}, best"));
        for (rank, alt) in top.iter().enumerate() {
            let expected = alternative(&model, step, &alt["token"], rank);
            close(&alt["logprob"], expected, &format!("step {i}, rank {rank}"));
        }
    }
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let streamed = post(server.addr, "/v1/chat/completions", &stream_body);
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    let streamed_content: Vec<Value> = chunks(&streamed.text())
        .iter()
        .flat_map(|c| {
            c["choices"][0]["logprobs"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        streamed_content, content,
        "streamed chunks carry the same entries"
    );

    // Completions: the legacy shape with 5 alternatives.
    let prompt = "The capital of France is";
    let body = json!({"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 5});
    let whole = post(server.addr, "/v1/completions", &body);
    assert_eq!(whole.status, 200, "{}", whole.text());
    let whole = whole.json();
    let logprobs = &whole["choices"][0]["logprobs"];
    let report = generate_every_logit(prompt, false, 4);
    let steps = log_softmax_steps(&report);
    let ids = report["tokens"].as_array().unwrap();
    let mut offset = 0;
    for (i, id) in ids.iter().enumerate() {
        let id = id.as_u64().unwrap() as u32;
        let step = &steps[i];
        assert_eq!(logprobs["tokens"][i], piece(id), "step {i}");
        assert_eq!(logprobs["text_offset"][i], offset, "step {i}");
        offset += piece(id).chars().count();
        let expected = step.iter().find(|t| t.0 == id).unwrap().1;
        close(
            &logprobs["token_logprobs"][i],
            expected,
            &format!("step {i}"),
        );
        let top = logprobs["top_logprobs"][i].as_object().unwrap();
        assert!(
            (5..=6).contains(&top.len()),
            "5 best and the token: {top:?}"
        );
        for (rank, (token, logprob)) in top.iter().enumerate() {
            let expected = alternative(&model, step, &json!(token), rank);
            close(logprob, expected, &format!("step {i}, {token:?}"));
        }
    }
    assert_eq!(logprobs["tokens"].as_array().unwrap().len(), ids.len());
}

/// The text of every choice of a whole reply, by index.
/// POSTs `body` with `extra`'s fields added (replacing any of the same name) to `path`;
/// the reply, which must be a 200.
fn post_ok(addr: std::net::SocketAddr, path: &str, mut body: Value, extra: Value) -> Value {
    body.as_object_mut()
        .expect("a JSON object")
        .extend(extra.as_object().expect("a JSON object").clone());
    let response = post(addr, path, &body);
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

fn choice_texts(reply: &Value) -> Vec<String> {
    let choices = reply["choices"].as_array().expect("choices");
    for (i, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], i, "{reply}");
    }
    choices
        .iter()
        .map(|c| {
            c["message"]["content"]
                .as_str()
                .or_else(|| c["text"].as_str())
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn n_choices_are_the_requests_with_seeds_seed_plus_i() {
    let server = Server::start(&["--backends", "cpu", "--ctx", CTX, "--max-queue", "4"]);
    let chat = "/v1/chat/completions";
    let ask = |extra: Value| {
        let body = json!({
            "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 10,
        });
        post_ok(server.addr, chat, body, extra)
    };

    // Greedy: three identical choices; usage counts the prompt once.
    let one = ask(json!({"temperature": 0}));
    let three = ask(json!({"temperature": 0, "n": 3}));
    let texts = choice_texts(&three);
    assert_eq!(texts, vec![choice_texts(&one)[0].clone(); 3]);
    let usage = &three["usage"];
    assert_eq!(usage["prompt_tokens"], one["usage"]["prompt_tokens"]);
    assert_eq!(
        usage["completion_tokens"],
        3 * one["usage"]["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );

    // Sampled with a seed: choice i is the single request with seed + i.
    let sampled = ask(json!({"temperature": 1.0, "seed": 11, "n": 3}));
    let texts = choice_texts(&sampled);
    for (i, text) in texts.iter().enumerate() {
        let alone = ask(json!({"temperature": 1.0, "seed": 11 + i}));
        assert_eq!(text, &choice_texts(&alone)[0], "choice {i}");
    }
    assert!(texts[0] != texts[1] || texts[1] != texts[2], "{texts:?}");

    // Streamed: a role chunk, text and a finish reason per index, then one usage chunk.
    let body = json!({
        "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 10,
        "temperature": 1.0, "seed": 11, "n": 3, "stream": true,
        "stream_options": {"include_usage": true},
    });
    let streamed = post(server.addr, chat, &body);
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    let mut text = vec![String::new(); 3];
    let (mut roles, mut finished, mut usage) = (vec![0; 3], vec![0; 3], None);
    for chunk in chunks(&streamed.text()) {
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            if choice["delta"]["role"] == "assistant" {
                roles[i] += 1;
            }
            text[i].push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            if choice["finish_reason"].is_string() {
                finished[i] += 1;
            }
        }
    }
    assert_eq!(text, texts);
    assert_eq!((roles, finished), (vec![1; 3], vec![1; 3]));
    assert_eq!(usage.as_ref(), Some(&sampled["usage"]));

    // Completions, streamed: chunks tagged by index, the same texts as whole.
    let body = json!({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0,
                      "seed": 3, "n": 3});
    let whole = post(server.addr, "/v1/completions", &body);
    assert_eq!(whole.status, 200, "{}", whole.text());
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let streamed = post(server.addr, "/v1/completions", &stream_body);
    let mut text = vec![String::new(); 3];
    for chunk in chunks(&streamed.text()) {
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            text[i].push_str(choice["text"].as_str().unwrap());
        }
    }
    assert_eq!(text, choice_texts(&whole.json()));
}

/// `switchyard generate` of `prompt` (no template), greedy, `tokens` long, with `flags`:
/// the generated ids and text.
fn generate_ids(prompt: &str, tokens: usize, flags: &[&str]) -> (Vec<u64>, String) {
    let tokens = tokens.to_string();
    let mut args = vec!["--json", "-n", &tokens];
    args.extend_from_slice(flags);
    args.push(prompt);
    let report: Value = serde_json::from_slice(&generate_greedy(&args)).expect("a JSON report");
    let ids = report["tokens"].as_array().expect("tokens").iter();
    let ids = ids.map(|id| id.as_u64().unwrap()).collect();
    (ids, report["text"].as_str().unwrap().to_string())
}

#[test]
fn logit_bias_and_penalties_change_the_text_as_generate_flags_do() {
    let server = Server::start(&["--backends", "cpu", "--ctx", CTX, "--max-queue", "4"]);
    let prompt = "Once upon a time, there was a little cat. The cat";
    let complete = |extra: Value| {
        let body = json!({"prompt": prompt, "max_tokens": 24, "temperature": 0});
        post_ok(server.addr, "/v1/completions", body, extra)
    };
    let text = |reply: &Value| reply["choices"][0]["text"].as_str().unwrap().to_string();

    // Banning the greedy first token picks the runner-up the log-probabilities name.
    let (plain_ids, plain_text) = generate_ids(prompt, 24, &[]);
    let plain = complete(json!({"logprobs": 2}));
    assert_eq!(text(&plain), plain_text);
    let first = &plain["choices"][0]["logprobs"]["top_logprobs"][0];
    let ranked = first.as_object().expect("top_logprobs");
    let mut ranked: Vec<(&String, f64)> = ranked
        .iter()
        .map(|(t, l)| (t, l.as_f64().unwrap()))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let banned = complete(json!({"logit_bias": {plain_ids[0].to_string(): -100}}));
    assert!(
        text(&banned).starts_with(ranked[1].0.as_str()),
        "{:?} after banning {:?} (runner-up {:?})",
        text(&banned),
        ranked[0].0,
        ranked[1].0
    );
    let flag = format!("{}-100", plain_ids[0]);
    assert_eq!(
        generate_ids(prompt, 24, &["--logit-bias", &flag]).1,
        text(&banned)
    );

    // Penalties: the server's text is generate's with the same values, and not the
    // unpenalised text.
    let penalised = complete(json!({"frequency_penalty": 1.5, "presence_penalty": 1.0}));
    let flags = ["--frequency-penalty", "1.5", "--presence-penalty", "1.0"];
    assert_eq!(text(&penalised), generate_ids(prompt, 24, &flags).1);
    assert_ne!(text(&penalised), plain_text);

    // Ids past the vocabulary are refused, naming the field.
    let past = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 2, "logit_bias": {"49152": 1}}),
    );
    assert_eq!(past.status, 400, "{}", past.text());
    assert_eq!(past.json()["error"]["param"], "logit_bias");
}

#[test]
fn json_replies_parse_match_their_schema_and_generate() {
    let server = Server::start(&["--backends", "cpu", "--ctx", CTX, "--max-queue", "4"]);
    let chat = "/v1/chat/completions";
    let ask = |content: &str, extra: Value| {
        let body = json!({
            "messages": [{"role": "user", "content": content}], "max_tokens": 120,
            "response_format": {"type": "json_object"},
        });
        post_ok(server.addr, chat, body, extra)
    };
    let object = |text: &str| {
        let value: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
        assert!(value.is_object(), "{text:?}");
    };

    // Greedy: an object that ends the reply ("stop"), the text `generate` writes.
    let cat = "Give me a JSON object describing a cat with name and age.";
    let greedy = ask(cat, json!({"temperature": 0}));
    let choice = &greedy["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{greedy}");
    let text = choice["message"]["content"].as_str().unwrap();
    object(text);
    let written = generate_text(&["--chat", "--json-object", "-n", "120", cat]);
    assert_eq!(written, text);
    // A prompt answered in prose without the constraint opens an object with it.
    let joke = "Tell me a joke.";
    let plain = post(
        server.addr,
        chat,
        &json!({"messages": [{"role": "user", "content": joke}], "max_tokens": 20,
                "temperature": 0}),
    );
    let plain = plain.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!plain.trim_start().starts_with('{'), "{plain:?}");
    let held = ask(joke, json!({"temperature": 0, "max_tokens": 20}));
    let held = held["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(held.trim_start().starts_with('{'), "{held:?}");
    // Twelve prose tokens pushed far above the rest are masked: the reply still opens
    // an object.
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let mut prose = model
        .tokenizer
        .encode(
            " the cat sat on a mat and then the dog ran far away home",
            false,
        )
        .unwrap();
    prose.sort_unstable();
    prose.dedup();
    assert!(prose.len() >= 12, "{prose:?}");
    let bias: serde_json::Map<String, Value> = prose
        .iter()
        .map(|id| (id.to_string(), json!(100)))
        .collect();
    let pushed = ask(
        joke,
        json!({"temperature": 0, "max_tokens": 8, "logit_bias": bias}),
    );
    let pushed = pushed["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(pushed.trim_start().starts_with('{'), "{pushed:?}");

    // Sampled choices, whole and streamed: every finished one is an object.
    let sampled = ask(
        "Describe a dog as JSON.",
        json!({"temperature": 1.0, "seed": 5, "n": 4}),
    );
    let mut finished = 0;
    for choice in sampled["choices"].as_array().unwrap() {
        if choice["finish_reason"] == "stop" {
            object(choice["message"]["content"].as_str().unwrap());
            finished += 1;
        }
    }
    assert!(finished >= 2, "{sampled}");
    let body = json!({
        "messages": [{"role": "user", "content": "Describe a dog as JSON."}], "max_tokens": 120,
        "response_format": {"type": "json_object"}, "temperature": 1.0, "seed": 5, "n": 4,
        "stream": true,
    });
    let streamed = post(server.addr, chat, &body);
    let mut texts = vec![String::new(); 4];
    for chunk in chunks(&streamed.text()) {
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            texts[i].push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        }
    }
    let whole: Vec<String> = choice_texts(&sampled);
    assert_eq!(texts, whole);

    // A JSON Schema: the greedy reply matches it and is what `generate --json-schema`
    // writes; sampled choices match it too.
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "color": {"enum": ["black", "white", "orange"]},
            "toys": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["name", "age", "color", "toys"],
        "additionalProperties": false,
    });
    let format = json!({"type": "json_schema", "json_schema": {"name": "cat", "schema": schema}});
    let matches = |text: &str| {
        let value: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
        let object = value.as_object().unwrap_or_else(|| panic!("{text:?}"));
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["age", "color", "name", "toys"], "{text:?}");
        assert!(
            value["name"].is_string() && value["age"].is_i64(),
            "{text:?}"
        );
        assert!(["black", "white", "orange"].contains(&value["color"].as_str().unwrap()));
        let toys = value["toys"].as_array().unwrap();
        assert!(
            toys.len() <= 3 && toys.iter().all(Value::is_string),
            "{text:?}"
        );
    };
    let shaped = ask(
        "Describe a cat.",
        json!({"temperature": 0, "response_format": format}),
    );
    assert_eq!(shaped["choices"][0]["finish_reason"], "stop", "{shaped}");
    let text = shaped["choices"][0]["message"]["content"].as_str().unwrap();
    matches(text);
    let schema_text = schema.to_string();
    let flags = [
        "--chat",
        "--json-schema",
        &schema_text,
        "-n",
        "120",
        "Describe a cat.",
    ];
    assert_eq!(generate_text(&flags), text);
    let sampled = ask(
        "Describe a cat.",
        json!({"temperature": 1.0, "seed": 9, "n": 3, "response_format": format}),
    );
    for choice in sampled["choices"].as_array().unwrap() {
        if choice["finish_reason"] == "stop" {
            matches(choice["message"]["content"].as_str().unwrap());
        }
    }

    // What Pydantic writes for optional fields, field bounds and a nested model (`anyOf`
    // with null, a list of types, lengths and a range, `$defs` and `$ref`): the greedy
    // reply matches and is `generate`'s.
    let schema = json!({
        "$defs": {"Pet": {
            "properties": {"name": {"title": "Name", "type": "string"},
                           "kind": {"enum": ["cat", "dog"], "title": "Kind", "type": "string"}},
            "required": ["name", "kind"], "title": "Pet", "type": "object",
            "additionalProperties": false,
        }},
        "properties": {
            "name": {"title": "Name", "type": "string", "minLength": 1, "maxLength": 12},
            "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
            "age": {"type": ["integer", "null"], "minimum": 0, "maximum": 120},
            "pets": {"items": {"$ref": "#/$defs/Pet"}, "type": "array", "maxItems": 2},
        },
        "required": ["name", "nickname", "age", "pets"],
        "title": "Person", "type": "object", "additionalProperties": false,
    });
    let format =
        json!({"type": "json_schema", "json_schema": {"name": "Person", "schema": schema}});
    let prompt = "Describe a person named Ann with two pets as JSON.";
    let shaped = ask(
        prompt,
        json!({"temperature": 0, "max_tokens": 120, "response_format": format}),
    );
    assert_eq!(shaped["choices"][0]["finish_reason"], "stop", "{shaped}");
    let text = shaped["choices"][0]["message"]["content"].as_str().unwrap();
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let name = value["name"].as_str().unwrap();
    assert!((1..=12).contains(&name.chars().count()), "{text:?}");
    assert!(
        value["nickname"].is_string() || value["nickname"].is_null(),
        "{text:?}"
    );
    let age = &value["age"];
    assert!(
        age.is_null() || age.as_i64().is_some_and(|a| (0..=120).contains(&a)),
        "{text:?}"
    );
    let pets = value["pets"].as_array().unwrap();
    assert!(pets.len() <= 2, "{text:?}");
    for pet in pets {
        assert!(pet["name"].is_string(), "{text:?}");
        assert!(
            ["cat", "dog"].contains(&pet["kind"].as_str().unwrap()),
            "{text:?}"
        );
    }
    let schema_text = schema.to_string();
    let flags = ["--chat", "--json-schema", &schema_text, "-n", "120", prompt];
    assert_eq!(generate_text(&flags), text);
}

/// A streamed completion's choices put back together from its chunks, in index order:
/// each one's text and its `logprobs` arrays joined key by key.
fn joined_choices(chunks: &[Value]) -> Vec<(String, serde_json::Map<String, Value>)> {
    let mut choices: Vec<(String, serde_json::Map<String, Value>)> = Vec::new();
    for chunk in chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let index = choice["index"].as_u64().unwrap() as usize;
            if choices.len() <= index {
                choices.resize_with(index + 1, Default::default);
            }
            let (text, arrays) = &mut choices[index];
            text.push_str(choice["text"].as_str().unwrap_or(""));
            if let Some(part) = choice["logprobs"].as_object() {
                for (key, values) in part {
                    let list = arrays.entry(key.clone()).or_insert_with(|| json!([]));
                    let list = list.as_array_mut().unwrap();
                    list.extend(values.as_array().unwrap().iter().cloned());
                }
            }
        }
    }
    choices
}

#[test]
fn echo_scores_the_prompt_as_teacher_forced_generate_does() {
    let path = fetch::default_model_path(false).expect("fetching the default model");
    let model = Model::open(&path).unwrap();
    let text = "The capital of France is Paris, and the capital of Italy is";
    let ids = model.tokenizer.encode(text, false).unwrap();
    let first = model.tokenizer.decode(&ids[..1], false).unwrap();
    assert_eq!(model.tokenizer.encode(&first, false).unwrap(), &ids[..1]);
    let server = Server::start(&["--backends", "cpu", "--ctx", CTX, "--max-queue", "4"]);

    // Token ids in, nothing generated: the prompt's own scores, the first one null.
    let body = json!({"prompt": ids, "max_tokens": 0, "echo": true, "logprobs": 2,
                      "temperature": 0});
    let reply = post(server.addr, "/v1/completions", &body);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = reply.json();
    let choice = &reply["choices"][0];
    assert_eq!(choice["text"], text);
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(reply["usage"]["completion_tokens"], 0);
    assert_eq!(reply["usage"]["prompt_tokens"], ids.len());
    let logprobs = &choice["logprobs"];
    let scores = logprobs["token_logprobs"].as_array().unwrap();
    assert_eq!(scores.len(), ids.len());
    assert!(scores[0].is_null() && logprobs["top_logprobs"][0].is_null());

    // Teacher forcing the same tokens through `generate` gives each step's whole
    // distribution: the score of token i + 1 is its log-softmax at step i.
    let forced: Vec<String> = ids[1..].iter().map(u32::to_string).collect();
    let (count, forced) = (forced.len().to_string(), forced.join(","));
    let report = generate_greedy(&[
        "--json",
        "--top-logits",
        "1000000",
        "-n",
        &count,
        "--force-tokens",
        &forced,
        &first,
    ]);
    let steps = log_softmax_steps(&serde_json::from_slice(&report).unwrap());
    for (i, (&token, step)) in ids[1..].iter().zip(&steps).enumerate() {
        let expected = step.iter().find(|(id, _)| *id == token).unwrap().1;
        close(&scores[i + 1], expected, &format!("prompt token {}", i + 1));
        // The best alternative is the step's best.
        let top = logprobs["top_logprobs"][i + 1].as_object().unwrap();
        let best = top
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(
            (best - step[0].1).abs() < 1e-4,
            "token {}: {best} vs {}",
            i + 1,
            step[0].1
        );
    }

    // A text prompt echoes as given, then the generated token follows.
    let body = json!({"prompt": text, "max_tokens": 1, "echo": true, "temperature": 0});
    let one = post(server.addr, "/v1/completions", &body).json();
    let echoed = one["choices"][0]["text"].as_str().unwrap();
    assert!(
        echoed.starts_with(text) && echoed.len() > text.len(),
        "{echoed:?}"
    );

    // Streamed, with and without scores: the chunks add up to the whole reply, the
    // prompt's text (and scores) first.
    for logprobs in [json!(2), Value::Null] {
        let body = json!({"prompt": text, "max_tokens": 5, "echo": true, "temperature": 0,
                          "logprobs": logprobs});
        let whole = post(server.addr, "/v1/completions", &body).json();
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let streamed = post(server.addr, "/v1/completions", &streamed);
        assert_eq!(streamed.status, 200, "{}", streamed.text());
        let chunks = chunks(&streamed.text());
        let first = &chunks[0]["choices"][0];
        assert_eq!(first["text"], text, "{first}");
        let (joined, arrays) = joined_choices(&chunks).remove(0);
        let choice = &whole["choices"][0];
        assert_eq!(joined, choice["text"].as_str().unwrap());
        match choice["logprobs"].as_object() {
            Some(expected) => assert_eq!(&arrays, expected),
            None => assert!(arrays.is_empty(), "{arrays:?}"),
        }
    }
}

#[test]
fn several_prompts_are_answered_as_each_alone_numbered_on() {
    let server = Server::start(&["--backends", "cpu", "--ctx", CTX, "--max-queue", "8"]);
    let complete = |body: Value| {
        let response = post(server.addr, "/v1/completions", &body);
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()
    };
    let (first, second) = ("Once upon a time", vec![504u32, 3575, 282]);
    let alone = |prompt: Value| {
        complete(
            json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "n": 2,
                        "echo": true, "logprobs": 1}),
        )
    };
    let one = alone(json!(first));
    let two = alone(json!(second));
    let both = complete(
        json!({"prompt": [json!(first), json!(second)], "max_tokens": 6,
                               "temperature": 0, "n": 2, "echo": true, "logprobs": 1}),
    );
    let choices = both["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    let expected = [
        &one["choices"][0],
        &one["choices"][1],
        &two["choices"][0],
        &two["choices"][1],
    ];
    for (i, (got, want)) in choices.iter().zip(expected).enumerate() {
        assert_eq!(got["index"], i);
        assert_eq!(got["text"], want["text"], "choice {i}");
        assert_eq!(got["logprobs"], want["logprobs"], "choice {i}");
    }
    let usage = |reply: &Value, key: &str| reply["usage"][key].as_u64().unwrap();
    assert_eq!(
        usage(&both, "prompt_tokens"),
        usage(&one, "prompt_tokens") + usage(&two, "prompt_tokens")
    );
    assert_eq!(
        usage(&both, "completion_tokens"),
        usage(&one, "completion_tokens") + usage(&two, "completion_tokens")
    );

    // Streamed, the same choices come as chunks numbered alike (interleaved as the engine
    // makes them), then one usage chunk for every prompt.
    let mut streamed = json!({"prompt": [json!(first), json!(second)], "max_tokens": 6,
                              "temperature": 0, "n": 2, "echo": true, "logprobs": 1,
                              "stream": true, "stream_options": {"include_usage": true}});
    let response = post(server.addr, "/v1/completions", &streamed);
    assert_eq!(response.status, 200, "{}", response.text());
    let events = chunks(&response.text());
    let joined = joined_choices(&events);
    assert_eq!(joined.len(), 4);
    for (i, ((text, arrays), want)) in joined.iter().zip(choices).enumerate() {
        assert_eq!(text, want["text"].as_str().unwrap(), "streamed choice {i}");
        assert_eq!(
            &Value::Object(arrays.clone()),
            &want["logprobs"],
            "streamed choice {i}"
        );
    }
    let last = events.last().unwrap();
    assert_eq!(last["usage"], both["usage"], "{last}");
    let finished = events
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap())
        .filter(|c| c["finish_reason"].is_string())
        .count();
    assert_eq!(finished, 4);
    // Without echo or scores too: each choice is what it is in the whole reply.
    streamed["echo"] = json!(false);
    streamed["logprobs"] = Value::Null;
    let mut whole = streamed.clone();
    whole["stream"] = json!(false);
    whole.as_object_mut().unwrap().remove("stream_options");
    let whole = complete(whole);
    let response = post(server.addr, "/v1/completions", &streamed);
    let joined = joined_choices(&chunks(&response.text()));
    let texts: Vec<&str> = joined.iter().map(|(t, _)| t.as_str()).collect();
    let want: Vec<&str> = whole["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, want);

    // A choice that takes its prompt from the prefix cache (remembered unscored) starts
    // generating before its job's scored prompt is in, chunk by chunk: streamed, its text
    // still follows the echo, as in the whole reply.
    let long = "The river bends past the mill and the old stone bridge. ".repeat(12);
    complete(json!({"prompt": long, "max_tokens": 1, "temperature": 0}));
    let mut body = json!({"prompt": long, "max_tokens": 4, "temperature": 0, "n": 2,
                          "echo": true, "logprobs": 1, "stream": true});
    let response = post(server.addr, "/v1/completions", &body);
    assert_eq!(response.status, 200, "{}", response.text());
    let joined = joined_choices(&chunks(&response.text()));
    body["stream"] = json!(false);
    let whole = complete(body);
    for (i, (text, arrays)) in joined.iter().enumerate() {
        let want = &whole["choices"][i];
        assert!(text.starts_with(&long), "choice {i}: {text:?}");
        assert_eq!(text, want["text"].as_str().unwrap(), "choice {i}");
        assert_eq!(
            &Value::Object(arrays.clone()),
            &want["logprobs"],
            "choice {i}"
        );
    }

    // Too many choices in all is refused by name.
    let refused = |body: Value, code: &str| {
        let response = post(server.addr, "/v1/completions", &body);
        assert_eq!(response.status, 400, "{}", response.text());
        let error = &response.json()["error"];
        assert_eq!(
            (error["code"].as_str(), error["param"].as_str()),
            (Some(code), Some("prompt"))
        );
    };
    refused(json!({"prompt": vec!["a"; 8], "n": 16}), "invalid_value");
}
