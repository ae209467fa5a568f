//! Hostile command-line values, table-driven over `generate`, `chat`, `serve` and
//! `bench`: huge, zero, negative, NaN and infinite numbers, absurd thread counts and
//! budgets. Each case must end within seconds (the harness kills it at a deadline and
//! fails), never panic, and either be refused with a message naming the flag or be
//! clamped with a warning naming it (a few extreme but valid values must simply work).

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a case may take: loading the default model and, for the cases that run,
/// two generated tokens or the server's start; refusals take milliseconds.
const LIMIT: Duration = Duration::from_secs(30);

/// `u64::MAX`, the largest value a count flag parses.
const HUGE: &str = "18446744073709551615";

/// One past `u64::MAX`: does not parse at all.
const HUGER: &str = "18446744073709551616";

/// What a case must do.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Exit with a failure, saying this on stderr.
    Refused(&'static str),
    /// Run (exit 0, or for `serve` start listening), saying this on stderr.
    Warned(&'static str),
    /// Run without complaint: an extreme value that is still valid.
    Accepted,
}
use Expect::{Accepted, Refused, Warned};

/// `(command, flags, expectation)`; the harness adds what each command needs to run
/// quickly on the CPU (a prompt and `-n 2` for `generate`, a free port for `serve`).
const CASES: &[(&str, &[&str], Expect)] = &[
    // generate: the token limit.
    ("generate", &["-n", HUGE], Refused("--max-tokens")),
    (
        "generate",
        &["-n", "0"],
        Refused("--max-tokens must be at least 1"),
    ),
    ("generate", &["-n", "-1"], Refused("--max-tokens")),
    (
        "generate",
        &["--max-tokens", HUGER],
        Refused("--max-tokens"),
    ),
    // Sampling values: NaN, infinities, negatives, out of range.
    (
        "generate",
        &["--temperature", "nan"],
        Refused("--temperature"),
    ),
    (
        "generate",
        &["--temperature", "inf"],
        Refused("--temperature"),
    ),
    (
        "generate",
        &["--temperature", "-inf"],
        Refused("--temperature"),
    ),
    (
        "generate",
        &["--temperature", "-1"],
        Refused("--temperature"),
    ),
    (
        "generate",
        &["--temperature", "1e30"],
        Refused("--temperature"),
    ),
    ("generate", &["--top-p", "2"], Refused("--top-p")),
    ("generate", &["--top-p", "0"], Refused("--top-p")),
    ("generate", &["--top-p", "-0.5"], Refused("--top-p")),
    ("generate", &["--top-p", "NaN"], Refused("--top-p")),
    ("generate", &["--top-p", "-inf"], Refused("--top-p")),
    ("generate", &["--top-k", "-1"], Refused("--top-k")),
    ("generate", &["--top-k", HUGER], Refused("--top-k")),
    (
        "generate",
        &["--top-k", HUGE],
        Warned("--top-k 18446744073709551615"),
    ),
    ("generate", &["--min-p", "-3"], Refused("--min-p")),
    ("generate", &["--min-p", "2"], Refused("--min-p")),
    ("generate", &["--min-p", "nan"], Refused("--min-p")),
    ("generate", &["--min-p", "inf"], Refused("--min-p")),
    ("generate", &["--min-p", "-inf"], Refused("--min-p")),
    (
        "generate",
        &["--repeat-penalty", "0"],
        Refused("--repeat-penalty"),
    ),
    (
        "generate",
        &["--repeat-penalty", "-1"],
        Refused("--repeat-penalty"),
    ),
    (
        "generate",
        &["--repeat-penalty", "nan"],
        Refused("--repeat-penalty"),
    ),
    (
        "generate",
        &["--repeat-penalty", "inf"],
        Refused("--repeat-penalty"),
    ),
    (
        "generate",
        &["--repeat-penalty", "1e30"],
        Refused("--repeat-penalty"),
    ),
    (
        "generate",
        &["--repeat-last-n", "-1"],
        Refused("--repeat-last-n"),
    ),
    ("generate", &["--seed", "-1"], Refused("--seed")),
    ("generate", &["--seed", HUGER], Refused("--seed")),
    ("generate", &["--seed", HUGE], Accepted),
    ("generate", &["--stop", ""], Refused("--stop")),
    // Threads, context, outputs, backends.
    (
        "generate",
        &["--threads", "0"],
        Refused("--threads must be at least 1"),
    ),
    (
        "generate",
        &["--threads", "5000"],
        Refused("--threads 5000"),
    ),
    ("generate", &["--threads", "-1"], Refused("--threads")),
    ("generate", &["--threads", HUGE], Refused("--threads")),
    (
        "generate",
        &["--ctx", "0"],
        Refused("--ctx must be at least 1"),
    ),
    ("generate", &["--ctx", "-1"], Refused("--ctx")),
    (
        "generate",
        &["--ctx", HUGE],
        Warned("--ctx 18446744073709551615"),
    ),
    ("generate", &["--top-logits", "-1"], Refused("--top-logits")),
    ("generate", &["--top-logits", "3"], Refused("--top-logits")),
    (
        "generate",
        &["--json", "--top-logits", HUGE],
        Warned("--top-logits 18446744073709551615"),
    ),
    (
        "generate",
        &["--force-tokens", "4294967295"],
        Refused("--force-tokens: id 4294967295"),
    ),
    ("generate", &["--backends", "tpu"], Refused("\"tpu\"")),
    // chat shares the sampling flags; they are refused before the model loads.
    ("chat", &["-n", "0"], Refused("--max-tokens")),
    ("chat", &["--temperature", "nan"], Refused("--temperature")),
    ("chat", &["--top-k", "-5"], Refused("--top-k")),
    ("chat", &["--threads", "5000"], Refused("--threads")),
    // serve: batching, queue and memory budgets.
    ("serve", &["--parallel", "0"], Refused("--parallel 0")),
    ("serve", &["--parallel", "-1"], Refused("--parallel")),
    ("serve", &["--parallel", HUGE], Refused("--parallel")),
    (
        "serve",
        &["--prefill-per-step", "0"],
        Refused("--prefill-per-step 0"),
    ),
    (
        "serve",
        &["--prefill-per-step", "-1"],
        Refused("--prefill-per-step"),
    ),
    (
        "serve",
        &["--prefill-per-step", HUGE],
        Refused("--prefill-per-step"),
    ),
    ("serve", &["--max-queue", "0"], Refused("--max-queue 0")),
    ("serve", &["--max-queue", "-1"], Refused("--max-queue")),
    ("serve", &["--max-queue", HUGE], Refused("--max-queue")),
    ("serve", &["--kv-memory", "0"], Refused("--kv-memory 0")),
    ("serve", &["--kv-memory", "-1"], Refused("--kv-memory")),
    (
        "serve",
        &["--kv-memory", HUGE],
        Warned("--kv-memory 18446744073709551615"),
    ),
    ("serve", &["--ctx", "0"], Refused("--ctx")),
    (
        "serve",
        &["--ctx", HUGE],
        Warned("--ctx 18446744073709551615"),
    ),
    ("serve", &["--threads", "5000"], Refused("--threads")),
    // bench: repetitions, lengths, batch sizes, rounds.
    ("bench", &["--reps", "0"], Refused("--reps 0")),
    ("bench", &["--reps", "-1"], Refused("--reps")),
    ("bench", &["--reps", HUGE], Refused("--reps")),
    ("bench", &["--gen-tokens", HUGE], Refused("--gen-tokens")),
    ("bench", &["--gen-tokens", "-1"], Refused("--gen-tokens")),
    (
        "bench",
        &["--prompt-tokens", HUGE],
        Refused("--prompt-tokens"),
    ),
    (
        "bench",
        &["--prompt-tokens", "1000000", "--gen-tokens", "0"],
        Refused("--prompt-tokens"),
    ),
    ("bench", &["--batch", "0"], Refused("--batch")),
    ("bench", &["--batch", HUGE], Refused("--batch")),
    (
        "bench",
        &["--arms", "cpu", "--rounds", "0"],
        Refused("--rounds 0"),
    ),
    (
        "bench",
        &["--arms", "cpu", "--rounds", HUGE],
        Refused("--rounds"),
    ),
    (
        "bench",
        &["--arms", "cpu", "--warmup", HUGE],
        Refused("--warmup"),
    ),
    (
        "bench",
        &["--arms", "cpu", "--seed", "-1"],
        Refused("--seed"),
    ),
    (
        "bench",
        &[
            "--arms",
            "cpu",
            "--prompt-tokens",
            "1000000",
            "--gen-tokens",
            "1",
        ],
        Refused("--prompt-tokens 1000000 plus --gen-tokens 1"),
    ),
    ("bench", &["--threads", "0"], Refused("--threads")),
    // bench's cut of a draw: only with a temperature, top-p in (0, 1].
    (
        "bench",
        &["--top-k", "5"],
        Refused("--top-k and --top-p cut a draw"),
    ),
    ("bench", &["--top-k", "-1"], Refused("--top-k")),
    (
        "bench",
        &["--temperature", "1", "--top-p", "0"],
        Refused("--top-p 0 is out of range"),
    ),
    (
        "bench",
        &["--temperature", "1", "--top-p", "nan"],
        Refused("--top-p NaN is out of range"),
    ),
    (
        "bench",
        &["--temperature", "1", "--top-p", "-0.5"],
        Refused("--top-p -0.5 is out of range"),
    ),
    // plan and calibrate.
    ("plan", &["--demo", "--tokens", HUGE], Refused("--tokens")),
    ("plan", &["--demo", "--tokens", "0"], Refused("--tokens")),
    ("plan", &["--demo", "--tokens", "-1"], Refused("--tokens")),
    ("calibrate", &["--reps", "0"], Refused("--reps")),
    ("calibrate", &["--reps", "-1"], Refused("--reps")),
    (
        "calibrate",
        &["--reps", "4294967295"],
        Refused("--reps 4294967295"),
    ),
];

/// How a case ended.
struct Outcome {
    /// The exit status, or `None` when `serve` started listening and was stopped.
    status: Option<ExitStatus>,
    stderr: String,
    elapsed: Duration,
}

/// Runs `switchyard COMMAND …` with a deadline: killed (and reported) past [`LIMIT`],
/// stopped once a server prints its address.
fn run(command: &str, flags: &[&str]) -> Result<Outcome, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.arg(command);
    match command {
        "generate" => {
            cmd.arg("Hi");
            if !flags.contains(&"--backends") {
                cmd.args(["--backends", "cpu"]);
            }
            if !flags.iter().any(|f| *f == "-n" || *f == "--max-tokens") {
                cmd.args(["-n", "2"]);
            }
        }
        "chat" => {
            cmd.args(["--backends", "cpu"]);
        }
        "serve" => {
            cmd.args(["--host", "127.0.0.1", "--port", "0", "--backends", "cpu"]);
        }
        "bench" | "calibrate" => {
            cmd.args(["--backends", "cpu"]);
        }
        "plan" => {}
        other => panic!("no harness for {other}"),
    }
    let started = Instant::now();
    let mut child = cmd
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning: {e}"))?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    // Read stderr on a thread, reporting each chunk, so that a server's address is
    // seen while it runs and a full pipe never blocks the child.
    let (chunks, received) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0
                || chunks
                    .send(String::from_utf8_lossy(&buf[..n]).into())
                    .is_err()
            {
                break;
            }
        }
    });
    let mut text = String::new();
    let status = loop {
        while let Ok(chunk) = received.try_recv() {
            text.push_str(&chunk);
        }
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting: {e}"))? {
            break Some(status);
        }
        if command == "serve" && text.contains("listening on http://") {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "still running after {LIMIT:?}; stderr so far:\n{text}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let _ = reader.join();
    while let Ok(chunk) = received.try_recv() {
        text.push_str(&chunk);
    }
    Ok(Outcome {
        status,
        stderr: text,
        elapsed,
    })
}

