//! The machine's read bandwidth, the ceiling of memory-bound decode: threads each sum
//! their share of a buffer far beyond the last-level cache. [`read_gb_s`] times one
//! pass; [`BandwidthProbe`] takes such passes between a benchmark's repetitions, so a
//! decode's GB/s is compared with what the machine read in the same minutes (its
//! bandwidth drifts by half between minutes on shared hosts), without its buffer
//! counting in the process's peak RSS.

use std::hint::black_box;
use std::time::Instant;

/// Bytes each [`BandwidthProbe::probe`] reads: 8× a 32 MiB L3, so caches hold little of it.
pub const PROBE_BYTES: usize = 256 << 20;

/// Timed passes per probe; the probe keeps their median.
const PASSES_PER_PROBE: usize = 3;

/// Sum of `s` in eight independent lanes (the compiler vectorizes it), so the loop is
/// bound by loads, not by one add chain.
fn sum(s: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in s.chunks_exact(8) {
        for l in 0..8 {
            acc[l] = acc[l].wrapping_add(c[l]);
        }
    }
    acc.iter().fold(0, |a, &b| a.wrapping_add(b))
}

/// A buffer of `bytes` (rounded down to whole `u64`s), every page written, to read.
pub fn touched_buffer(bytes: usize) -> Vec<u64> {
    (0..bytes / 8).map(|i| i as u64).collect()
}

/// GB/s (10⁹ bytes/s) of one pass of `threads` threads (at least one) summing equal
/// shares of `buf`.
pub fn read_gb_s(buf: &[u64], threads: usize) -> f64 {
    let share = buf.len().div_ceil(threads.max(1)).max(1);
    let start = Instant::now();
    std::thread::scope(|s| {
        for part in buf.chunks(share) {
            s.spawn(move || black_box(sum(black_box(part))));
        }
    });
    std::mem::size_of_val(buf) as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// Read-bandwidth probes taken between a benchmark's repetitions. Each allocates its
/// buffer, reads it, frees it and resets the kernel's peak-RSS mark, keeping the
/// highest mark seen before, so [`Self::peak_rss_bytes`] is the benchmark's own peak.
pub struct BandwidthProbe {
    threads: usize,
    bytes: usize,
    gb_s: Vec<f64>,
    peak_before: u64,
}

impl BandwidthProbe {
    /// A probe reading `bytes` with `threads` threads per pass; `None` where this OS
    /// cannot reset the peak-RSS mark (Linux's `/proc/self/clear_refs`), since the
    /// buffer would then inflate the peak RSS a benchmark reports.
    pub fn new(threads: usize, bytes: usize) -> Option<BandwidthProbe> {
        let peak_before = super::env::peak_rss_bytes()?;
        reset_peak_rss().then_some(BandwidthProbe {
            threads: threads.max(1),
            bytes,
            gb_s: Vec::new(),
            peak_before,
        })
    }

    /// Measures once: the median of a few passes over a freshly written buffer.
    pub fn probe(&mut self) {
        if let Some(peak) = super::env::peak_rss_bytes() {
            self.peak_before = self.peak_before.max(peak);
        }
        let buf = touched_buffer(self.bytes);
        let mut passes: Vec<f64> = (0..PASSES_PER_PROBE)
            .map(|_| read_gb_s(&buf, self.threads))
            .collect();
        drop(buf);
        reset_peak_rss();
        passes.sort_by(f64::total_cmp);
        self.gb_s.push(passes[PASSES_PER_PROBE / 2]);
    }

    /// Each probe's GB/s, in order.
    pub fn results(&self) -> &[f64] {
        &self.gb_s
    }

    /// The median probe's GB/s; `None` before any probe.
    pub fn median_gb_s(&self) -> Option<f64> {
        let mut sorted = self.gb_s.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied()
    }

    /// The process's peak RSS outside the probes' buffers.
    pub fn peak_rss_bytes(&self) -> u64 {
        super::env::peak_rss_bytes().map_or(self.peak_before, |now| now.max(self.peak_before))
    }
}

/// Resets this process's peak-RSS mark (`VmHWM`) to its current RSS; whether it could.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_reads_at_a_positive_finite_rate_with_any_thread_count() {
        let buf = touched_buffer(4 << 20);
        for threads in [0, 1, 3] {
            let gb_s = read_gb_s(&buf, threads);
            assert!(gb_s.is_finite() && gb_s > 0.0, "{threads} threads: {gb_s}");
        }
    }
}
