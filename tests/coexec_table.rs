//! The calibration table on disk: round trip, lookups by rows bucket, invalidation when
//! the hardware fingerprint changes, clear errors for corrupt and hostile files, and
//! atomic saves under a concurrent reader.

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use switchyard::backend::BackendId;
use switchyard::coexec::{
    calibrate, table_path, Calibration, CalibrationTable, Component, HardwareFingerprint,
    Invalidation, LoadStatus, SplitKey, TableError,
};
use switchyard::graph::DType;

const PAIR: (BackendId, BackendId) = (BackendId::CPU, BackendId::GPU);

/// A calibration of an `m × k` by `k × 1536` Q4_1 matmul whose fastest point is ρ = 0.3.
fn calibration(m: u32, k: u32) -> Calibration {
    let key = SplitKey::new(m, k, 1536, DType::Q4_1, PAIR);
    let measure = |rho: u16| {
        let micros = 1000 + u64::from(rho.abs_diff(300)) + u64::from(k);
        Ok::<_, Infallible>(Duration::from_micros(micros))
    };
    let Ok(calibration) = calibrate(key, NonZeroU32::MIN, measure, &mut |_, _| {});
    calibration
}

fn fingerprint(driver: &str) -> HardwareFingerprint {
    HardwareFingerprint {
        cpu_model: "AMD EPYC 7B13".into(),
        gpu_adapter: "llvmpipe (LLVM 15.0.7, 256 bits)".into(),
        gpu_driver: driver.into(),
    }
}

/// A table with `n_keys` calibrated shapes.
fn table(n_keys: u32) -> CalibrationTable {
    let mut table = CalibrationTable::new(fingerprint("Mesa 23.2.1"));
    for i in 0..n_keys {
        table.insert(calibration(64 << (i % 5), 576 + i));
    }
    table
}

fn load(path: &Path, driver: &str) -> Result<(CalibrationTable, LoadStatus), TableError> {
    CalibrationTable::load(path, fingerprint(driver))
}

#[test]
fn the_table_round_trips_through_its_file() {
    let home = tempfile::tempdir().unwrap();
    let path = table_path(&home.path().join("nested"));
    let (empty, status) = load(&path, "Mesa 23.2.1").unwrap();
    assert_eq!((empty.len(), status), (0, LoadStatus::Missing));
    let saved = table(6);
    assert_eq!(saved.len(), 6);
    saved.save(&path).unwrap();
    let (loaded, status) = load(&path, "Mesa 23.2.1").unwrap();
    assert_eq!(status, LoadStatus::Loaded);
    assert_eq!(loaded, saved);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&fingerprint("Mesa 23.2.1").id()));
    assert!(text.contains(r#""dtype": "q4_1""#));
}

#[test]
fn lookups_bucket_rows_to_the_next_power_of_two() {
    let mut table = CalibrationTable::new(fingerprint("Mesa 23.2.1"));
    let calibration = calibration(300, 576);
    assert_eq!(calibration.rho_permille(), 300);
    table.insert(calibration.clone());
    for m in [257, 300, 512] {
        let key = SplitKey::new(m, 576, 1536, DType::Q4_1, PAIR);
        assert_eq!(table.get(&key), Some(&calibration), "{m} rows");
    }
    for key in [
        SplitKey::new(256, 576, 1536, DType::Q4_1, PAIR),
        SplitKey::new(513, 576, 1536, DType::Q4_1, PAIR),
        SplitKey::new(512, 576, 1536, DType::Q8_0, PAIR),
        SplitKey::new(
            512,
            576,
            1536,
            DType::Q4_1,
            (BackendId::CPU, BackendId::SIM),
        ),
    ] {
        assert_eq!(table.get(&key), None, "{key:?}");
    }
}

#[test]
fn a_changed_gpu_driver_invalidates_the_table() {
    let home = tempfile::tempdir().unwrap();
    let path = table_path(home.path());
    table(3).save(&path).unwrap();
    let (loaded, status) = load(&path, "Mesa 24.0.0").unwrap();
    assert!(loaded.is_empty());
    assert_eq!(loaded.fingerprint(), &fingerprint("Mesa 24.0.0"));
    let LoadStatus::Invalidated(reason) = status else {
        panic!("expected an invalidation, got {status:?}");
    };
    let Invalidation::Hardware(changes) = &reason else {
        panic!("expected a hardware change, got {reason:?}");
    };
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].component, Component::GpuDriver);
    assert_eq!(
        format!("calibration invalidated: {reason}"),
        r#"calibration invalidated: GPU driver changed ("Mesa 23.2.1" -> "Mesa 24.0.0")"#
    );
}

