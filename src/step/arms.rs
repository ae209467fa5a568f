//! The runner's side of prefill co-execution: which arm a step runs, the arms a prefill
//! bucket offers the gate, and calibrating the split ratios of its linears on the
//! model's own weights.

use crate::cache::{CompileError, Phase};
use crate::coexec::{CalibrationTable, MemoryPressure, SplitKey};
use crate::graph::eliminate_dead_code;
use crate::plan::partition;

use super::coexec::{self, Arm, CoexecMode};
use super::{Runner, StepError, PREFILL_CHUNK};

impl Runner {
    /// Which arm runs this step, and its index in the bucket's gate when the gate chose.
    pub(super) fn choose_arm(
        &mut self,
        phase: Phase,
        bucket: u32,
    ) -> Result<(Arm, Option<usize>), StepError> {
        let mode = self.coexec.mode;
        if mode == CoexecMode::Off || self.coexec.pair.is_none() {
            return Ok((Arm::Baseline, None));
        }
        if phase == Phase::Prefill {
            self.ensure_calibrated(bucket as usize, false, 1, &mut |_, _, _| {})?;
            if mode == CoexecMode::Split {
                return Ok((Arm::Split, None));
            }
        } else if mode != CoexecMode::Gate {
            return Ok((Arm::Baseline, None));
        }
        if !self.coexec.has_gate(bucket) {
            let (arms, pressure) = self.arms(phase, bucket as usize)?;
            let names = arms.iter().map(|a| a.name(&self.backends)).collect();
            self.coexec.add_gate(bucket, arms, names, pressure)?;
        }
        Ok(match self.coexec.choose(bucket) {
            Some((arm, index)) => (arm, Some(index)),
            None => (Arm::Baseline, None),
        })
    }

    /// The arms worth offering for a step of `bucket` tokens: the baseline, the split
    /// (prefill only) when some linear calibrated to a non-zero ratio, and each
    /// single-backend plan that can run the whole step and differs from the baseline.
    /// Memory pressure when the weights in every space the arms use exceed the memory
    /// available.
    fn arms(&self, phase: Phase, bucket: usize) -> Result<(Vec<Arm>, MemoryPressure), StepError> {
        let graph = eliminate_dead_code(&self.model.trace(bucket, 1).map_err(CompileError::from)?);
        let baseline = partition(&graph, &self.backends.capabilities(), &self.policy)
            .map_err(CompileError::from)?;
        let mut arms = vec![Arm::Baseline];
        if phase == Phase::Prefill && self.coexec.split_pays() {
            arms.push(Arm::Split);
        }
        for b in self.backends.iter().map(|b| b.id()) {
            if coexec::runs_everything(&graph, &self.backends, b) && !coexec::all_on(&baseline, b) {
                arms.push(Arm::Only(b));
            }
        }
        let needed = coexec::weight_bytes(&graph) * self.backends.iter().count();
        let pressure = match available_memory() {
            Some(available) if needed > available => MemoryPressure::Present,
            _ => MemoryPressure::Absent,
        };
        Ok((arms, pressure))
    }

    /// Makes sure every splittable linear of the prefill `bucket` has a calibrated ratio
    /// (all of them again when `force`), timing `reps` runs per grid point; reports
    /// `(shape, done, total)` as it goes, and persists the table.
    fn ensure_calibrated(
        &mut self,
        bucket: usize,
        force: bool,
        reps: u32,
        progress: &mut dyn FnMut(&SplitKey, usize, usize),
    ) -> Result<(), StepError> {
        let Some(pair) = self.coexec.pair else {
            return Ok(());
        };
        if self.coexec.fixed_rho.is_some()
            || (!force && self.coexec.calibrated.contains(&(bucket as u32)))
        {
            return Ok(());
        }
        let graph = eliminate_dead_code(&self.model.trace(bucket, 1).map_err(CompileError::from)?);
        let Some(rule) = coexec::rule(&self.backends, pair) else {
            return Ok(());
        };
        let shapes = coexec::split_shapes(&graph, &rule);
        let fingerprint = coexec::hardware(&self.backends, pair);
        let reps = std::num::NonZeroU32::new(reps.max(1)).expect("at least one");
        let mut changed = false;
        for (key, (name, m)) in shapes {
            if !force && self.coexec.table(&fingerprint).get(&key).is_some() {
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
            let calibration = coexec::calibrate_shape(
                &key,
                &name,
                m,
                &self.backends,
                &self.store,
                self.coexec.clock.as_ref(),
                reps,
                &mut |done, total| progress(&key, done, total),
            )?;
            self.coexec.table(&fingerprint).insert(calibration);
            changed = true;
        }
        if changed {
            self.coexec.save();
        }
        self.coexec.calibrated.insert(bucket as u32);
        Ok(())
    }

    /// Calibrates every prefill bucket that can split (`reps` timed runs per grid point),
    /// replacing earlier calibrations, and saves the table. Returns the table.
    pub fn calibrate(
        &mut self,
        reps: u32,
        progress: &mut dyn FnMut(&SplitKey, usize, usize),
    ) -> Result<Option<&CalibrationTable>, StepError> {
        let mut bucket = PREFILL_CHUNK;
        while bucket >= coexec::MIN_SPLIT_ROWS {
            self.ensure_calibrated(bucket, true, reps, progress)?;
            bucket /= 2;
        }
        Ok(self.coexec.loaded_table())
    }
}

/// `MemAvailable` from `/proc/meminfo`, in bytes, where readable.
fn available_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
