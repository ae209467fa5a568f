//! What the gate did, for `--json` and logs: each call (arm, reason, time, the active
//! arm afterwards) and each decision (probation results, switches, drift), kept in
//! bounded logs so a long-running server's memory does not grow with its uptime.

use std::collections::VecDeque;

use serde::Serialize;

use super::GateConfig;

/// An arm of the gate: an index into the arms it was built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ArmId(pub usize);

/// Why the gate chose an arm for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Reason {
    /// A warm-up call of the first probation; its time is discarded.
    Warmup,
    /// A timed call of the first probation.
    Probation,
    /// A warm-up call of a probation that drift started (memory pressure).
    DriftWarmup,
    /// A timed call of a probation that drift started (memory pressure).
    DriftReprobe,
    /// The active arm.
    Active,
    /// A scheduled re-probe of an inactive arm (no memory pressure).
    Reprobe,
}

/// The arm to run for the next call, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// The arm to run.
    pub arm: ArmId,
    /// Why it was chosen.
    pub reason: Reason,
}

/// One recorded call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    /// Index of the call, from 0, counting every recorded call.
    pub call_idx: u64,
    /// The arm that ran.
    pub arm: ArmId,
    /// Why it ran.
    pub reason: Reason,
    /// Its wall time in nanoseconds (saturating).
    pub duration_ns: u64,
    /// The active arm once the call was recorded (`None` during the first probation).
    pub active_after: Option<ArmId>,
}

/// A change in what the gate believes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    /// Probation finished: each arm's median, and the arm made active.
    ProbationEnded {
        /// The call that finished it.
        call_idx: u64,
        /// Median probation time per arm, in nanoseconds, in arm order.
        medians_ns: Vec<f64>,
        /// The arm active before (`None` after the first probation).
        previous: Option<ArmId>,
        /// The arm made active.
        chosen: ArmId,
    },
    /// Another arm's average beat the active one's by more than the hysteresis.
    Switched {
        /// The call whose record caused it.
        call_idx: u64,
        /// The arm that was active.
        from: ArmId,
        /// The arm now active.
        to: ArmId,
        /// The old arm's average, in nanoseconds.
        from_ema_ns: f64,
        /// The new arm's average, in nanoseconds.
        to_ema_ns: f64,
    },
    /// In probation, an arm was measured far slower than another and is measured no
    /// further (its remaining probation calls are dropped).
    Abandoned {
        /// The call whose record caused it.
        call_idx: u64,
        /// The slow arm.
        arm: ArmId,
        /// Its fastest call after its first, in nanoseconds.
        ns: f64,
        /// The fastest call of any other arm, in nanoseconds.
        fastest_other_ns: f64,
    },
    /// Under memory pressure, the locked arm's average left its band; probation
    /// starts again.
    Drift {
        /// The call whose record caused it.
        call_idx: u64,
        /// The locked arm.
        arm: ArmId,
        /// Its average when it was locked, in nanoseconds.
        locked_ema_ns: f64,
        /// Its average now, in nanoseconds.
        ema_ns: f64,
    },
}

/// The most recent entries of a log, and how many older ones were dropped.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventLog<T> {
    entries: VecDeque<T>,
    n_dropped: u64,
    #[serde(skip)]
    capacity: usize,
}

impl<T> EventLog<T> {
    /// An empty log keeping at most `capacity` entries (at least one).
    pub(super) fn new(capacity: usize) -> EventLog<T> {
        EventLog {
            entries: VecDeque::new(),
            n_dropped: 0,
            capacity: capacity.max(1),
        }
    }

    /// Appends `entry`, dropping the oldest when full.
    pub(super) fn push(&mut self, entry: T) {
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.n_dropped += 1;
        }
        self.entries.push_back(entry);
    }

    /// The kept entries, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &T> {
        self.entries.iter()
    }

    /// How many entries were dropped to stay within capacity.
    pub fn n_dropped(&self) -> u64 {
        self.n_dropped
    }
}

/// Everything the gate knows, for `--json` and logs.
#[derive(Serialize)]
pub struct GateReport<'a> {
    /// Arm names, in arm order.
    pub arms: &'a [String],
    /// The baseline arm.
    pub baseline: ArmId,
    /// The settings.
    pub config: &'a GateConfig,
    /// The active arm (`None` during the first probation).
    pub active: Option<ArmId>,
    /// Each arm's moving average in nanoseconds (`None` before its first probation).
    pub ema_ns: &'a [Option<f64>],
    /// Calls recorded.
    pub n_calls: u64,
    /// Times the active arm changed after the first probation.
    pub n_switches: u64,
    /// The most recent calls.
    pub timeline: &'a EventLog<CallRecord>,
    /// The most recent decisions.
    pub decisions: &'a EventLog<Decision>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_log_drops_its_oldest_entries_and_counts_them() {
        let mut log = EventLog::new(2);
        for value in 0..5 {
            log.push(value);
        }
        assert_eq!(log.entries().copied().collect::<Vec<_>>(), [3, 4]);
        assert_eq!(log.n_dropped(), 3);
        let json = serde_json::to_string(&log).unwrap();
        assert_eq!(json, r#"{"entries":[3,4],"n_dropped":3}"#);
    }
}
