//! Co-execution in the runner: for each prefill bucket, which arm runs (the
//! capability-greedy baseline, the row split, a single-backend plan), chosen by the
//! no-regression gate from measured times; the split's ratios come from the
//! calibration table, filled lazily (and persisted) the first time a shape needs one.
//! Decode never splits; in gate mode its own gate (bucket 1; prefill buckets are ≥ 2)
//! picks between the baseline and the single-backend plans.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backend::{BackendId, BackendSet, StepState, Tensor};
use crate::cache::{CompileError, WeightStore};
use crate::coexec::{
    calibrate, split_graph, split_key, Calibration, CalibrationTable, Clock, Gate, GateConfig,
    GateReport, HardwareFingerprint, LoadStatus, MemoryPressure, SplitKey, SplitRule,
};
use crate::exec::Executor;
use crate::graph::{DType, Graph, GraphBuilder, Op, OpKind};
use crate::plan::{partition, partition_pinned, Pins, Placement, Plan, Policy};

use super::StepError;

/// How prefill may use a second backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum CoexecMode {
    /// Always the capability-greedy plan.
    #[default]
    Off,
    /// The gate picks among the arms by measurement; never slower than the baseline
    /// beyond its probes.
    Gate,
    /// Always the row split (when a second backend exists).
    Split,
}

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

/// The gate of one prefill bucket, for reports.
#[derive(Serialize)]
pub struct BucketGate<'a> {
    /// Tokens per chunk.
    pub bucket: u32,
    /// The gate's state and logs.
    pub gate: GateReport<'a>,
}

/// Co-execution state of a runner.
pub(super) struct Coexec {
    /// Whether prefill may leave the baseline.
    pub mode: CoexecMode,
    /// `(a, b)`: the CPU and the highest-priority other backend.
    pub pair: Option<(BackendId, BackendId)>,
    table: Option<CalibrationTable>,
    /// Where the table persists (`None`: in memory only).
    pub table_file: Option<PathBuf>,
    /// A ratio (permille on the CPU) used for every split instead of calibrations.
    pub fixed_rho: Option<u16>,
    gates: BTreeMap<u32, (Vec<Arm>, Gate)>,
    /// Prefill buckets whose shapes have calibrations.
    pub calibrated: std::collections::BTreeSet<u32>,
    /// Times the arms (a fake clock in tests).
    pub clock: Arc<dyn Clock>,
}

impl Coexec {
    /// Co-execution over `backends`, off until a mode is set: the pair is `fallback`
    /// and the highest-priority other backend, when there is one.
    pub fn new(backends: &BackendSet, fallback: BackendId, clock: Arc<dyn Clock>) -> Coexec {
        let other = backends
            .iter()
            .filter(|b| b.id() != fallback)
            .max_by_key(|b| (b.capability().priority, std::cmp::Reverse(b.id())))
            .map(|b| b.id());
        Coexec {
            mode: CoexecMode::Off,
            pair: other.map(|b| (fallback, b)),
            table: None,
            table_file: None,
            fixed_rho: None,
            gates: BTreeMap::new(),
            calibrated: Default::default(),
            clock,
        }
    }

    /// Forgets gates, calibrations and the pair after a backend was dropped: the pair
    /// becomes `fallback` and the highest-priority backend left, if any.
    pub fn forget(&mut self, backends: &BackendSet, fallback: BackendId) {
        let fresh = Coexec::new(backends, fallback, self.clock.clone());
        self.pair = fresh.pair;
        self.table = None;
        self.gates.clear();
        self.calibrated.clear();
    }

