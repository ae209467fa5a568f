//! GPU time per dispatch kind for `switchyard bench --profile`, where the adapter can
//! write timestamps inside a compute pass (`TIMESTAMP_QUERY_INSIDE_PASSES`): while the
//! backend's [`OpProfile`] is on, a partition run writes a timestamp before its first
//! dispatch and after each one, resolves them in the same submit, and reads them back
//! after the step (one more wait, in profiling runs only). Each dispatch's time is
//! recorded under its kind, so the profile's table says how the device's time splits
//! between products, attention, norms and the rest; the time between the first and the
//! last timestamp is the run's.

use std::sync::Arc;

use super::device::Gpu;
use crate::backend::{BackendError, OpLabel, OpProfile};

/// Most timestamps one query set holds (wgpu's limit).
const MAX_QUERIES: u32 = wgpu::QUERY_SET_MAX_QUERIES;

/// The timestamps of one partition's runs.
pub(super) struct Timer {
    profile: Arc<OpProfile>,
    /// Made at the first profiled run, for that many dispatches.
    queries: Option<Queries>,
    /// The kind of each dispatch of the run being recorded, in order.
    kinds: Vec<&'static str>,
    /// Rows the partition evaluates (the profile keeps row counts apart).
    rows: usize,
}

/// A query set and the buffers its timestamps are resolved into and read from.
struct Queries {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    read: wgpu::Buffer,
    count: u32,
}

impl Timer {
    /// A timer recording into `profile` runs of `rows` rows (the backend has a profile
    /// only where the adapter writes timestamps inside passes).
    pub fn new(profile: Option<Arc<OpProfile>>, rows: usize) -> Option<Timer> {
        Some(Timer {
            profile: profile?,
            queries: None,
            kinds: Vec::new(),
            rows,
        })
    }

    /// Starts a run of `dispatches` dispatches: whether it is timed (the profile is on
    /// and a query set holds them).
    pub fn start(&mut self, gpu: &Gpu, dispatches: usize) -> bool {
        let count = dispatches as u32 + 1;
        if !self.profile.enabled() || count > MAX_QUERIES {
            return false;
        }
        if self.queries.as_ref().is_none_or(|q| q.count < count) {
            let bytes = count as usize * 8;
            self.queries = Some(Queries {
                set: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("dispatch timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count,
                }),
                resolved: gpu.query_resolve_buffer(bytes),
                read: gpu.readback("dispatch timestamps", bytes),
                count,
            });
        }
        self.kinds.clear();
        true
    }

    /// Writes the timestamp before the first dispatch.
    pub fn begin(&self, pass: &mut wgpu::ComputePass<'_>) {
        if let Some(q) = &self.queries {
            pass.write_timestamp(&q.set, 0);
        }
    }

    /// Writes the timestamp after a dispatch of `kind`.
    pub fn after(&mut self, pass: &mut wgpu::ComputePass<'_>, kind: &'static str) {
        if let Some(q) = &self.queries {
            self.kinds.push(kind);
            pass.write_timestamp(&q.set, self.kinds.len() as u32);
        }
    }

    /// Resolves the run's timestamps and copies them where the host reads them.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        if let Some(q) = &self.queries {
            let n = self.kinds.len() as u32 + 1;
            encoder.resolve_query_set(&q.set, 0..n, &q.resolved, 0);
            encoder.copy_buffer_to_buffer(&q.resolved, 0, &q.read, 0, u64::from(n) * 8);
        }
    }

    /// Waits for the run, reads its timestamps and adds each dispatch's time to the
    /// profile under its kind.
    pub fn record(&self, gpu: &Gpu) -> Result<(), BackendError> {
        let Some(q) = &self.queries else {
            return Ok(());
        };
        let n = self.kinds.len() + 1;
        let bytes = gpu.map_read(&q.read, n * 8)?;
        let ticks: &[u64] = bytes.view();
        let period = f64::from(gpu.queue.get_timestamp_period());
        let time = |from: u64, to: u64| {
            std::time::Duration::from_nanos((to.saturating_sub(from) as f64 * period) as u64)
        };
        let times: Vec<_> = ticks.windows(2).map(|w| time(w[0], w[1])).collect();
        let labels: Vec<OpLabel> = self
            .kinds
            .iter()
            .map(|kind| OpLabel {
                op: (*kind).to_string(),
                weight_bytes: 0,
                macs: 0,
            })
            .collect();
        let total = time(ticks[0], ticks[n - 1]);
        self.profile.record(self.rows, total, &labels, &times);
        Ok(())
    }
}
