//! The gate's settings and errors: the paper's defaults, the memory-pressure mode, and
//! the checks that keep every setting inside the range where the gate is well-defined.

use serde::Serialize;

use super::ArmId;

/// Whether the arms' working sets fit in memory together; the caller decides (from the
/// arms' estimated footprints and the memory available) and the gate adapts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MemoryPressure {
    /// They fit: probe inactive arms continuously (every `reprobe_every`-th call).
    Absent,
    /// They do not: probing one arm evicts another's working set, biasing both
    /// readings, so probation runs arm by arm, then the gate locks and re-probes only
    /// when the active arm drifts.
    Present,
}

/// The gate's settings. [`GateConfig::fusionml`] gives the paper's values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateConfig {
    /// Calls per arm run and discarded before probation samples (compile, caches).
    pub warmup_calls: u32,
    /// Timed calls per arm in probation; their median starts the arm's average (≥ 1).
    pub probation_samples: u32,
    /// Weight of the newest sample in the moving average, in (0, 1].
    pub ema_alpha: f64,
    /// Without memory pressure, the densest re-probing: one call in this many probes
    /// an inactive arm (≥ 2), when the arms are about as fast as each other.
    pub reprobe_every: u32,
    /// Without memory pressure, the most that re-probes may add to the mean call time,
    /// as a fraction of the active arm's (in (0, 1)): an arm measured `r`× slower than
    /// the active one is re-probed at most once in `(arms − 1)·(r − 1) / regret_budget`
    /// calls, so probing a 100× slower arm cannot dominate the mean.
    pub regret_budget: f64,
    /// In probation, an arm whose every call after its first (compiling) one took more
    /// than this many times another arm's fastest call is measured no further (> 1).
    pub abandon_factor: f64,
    /// Switch only when another arm's average is below `active · (1 − hysteresis)`;
    /// in [0, 1).
    pub hysteresis: f64,
    /// Whether the arms' working sets fit together.
    pub memory_pressure: MemoryPressure,
    /// Under memory pressure, a relative move of the active arm's average away from its
    /// value at lock time beyond which probation starts again (> 0).
    pub drift_threshold: f64,
    /// Most recent calls and decisions kept for reports (≥ 1 each); older ones are
    /// dropped and counted, so a long-running server's memory stays bounded.
    pub log_capacity: usize,
}

impl GateConfig {
    /// The paper's settings: 2 warm-up calls and 5 probation samples per arm, moving
    /// average weight 0.2, re-probes at most every 10th call, 3 % hysteresis, 15 %
    /// drift; plus ours: re-probes priced to add at most 2 % to the mean, and an arm 4×
    /// slower than another abandoned in probation.
    pub fn fusionml(memory_pressure: MemoryPressure) -> GateConfig {
        GateConfig {
            warmup_calls: 2,
            probation_samples: 5,
            ema_alpha: 0.2,
            reprobe_every: 10,
            regret_budget: 0.02,
            abandon_factor: 4.0,
            hysteresis: 0.03,
            memory_pressure,
            drift_threshold: 0.15,
            log_capacity: 4096,
        }
    }

    /// Checks every setting's range; the error names the first one out of range.
    pub(super) fn check(&self) -> Result<(), GateError> {
        let invalid =
            |field: &'static str, rule: &'static str| Err(GateError::InvalidConfig { field, rule });
        if self.probation_samples == 0 {
            return invalid("probation_samples", "must be at least 1");
        }
        if !(self.ema_alpha > 0.0 && self.ema_alpha <= 1.0) {
            return invalid("ema_alpha", "must be in (0, 1]");
        }
        if self.reprobe_every < 2 {
            return invalid("reprobe_every", "must be at least 2");
        }
        if !(self.regret_budget > 0.0 && self.regret_budget < 1.0) {
            return invalid("regret_budget", "must be in (0, 1)");
        }
        if self.abandon_factor.is_nan() || self.abandon_factor <= 1.0 {
            return invalid("abandon_factor", "must be above 1");
        }
        if !(self.hysteresis >= 0.0 && self.hysteresis < 1.0) {
            return invalid("hysteresis", "must be in [0, 1)");
        }
        if !(self.drift_threshold > 0.0 && self.drift_threshold.is_finite()) {
            return invalid("drift_threshold", "must be positive and finite");
        }
        if self.log_capacity == 0 {
            return invalid("log_capacity", "must be at least 1");
        }
        Ok(())
    }
}

/// Errors from building or feeding a [`super::Gate`]; the gate's state is unchanged
/// when one is returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// A gate needs at least one arm.
    #[error("a gate needs at least one arm")]
    NoArms,
    /// The baseline index does not name an arm.
    #[error("baseline arm {baseline} is not one of the {n_arms} arms")]
    BaselineOutOfRange {
        /// The index given.
        baseline: usize,
        /// How many arms there are.
        n_arms: usize,
    },
    /// A setting is out of range.
    #[error("gate setting {field} {rule}")]
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// Its allowed range.
        rule: &'static str,
    },
    /// A time was recorded for an arm other than the one the pending choice named (or
    /// with no choice pending); the time is ignored.
    #[error("recorded a time for arm {arm:?} but the pending choice is {expected:?}")]
    UnexpectedRecord {
        /// The arm given.
        arm: ArmId,
        /// The arm of the pending choice, if any.
        expected: Option<ArmId>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_settings_are_valid() {
        assert_eq!(GateConfig::fusionml(MemoryPressure::Absent).check(), Ok(()));
    }

    #[test]
    fn out_of_range_settings_are_named() {
        let base = GateConfig::fusionml(MemoryPressure::Present);
        let cases: [(&str, GateConfig); 8] = [
            (
                "regret_budget",
                GateConfig {
                    regret_budget: 0.0,
                    ..base.clone()
                },
            ),
            (
                "abandon_factor",
                GateConfig {
                    abandon_factor: f64::NAN,
                    ..base.clone()
                },
            ),
            (
                "probation_samples",
                GateConfig {
                    probation_samples: 0,
                    ..base.clone()
                },
            ),
            (
                "ema_alpha",
                GateConfig {
                    ema_alpha: f64::NAN,
                    ..base.clone()
                },
            ),
            (
                "reprobe_every",
                GateConfig {
                    reprobe_every: 1,
                    ..base.clone()
                },
            ),
            (
                "hysteresis",
                GateConfig {
                    hysteresis: 1.0,
                    ..base.clone()
                },
            ),
            (
                "drift_threshold",
                GateConfig {
                    drift_threshold: 0.0,
                    ..base.clone()
                },
            ),
            (
                "log_capacity",
                GateConfig {
                    log_capacity: 0,
                    ..base.clone()
                },
            ),
        ];
        for (name, config) in cases {
            match config.check() {
                Err(GateError::InvalidConfig { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: expected an InvalidConfig error, got {other:?}"),
            }
        }
    }
}
