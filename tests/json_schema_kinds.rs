//! The schema kinds issue 48 found refused by the old engine (annotations, vendor
//! keywords, `patternProperties`, schema-valued `additionalProperties`, `allOf` of
//! several, unions whose branches start alike, non-object top levels, number bounds, a
//! `uri` format) run through `switchyard generate --json-schema` on the default model,
//! and every reply validates with Python's `jsonschema`, an implementation independent
//! of the engine (tests/json_schema_kinds.py). Skipped with a message when python3 lacks
//! `jsonschema`, unless SWITCHYARD_REQUIRE_JSONSCHEMA=1 (CI's `scripts/test` installs it
//! and sets it).

use std::process::{Command, Stdio};

/// Whether python3 imports `jsonschema`.
fn jsonschema_importable() -> bool {
    Command::new("python3")
        .args(["-c", "import jsonschema"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn generated_replies_to_the_schema_kinds_validate_with_python_jsonschema() {
    if !jsonschema_importable() {
        let required = std::env::var("SWITCHYARD_REQUIRE_JSONSCHEMA").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SWITCHYARD_REQUIRE_JSONSCHEMA=1 but python3 cannot import jsonschema"
        );
        eprintln!(
            "SKIPPED: python3 has no `jsonschema` package (`python3 -m pip install jsonschema`)"
        );
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/json_schema_kinds.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_switchyard"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "a reply did not validate:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
