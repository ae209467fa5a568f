//! The persisted calibration table: `calibration.json` under `$SWITCHYARD_HOME`, valid
//! for one hardware fingerprint (CPU model, GPU adapter, GPU driver).
//!
//! **Invariant:** a table never outlives its hardware. Loading a file written for a
//! different fingerprint (or an unknown format version) gives an empty table and says
//! why; a damaged or hostile file is a [`TableError`], never a panic; a save replaces
//! the file atomically (temporary file, then rename), so readers see the old table or
//! the new one, never half of one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::calibrate::{Calibration, SplitKey, GRID_PERMILLE};
use super::fingerprint::{HardwareFingerprint, Invalidation};
use crate::backend::BackendId;
use crate::graph::DType;
use serde::{Deserialize, Serialize};

/// File name of the table inside Switchyard's data directory.
pub const TABLE_FILE_NAME: &str = "calibration.json";
/// The format this code writes; a file with another version is ignored (invalidated).
pub(super) const FORMAT_VERSION: u64 = 1;
/// Larger files are refused before they are read (tens of thousands of entries fit).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// The table's path in Switchyard's data directory (`model::fetch::switchyard_home`).
pub fn table_path(home: &Path) -> PathBuf {
    home.join(TABLE_FILE_NAME)
}

/// Errors reading or writing the calibration table; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The file could not be read, written or renamed.
    #[error("calibration table {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is larger than any table this code writes.
    #[error("calibration table {path}: {bytes} bytes is over the {limit}-byte limit")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The file is not a valid table (bad JSON, missing fields, impossible values).
    #[error("calibration table {path} is corrupt: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry where there is one.
        detail: String,
    },
}

/// What [`CalibrationTable::load`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum LoadStatus {
    /// No file: the table starts empty.
    Missing,
    /// The file matched this hardware; its entries were loaded.
    Loaded,
    /// The file was set aside (the table starts empty) for this reason.
    Invalidated(Invalidation),
}

/// Calibrated ratios for one hardware fingerprint, looked up by [`SplitKey`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalibrationTable {
    fingerprint: HardwareFingerprint,
    entries: BTreeMap<SplitKey, Calibration>,
}

impl CalibrationTable {
    /// An empty table for `fingerprint`.
    pub fn new(fingerprint: HardwareFingerprint) -> CalibrationTable {
        CalibrationTable {
            fingerprint,
            entries: BTreeMap::new(),
        }
    }

