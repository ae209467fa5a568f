//! The official `openai` Python client against `switchyard serve` (tests/server_openai.py):
//! chat with and without streaming (same text), a completion, the model list and an
//! error. Skips with a message when python3 lacks `openai`, unless
//! SWITCHYARD_REQUIRE_OPENAI=1 (CI sets it through scripts/test), which makes that a failure.

mod server_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use server_support::Server;

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
