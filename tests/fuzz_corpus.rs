//! The fuzz harnesses (`switchyard::harness`) over the committed corpus: every seed in
//! `fuzz/corpus/<target>/` and every past crash, timeout or out-of-memory input in
//! `fuzz/regressions/<target>/` runs as an ordinary test on the stable toolchain, so a
//! fixed crash stays fixed. Each input must return without a panic and within a few
//! seconds (the fuzzer's limit is 1 s on an optimized build).
//!
//! `SWITCHYARD_WRITE_SEEDS=1 cargo test --test fuzz_corpus` rewrites the generated GGUF
//! seeds (`harness::write_seed_ggufs`) after a change to the generator.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet};
use switchyard::harness::{self, TARGETS};
use switchyard::model::LlamaStep;
use switchyard::model::Model;
use switchyard::step::Runner;

/// The most one input may take here (a debug-ish test build is slower than the fuzzer's).
const PER_INPUT: Duration = Duration::from_secs(10);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files directly under `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"))
        .collect();
    files.sort();
    files
}

/// Runs `target`'s harness over its corpus and regressions; returns how many ran.
fn run_target(name: &str) -> usize {
    let (_, harness) = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a known target");
    let mut ran = 0;
    for sub in ["corpus", "regressions"] {
        for path in files(&fuzz_dir().join(sub).join(name)) {
            let data = std::fs::read(&path).unwrap();
            let started = Instant::now();
            harness(&data);
            let took = started.elapsed();
            assert!(
                took < PER_INPUT,
                "{} took {took:?} (limit {PER_INPUT:?})",
                path.display()
            );
            ran += 1;
        }
    }
    ran
}

#[test]
fn gguf_corpus_and_regressions() {
    assert!(run_target("gguf") >= 2, "the GGUF seeds are committed");
}

#[test]
fn safetensors_corpus_and_regressions() {
    assert!(run_target("safetensors") >= 1);
}

#[test]
fn hf_config_corpus_and_regressions() {
    assert!(run_target("hf_config") >= 1);
}

#[test]
fn tokenizer_corpus_and_regressions() {
    assert!(run_target("tokenizer") >= 1);
}

#[test]
fn chat_template_corpus_and_regressions() {
    assert!(run_target("chat_template") >= 1);
}

#[test]
fn server_request_corpus_and_regressions() {
    assert!(run_target("server_request") >= 1);
}

#[test]
fn every_target_has_a_corpus_and_a_fuzz_target() {
    for (name, _) in TARGETS {
        assert!(
            fuzz_dir().join("corpus").join(name).is_dir(),
            "fuzz/corpus/{name}/ is missing"
        );
        assert!(
            fuzz_dir()
                .join("fuzz_targets")
                .join(format!("{name}.rs"))
                .is_file(),
            "fuzz/fuzz_targets/{name}.rs is missing"
        );
    }
}

/// The committed GGUF seeds are what the generator writes, and they load and step (a
/// seed that failed to load would only exercise the reader's refusals).
#[test]
fn gguf_seeds_are_current_and_load() {
    let corpus = fuzz_dir().join("corpus/gguf");
    let tmp = tempfile::tempdir().unwrap();
    let write = std::env::var_os("SWITCHYARD_WRITE_SEEDS").is_some();
    let out = if write {
        corpus.clone()
    } else {
        tmp.path().into()
    };
    for path in harness::write_seed_ggufs(&out).unwrap() {
        let name = path.file_name().unwrap();
        let committed = std::fs::read(corpus.join(name)).unwrap_or_default();
        assert!(
            committed == std::fs::read(&path).unwrap(),
            "fuzz/corpus/gguf/{} is stale: rerun with SWITCHYARD_WRITE_SEEDS=1",
            name.to_string_lossy()
        );
        let model = Model::open(&path).unwrap();
        let prompt = model.tokenizer.encode("Hi there", true).unwrap();
        assert!(!prompt.is_empty());
        let cpu = Arc::new(CpuBackend::new(Some(1)).unwrap()) as Arc<dyn Backend>;
        let backends = BackendSet::new(vec![cpu]).unwrap();
        let vocab = model.config.vocab_size;
        let mut runner = Runner::new(LlamaStep::new(model.config, model.weights, 1), backends, 64);
        let mut seq = runner.new_sequence().unwrap();
        let logits = runner.forward(&mut seq, &prompt).unwrap();
        assert_eq!(logits.len(), vocab);
        let logits = runner.forward(&mut seq, &[prompt[0]]).unwrap();
        assert!(logits.iter().all(|l| l.is_finite()));
    }
}
