//! The arms of co-execution: one way each to run a step ([`Arm`]), the arms a bucket
//! offers its gate, planning a step as an arm, and timing one split shape for the
//! calibration table. Stateless: [`super::coexec::Coexec`] holds the gates and table.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::backend::{BackendId, BackendSet, StepState, Tensor};
use crate::cache::{CompileError, Phase, Pick};
use crate::coexec::{
    calibrate, split_graph, split_key, Calibration, Clock, HardwareFingerprint, MemoryPressure,
    SplitKey, SplitRule,
};
use crate::exec::Executor;
use crate::graph::{DType, Graph, GraphBuilder, Op, OpKind};
use crate::plan::{partition, partition_pinned, Pins, Placement, Plan, Policy};

use super::coexec::Coexec;
use super::target::Target;
use super::StepError;

/// One way to run a prefill step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Arm {
    /// The capability-greedy plan over every backend.
    Baseline,
    /// The baseline with large linears split by rows across the backend pair.
    Split,
    /// Every compute node on one backend.
    Only(BackendId),
}

impl Arm {
    /// The arm's name in reports (`baseline`, `split`, `cpu`, `gpu`).
    pub fn name(&self, backends: &BackendSet) -> String {
        match self {
            Arm::Baseline => "baseline".into(),
            Arm::Split => "split".into(),
            Arm::Only(b) => backends.name_of(*b),
        }
    }
}

/// Linears with fewer rows never split.
pub const MIN_SPLIT_ROWS: usize = 16;

/// The arms worth offering for a step of `bucket` tokens on `target`: the baseline, the
/// split (prefill only) when `split_pays` (some linear calibrated to a non-zero ratio),
/// and each single-backend plan that can run the whole step and differs from the
/// baseline. Memory pressure when the weights in every space the arms use exceed the
/// memory available.
pub(super) fn offered(
    phase: Phase,
    bucket: usize,
    target: &Target,
    split_pays: bool,
) -> Result<(Vec<Arm>, MemoryPressure), StepError> {
    let graph = target.graph(bucket, 1, Pick::Logits)?;
    let backends = target.backends();
    let baseline =
        partition(&graph, &backends.capabilities(), target.policy()).map_err(CompileError::from)?;
    let mut arms = vec![Arm::Baseline];
    if phase == Phase::Prefill && split_pays {
        arms.push(Arm::Split);
    }
    for b in backends.iter().map(|b| b.id()) {
        if runs_everything(&graph, backends, b) && !all_on(&baseline, b) {
            arms.push(Arm::Only(b));
        }
    }
    let needed = weight_bytes(&graph) * backends.iter().count();
    let pressure = match available_memory() {
        Some(available) if needed > available => MemoryPressure::Present,
        _ => MemoryPressure::Absent,
    };
    Ok((arms, pressure))
}

/// The machine's fingerprint: the CPU's and the other backend's detected versions.
pub(super) fn hardware(backends: &BackendSet, pair: (BackendId, BackendId)) -> HardwareFingerprint {
    let version = |b: BackendId| {
        backends
            .get(b)
            .map_or_else(String::new, |b| b.capability().version.clone())
    };
    HardwareFingerprint {
        cpu_model: version(pair.0),
        gpu_adapter: backends.name_of(pair.1),
        gpu_driver: version(pair.1),
    }
}

/// The split rule for `pair` over `backends`.
pub(super) fn rule<'a>(
    backends: &'a BackendSet,
    pair: (BackendId, BackendId),
) -> Option<SplitRule<'a>> {
    Some(SplitRule {
        pair,
        capabilities: (
            backends.get(pair.0)?.capability(),
            backends.get(pair.1)?.capability(),
        ),
        min_rows: MIN_SPLIT_ROWS,
    })
}

