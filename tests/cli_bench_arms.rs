//! `switchyard bench --arms cpu,cpu2,gpu,split,gate` on the default model and this machine's
//! GPU (lavapipe in CI), at the smallest sizes that still split a linear: it must write
//! the JSON, markdown and SVG with every arm, and record its seed and round orders.
#![cfg(feature = "gpu")]

mod gpu_support;

use std::process::Command;

use switchyard::model::fetch;

#[test]
fn arms_bench_writes_json_markdown_and_svg_for_every_arm() {
    if gpu_support::gpu().is_none() {
        return;
    }
    let model = fetch::default_model_path(false).expect("fetching the default model");
    let home = tempfile::tempdir().unwrap();
    let prefix = home.path().join("arms");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .env("SWITCHYARD_HOME", home.path())
        .args([
            "bench",
            "--arms",
            "cpu,cpu2,gpu,split,gate",
            "--backends",
            "cpu,gpu",
        ])
        .args([
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--prompt-tokens",
            "16",
            "--gen-tokens",
            "1",
        ])
        .args(["--seed", "3", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&prefix)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(prefix.with_extension("json")).unwrap())
            .unwrap();
    let svg = std::fs::read_to_string(prefix.with_extension("svg")).unwrap();
    let markdown = std::fs::read_to_string(prefix.with_extension("md")).unwrap();
    assert_eq!(json["seed"], 3);
    assert_eq!(json["rounds"].as_array().unwrap().len(), 1);
    for arm in ["cpu", "cpu2", "gpu", "split", "gate"] {
        assert!(
            table.contains(arm) && markdown.contains(arm) && svg.contains(arm),
            "{arm} missing"
        );
    }
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{svg}");
    assert!(
        home.path().join("calibration.json").exists(),
        "the split arm calibrated and saved its ratios"
    );
}
