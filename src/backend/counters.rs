//! What a device backend did, counted: compute passes, dispatches by kernel kind,
//! submits, buffers and bind groups created, bytes moved each way, blocking waits and
//! the host time spent recording. A GPU step's cost is mostly these, and most of them
//! cannot be timed without the device, so `bench --json`/`--profile` and `/metrics`
//! report them per step and the tests assert on them.

use std::collections::BTreeMap;

use serde::Serialize;

/// A snapshot of a device's counters since it opened; subtract two with
/// [`DeviceCounters::since`] to get what happened between them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceCounters {
    /// Compiled partitions run.
    pub runs: u64,
    /// Compute passes begun.
    pub passes: u64,
    /// Dispatches, by kernel kind (`matmul`, `attention`, `rms_norm`, ...).
    pub dispatches: BTreeMap<String, u64>,
    /// Command buffers submitted to the queue.
    pub submits: u64,
    /// Device buffers created (weights, pools and partitions' buffers included).
    pub buffers_created: u64,
    /// Bind groups created.
    pub bind_groups_created: u64,
    /// Bytes written from the host into device buffers.
    pub bytes_written: u64,
    /// Bytes read back from the device to the host.
    pub bytes_read: u64,
    /// Times the host blocked waiting for the device.
    pub waits: u64,
    /// Host nanoseconds partition runs spent on their step's path before the submit:
    /// everything from the inputs to the finished command buffer (a run recorded ahead
    /// only writes its inputs and takes its commands).
    pub record_nanos: u64,
    /// Runs whose commands were recorded ahead, while the run before them was being
    /// submitted, so recording them took nothing from their own step's path.
    pub ahead_runs: u64,
    /// Host nanoseconds spent recording runs ahead, beside the previous run's submit
    /// (those recorded for a run that then changed shape and recorded afresh included).
    pub ahead_nanos: u64,
    /// Host nanoseconds spent inside the queue's submit (a software adapter such as
    /// lavapipe may run shaders there, so it is kept apart from recording).
    pub submit_nanos: u64,
    /// The host nanoseconds of each of the most recent runs (at most
    /// [`RECENT_RUNS`]), oldest first, for medians.
    pub recent_record_nanos: Vec<u64>,
}

/// How many runs' record times a snapshot keeps.
pub const RECENT_RUNS: usize = 1024;

impl DeviceCounters {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        let dispatches = self
            .dispatches
            .iter()
            .map(|(kind, &n)| {
                let before = earlier.dispatches.get(kind).copied().unwrap_or(0);
                (kind.clone(), n.saturating_sub(before))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        DeviceCounters {
            runs: self.runs.saturating_sub(earlier.runs),
            passes: self.passes.saturating_sub(earlier.passes),
            dispatches,
            submits: self.submits.saturating_sub(earlier.submits),
            buffers_created: self.buffers_created.saturating_sub(earlier.buffers_created),
            bind_groups_created: self
                .bind_groups_created
                .saturating_sub(earlier.bind_groups_created),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            waits: self.waits.saturating_sub(earlier.waits),
            record_nanos: self.record_nanos.saturating_sub(earlier.record_nanos),
            ahead_runs: self.ahead_runs.saturating_sub(earlier.ahead_runs),
            ahead_nanos: self.ahead_nanos.saturating_sub(earlier.ahead_nanos),
            submit_nanos: self.submit_nanos.saturating_sub(earlier.submit_nanos),
            recent_record_nanos: {
                let runs = self.runs.saturating_sub(earlier.runs) as usize;
                let recent = &self.recent_record_nanos;
                recent[recent.len().saturating_sub(runs)..].to_vec()
            },
        }
    }

    /// The median host time to record one run, in nanoseconds, over the recent runs
    /// this snapshot holds.
    pub fn median_record_nanos(&self) -> Option<u64> {
        let mut sorted = self.recent_record_nanos.clone();
        sorted.sort_unstable();
        sorted.get(sorted.len() / 2).copied()
    }

    /// Dispatches of every kind together.
    pub fn total_dispatches(&self) -> u64 {
        self.dispatches.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_each_counter_and_drops_idle_kinds() {
        let earlier = DeviceCounters {
            runs: 2,
            dispatches: [("matmul".to_string(), 10), ("copy".to_string(), 4)].into(),
            submits: 3,
            ahead_runs: 1,
            ..DeviceCounters::default()
        };
        let later = DeviceCounters {
            runs: 5,
            dispatches: [
                ("matmul".to_string(), 16),
                ("copy".to_string(), 4),
                ("attention".to_string(), 2),
            ]
            .into(),
            submits: 4,
            bytes_read: 64,
            ahead_runs: 3,
            recent_record_nanos: vec![9, 7, 3, 5, 4],
            ..DeviceCounters::default()
        };
        let step = later.since(&earlier);
        assert_eq!(step.runs, 3);
        assert_eq!(step.submits, 1);
        assert_eq!(step.bytes_read, 64);
        assert_eq!(step.ahead_runs, 2);
        assert_eq!(
            step.dispatches,
            [("attention".to_string(), 2), ("matmul".to_string(), 6)].into()
        );
        assert_eq!(step.total_dispatches(), 8);
        assert_eq!(step.recent_record_nanos, [3, 5, 4], "the last three runs");
        assert_eq!(step.median_record_nanos(), Some(4));
    }
}
