//! The hardware fingerprint a calibration table is valid for, and the reasons a table
//! on disk is set aside, worded for the log ("GPU driver changed ...").

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::table::FORMAT_VERSION;

/// The hardware a table is valid for, as detected by the caller at start-up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardwareFingerprint {
    /// CPU model name (e.g. from `/proc/cpuinfo`).
    pub cpu_model: String,
    /// GPU adapter name as the GPU API reports it.
    pub gpu_adapter: String,
    /// GPU driver name and version.
    pub gpu_driver: String,
}

impl HardwareFingerprint {
    /// A stable identifier: `hw-` and 16 hex digits of the SHA-256 of the three fields
    /// (each length-prefixed, so no two different fingerprints share an encoding).
    pub fn id(&self) -> String {
        let mut hasher = Sha256::new();
        for field in [&self.cpu_model, &self.gpu_adapter, &self.gpu_driver] {
            hasher.update((field.len() as u64).to_le_bytes());
            hasher.update(field.as_bytes());
        }
        let digest = hasher.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("hw-{hex}")
    }

    /// The fields that differ between this (stored) fingerprint and `now`.
    pub fn changes_to(&self, now: &HardwareFingerprint) -> Vec<FingerprintChange> {
        [
            (Component::CpuModel, &self.cpu_model, &now.cpu_model),
            (Component::GpuAdapter, &self.gpu_adapter, &now.gpu_adapter),
            (Component::GpuDriver, &self.gpu_driver, &now.gpu_driver),
        ]
        .into_iter()
        .filter(|(_, was, now)| was != now)
        .map(|(component, was, now)| FingerprintChange {
            component,
            was: was.clone(),
            now: now.clone(),
        })
        .collect()
    }
}

/// The part of the fingerprint that changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Component {
    /// The CPU model.
    CpuModel,
    /// The GPU adapter.
    GpuAdapter,
    /// The GPU driver.
    GpuDriver,
}

/// One fingerprint field that differs between the file and this machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FingerprintChange {
    /// Which field.
    pub component: Component,
    /// Its value in the file.
    pub was: String,
    /// Its value now.
    pub now: String,
}

impl std::fmt::Display for FingerprintChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.component {
            Component::CpuModel => "CPU model",
            Component::GpuAdapter => "GPU adapter",
            Component::GpuDriver => "GPU driver",
        };
        write!(f, "{name} changed ({:?} -> {:?})", self.was, self.now)
    }
}

/// Why a table on disk was set aside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Invalidation {
    /// It was written on other hardware; the differing fields (empty when only the
    /// fingerprint id differs).
    Hardware(Vec<FingerprintChange>),
    /// It was written in a format this code does not read.
    FormatVersion(u64),
}

impl std::fmt::Display for Invalidation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalidation::Hardware(changes) if changes.is_empty() => {
                f.write_str("hardware fingerprint changed")
            }
            Invalidation::Hardware(changes) => {
                let parts: Vec<String> = changes.iter().map(ToString::to_string).collect();
                f.write_str(&parts.join(", "))
            }
            Invalidation::FormatVersion(found) => write!(
                f,
                "table format {found} is not the supported format {FORMAT_VERSION}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(driver: &str) -> HardwareFingerprint {
        HardwareFingerprint {
            cpu_model: "AMD EPYC 7B13".into(),
            gpu_adapter: "llvmpipe (LLVM 15.0.7, 256 bits)".into(),
            gpu_driver: driver.into(),
        }
    }

    #[test]
    fn id_is_stable_and_separates_fields() {
        let a = fingerprint("Mesa 23.2.1");
        assert_eq!(a.id(), fingerprint("Mesa 23.2.1").id());
        assert_eq!(a.id().len(), "hw-".len() + 16);
        assert_ne!(a.id(), fingerprint("Mesa 24.0.0").id());
        let shifted = HardwareFingerprint {
            cpu_model: "ab".into(),
            gpu_adapter: "c".into(),
            gpu_driver: String::new(),
        };
        let unshifted = HardwareFingerprint {
            cpu_model: "a".into(),
            gpu_adapter: "bc".into(),
            gpu_driver: String::new(),
        };
        assert_ne!(shifted.id(), unshifted.id());
    }

    #[test]
    fn a_driver_change_is_named_in_the_reason() {
        let changes = fingerprint("Mesa 23.2.1").changes_to(&fingerprint("Mesa 24.0.0"));
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].component, Component::GpuDriver);
        let reason = Invalidation::Hardware(changes).to_string();
        assert_eq!(
            reason,
            r#"GPU driver changed ("Mesa 23.2.1" -> "Mesa 24.0.0")"#
        );
        assert_eq!(
            Invalidation::Hardware(Vec::new()).to_string(),
            "hardware fingerprint changed"
        );
    }
}
