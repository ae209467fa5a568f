//! `switchyard bench` as a user runs it on the default model: the JSON report's shape
//! (never its speeds) and clear errors for tests that cannot run; with a grammar, the
//! constrained comparison's report.

use std::process::{Command, Output};

fn switchyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// `switchyard bench --prompt-tokens 8 --gen-tokens 4 --reps 1 --threads 1 --json`
/// plus `extra` on the default model: its JSON report, once it succeeded.
fn bench_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "--prompt-tokens",
        "8",
        "--gen-tokens",
        "4",
        "--reps",
        "1",
        "--threads",
        "1",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = switchyard(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bench_json_reports_every_test_the_environment_and_memory() {
    let json = bench_json(&[]);

    let results = json["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pp8", "tg4"]);
    for (result, tokens) in results.iter().zip([8, 4]) {
        assert_eq!(result["tokens"], tokens);
        assert_eq!(result["tok_s"].as_array().unwrap().len(), 1);
        let summary = &result["summary"];
        assert_eq!(summary["n"], 1);
        for key in ["median", "min", "max"] {
            assert!(summary[key].as_f64().unwrap() > 0.0, "{key}: {summary}");
        }
        assert!(summary["ci95"].is_null(), "one rep has no interval");
    }
    assert_eq!(json["threads"], 1);
    assert_eq!(json["reps"], 1);
    assert_eq!(json["backends"], "cpu");

    let model = &json["model"];
    assert!(model["path"]
        .as_str()
        .unwrap()
        .ends_with("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(model["file_bytes"].as_u64().unwrap() > 0);
    assert!(model["kv_bytes"].as_u64().unwrap() > 0);
    assert!(model["ctx"].as_u64().unwrap() >= 132);

    let env = &json["env"];
    assert!(env["cores_logical"].as_u64().unwrap() >= 1);
    assert!(env["simd"].is_array());
    assert_eq!(env["version"], env!("CARGO_PKG_VERSION"));
    assert!(env["git_commit"].is_string());
    // The kernel set in force: the host's widest unless SWITCHYARD_ISA capped it.
    let kernels = &env["cpu_kernels"];
    assert!(
        kernels["active"].is_string() && kernels["host"].is_string(),
        "{kernels}"
    );
    let capped = std::env::var("SWITCHYARD_ISA").is_ok_and(|v| !v.trim().is_empty());
    assert_eq!(kernels["capped_by"].is_null(), !capped, "{kernels}");
    for key in [
        "unix_time",
        "cpu_model",
        "cores_physical",
        "os",
        "arch",
        "kernel",
        "mem_available_bytes",
        "loadavg",
    ] {
        assert!(env.get(key).is_some(), "env lacks {key}: {env}");
    }
    if cfg!(target_os = "linux") {
        let peak = json["peak_rss_bytes"].as_u64().unwrap();
        assert!(peak > 0);
        assert_eq!(env["loadavg"].as_array().unwrap().len(), 3);
        // tg4's warm-up and repetition are each followed by a read-bandwidth probe,
        // whose 1 GiB buffer is not the benchmark's peak RSS (where the kernel lets a
        // process reset its peak, as it lets this one).
        let bw = &json["read_bandwidth"];
        if std::fs::write("/proc/self/clear_refs", "5").is_err() {
            assert!(bw.is_null(), "{bw}");
            return;
        }
        assert_eq!(bw["probes_gb_s"].as_array().unwrap().len(), 2, "{bw}");
        assert!(bw["median_gb_s"].as_f64().unwrap() > 0.0);
        assert!(peak < bw["bytes"].as_u64().unwrap(), "peak RSS {peak}");
    } else {
        assert!(json["peak_rss_bytes"].is_null());
    }
}

#[test]
fn bench_rejects_zero_reps_and_empty_test_lists() {
    let out = switchyard(&["bench", "--reps", "0", "--json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reps"));
    let out = switchyard(&["bench", "--prompt-tokens", "0", "--gen-tokens", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to measure"));
}

#[test]
fn bench_profile_says_where_each_tests_steps_go() {
    let json = bench_json(&["--backends", "cpu", "--profile"]);
    let profile = json["profile"]
        .as_array()
        .expect("--profile adds node times");
    let tests: Vec<&str> = profile
        .iter()
        .map(|p| p["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["pp8", "tg4"]);
    // tg4 prefills its 128-token prompt, then steps one row at a time (a warm-up and
    // one repetition: 8 steps).
    let steps = profile[1]["steps"].as_array().unwrap();
    let decode = steps
        .iter()
        .find(|s| s["rows"] == 1)
        .expect("one-row decode steps");
    assert_eq!(decode["runs"], 8);
    let ops = decode["ops"].as_array().unwrap();
    let total = decode["nanos"].as_u64().unwrap();
    let inside: u64 = ops.iter().map(|o| o["nanos"].as_u64().unwrap()).sum();
    assert!(inside <= total && inside > total / 2, "{inside} of {total}");
    let head = ops
        .iter()
        .find(|o| o["op"] == "matmul q8_0 [49152, 576]")
        .expect("the default model's output head");
    assert_eq!(head["calls"], 8);
    assert_eq!(head["weight_bytes"], 49152 / 32 * 34 * 576);
    assert!(ops
        .iter()
        .any(|o| o["op"] == "attention" && o["calls"] == 8 * 30));
    // Beside the tg test's step, the default sampling of its one row.
    let sampling = json["sampling"]
        .as_array()
        .expect("--profile times sampling");
    assert_eq!(sampling.len(), 1, "{sampling:?}");
    assert_eq!(
        (&sampling[0]["test"], &sampling[0]["rows"]),
        (&"tg4".into(), &1.into())
    );
    assert!(sampling[0]["percent_of_step"].as_f64().unwrap() > 0.0);

    let out = switchyard(&["bench", "--arms", "cpu", "--profile"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--profile"));
}

#[test]
fn bench_with_a_grammar_compares_constrained_steps_and_times_the_mask() {
    let out = switchyard(&[
        "bench",
        "--json-schema",
        r#"{"type": "object", "properties": {"name": {"type": "string"}}}"#,
        "--batch",
        "2",
        "--gen-tokens",
        "3",
        "--reps",
        "1",
        "--threads",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["sequences"], 2);
    assert_eq!(json["vocab_size"], 49152);
    for key in [
        "unconstrained_step_ms",
        "constrained_step_ms",
        "mask_us",
        "apply_us",
        "advance_us",
        "constraint_us",
    ] {
        let summary = &json[key];
        assert!(summary["median"].as_f64().unwrap() >= 0.0, "{key}: {json}");
        assert!(summary["p99"].as_f64().unwrap() >= 0.0, "{key}: {json}");
    }
    // Three timed steps of each arm.
    assert_eq!(json["unconstrained_step_ms"]["n"], 3);
    assert_eq!(json["constrained_step_ms"]["n"], 3);

    let out = switchyard(&["bench", "--json-object", "--profile"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--profile"));
}
