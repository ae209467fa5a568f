//! Hostile command-line values: each is refused with a message naming the flag (or the
//! limit it breaks) and the command returns within seconds instead of hanging, wrapping
//! around or running with a value the user did not mean.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a refusal may take: loading the default model and checking, no generation.
const LIMIT: Duration = Duration::from_secs(60);

/// `(arguments after "generate Hi", text the error must contain)`.
const CASES: &[(&[&str], &str)] = &[
    (&["--threads", "5000"], "--threads 5000"),
    (&["--threads", "0"], "--threads must be at least 1"),
    (&["-n", "18446744073709551615"], "positions are needed"),
    (&["--ctx", "0"], "--ctx must be at least 1"),
    (&["--temperature", "nan"], "temperature"),
    (&["--temperature", "-1"], "temperature"),
    (&["--top-p", "2"], "top_p"),
    (&["--min-p", "-3"], "min_p"),
    (&["--repeat-penalty", "0"], "repetition_penalty"),
    (&["--stop", ""], "--stop"),
    (&["--backends", "tpu"], "\"tpu\""),
];

#[test]
fn hostile_generate_flags_are_refused_by_name_within_seconds() {
    let mut failures = Vec::new();
    for (extra, expected) in CASES {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["generate", "Hi"])
            .args(*extra)
            .args(if extra.contains(&"-n") {
                &[][..]
            } else {
                &["-n", "2"][..]
            })
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !stderr.contains(expected) {
            failures.push(format!(
                "{extra:?}: exit {:?}, stderr does not say {expected:?}:\n{stderr}",
                out.status.code()
            ));
        }
        assert!(
            started.elapsed() < LIMIT,
            "{extra:?} took {:?}",
            started.elapsed()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
