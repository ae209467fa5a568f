//! Co-execution in the runner: for each prefill bucket, which arm runs (the
//! capability-greedy baseline, the row split, a single-backend plan), chosen by the
//! no-regression gate from measured times; the split's ratios come from the
//! calibration table, filled lazily (and persisted) the first time a shape needs one.
//! Decode never splits; in gate mode its own gate (bucket 1; prefill buckets are ≥ 2)
//! picks between the baseline and the single-backend plans. [`Coexec`] owns that state;
//! `arms.rs` plans and times the arms.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backend::{BackendId, BackendSet};
use crate::cache::{Phase, Pick};
use crate::coexec::{
    Calibration, CalibrationTable, Clock, Gate, GateConfig, GateReport, HardwareFingerprint,
    LoadStatus, SplitKey,
};

use super::arms::{self, Arm, MIN_SPLIT_ROWS};
use super::target::Target;
use super::{StepError, PREFILL_CHUNK};

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

/// The gate of one prefill bucket, for reports.
#[derive(Serialize)]
pub struct BucketGate<'a> {
    /// Tokens per chunk.
    pub bucket: u32,
    /// The gate's state and logs.
    pub gate: GateReport<'a>,
}

/// Co-execution state of a runner: the mode, the backend pair, the calibration table
/// and the gates. *Invariant:* `pair`, `table`, `gates` and `calibrated` describe the
/// backends last given to [`Coexec::new`] or [`Coexec::forget`].
pub(super) struct Coexec {
    /// Whether prefill may leave the baseline.
    mode: CoexecMode,
    /// `(a, b)`: the CPU and the highest-priority other backend.
    pair: Option<(BackendId, BackendId)>,
    table: Option<CalibrationTable>,
    /// Where the table persists (`None`: in memory only).
    table_file: Option<PathBuf>,
    /// A ratio (permille on the CPU) used for every split instead of calibrations.
    fixed_rho: Option<u16>,
    gates: BTreeMap<u32, (Vec<Arm>, Gate)>,
    /// Prefill buckets whose shapes have calibrations.
    calibrated: BTreeSet<u32>,
    /// Times the arms (a fake clock in tests).
    clock: Arc<dyn Clock>,
}