    /// Reads the table at `path` for this machine's `fingerprint`. A missing file, one
    /// from other hardware or one in another format version gives an empty table and a
    /// [`LoadStatus`] saying so; an unreadable or invalid file is an error.
    pub fn load(
        path: &Path,
        fingerprint: HardwareFingerprint,
    ) -> Result<(CalibrationTable, LoadStatus), TableError> {
        let Some(text) = read_bounded(path)? else {
            return Ok((CalibrationTable::new(fingerprint), LoadStatus::Missing));
        };
        let corrupt = |detail: String| TableError::Corrupt {
            path: path.to_path_buf(),
            detail,
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
        let version = value
            .get("format_version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| corrupt("no numeric format_version".into()))?;
        if version != FORMAT_VERSION {
            let status = LoadStatus::Invalidated(Invalidation::FormatVersion(version));
            return Ok((CalibrationTable::new(fingerprint), status));
        }
        let file: TableFile = serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?;
        if file.fingerprint_id != fingerprint.id() {
            let changes = file.fingerprint.changes_to(&fingerprint);
            let status = LoadStatus::Invalidated(Invalidation::Hardware(changes));
            return Ok((CalibrationTable::new(fingerprint), status));
        }
        let mut table = CalibrationTable::new(fingerprint);
        for (entry_idx, entry) in file.entries.into_iter().enumerate() {
            let calibration = entry
                .into_calibration()
                .map_err(|detail| corrupt(format!("entry {entry_idx}: {detail}")))?;
            let key = *calibration.key();
            if table.entries.insert(key, calibration).is_some() {
                return Err(corrupt(format!("entry {entry_idx}: duplicate key {key:?}")));
            }
        }
        Ok((table, LoadStatus::Loaded))
    }

    /// Writes the table to `path` atomically: a temporary file in the same directory
    /// (created if missing) is written, flushed to disk, then renamed over `path`.
    pub fn save(&self, path: &Path) -> Result<(), TableError> {
        let io = |source| TableError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = TableFile {
            format_version: FORMAT_VERSION,
            fingerprint_id: self.fingerprint.id(),
            fingerprint: self.fingerprint.clone(),
            entries: self.entries.values().map(EntryFile::from).collect(),
        };
        let json = serde_json::to_vec_pretty(&file).map_err(|e| io(e.into()))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let temp = temp_path(path);
        let written = std::fs::File::create(&temp).and_then(|mut f| {
            f.write_all(&json)?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&temp, path)) {
            // Best effort: the temporary file may not exist if creating it failed.
            let _ = std::fs::remove_file(&temp);
            return Err(io(e));
        }
        Ok(())
    }

    /// The fingerprint this table is valid for.
    pub fn fingerprint(&self) -> &HardwareFingerprint {
        &self.fingerprint
    }

    /// The calibration for `key`, if it has been calibrated.
    pub fn get(&self, key: &SplitKey) -> Option<&Calibration> {
        self.entries.get(key)
    }

    /// Adds or replaces the calibration for its key; returns the one replaced.
    pub fn insert(&mut self, calibration: Calibration) -> Option<Calibration> {
        self.entries.insert(*calibration.key(), calibration)
    }

    /// Every calibration, in key order.
    pub fn calibrations(&self) -> impl Iterator<Item = &Calibration> {
        self.entries.values()
    }

    /// Number of calibrated keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is calibrated.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The file's contents, or `None` when it does not exist; refuses oversized files.
fn read_bounded(path: &Path) -> Result<Option<String>, TableError> {
    let io = |source| TableError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if bytes > MAX_FILE_BYTES {
        return Err(TableError::TooLarge {
            path: path.to_path_buf(),
            bytes,
            limit: MAX_FILE_BYTES,
        });
    }
    std::fs::read_to_string(path).map(Some).map_err(io)
}

/// A temporary name next to `path`, unique per process and per save.
fn temp_path(path: &Path) -> PathBuf {
    static SAVES: AtomicU64 = AtomicU64::new(0);
    let save_idx = SAVES.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}.{save_idx}", std::process::id()));
    path.with_file_name(name)
}

/// The table as stored.
#[derive(Serialize, Deserialize)]
struct TableFile {
    format_version: u64,
    fingerprint_id: String,
    fingerprint: HardwareFingerprint,
    entries: Vec<EntryFile>,
}

/// One calibration as stored: dtype by name, backends by id, times in nanoseconds.
#[derive(Serialize, Deserialize)]
struct EntryFile {
    rows_bucket: u32,
    k: u32,
    n: u32,
    dtype: String,
    pair: [u8; 2],
    rho_permille: u16,
    per_point_ns: Vec<(u16, u64)>,
}

impl From<&Calibration> for EntryFile {
    fn from(calibration: &Calibration) -> EntryFile {
        let key = calibration.key();
        EntryFile {
            rows_bucket: key.rows_bucket(),
            k: key.k(),
            n: key.n(),
            dtype: key.dtype().name().to_string(),
            pair: [key.pair().0 .0, key.pair().1 .0],
            rho_permille: calibration.rho_permille(),
            per_point_ns: calibration
                .per_point()
                .iter()
                .map(|&(rho, t)| (rho, u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)))
                .collect(),
        }
    }
}

impl EntryFile {
    /// Checks every value; the error says which one is impossible.
    fn into_calibration(self) -> Result<Calibration, String> {
        let dtype = DType::ALL
            .into_iter()
            .find(|d| d.name() == self.dtype)
            .ok_or_else(|| format!("unknown dtype {:?}", self.dtype))?;
        let pair = (BackendId(self.pair[0]), BackendId(self.pair[1]));
        let key = SplitKey::from_bucket(self.rows_bucket, self.k, self.n, dtype, pair)
            .ok_or_else(|| format!("rows bucket {} is not a power of two", self.rows_bucket))?;
        let on_grid = |rho: u16| GRID_PERMILLE.contains(&rho);
        if !on_grid(self.rho_permille) {
            return Err(format!("rho {}‰ is not a grid point", self.rho_permille));
        }
        let mut per_point = Vec::with_capacity(self.per_point_ns.len());
        for (rho, nanos) in self.per_point_ns {
            if !on_grid(rho) || per_point.iter().any(|&(seen, _)| seen == rho) {
                return Err(format!("per-point rho {rho}‰ is off the grid or repeated"));
            }
            per_point.push((rho, Duration::from_nanos(nanos)));
        }
        Ok(Calibration::from_parts(key, self.rho_permille, per_point))
    }
}
