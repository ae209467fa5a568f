//! Injected backend faults, one of each error kind, for checking what follows each on
//! the real binary and in tests: `SWITCHYARD_FAULT=BACKEND:WHEN[,...]` wraps the named
//! backend so that it fails as a lost device would (its `N`th partition run, and
//! everything after), cannot allocate (`alloc`), panics in its `N`th run (`panic:N`, for
//! the engine's panic recovery), holds buffers of at most `BYTES` as a smaller device
//! would (`limit:BYTES`), or fails as our bug would in every run whose graph input
//! `INPUT` holds the i32 `VALUE` (`bug:INPUT=VALUE`, a token id, say).
//!
//! **Invariant:** a wrapped backend is indistinguishable from the real one (id, name,
//! capability, results) until its fault trips, but for a buffer limit, which its
//! capability declares as a real device's would; after a lost-device fault it never
//! succeeds again, as a real lost device does not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{
    Backend, BackendError, BackendId, Capability, CompiledPartition, DeviceCounters, HostTensor,
    PartitionSpec, ResidentWeight, StepState, Tensor, WeightProvider,
};
use crate::graph::Op;

/// The environment variable that injects faults.
pub const FAULT_ENV: &str = "SWITCHYARD_FAULT";

/// When an injected fault strikes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The `n`th partition run (1-based) fails as a lost device would, and so does every
    /// later call.
    LostAtRun(u64),
    /// Every allocation (weight upload, partition compile) fails as out of memory.
    Alloc,
    /// The `n`th partition run (1-based) panics.
    PanicAtRun(u64),
    /// Its buffers hold at most this many bytes: its capability refuses any operand
    /// past it (as f32 elements, bytes / 4), so a plan places such nodes elsewhere, and
    /// an upload of a larger weight fails with [`BackendError::Limit`].
    BufferLimit(u64),
    /// Every partition run whose graph input `input` holds `value` fails with
    /// [`BackendError::Bug`], as a bug of ours in that request's step would.
    BugOn {
        /// The graph input's name (`tokens`).
        input: String,
        /// The i32 value that trips it.
        value: i32,
    },
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
    pub fn kind(&self) -> &FaultKind {
        &self.kind
    }

    /// Parses `BACKEND:N`, `BACKEND:alloc`, `BACKEND:panic:N`, `BACKEND:limit:BYTES` or
    /// `BACKEND:bug:INPUT=VALUE`, comma-separated; an empty string is no fault. The
    /// error names the part that does not parse.
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
                "{FAULT_ENV}: {part:?} is not BACKEND:N, BACKEND:alloc, BACKEND:panic:N, BACKEND:limit:BYTES (N, BYTES ≥ 1) or BACKEND:bug:INPUT=VALUE (an i32)"
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
            Some(("limit", n)) => FaultKind::BufferLimit(count(n)?),
            Some(("bug", rule)) => match rule.split_once('=') {
                Some((input, value)) if !input.is_empty() => FaultKind::BugOn {
                    input: input.into(),
                    value: value.parse().map_err(|_| bad())?,
                },
                _ => return Err(bad()),
            },
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
            Ok(Arc::new(Faulty::new(backend, fault.kind.clone())))
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
    /// The inner backend's, lowered for a buffer limit.
    capability: Capability,
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
        let mut capability = inner.capability().clone();
        if let FaultKind::BufferLimit(bytes) = kind {
            let elements = usize::try_from(bytes / 4).unwrap_or(usize::MAX);
            capability.max_elements = capability.max_elements.min(elements);
            capability
                .version
                .push_str(&format!(" buffers ≤ {bytes} bytes"));
        }
        Faulty {
            inner,
            kind,
            capability,
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
            return Err(BackendError::OutOfMemory(format!(
                "{} (injected by {FAULT_ENV})",
                self.inner.name()
            )));
        }
        Ok(())
    }
}

fn lost_device(name: &str) -> BackendError {
    BackendError::Lost(format!("{name} (injected by {FAULT_ENV})"))
}

impl Backend for Faulty {
    fn id(&self) -> BackendId {
        self.inner.id()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capability(&self) -> &Capability {
        &self.capability
    }

    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError> {
        self.allocation()?;
        let bytes = weight.data.as_bytes().len() as u64;
        if let FaultKind::BufferLimit(limit) = self.kind {
            if bytes > limit {
                return Err(BackendError::limit(
                    format!("bytes of a {} {} weight", weight.dtype, weight.shape),
                    bytes,
                    limit,
                ));
            }
        }
        self.inner.upload(weight)
    }

    fn compile(
        &self,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError> {
        self.allocation()?;
        // For a bug fault, the position among the partition's inputs of the graph
        // input it watches (none: this partition never trips it).
        let watched = match &self.kind {
            FaultKind::BugOn { input, value } => spec
                .inputs
                .iter()
                .position(
                    |&id| matches!(&spec.graph.node(id).op, Op::Input { name } if name == input),
                )
                .map(|i| (i, *value)),
            _ => None,
        };
        Ok(Box::new(FaultyPartition {
            inner: self.inner.compile(spec, weights)?,
            name: self.inner.name().to_string(),
            kind: self.kind.clone(),
            watched,
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
    /// The input a bug fault watches (its position) and the value that trips it.
    watched: Option<(usize, i32)>,
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
        if let Some((i, value)) = self.watched {
            let held = inputs
                .get(i)
                .and_then(|t| t.host_bytes().ok())
                .is_some_and(|bytes| bytes.view::<i32>().contains(&value));
            if held {
                return Err(BackendError::Bug(format!(
                    "{}: a run with {value} in its input (injected by {FAULT_ENV})",
                    self.name
                )));
            }
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
        let got =
            FaultSpec::parse_list("gpu:5, sim:alloc,cpu:panic:2,gpu:limit:4096,cpu:bug:tokens=-7")
                .unwrap();
        assert_eq!(
            got,
            [
                FaultSpec::new("gpu", FaultKind::LostAtRun(5)),
                FaultSpec::new("sim", FaultKind::Alloc),
                FaultSpec::new("cpu", FaultKind::PanicAtRun(2)),
                FaultSpec::new("gpu", FaultKind::BufferLimit(4096)),
                FaultSpec::new(
                    "cpu",
                    FaultKind::BugOn {
                        input: "tokens".into(),
                        value: -7
                    }
                ),
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
            "gpu:limit:0",
            "gpu:limit",
            "cpu:bug:tokens",
            "cpu:bug:=3",
            "cpu:bug:tokens=x",
        ] {
            let err = FaultSpec::parse_list(bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
