//! Checks that refuse a benchmark whose numbers would mislead, unless forced: the memory
//! guard refuses when the working set does not fit in the memory available at the start
//! (the timings would measure paging, as in the paper's excluded 15.6 GB-in-1.8 GB run).
//! A forced run goes ahead and its report says so.

use serde::Serialize;

/// Whether a refused check may be overridden (`--force`); a forced run is marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Force {
    /// Refuse when a check fails.
    No,
    /// Run anyway and mark the report with the reason.
    Yes,
}

impl From<bool> for Force {
    fn from(force: bool) -> Force {
        if force {
            Force::Yes
        } else {
            Force::No
        }
    }
}

/// The memory guard passed, but the report must carry this note.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum MemoryWarning {
    /// The working set did not fit and the run was forced.
    Forced {
        /// Estimated bytes the benchmark needs resident.
        estimated_bytes: u64,
        /// Bytes available at the start.
        available_bytes: u64,
    },
    /// The OS did not say how much memory is available, so nothing was checked.
    Unknown {
        /// Estimated bytes the benchmark needs resident.
        estimated_bytes: u64,
    },
}

impl MemoryWarning {
    /// Whether the run went ahead only because it was forced.
    pub fn is_forced(&self) -> bool {
        matches!(self, MemoryWarning::Forced { .. })
    }
}

impl std::fmt::Display for MemoryWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryWarning::Forced {
                estimated_bytes,
                available_bytes,
            } => write!(
                f,
                "the estimated working set ({}) exceeds the memory available at the start \
                 ({}); forced, so timings may include paging",
                bytes(*estimated_bytes),
                bytes(*available_bytes)
            ),
            MemoryWarning::Unknown { estimated_bytes } => write!(
                f,
                "available memory is unknown; the estimated working set ({}) was not checked",
                bytes(*estimated_bytes)
            ),
        }
    }
}

/// The memory guard refused the run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the estimated working set ({}) exceeds the memory available ({}); the timings would \
     measure paging, not compute. Free memory, or pass --force to run anyway (the result \
     is marked forced)",
    bytes(*.estimated_bytes),
    bytes(*.available_bytes)
)]
pub struct MemoryRefusal {
    /// Estimated bytes the benchmark needs resident.
    pub estimated_bytes: u64,
    /// Bytes available at the start.
    pub available_bytes: u64,
}

/// Refuses a run whose estimated working set exceeds the available memory, unless
/// forced; `Ok(Some(_))` carries the note a forced or unchecked run's report must show.
pub fn check_memory(
    estimated_working_set_bytes: u64,
    available_bytes: Option<u64>,
    force: Force,
) -> Result<Option<MemoryWarning>, MemoryRefusal> {
    let Some(available_bytes) = available_bytes else {
        return Ok(Some(MemoryWarning::Unknown {
            estimated_bytes: estimated_working_set_bytes,
        }));
    };
    if available_bytes >= estimated_working_set_bytes {
        return Ok(None);
    }
    match force {
        Force::No => Err(MemoryRefusal {
            estimated_bytes: estimated_working_set_bytes,
            available_bytes,
        }),
        Force::Yes => Ok(Some(MemoryWarning::Forced {
            estimated_bytes: estimated_working_set_bytes,
            available_bytes,
        })),
    }
}

/// `1.5 GiB (1610612736 bytes)`: readable and exact.
fn bytes(n: u64) -> String {
    format!("{:.1} GiB ({n} bytes)", n as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn enough_memory_passes_silently() {
        assert_eq!(check_memory(GIB, Some(2 * GIB), Force::No), Ok(None));
        assert_eq!(check_memory(GIB, Some(GIB), Force::No), Ok(None));
    }

    #[test]
    fn too_little_memory_is_refused_with_both_numbers_and_the_override() {
        let refusal = check_memory(16 * GIB, Some(2 * GIB), Force::No).unwrap_err();
        let message = refusal.to_string();
        assert!(
            message.contains("16.0 GiB (17179869184 bytes)"),
            "{message}"
        );
        assert!(message.contains("2.0 GiB (2147483648 bytes)"), "{message}");
        assert!(message.contains("--force"), "{message}");
    }

    #[test]
    fn forcing_runs_and_says_why() {
        let warning = check_memory(16 * GIB, Some(2 * GIB), Force::Yes)
            .unwrap()
            .unwrap();
        assert!(warning.is_forced());
        assert!(warning.to_string().contains("forced"));
        assert_eq!(Force::from(true), Force::Yes);
        assert_eq!(Force::from(false), Force::No);
    }

    #[test]
    fn unknown_memory_is_noted_not_refused() {
        let warning = check_memory(GIB, None, Force::No).unwrap().unwrap();
        assert!(!warning.is_forced());
        assert!(warning.to_string().contains("unknown"));
    }
}