impl Coexec {
    /// Co-execution over `backends`, off until a mode is set: the pair is `fallback`
    /// and the highest-priority other backend, when there is one.
    pub(super) fn new(backends: &BackendSet, fallback: BackendId, clock: Arc<dyn Clock>) -> Coexec {
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

    /// Sets how prefill may use a second backend.
    pub(super) fn set_mode(&mut self, mode: CoexecMode) {
        self.mode = mode;
    }

    /// Keeps calibrations in `file` (`None`: in memory only).
    pub(super) fn set_table_file(&mut self, file: Option<PathBuf>) {
        self.table_file = file;
    }

    /// Splits every splittable linear at `rho_permille` thousandths of its rows on the
    /// CPU (at most 1000), without calibrating.
    pub(super) fn set_fixed_rho(&mut self, rho_permille: u16) {
        self.fixed_rho = Some(rho_permille.min(1000));
    }

    /// Times the arms with `clock`.
    pub(super) fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// The arms' clock's time now.
    pub(super) fn now(&self) -> Duration {
        self.clock.now()
    }

    /// `(a, b)`: the CPU and the highest-priority other backend, when there is one.
    pub(super) fn pair(&self) -> Option<(BackendId, BackendId)> {
        self.pair
    }

    /// Which arm runs a step of `bucket` rows on `target`, and its index in the
    /// bucket's gate when the gate chose (the caller records its time).
    pub(super) fn choose_arm(
        &mut self,
        phase: Phase,
        bucket: u32,
        target: &Target,
    ) -> Result<(Arm, Option<usize>), StepError> {
        let mode = self.mode;
        if mode == CoexecMode::Off || self.pair.is_none() {
            return Ok((Arm::Baseline, None));
        }
        if phase == Phase::Prefill {
            self.ensure_calibrated(bucket as usize, false, 1, target, &mut |_, _, _| {})?;
            if mode == CoexecMode::Split {
                return Ok((Arm::Split, None));
            }
        } else if mode != CoexecMode::Gate {
            return Ok((Arm::Baseline, None));
        }
        if !self.gates.contains_key(&bucket) {
            let (arms, pressure) =
                arms::offered(phase, bucket as usize, target, self.split_pays())?;
            let names = arms.iter().map(|a| a.name(target.backends())).collect();
            let gate = Gate::new(names, 0, GateConfig::fusionml(pressure))
                .map_err(|e| StepError::Internal(format!("co-execution gate: {e}")))?;
            self.gates.insert(bucket, (arms, gate));
        }
        let Some((arms, gate)) = self.gates.get_mut(&bucket) else {
            return Ok((Arm::Baseline, None));
        };
        let choice = gate.choose().arm.0;
        Ok(match arms.get(choice) {
            Some(&arm) => (arm, Some(choice)),
            None => (Arm::Baseline, None),
        })
    }

    /// Makes sure every splittable linear of the prefill `bucket` has a calibrated ratio
    /// (all of them again when `force`), timing `reps` runs per grid point; reports
    /// `(shape, done, total)` as it goes, and persists the table.
    fn ensure_calibrated(
        &mut self,
        bucket: usize,
        force: bool,
        reps: u32,
        target: &Target,
        progress: &mut dyn FnMut(&SplitKey, usize, usize),
    ) -> Result<(), StepError> {
        let Some(pair) = self.pair else {
            return Ok(());
        };
        if self.fixed_rho.is_some() || (!force && self.calibrated.contains(&(bucket as u32))) {
            return Ok(());
        }
        let graph = target.graph(bucket, 1, Pick::Logits)?;
        let Some(rule) = arms::rule(target.backends(), pair) else {
            return Ok(());
        };
        let shapes = arms::split_shapes(&graph, &rule);
        let fingerprint = arms::hardware(target.backends(), pair);
        let reps = std::num::NonZeroU32::new(reps.max(1)).expect("at least one");
        let mut changed = false;
        for (key, (name, m)) in shapes {
            if !force && self.table(&fingerprint).get(&key).is_some() {
                continue;
            }
            log::info!(
                target: "switchyard::progress",
                "calibrating the CPU+GPU row split of {}×{} {} linears ({} rows), once for this machine",
                key.n(),
                key.k(),
                key.dtype(),
                key.rows_bucket()
            );
            let calibration = arms::calibrate_shape(
                &key,
                &name,
                m,
                target,
                self.clock.as_ref(),
                reps,
                &mut |done, total| progress(&key, done, total),
            )?;
            self.table(&fingerprint).insert(calibration);
            changed = true;
        }
        if changed {
            self.save();
        }
        self.calibrated.insert(bucket as u32);
        Ok(())
    }

    /// Calibrates every prefill bucket that can split (`reps` timed runs per grid point)
    /// on `target`, replacing earlier calibrations, and saves the table. Returns the table.
    pub(super) fn calibrate(
        &mut self,
        reps: u32,
        target: &Target,
        progress: &mut dyn FnMut(&SplitKey, usize, usize),
    ) -> Result<Option<&CalibrationTable>, StepError> {
        let mut bucket = PREFILL_CHUNK;
        while bucket >= MIN_SPLIT_ROWS {
            self.ensure_calibrated(bucket, true, reps, target, progress)?;
            bucket /= 2;
        }
        Ok(self.table.as_ref())
    }

    /// Forgets gates, calibrations and the pair after a backend was dropped: the pair
    /// becomes `fallback` and the highest-priority backend left, if any.
    pub(super) fn forget(&mut self, backends: &BackendSet, fallback: BackendId) {
        let fresh = Coexec::new(backends, fallback, self.clock.clone());
        self.pair = fresh.pair;
        self.table = None;
        self.gates.clear();
        self.calibrated.clear();
    }

    /// The gates' reports, by bucket.
    pub(super) fn reports(&self) -> Vec<BucketGate<'_>> {
        self.gates
            .iter()
            .map(|(&bucket, (_, gate))| BucketGate {
                bucket,
                gate: gate.report(),
            })
            .collect()
    }

    /// The arm `bucket`'s gate runs now (its incumbent while in probation), without
    /// counting a call; `None` without a gate.
    pub(super) fn active(&self, bucket: u32) -> Option<Arm> {
        let (arms, gate) = self.gates.get(&bucket)?;
        arms.get(gate.active()?.0).copied()
    }

    /// A fingerprint of the calibrated ratios, part of the split arm's step keys.
    pub(super) fn split_signature(&self) -> u64 {
        let mut text = format!("fixed={:?};", self.fixed_rho);
        for c in self.table.iter().flat_map(|t| t.calibrations()) {
            text.push_str(&format!("{:?}={};", c.key(), c.rho_permille()));
        }
        crate::cache::fingerprint(text.as_bytes())
    }

    /// Whether some linear would split: a fixed ratio above zero, or a calibrated one.
    fn split_pays(&self) -> bool {
        match self.fixed_rho {
            Some(rho) => rho > 0,
            None => self
                .table
                .as_ref()
                .is_some_and(|t| t.calibrations().any(|c| c.rho_permille() > 0)),
        }
    }

    /// The ratio for a split shape: the fixed one, else the calibrated one.
    pub(super) fn rho(&self, key: &SplitKey) -> Option<u16> {
        self.fixed_rho
            .or_else(|| self.table.as_ref()?.get(key).map(Calibration::rho_permille))
    }

    /// Records the measured time of the arm the gate chose for `bucket`.
    pub(super) fn record(&mut self, bucket: u32, arm: usize, took: Duration) {
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
    fn table(&mut self, fingerprint: &HardwareFingerprint) -> &mut CalibrationTable {
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
    fn save(&self) {
        if let (Some(table), Some(path)) = (&self.table, &self.table_file) {
            if let Err(e) = table.save(path) {
                log::warn!("could not save the calibration table: {e}");
            }
        }
    }
}
