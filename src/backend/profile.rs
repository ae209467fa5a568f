//! Where a compiled partition's time goes, node by node, for `switchyard bench
//! --profile`. A backend that supports it times each node (or each group of nodes it
//! runs as one region) while profiling is on and adds the times here, grouped by the
//! partition's row count, so a decode step (one row) and a prompt chunk are never mixed.
//! Off, the cost is one relaxed atomic load per partition run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// What one timed region of a partition is: an op name, for products with the weight's
/// type and `[rows, columns]`, the weight bytes it reads per call (0 when it reads
/// none or only a few rows of one, as an embedding does) and its multiply-adds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct OpLabel {
    /// E.g. `attention`, `matmul q4_1 [1536, 576]`, `matmul ×3 q4_1 [960, 576]`.
    pub op: String,
    /// Weight bytes read per call.
    pub weight_bytes: u64,
    /// Multiply-adds per call (a product's activation rows × weight rows × columns;
    /// 0 for other ops), for GMAC/s beside a kernel set's limit.
    pub macs: u64,
}

/// One region's totals over the recorded runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpTime {
    /// The region.
    #[serde(flatten)]
    pub label: OpLabel,
    /// Calls over all recorded runs.
    pub calls: u64,
    /// Wall time of those calls.
    pub nanos: u64,
}

/// The recorded runs of partitions of one row count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowsProfile {
    /// Rows (tokens) a run evaluates.
    pub rows: usize,
    /// Partition runs recorded.
    pub runs: u64,
    /// Their total wall time, nodes and what lies between them.
    pub nanos: u64,
    /// Every region, slowest total first.
    pub ops: Vec<OpTime>,
}

impl RowsProfile {
    /// Time of the runs not inside any timed region (dispatch between nodes).
    pub fn outside_nanos(&self) -> u64 {
        let inside: u64 = self.ops.iter().map(|o| o.nanos).sum();
        self.nanos.saturating_sub(inside)
    }
}

/// Totals of one row count while recording.
#[derive(Default)]
struct Totals {
    runs: u64,
    nanos: u64,
    ops: HashMap<OpLabel, (u64, u64)>,
}

/// A node-time recorder shared by a backend's compiled partitions; off until
/// [`OpProfile::set_enabled`].
#[derive(Default)]
pub struct OpProfile {
    on: AtomicBool,
    totals: Mutex<HashMap<usize, Totals>>,
}

impl OpProfile {
    /// Turns recording on or off (runs already under way finish as they started).
    pub fn set_enabled(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Whether partitions should time their nodes now.
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Adds one partition run of `rows` rows that took `total`: region `i` labelled
    /// `labels[i]` took `times[i]` (the two of one length).
    pub fn record(&self, rows: usize, total: Duration, labels: &[OpLabel], times: &[Duration]) {
        debug_assert_eq!(labels.len(), times.len());
        let mut all = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let t = all.entry(rows).or_default();
        t.runs += 1;
        t.nanos += nanos(total);
        for (label, &time) in labels.iter().zip(times) {
            let (calls, ns) = match t.ops.get_mut(label) {
                Some(entry) => entry,
                None => t.ops.entry(label.clone()).or_default(),
            };
            *calls += 1;
            *ns += nanos(time);
        }
    }

    /// What was recorded since the last call, fewest rows first; recording starts over.
    pub fn take(&self) -> Vec<RowsProfile> {
        let all = std::mem::take(&mut *self.totals.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out: Vec<RowsProfile> = all
            .into_iter()
            .map(|(rows, t)| {
                let mut ops: Vec<OpTime> = t
                    .ops
                    .into_iter()
                    .map(|(label, (calls, nanos))| OpTime {
                        label,
                        calls,
                        nanos,
                    })
                    .collect();
                ops.sort_by(|a, b| b.nanos.cmp(&a.nanos).then(a.label.op.cmp(&b.label.op)));
                RowsProfile {
                    rows,
                    runs: t.runs,
                    nanos: t.nanos,
                    ops,
                }
            })
            .collect();
        out.sort_by_key(|p| p.rows);
        out
    }
}

/// `d` in nanoseconds, saturating (a run does not last 584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(op: &str, weight_bytes: u64) -> OpLabel {
        OpLabel {
            op: op.into(),
            weight_bytes,
            macs: 0,
        }
    }

    #[test]
    fn runs_add_up_by_row_count_and_take_starts_over() {
        let p = OpProfile::default();
        assert!(!p.enabled());
        p.set_enabled(true);
        assert!(p.enabled());
        let (mm, att) = (label("matmul q4_1 [8, 4]", 20), label("attention", 0));
        let us = Duration::from_micros;
        let labels = [mm.clone(), att.clone(), mm.clone()];
        p.record(1, us(100), &labels, &[us(30), us(10), us(40)]);
        p.record(1, us(90), &labels, &[us(20), us(20), us(40)]);
        p.record(16, us(500), &labels[..1], &[us(450)]);

        let got = p.take();
        assert_eq!(got.iter().map(|r| r.rows).collect::<Vec<_>>(), [1, 16]);
        let one = &got[0];
        assert_eq!((one.runs, one.nanos), (2, 190_000));
        let ops: Vec<(&str, u64, u64)> = one
            .ops
            .iter()
            .map(|o| (o.label.op.as_str(), o.calls, o.nanos))
            .collect();
        assert_eq!(
            ops,
            [("matmul q4_1 [8, 4]", 4, 130_000), ("attention", 2, 30_000)]
        );
        assert_eq!(one.outside_nanos(), 30_000);
        assert_eq!((got[1].runs, got[1].outside_nanos()), (1, 50_000));
        assert!(p.take().is_empty(), "take clears what it returned");
    }
}
