//! House rules checked as ordinary tests: every source file opens with a `//!` line,
//! every module of `src/lib.rs` has a section in `docs/architecture.md`, `unsafe`
//! appears only in the files allowed to hold it, and no file grows past 1,000 lines.

use std::path::{Path, PathBuf};

/// Files allowed to contain `unsafe` (style rule 7: unsafe and SIMD live in few places).
const UNSAFE_ALLOWED: &[&str] = &[
    "src/backend/cpu/kernels/attention/avx2.rs",
    "src/backend/cpu/kernels/attention/avx512.rs",
    "src/backend/cpu/kernels/attention/mod.rs",
    "src/backend/cpu/kernels/attention/tests.rs",
    "src/backend/cpu/kernels/draw.rs",
    "src/backend/cpu/kernels/matmul.rs",
    "src/backend/cpu/kernels/vexp.rs",
    "src/backend/cpu/packed/avx2.rs",
    "src/backend/cpu/packed/avx512.rs",
    "src/backend/cpu/packed/float/avx2.rs",
    "src/backend/cpu/packed/float/avx512.rs",
    "src/backend/cpu/packed/lines.rs",
    "src/backend/cpu/prefetch.rs",
    "src/backend/cpu/simd/avx2.rs",
    "src/backend/cpu/simd/mod.rs",
    "src/bench/bandwidth.rs",
    "src/model/mapped.rs",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(path, _)| path)
        .collect();
    assert!(missing.is_empty(), "files without a //! line: {missing:?}");
}

#[test]
fn every_module_has_a_section_in_the_architecture_doc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let missing: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .filter(|m| !doc.contains(&format!("### `{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "modules missing from docs/architecture.md: {missing:?}"
    );
}

#[test]
fn unsafe_stays_in_its_allowed_files() {
    let offenders: Vec<String> = sources()
        .into_iter()
        .filter(|(path, text)| {
            text.lines().any(|l| {
                let code = l.split("//").next().unwrap_or("");
                code.contains("unsafe ") || code.contains("unsafe{")
            }) && !UNSAFE_ALLOWED.contains(&path.as_str())
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        offenders.is_empty(),
        "unsafe outside the allowed files: {offenders:?}"
    );
}

#[test]
fn files_stay_small() {
    let mut report = Vec::new();
    for (path, text) in sources() {
        let n_lines = text.lines().count();
        report.push(format!("{n_lines:>5} {path}"));
        assert!(
            n_lines <= 1000,
            "{path} has {n_lines} lines; split it (style rule 12)"
        );
    }
    println!("{}", report.join("\n"));
}