    /// The gates' reports, by bucket.
    pub fn reports(&self) -> Vec<BucketGate<'_>> {
        self.gates
            .iter()
            .map(|(&bucket, (_, gate))| BucketGate {
                bucket,
                gate: gate.report(),
            })
            .collect()
    }

    /// Whether `bucket` has a gate yet.
    pub fn has_gate(&self, bucket: u32) -> bool {
        self.gates.contains_key(&bucket)
    }

    /// Creates the gate of `bucket` over `arms` (the first is the baseline).
    pub fn add_gate(
        &mut self,
        bucket: u32,
        arms: Vec<Arm>,
        names: Vec<String>,
        pressure: MemoryPressure,
    ) -> Result<(), StepError> {
        let gate = Gate::new(names, 0, GateConfig::fusionml(pressure))
            .map_err(|e| StepError::Internal(format!("co-execution gate: {e}")))?;
        self.gates.insert(bucket, (arms, gate));
        Ok(())
    }

    /// The gate's choice for `bucket`: the arm and its index.
    pub fn choose(&mut self, bucket: u32) -> Option<(Arm, usize)> {
        let (arms, gate) = self.gates.get_mut(&bucket)?;
        let choice = gate.choose();
        arms.get(choice.arm.0).map(|&arm| (arm, choice.arm.0))
    }

    /// The arm `bucket`'s gate runs now (its incumbent while in probation), without
    /// counting a call; `None` without a gate.
    pub fn active(&self, bucket: u32) -> Option<Arm> {
        let (arms, gate) = self.gates.get(&bucket)?;
        arms.get(gate.active()?.0).copied()
    }

    /// A fingerprint of the calibrated ratios, part of the split arm's step keys.
    pub fn split_signature(&self) -> u64 {
        let mut text = format!("fixed={:?};", self.fixed_rho);
        for c in self.table.iter().flat_map(|t| t.calibrations()) {
            text.push_str(&format!("{:?}={};", c.key(), c.rho_permille()));
        }
        crate::cache::fingerprint(text.as_bytes())
    }

    /// The table, once loaded.
    pub fn loaded_table(&self) -> Option<&CalibrationTable> {
        self.table.as_ref()
    }

    /// Whether some linear would split: a fixed ratio above zero, or a calibrated one.
    pub fn split_pays(&self) -> bool {
        match self.fixed_rho {
            Some(rho) => rho > 0,
            None => self
                .table
                .as_ref()
                .is_some_and(|t| t.calibrations().any(|c| c.rho_permille() > 0)),
        }
    }

    /// The ratio for a split shape: the fixed one, else the calibrated one.
    pub fn rho(&self, key: &SplitKey) -> Option<u16> {
        self.fixed_rho
            .or_else(|| self.table.as_ref()?.get(key).map(Calibration::rho_permille))
    }

    /// Records the measured time of the arm the gate chose for `bucket`.
    pub fn record(&mut self, bucket: u32, arm: usize, took: Duration) {
        if let Some((_, gate)) = self.gates.get_mut(&bucket) {
            let before = gate.active();
            if let Err(e) = gate.record(crate::coexec::ArmId(arm), took) {
                log::warn!("co-execution gate: {e}");
            }
            let after = gate.active();
            if after != before {
                let name = |a: Option<crate::coexec::ArmId>| {
                    a.and_then(|a| gate.arm_name(a))
                        .unwrap_or("none")
                        .to_string()
                };
                let step = match bucket {
                    1 => "decode".to_string(),
                    _ => format!("prefill bucket {bucket}"),
                };
                log::info!(
                    "{step}: the gate's active arm is now {} (was {})",
                    name(after),
                    name(before)
                );
            }
        }
    }

    /// The calibration table for `fingerprint`, loaded from `table_file` once.
    pub fn table(&mut self, fingerprint: &HardwareFingerprint) -> &mut CalibrationTable {
        let file = self.table_file.clone();
        self.table.get_or_insert_with(|| {
            let Some(path) = file else {
                return CalibrationTable::new(fingerprint.clone());
            };
            match CalibrationTable::load(&path, fingerprint.clone()) {
                Ok((table, LoadStatus::Invalidated(why))) => {
                    log::info!("calibration invalidated: {why}");
                    table
                }
                Ok((table, _)) => table,
                Err(e) => {
                    log::warn!("ignoring the calibration table: {e}");
                    CalibrationTable::new(fingerprint.clone())
                }
            }
        })
    }

    /// Writes the table back, atomically; failures are logged (calibration is a cache).
    pub fn save(&self) {
        if let (Some(table), Some(path)) = (&self.table, &self.table_file) {
            if let Err(e) = table.save(path) {
                log::warn!("could not save the calibration table: {e}");
            }
        }
    }
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

/// Plans `graph` (dead code already removed) as `arm`.
pub(super) fn plan_arm(
    graph: &Graph,
    arm: Arm,
    backends: &BackendSet,
    policy: &Policy,
    coexec: &Coexec,
) -> Result<Plan, CompileError> {
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
            let Some(rule) = coexec.pair.and_then(|pair| rule(backends, pair)) else {
                return Ok(partition(graph, &all, policy)?);
            };
            let split = split_graph(graph, &rule, |key| coexec.rho(key))?;
            partition_pinned(&split.graph, &all, policy, &split.pins)?
        }
    })
}

/// Whether backend `b` can run every compute node of `graph`.
pub(super) fn runs_everything(graph: &Graph, backends: &BackendSet, b: BackendId) -> bool {
    backends.get(b).is_some_and(|backend| {
        graph
            .ids()
            .filter(|&id| !graph.node(id).op.kind().is_source())
            .all(|id| backend.capability().supports(graph, id).is_ok())
    })
}

/// Whether `plan` places every compute node on `b`.
pub(super) fn all_on(plan: &Plan, b: BackendId) -> bool {
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
pub(super) fn weight_bytes(graph: &Graph) -> usize {
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
#[allow(clippy::too_many_arguments)]
pub(super) fn calibrate_shape(
    key: &SplitKey,
    name: &str,
    m: usize,
    backends: &BackendSet,
    store: &WeightStore,
    clock: &dyn Clock,
    reps: std::num::NonZeroU32,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Calibration, StepError> {
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
