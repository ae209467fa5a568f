//! The `switchyard` binary as a user runs it: doctor, plan, generate (text and JSON,
//! stop strings, seeds) on the default model, and clear errors for bad input.

use std::process::{Command, Output};

fn switchyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn doctor_reports_the_cpu_backend() {
    let out = switchyard(&["doctor"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("backend cpu (id 0)"));
    let json: serde_json::Value =
        serde_json::from_slice(&switchyard(&["doctor", "--json"]).stdout).unwrap();
    assert_eq!(json["backends"][0]["name"], "cpu");
}

/// `switchyard doctor --json` under `SWITCHYARD_ISA=env` (unset for `None`) with
/// `flags` before the subcommand.
fn doctor_under(env: Option<&str>, flags: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    match env {
        Some(v) => cmd.env("SWITCHYARD_ISA", v),
        None => cmd.env_remove("SWITCHYARD_ISA"),
    };
    cmd.args(flags)
        .args(["doctor", "--json"])
        .output()
        .expect("the binary runs")
}

#[test]
fn the_cpu_kernel_cap_is_reported_and_bad_caps_are_refused_by_name() {
    let kernels = |out: &Output| -> serde_json::Value {
        assert!(out.status.success(), "{}", stderr(out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["cpu_kernels"].clone()
    };
    let native = kernels(&doctor_under(None, &[]));
    assert!(native["capped_by"].is_null(), "{native}");
    assert_eq!(native["active"], native["host"]);
    let host = native["host"].as_str().unwrap().to_string();

    let scalar = kernels(&doctor_under(Some("scalar"), &[]));
    assert_eq!(scalar["active"], "scalar");
    assert_eq!(scalar["capped_by"], "SWITCHYARD_ISA");
    assert_eq!(scalar["host"], host.as_str());
    // The backend's version (a cache key) names the cap.
    let out = doctor_under(None, &["--isa", "scalar"]);
    assert_eq!(kernels(&out)["capped_by"], "--isa");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let version = json["backends"][0]["capability"]["version"]
        .as_str()
        .unwrap();
    assert!(version.contains(" isa=scalar "), "{version}");
    // The flag wins over the variable, but a bad variable is refused even then.
    if host != "scalar" {
        let out = doctor_under(Some("scalar"), &["--isa", "avx2"]);
        assert_eq!(kernels(&out)["active"], "avx2");
    }
    let out = doctor_under(Some("bogus"), &["--isa", "scalar"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("SWITCHYARD_ISA=\"bogus\""),
        "{}",
        stderr(&out)
    );

    let out = doctor_under(Some("sse9"), &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("SWITCHYARD_ISA=\"sse9\" is not a kernel set"),
        "{}",
        stderr(&out)
    );
    let out = doctor_under(None, &["--isa", "avx512"]);
    if host == "avx512" {
        assert_eq!(kernels(&out)["active"], "avx512");
    } else {
        assert!(!out.status.success());
        let text = stderr(&out);
        assert!(
            text.contains("--isa=avx512 asks for kernels this CPU lacks"),
            "{text}"
        );
    }
}

#[test]
fn a_headless_gpu_probe_prints_no_desktop_errors() {
    // Mesa's device-selection layer, where installed, complains about a missing
    // XDG_RUNTIME_DIR on every probe unless the binary switches it off.
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("doctor")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("NODEVICE_SELECT")
        .env_remove("MESA_VK_DEVICE_SELECT")
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("XDG_RUNTIME_DIR"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_demo_places_runs_and_hits_the_cache() {
    let out = switchyard(&["plan", "--demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("partitions: 1"));
    assert!(text.contains("graph cache: 2 compiles, 7 hits"), "{text}");
    let dot = tempfile::NamedTempFile::new().unwrap();
    let out = switchyard(&[
        "plan",
        "--demo",
        "--json",
        "--dot",
        dot.path().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(plan["partitions"].as_array().unwrap().len() == 1);
    assert!(std::fs::read_to_string(dot.path())
        .unwrap()
        .starts_with("digraph"));
}

#[test]
fn generate_json_reports_one_decode_compile_then_hits() {
    let out = switchyard(&["generate", "The capital of France is", "-n", "6", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["prompt_tokens"],
        serde_json::json!([504, 3575, 282, 4649, 314])
    );
    assert_eq!(json["tokens"][0], 7042, "greedy ' Paris'");
    let n = json["tokens"].as_array().unwrap().len() as u64;
    assert_eq!(json["cache"]["decode"]["compiles"], 1);
    assert_eq!(
        json["cache"]["decode"]["hits"],
        n - 2,
        "n tokens = prefill + n-1 decode steps"
    );
    assert_eq!(json["cache"]["prefill"]["compiles"], 1);
}

#[test]
fn stop_strings_end_the_text_and_seeds_repeat() {
    let out = switchyard(&[
        "generate",
        "The capital of France is",
        "-n",
        "20",
        "--stop",
        ".",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), " Paris");
    let sampled = |seed: &str| {
        let args = [
            "generate",
            "Once upon a time",
            "-n",
            "12",
            "--temperature",
            "0.9",
            "--seed",
            seed,
        ];
        stdout(&switchyard(&args))
    };
    assert_eq!(sampled("7"), sampled("7"));
}

#[test]
fn bad_input_gets_a_clear_error() {
    let too_long = switchyard(&["generate", "hello", "-n", "5000"]);
    assert!(!too_long.status.success());
    assert!(
        stderr(&too_long).contains("context holds 2048"),
        "{}",
        stderr(&too_long)
    );

    let missing = switchyard(&["generate", "hi", "--model", "/nonexistent/model.gguf"]);
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("/nonexistent/model.gguf"));

    let garbage = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(garbage.path(), b"definitely not a gguf file").unwrap();
    let bad = switchyard(&[
        "generate",
        "hi",
        "--model",
        garbage.path().to_str().unwrap(),
    ]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("malformed") || stderr(&bad).contains("magic"),
        "{}",
        stderr(&bad)
    );

    let backend = switchyard(&["generate", "hi", "--backends", "cpu,tpu"]);
    assert!(stderr(&backend).contains("unknown backend \"tpu\""));
    let typo = switchyard(&["generate", "hi", "--backends", "cpus"]);
    assert!(
        stderr(&typo).contains("unknown backend \"cpus\""),
        "{}",
        stderr(&typo)
    );
    let no_cpu = switchyard(&["generate", "hi", "--backends", "gpu"]);
    assert!(
        stderr(&no_cpu).contains("must include cpu"),
        "{}",
        stderr(&no_cpu)
    );

    for (flags, says) in [
        (
            ["--logit-bias", "49152+1"],
            "--logit-bias names token 49152",
        ),
        (["--logit-bias", "12=3"], "is not ID+BIAS or ID-BIAS"),
        (["--logit-bias", "12+inf"], "-inf to ban"),
        (
            ["--presence-penalty", "2.5"],
            "--presence-penalty 2.5 is out of range",
        ),
        (
            ["--frequency-penalty", "NaN"],
            "--frequency-penalty NaN is out of range",
        ),
        (
            [
                "--json-schema",
                r#"{"type": "object", "properties": {"a": {"uniqueItems": true}}}"#,
            ],
            "uniqueItems",
        ),
        (
            ["--json-schema", "@/nonexistent/schema.json"],
            "reading /nonexistent",
        ),
        (["--json-schema", "false"], "admits no value"),
        (["--regex", "("], "--regex"),
        (["--json-object", "--regex=a"], "cannot be used with"),
    ] {
        let out = switchyard(&["generate", "hi", "-n", "2", flags[0], flags[1]]);
        assert!(!out.status.success(), "{flags:?} was accepted");
        assert!(stderr(&out).contains(says), "{flags:?}: {}", stderr(&out));
    }
}

/// `constrain` says whether a text is accepted, and if not the byte where it is refused
/// and what was expected there; its exit status says the same.
#[test]
fn constrain_accepts_or_says_where_and_what() {
    let schema =
        r#"{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}"#;
    let ok = switchyard(&["constrain", "--json-schema", schema, r#"{"n":12}"#]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert_eq!(stdout(&ok).trim(), "accepted (8 bytes)");
    let bad = switchyard(&["constrain", "--json-schema", schema, r#"{"n":"x"}"#]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stdout(&bad).starts_with("rejected at byte 5: expected one of '-', '0'-'9'"),
        "{}",
        stdout(&bad)
    );
    let open = switchyard(&["constrain", "--json", "--regex", "[a-c]+x", "ab"]);
    assert_eq!(open.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_str(&stdout(&open)).unwrap();
    assert_eq!(report["accepted"], false);
    assert_eq!(report["offset"], 2);
    let negative = switchyard(&[
        "constrain",
        "--json-schema",
        r#"{"type": "integer"}"#,
        "-12",
    ]);
    assert!(negative.status.success(), "{}", stderr(&negative));
    let choice = switchyard(&["constrain", "--choice", "yes,no", "no"]);
    assert!(choice.status.success(), "{}", stdout(&choice));
    let none = switchyard(&["constrain", "text"]);
    assert!(stderr(&none).contains("no grammar"), "{}", stderr(&none));
}

/// `chat` keeps its conversation's KV cache: the second turn evaluates only what the
/// first did not already hold (its prompt and reply), and says so with `--stats`.
#[test]
fn chat_turns_evaluate_only_their_new_tokens() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "chat",
            "--backends",
            "cpu",
            "--stats",
            "-n",
            "12",
            "--temperature",
            "0",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Name a fruit.\nName another one.\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let turns: Vec<(usize, usize, usize)> = stderr(&out)
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("(prompt ")?;
            let n: Vec<usize> = l
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            Some((n[0], n[1], n[2]))
        })
        .collect();
    assert_eq!(turns.len(), 2, "{}", stderr(&out));
    let ((first, reused0, _), (second, reused1, evaluated1)) = (turns[0], turns[1]);
    assert_eq!(reused0, 0);
    assert!(
        reused1 > first,
        "second turn reused {reused1} of a first prompt of {first}"
    );
    assert_eq!(reused1 + evaluated1, second);
    assert!(
        evaluated1 < 20,
        "{evaluated1} tokens evaluated for one new short message"
    );
}

#[test]
fn perplexity_agrees_with_llama_perplexity() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/perplexity/");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{data}llamacpp.json")).unwrap())
            .unwrap();
    let ctx = reference["ctx"].to_string();
    let file = format!("{data}architecture-excerpt.txt");
    let out = switchyard(&[
        "perplexity",
        "--backends",
        "cpu",
        "--ctx",
        &ctx,
        "-f",
        &file,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ours: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let windows = reference["windows"].as_u64().unwrap();
    assert_eq!(ours["windows"].as_u64(), Some(windows));
    // Each window scores its second half: ctx − 1 − ctx/2 tokens.
    let ctx = reference["ctx"].as_u64().unwrap();
    assert_eq!(ours["scored"].as_u64(), Some(windows * (ctx - 1 - ctx / 2)));
    let close = |key: &str, tolerance: f64| {
        let (a, b) = (
            ours[key].as_f64().unwrap(),
            reference[key].as_f64().unwrap(),
        );
        assert!(
            (a - b).abs() <= tolerance * b,
            "{key}: {a} against llama.cpp's {b}"
        );
    };
    close("ppl", 0.01);
    close("error", 0.02);

    let short = switchyard(&["perplexity", "--ctx", "4096", "-f", &file]);
    assert!(!short.status.success());
    assert!(
        stderr(&short).contains("needs at least"),
        "{}",
        stderr(&short)
    );
}
