//! Injected backend faults, for checking failover on the real binary and in tests:
//! `SWITCHYARD_FAULT=BACKEND:WHEN[,...]` wraps the named backend so that it fails as a
//! lost device would (its `N`th partition run, and everything after), cannot allocate
//! (`alloc`), or panics in its `N`th run (`panic:N`, for the engine's panic recovery).
//!
//! **Invariant:** a wrapped backend is indistinguishable from the real one (id, name,
//! capability, results) until its fault trips; after a lost-device fault it never
//! succeeds again, as a real lost device does not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{
    Backend, BackendError, BackendId, Capability, CompiledPartition, DeviceCounters, HostTensor,
    PartitionSpec, ResidentWeight, StepState, Tensor, WeightProvider,
};

/// The environment variable that injects faults.
pub const FAULT_ENV: &str = "SWITCHYARD_FAULT";

/// When an injected fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The `n`th partition run (1-based) fails as a lost device would, and so does every
    /// later call.
    LostAtRun(u64),
    /// Every allocation (weight upload, partition compile) fails as out of memory.
    Alloc,
    /// The `n`th partition run (1-based) panics.
    PanicAtRun(u64),
}

/// One fault: the backend it strikes (by name) and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    backend: String,
    kind: FaultKind,
}

impl FaultSpec {
    /// A fault striking the backend named `backend`.
    pub fn new(backend: impl Into<String>, kind: FaultKind) -> FaultSpec {
        FaultSpec {
            backend: backend.into(),
            kind,
        }
    }

    /// The backend's name (`gpu`, `cpu`, `sim`).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// When it strikes.
    pub fn kind(&self) -> FaultKind {
        self.kind
    }

    /// Parses `BACKEND:N`, `BACKEND:alloc` or `BACKEND:panic:N`, comma-separated; an
    /// empty string is no fault. The error names the part that does not parse.
    pub fn parse_list(text: &str) -> Result<Vec<FaultSpec>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(FaultSpec::parse)
            .collect()
    }

    fn parse(part: &str) -> Result<FaultSpec, String> {
        let bad = || {
            format!(
                "{FAULT_ENV}: {part:?} is not BACKEND:N, BACKEND:alloc or BACKEND:panic:N (N ≥ 1)"
            )
        };
        let count = |n: &str| match n.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(bad()),
        };
        let (backend, when) = part.split_once(':').ok_or_else(bad)?;
        if backend.is_empty() {
            return Err(bad());
        }
        let kind = match when.split_once(':') {
            Some(("panic", n)) => FaultKind::PanicAtRun(count(n)?),
            Some(_) => return Err(bad()),
            None if when == "alloc" => FaultKind::Alloc,
            None => FaultKind::LostAtRun(count(when)?),
        };
        Ok(FaultSpec::new(backend, kind))
    }

    /// The faults `SWITCHYARD_FAULT` asks for (none when it is unset).
    pub fn from_env() -> Result<Vec<FaultSpec>, String> {
        match std::env::var(FAULT_ENV) {
            Ok(text) => FaultSpec::parse_list(&text),
            Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
            Err(e) => Err(format!("{FAULT_ENV}: {e}")),
        }
    }
}

/// `backend` wrapped with every fault of `faults` that names it (unchanged when none
/// does). At most one fault per backend: a second one naming it is an error.
pub fn inject(backend: Arc<dyn Backend>, faults: &[FaultSpec]) -> Result<Arc<dyn Backend>, String> {
    let mine: Vec<&FaultSpec> = faults
        .iter()
        .filter(|f| f.backend == backend.name())
        .collect();
    match mine.as_slice() {
        [] => Ok(backend),
        [fault] => {
            log::warn!(
                "{FAULT_ENV}: injecting {:?} into the {} backend",
                fault.kind,
                fault.backend
            );
            Ok(Arc::new(Faulty::new(backend, fault.kind)))
        }
        _ => Err(format!(
            "{FAULT_ENV}: more than one fault names the {} backend",
            backend.name()
        )),
    }
}

/// A backend that fails on cue; see the module documentation.
pub struct Faulty {
    inner: Arc<dyn Backend>,
    kind: FaultKind,
    state: Arc<Trip>,
}