/// Why a case's outcome does not meet its expectation, if it does not.
fn judge(outcome: &Outcome, expect: Expect) -> Option<String> {
    let stderr = &outcome.stderr;
    if stderr.contains("panicked at") {
        return Some(format!("panicked:\n{stderr}"));
    }
    let ran = outcome.status.is_none_or(|s| s.success());
    match expect {
        Refused(text) if ran => Some(format!("ran instead of refusing ({text:?}):\n{stderr}")),
        Refused(text) if !stderr.contains("error: ") || !stderr.contains(text) => {
            Some(format!("refused without saying {text:?}:\n{stderr}"))
        }
        Warned(_) if !ran => Some(format!("failed instead of warning:\n{stderr}")),
        Warned(text) if !stderr.contains(text) => {
            Some(format!("ran without a warning saying {text:?}:\n{stderr}"))
        }
        Accepted if !ran => Some(format!("failed:\n{stderr}")),
        _ => None,
    }
}

#[test]
fn hostile_flags_are_refused_or_clamped_by_name_within_seconds() {
    // A few at a time: most are refusals that never load the model.
    let mut failures = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    for batch in CASES.chunks(4) {
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch
                .iter()
                .map(|&(command, flags, expect)| {
                    scope.spawn(move || (command, flags, expect, run(command, flags)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (command, flags, expect, result) in results {
            let case = format!("switchyard {command} {}", flags.join(" "));
            match result {
                Err(why) => failures.push(format!("{case}: {why}")),
                Ok(outcome) => {
                    if outcome.elapsed > slowest.0 {
                        slowest = (outcome.elapsed, case.clone());
                    }
                    if let Some(why) = judge(&outcome, expect) {
                        failures.push(format!("{case} (expected {expect:?}): {why}"));
                    }
                }
            }
        }
    }
    eprintln!("slowest case: {} in {:?}", slowest.1, slowest.0);
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n\n")
    );
}
