//! The kernel set the CPU backend dispatches to, and a cap on it: `SWITCHYARD_ISA`
//! (or the CLI's `--isa`) set to `scalar`, `avx2` or `avx512` runs no wider kernels
//! than that set, so a host with AVX-512 runs what an AVX2-only host or a portable
//! build runs (decision 160). Every dispatch point asks [`allows`] beside its own CPU
//! feature check; the cap is fixed once per process, before the first kernel runs,
//! because the kernel tables are chosen once.

use std::sync::OnceLock;

/// The environment variable that caps the CPU backend's kernel set.
pub const ENV: &str = "SWITCHYARD_ISA";

/// A kernel set of the CPU backend, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// The portable kernels, which every SIMD kernel is tested against.
    Scalar,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 (F, BW, VL; VNNI and BF16 where the host has them) over AVX2.
    Avx512,
}

impl Isa {
    /// Every set, narrowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The set's name, as `SWITCHYARD_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The widest set this host's CPU runs.
    pub fn host() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            if avx2 && is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A cap that cannot be used (small: it rides in every `BackendError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// The value names no kernel set.
    #[error("{origin}={value:?} is not a kernel set: use scalar, avx2 or avx512")]
    Unknown {
        /// Where it came from: `SWITCHYARD_ISA` or `--isa`.
        origin: &'static str,
        /// The value given.
        value: Box<str>,
    },
    /// The set asked for is wider than this CPU runs.
    #[error("{origin}={wanted} asks for kernels this CPU lacks: it runs at most {host}")]
    AboveHost {
        /// Where it came from: `SWITCHYARD_ISA` or `--isa`.
        origin: &'static str,
        /// The set asked for.
        wanted: Isa,
        /// The widest set this CPU runs.
        host: Isa,
    },
    /// A cap was asked for after another was already in force.
    #[error("the kernel set is already {fixed}; {origin}={wanted} comes too late to change it")]
    AlreadyFixed {
        /// Where the late cap came from.
        origin: &'static str,
        /// The set asked for.
        wanted: Isa,
        /// The set in force.
        fixed: Isa,
    },
}

/// The kernel set in force and whether a cap chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Dispatch {
    active: Isa,
    host: Isa,
    capped_by: Option<&'static str>,
}

impl Dispatch {
    /// The set the kernels are dispatched to.
    pub fn active(self) -> Isa {
        self.active
    }

    /// The widest set this CPU runs.
    pub fn host(self) -> Isa {
        self.host
    }

    /// What set the cap, `SWITCHYARD_ISA` or `--isa`; `None` when the host's set runs.
    pub fn capped_by(self) -> Option<&'static str> {
        self.capped_by
    }

    /// "avx2 (capped by SWITCHYARD_ISA; this CPU runs avx512)", or "avx512 (this
    /// CPU's widest)".
    pub fn describe(self) -> String {
        match self.capped_by {
            Some(origin) => format!(
                "{} (capped by {origin}; this CPU runs {})",
                self.active.name(),
                self.host.name()
            ),
            None => format!("{} (this CPU's widest)", self.active.name()),
        }
    }
}

/// The process's dispatch, fixed on first use.
static DISPATCH: OnceLock<Result<Dispatch, IsaError>> = OnceLock::new();

/// Parses a cap named by `origin` (the variable or flag) against a host running `host`:
/// `None` for no cap (absent or empty), else the set, refused when unknown or wider
/// than the host.
pub fn parse(origin: &'static str, value: &str, host: Isa) -> Result<Option<Isa>, IsaError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let wanted = Isa::ALL
        .into_iter()
        .find(|isa| isa.name().eq_ignore_ascii_case(value))
        .ok_or_else(|| IsaError::Unknown {
            origin,
            value: value.into(),
        })?;
    if wanted > host {
        return Err(IsaError::AboveHost {
            origin,
            wanted,
            host,
        });
    }
    Ok(Some(wanted))
}

/// The dispatch of a host running `host` under `cap`, set by `origin`.
fn dispatch_for(host: Isa, cap: Option<Isa>, origin: &'static str) -> Dispatch {
    Dispatch {
        active: cap.unwrap_or(host),
        host,
        capped_by: cap.map(|_| origin),
    }
}

/// The cap from `SWITCHYARD_ISA`, read once.
fn from_env() -> Result<Dispatch, IsaError> {
    let host = Isa::host();
    let value = std::env::var(ENV).unwrap_or_default();
    parse(ENV, &value, host).map(|cap| dispatch_for(host, cap, ENV))
}

/// Fixes the process's dispatch: `flag` (the CLI's `--isa`) where given, else
/// `SWITCHYARD_ISA`. Call before any kernel runs; a flag that differs from a dispatch
/// already in force is refused, as is an unknown set or one wider than this CPU, in
/// the flag or in the variable (which the flag overrides but does not hide).
pub fn init(flag: Option<&str>) -> Result<Dispatch, IsaError> {
    let Some(flag) = flag else {
        return dispatch();
    };
    let host = Isa::host();
    from_env()?;
    let wanted = dispatch_for(host, parse("--isa", flag, host)?, "--isa");
    let fixed = DISPATCH.get_or_init(|| Ok(wanted)).clone()?;
    if fixed.active != wanted.active {
        return Err(IsaError::AlreadyFixed {
            origin: "--isa",
            wanted: wanted.active,
            fixed: fixed.active,
        });
    }
    Ok(fixed)
}

/// The dispatch in force (from `SWITCHYARD_ISA` unless [`init`] fixed it first), or
/// the error naming a bad value. [`super::CpuBackend::new`] and the CLI check it
/// before any kernel runs.
pub fn dispatch() -> Result<Dispatch, IsaError> {
    DISPATCH.get_or_init(from_env).clone()
}

/// Whether the kernels of `isa` may run: the dispatch in force reaches it. A bad
/// `SWITCHYARD_ISA`, which every entry point refuses first, allows only the scalar
/// kernels. Dispatch points check their own CPU features as well.
pub(crate) fn allows(isa: Isa) -> bool {
    dispatch().map_or(isa == Isa::Scalar, |d| d.active >= isa)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_by_name_and_refuse_what_is_unknown_or_too_wide() {
        assert_eq!(parse(ENV, "", Isa::Avx512), Ok(None));
        assert_eq!(parse(ENV, " avx2 ", Isa::Avx512), Ok(Some(Isa::Avx2)));
        assert_eq!(parse(ENV, "SCALAR", Isa::Avx2), Ok(Some(Isa::Scalar)));
        assert_eq!(parse(ENV, "avx512", Isa::Avx512), Ok(Some(Isa::Avx512)));
        let unknown = parse(ENV, "sse4", Isa::Avx512).unwrap_err();
        assert!(
            unknown.to_string().contains("SWITCHYARD_ISA=\"sse4\""),
            "{unknown}"
        );
        let wide = parse("--isa", "avx512", Isa::Avx2).unwrap_err();
        assert_eq!(
            wide.to_string(),
            "--isa=avx512 asks for kernels this CPU lacks: it runs at most avx2"
        );
    }

    #[test]
    fn a_cap_dispatches_no_wider_and_says_so() {
        let capped = dispatch_for(Isa::Avx512, Some(Isa::Avx2), ENV);
        assert_eq!(
            (capped.active(), capped.capped_by()),
            (Isa::Avx2, Some(ENV))
        );
        assert_eq!(
            capped.describe(),
            "avx2 (capped by SWITCHYARD_ISA; this CPU runs avx512)"
        );
        let native = dispatch_for(Isa::Avx2, None, ENV);
        assert_eq!((native.active(), native.capped_by()), (Isa::Avx2, None));
        assert!(Isa::Scalar < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
    }

    /// Run under each cap by `scripts/test`: block and F16 weights are packed only
    /// where a packed kernel may run, which the scalar cap forbids.
    #[test]
    fn weights_are_packed_only_where_the_cap_lets_a_panel_kernel_run() {
        use crate::graph::DType;
        let Ok(d) = dispatch() else { return };
        let packs = d.active() >= Isa::Avx2;
        for dtype in [
            DType::Q4_0,
            DType::Q8_0,
            DType::Q6K,
            DType::F16,
            DType::BF16,
        ] {
            assert_eq!(
                super::super::packed::packs(dtype),
                packs,
                "{dtype:?}, {}",
                d.describe()
            );
        }
    }

    #[test]
    fn the_dispatch_in_force_is_the_hosts_or_narrower() {
        if let Ok(d) = dispatch() {
            assert!(d.active() <= d.host() && d.host() == Isa::host());
            assert!(allows(Isa::Scalar) && allows(d.active()));
            assert_eq!(
                allows(Isa::Avx512),
                d.active() == Isa::Avx512,
                "{}",
                d.describe()
            );
        }
    }
}