/// Shared by a faulty backend and every partition it compiled.
struct Trip {
    runs: AtomicU64,
    lost: AtomicBool,
}

impl Faulty {
    /// `inner`, failing as `kind` says.
    pub fn new(inner: Arc<dyn Backend>, kind: FaultKind) -> Faulty {
        Faulty {
            inner,
            kind,
            state: Arc::new(Trip {
                runs: AtomicU64::new(0),
                lost: AtomicBool::new(false),
            }),
        }
    }

    fn lost(&self) -> Result<(), BackendError> {
        if self.state.lost.load(Ordering::SeqCst) {
            return Err(lost_device(self.inner.name()));
        }
        Ok(())
    }

    fn allocation(&self) -> Result<(), BackendError> {
        self.lost()?;
        if self.kind == FaultKind::Alloc {
            return Err(BackendError::Device(format!(
                "{}: out of device memory (injected by {FAULT_ENV})",
                self.inner.name()
            )));
        }
        Ok(())
    }
}

fn lost_device(name: &str) -> BackendError {
    BackendError::Device(format!("{name}: device lost (injected by {FAULT_ENV})"))
}

impl Backend for Faulty {
    fn id(&self) -> BackendId {
        self.inner.id()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capability(&self) -> &Capability {
        self.inner.capability()
    }

    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError> {
        self.allocation()?;
        self.inner.upload(weight)
    }

    fn compile(
        &self,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError> {
        self.allocation()?;
        Ok(Box::new(FaultyPartition {
            inner: self.inner.compile(spec, weights)?,
            name: self.inner.name().to_string(),
            kind: self.kind,
            state: self.state.clone(),
        }))
    }

    fn import(&self, host: Tensor) -> Result<Tensor, BackendError> {
        self.lost()?;
        self.inner.import(host)
    }

    fn export(&self, tensor: &Tensor) -> Result<Tensor, BackendError> {
        self.lost()?;
        self.inner.export(tensor)
    }

    fn counters(&self) -> Option<DeviceCounters> {
        self.inner.counters()
    }

    fn takes_host_inputs(&self) -> bool {
        self.inner.takes_host_inputs()
    }
}

/// A partition of a [`Faulty`] backend: counts runs across every partition of it.
struct FaultyPartition {
    inner: Box<dyn CompiledPartition>,
    name: String,
    kind: FaultKind,
    state: Arc<Trip>,
}

impl CompiledPartition for FaultyPartition {
    fn run(
        &mut self,
        inputs: &[&Tensor],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, BackendError> {
        if self.state.lost.load(Ordering::SeqCst) {
            return Err(lost_device(&self.name));
        }
        let run = self.state.runs.fetch_add(1, Ordering::SeqCst) + 1;
        match self.kind {
            FaultKind::LostAtRun(n) if run >= n => {
                self.state.lost.store(true, Ordering::SeqCst);
                return Err(lost_device(&self.name));
            }
            FaultKind::PanicAtRun(n) if run == n => {
                panic!(
                    "{}: partition run {run} panicked (injected by {FAULT_ENV})",
                    self.name
                )
            }
            _ => {}
        }
        self.inner.run(inputs, state)
    }

    fn bytes(&self) -> usize {
        self.inner.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::{FaultKind, FaultSpec};

    #[test]
    fn parses_every_form_and_names_what_does_not() {
        let got = FaultSpec::parse_list("gpu:5, sim:alloc,cpu:panic:2").unwrap();
        assert_eq!(
            got,
            [
                FaultSpec::new("gpu", FaultKind::LostAtRun(5)),
                FaultSpec::new("sim", FaultKind::Alloc),
                FaultSpec::new("cpu", FaultKind::PanicAtRun(2)),
            ]
        );
        assert!(FaultSpec::parse_list("").unwrap().is_empty());
        for bad in [
            "gpu",
            "gpu:0",
            "gpu:x",
            ":3",
            "gpu:panic",
            "gpu:panic:0",
            "gpu:oom:1",
        ] {
            let err = FaultSpec::parse_list(bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