#[test]
fn another_format_version_invalidates_the_table() {
    let home = tempfile::tempdir().unwrap();
    let path = table_path(home.path());
    std::fs::write(&path, r#"{"format_version": 2, "anything": ["new"]}"#).unwrap();
    let (loaded, status) = load(&path, "Mesa 23.2.1").unwrap();
    assert!(loaded.is_empty());
    assert_eq!(
        status,
        LoadStatus::Invalidated(Invalidation::FormatVersion(2))
    );
}

#[test]
fn corrupt_and_hostile_files_are_clear_errors() {
    let home = tempfile::tempdir().unwrap();
    let path = table_path(home.path());
    table(2).save(&path).unwrap();
    let good = std::fs::read_to_string(&path).unwrap();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, String, &str)> = vec![
        ("empty", String::new(), "EOF"),
        ("truncated", good[..good.len() / 2].to_string(), "EOF"),
        ("not an object", "[1, 2]".into(), "format_version"),
        ("deeply nested", deep, "recursion limit"),
        (
            "bad rho",
            good.replace(r#""rho_permille": "#, r#""rho_permille": 7"#),
            "grid",
        ),
        (
            "bad bucket",
            good.replace(r#""rows_bucket": 64"#, r#""rows_bucket": 48"#),
            "power of two",
        ),
        (
            "unknown dtype",
            good.replace("q4_1", "q9_9"),
            "unknown dtype",
        ),
        (
            "wrong type",
            good.replace(r#""k": 576"#, r#""k": "576""#),
            "invalid type",
        ),
        (
            "overflow",
            good.replace(r#""k": 576"#, r#""k": 99999999999"#),
            "invalid value",
        ),
        (
            "duplicate",
            good.replace(r#""k": 577"#, r#""k": 576"#)
                .replace(r#""rows_bucket": 128"#, r#""rows_bucket": 64"#),
            "duplicate",
        ),
    ];
    for (case, text, detail) in cases {
        std::fs::write(&path, &text).unwrap();
        match load(&path, "Mesa 23.2.1") {
            Err(error @ TableError::Corrupt { .. }) => {
                let message = error.to_string();
                assert!(
                    message.contains("calibration.json is corrupt"),
                    "{case}: {message}"
                );
                assert!(message.contains(detail), "{case}: {message}");
            }
            other => panic!("{case}: expected a corrupt-table error, got {other:?}"),
        }
    }
}

#[test]
fn oversized_files_are_refused_before_reading() {
    let home = tempfile::tempdir().unwrap();
    let path = table_path(home.path());
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(17 << 20).unwrap();
    let error = load(&path, "Mesa 23.2.1").err();
    assert!(
        matches!(error, Some(TableError::TooLarge { .. })),
        "{error:?}"
    );
}

#[test]
fn saves_are_atomic_under_a_concurrent_reader() {
    let home = tempfile::tempdir().unwrap();
    let path = table_path(home.path());
    let small = table(1);
    let large = table(300);
    small.save(&path).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..100 {
                let table = if i % 2 == 0 { &large } else { &small };
                table.save(&path).unwrap();
            }
        });
        for _ in 0..300 {
            let (loaded, status) = load(&path, "Mesa 23.2.1").unwrap();
            assert_eq!(status, LoadStatus::Loaded);
            assert!(
                loaded == small || loaded == large,
                "a half-written table was read"
            );
        }
    });
    let names: Vec<String> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["calibration.json"], "no temporary files are left");
}