/// Plans `graph` (dead code already removed) as `arm` on `target`, the split at
/// `coexec`'s ratios.
pub(super) fn plan_arm(
    graph: &Graph,
    arm: Arm,
    target: &Target,
    coexec: &Coexec,
) -> Result<Plan, CompileError> {
    let (backends, policy) = (target.backends(), target.policy());
    let all = backends.capabilities();
    Ok(match arm {
        Arm::Baseline => partition(graph, &all, policy)?,
        Arm::Only(b) if b == policy.fallback => {
            let only: Vec<_> = all.into_iter().filter(|(id, _)| *id == b).collect();
            partition(graph, &only, policy)?
        }
        Arm::Only(b) => {
            let pins: Pins = graph
                .ids()
                .filter(|&id| !graph.node(id).op.kind().is_source())
                .map(|id| (id, b))
                .collect();
            partition_pinned(graph, &all, policy, &pins)?
        }
        Arm::Split => {
            let Some(rule) = coexec.pair().and_then(|pair| rule(backends, pair)) else {
                return Ok(partition(graph, &all, policy)?);
            };
            let split = split_graph(graph, &rule, |key| coexec.rho(key))?;
            partition_pinned(&split.graph, &all, policy, &split.pins)?
        }
    })
}

/// Whether backend `b` can run every compute node of `graph`.
fn runs_everything(graph: &Graph, backends: &BackendSet, b: BackendId) -> bool {
    backends.get(b).is_some_and(|backend| {
        graph
            .ids()
            .filter(|&id| !graph.node(id).op.kind().is_source())
            .all(|id| backend.capability().supports(graph, id).is_ok())
    })
}

/// Whether `plan` places every compute node on `b`.
fn all_on(plan: &Plan, b: BackendId) -> bool {
    plan.graph
        .nodes()
        .iter()
        .zip(&plan.placement)
        .all(|(node, at)| {
            node.op.kind().is_source()
                || node.op.kind() == OpKind::Transfer
                || *at == Placement::On(b)
        })
}

/// Bytes of the weights `graph` reads.
fn weight_bytes(graph: &Graph) -> usize {
    graph
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Weight { .. }))
        .filter_map(|n| n.dtype.bytes_for(n.shape.numel()))
        .sum()
}

/// The split linears of `graph`: each shape class with the name of one weight of it
/// and its row count.
pub(super) fn split_shapes(
    graph: &Graph,
    rule: &SplitRule<'_>,
) -> BTreeMap<SplitKey, (String, usize)> {
    let mut shapes = BTreeMap::new();
    for id in graph.ids() {
        if let Some((key, m)) = split_key(graph, id, rule) {
            if let Op::Weight { name } = &graph.node(graph.node(id).inputs[1]).op {
                shapes.entry(key).or_insert((name.clone(), m));
            }
        }
    }
    shapes
}

/// Calibrates one shape class: times the real concurrent split of the weight `name`
/// over `m` random rows at every grid ratio, `reps` times each.
pub(super) fn calibrate_shape(
    key: &SplitKey,
    name: &str,
    m: usize,
    target: &Target,
    clock: &dyn Clock,
    reps: std::num::NonZeroU32,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Calibration, StepError> {
    let (backends, store) = (target.backends(), target.store());
    let (k, n) = (key.k() as usize, key.n() as usize);
    let mut b = GraphBuilder::new();
    let graph_error = |e| StepError::from(CompileError::from(e));
    let x = b.input("x", DType::F32, [m, k]).map_err(graph_error)?;
    let w = b.weight(name, key.dtype(), [n, k]).map_err(graph_error)?;
    let y = b.matmul(x, w).map_err(graph_error)?;
    let graph = b.finish(vec![y]).map_err(graph_error)?;
    let rule = rule(backends, key.pair())
        .ok_or_else(|| StepError::internal("co-execution pair is missing"))?;
    let policy = Policy {
        min_run: 0,
        ..Policy::default()
    };
    let values: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let input = Tensor::from_f32([m, k], &values)?;
    let measure = |rho: u16| -> Result<Duration, StepError> {
        let split = split_graph(&graph, &rule, |_| Some(rho)).map_err(graph_error)?;
        let mut pins = split.pins;
        if split.splits.is_empty() {
            pins.insert(y, key.pair().1);
        }
        let plan = partition_pinned(&split.graph, &backends.capabilities(), &policy, &pins)
            .map_err(CompileError::from)?;
        let executor = Executor::compile(plan, backends, store)?;
        let run = || executor.run(&[("x", input.clone())], &mut StepState::stateless());
        run()?;
        let started = clock.now();
        run()?;
        Ok(clock.now().saturating_sub(started))
    };
    calibrate(*key, reps, measure, progress)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes, where readable.
fn available_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
