//! The machine's read bandwidth, the ceiling of memory-bound decode: persistent threads
//! each sum their share of a buffer far beyond the last-level cache with the widest
//! loads the CPU has (AVX2 where present), released together for each timed pass.
//! [`read_passes`] times passes; [`BandwidthProbe`] takes the best of a few between a
//! benchmark's repetitions, so a decode's GB/s is compared with what the machine read
//! in the same minutes (its bandwidth drifts by half between minutes on shared hosts),
//! without its buffer counting in the process's peak RSS. Decision 163 records the
//! size, the threads and the check against an independent reader; decision 197 the
//! buffer's 2 MiB pages.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

/// Bytes each [`BandwidthProbe::probe`] reads: 1 GiB, 32× a 32 MiB L3 (and 4× the
/// 256 MiB of the largest L3 on sale), so caches hold a negligible share of it.
pub const PROBE_BYTES: usize = 1 << 30;

/// Timed passes per probe; the probe keeps the best (the least disturbed by
/// neighbours, which only ever slow a pass down).
pub const PASSES_PER_PROBE: usize = 5;

/// Independent lanes [`sum`] adds into: four 256-bit registers, so the loop is bound
/// by loads, not by add chains.
const LANES: usize = 16;

/// Sum of `s` in [`LANES`] independent lanes (the compiler vectorizes it).
#[inline(always)]
fn sum(s: &[u64]) -> u64 {
    let mut acc = [0u64; LANES];
    let chunks = s.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(0u64, |a, &b| a.wrapping_add(b));
    for c in chunks {
        for l in 0..LANES {
            acc[l] = acc[l].wrapping_add(c[l]);
        }
    }
    acc.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

/// [`sum`] compiled for AVX2's 256-bit loads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(s: &[u64]) -> u64 {
    sum(s)
}

/// [`sum`] with the widest loads this CPU has.
fn sum_widest(s: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just now.
        return unsafe { sum_avx2(s) };
    }
    sum(s)
}

/// A buffer of `bytes` (rounded down to whole `u64`s), every page written, to read:
/// in 2 MiB pages where the OS gives them, as decode reads its packed weights
/// (decision 197), else on the heap.
pub fn touched_buffer(bytes: usize) -> ReadBuffer {
    let len = bytes / 8;
    let mut buf = match crate::backend::cpu::huge_pages::map(len * 8) {
        Ok((map, skip)) => ReadBuffer(Storage::Mapped { map, skip, len }),
        Err(_) => ReadBuffer(Storage::Heap(vec![0; len])),
    };
    for (i, v) in buf.values_mut().iter_mut().enumerate() {
        *v = i as u64;
    }
    buf
}

/// The values a probe reads, owned: in a huge-page map or on the heap.
pub struct ReadBuffer(Storage);

/// Where a [`ReadBuffer`]'s values live.
enum Storage {
    /// `len` values from byte `skip` (2 MiB-aligned) of a map advised for huge pages.
    Mapped {
        map: memmap2::MmapMut,
        skip: usize,
        len: usize,
    },
    /// Where no map could be made.
    Heap(Vec<u64>),
}

impl ReadBuffer {
    /// The values, to fill.
    fn values_mut(&mut self) -> &mut [u64] {
        match &mut self.0 {
            Storage::Mapped { map, skip, len } => {
                bytemuck::cast_slice_mut(&mut map[*skip..*skip + *len * 8])
            }
            Storage::Heap(v) => v,
        }
    }
}

impl std::ops::Deref for ReadBuffer {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        match &self.0 {
            Storage::Mapped { map, skip, len } => {
                bytemuck::cast_slice(&map[*skip..*skip + *len * 8])
            }
            Storage::Heap(v) => v,
        }
    }
}

/// GB/s (10⁹ bytes/s) of each of `passes` passes in which `threads` threads (at least
/// one), started once, sum equal shares of `buf`. A pass is timed from the barrier
/// that releases every thread to the one the last thread reaches, so thread start-up
/// and scheduling between passes are not counted.
pub fn read_passes(buf: &[u64], threads: usize, passes: usize) -> Vec<f64> {
    let threads = threads.max(1);
    let share = buf.len().div_ceil(threads).max(1);
    let parts: Vec<&[u64]> = buf.chunks(share).collect();
    let (start, end) = (Barrier::new(parts.len() + 1), Barrier::new(parts.len() + 1));
    let bytes = std::mem::size_of_val(buf) as f64;
    std::thread::scope(|s| {
        for &part in &parts {
            let (start, end) = (&start, &end);
            s.spawn(move || {
                for _ in 0..passes {
                    start.wait();
                    black_box(sum_widest(black_box(part)));
                    end.wait();
                }
            });
        }
        (0..passes)
            .map(|_| {
                start.wait();
                let t0 = Instant::now();
                end.wait();
                bytes / t0.elapsed().as_secs_f64() / 1e9
            })
            .collect()
    })
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

    /// Measures once: the best of [`PASSES_PER_PROBE`] passes over a freshly written
    /// buffer, after one untimed pass.
    pub fn probe(&mut self) {
        if let Some(peak) = super::env::peak_rss_bytes() {
            self.peak_before = self.peak_before.max(peak);
        }
        let buf = touched_buffer(self.bytes);
        let passes = read_passes(&buf, self.threads, PASSES_PER_PROBE + 1);
        drop(buf);
        reset_peak_rss();
        self.gb_s
            .push(passes[1..].iter().copied().fold(0.0, f64::max));
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
            let gb_s = read_passes(&buf, threads, 1)[0];
            assert!(gb_s.is_finite() && gb_s > 0.0, "{threads} threads: {gb_s}");
        }
    }

    #[test]
    fn a_touched_buffer_holds_every_value_in_order() {
        for bytes in [0, 7, 8, 4 << 20, (4 << 20) + 12] {
            let buf = touched_buffer(bytes);
            assert_eq!(buf.len(), bytes / 8);
            assert!(buf.iter().enumerate().all(|(i, &v)| v == i as u64));
        }
    }

    #[test]
    fn persistent_threads_time_every_pass_and_sum_every_value() {
        let buf = touched_buffer(1 << 20);
        for threads in [1, 2, 5] {
            let passes = read_passes(&buf, threads, 4);
            assert_eq!(passes.len(), 4);
            assert!(
                passes.iter().all(|g| g.is_finite() && *g > 0.0),
                "{passes:?}"
            );
        }
        assert!(read_passes(&buf, 2, 0).is_empty());
        // The vectorized sum misses no value, tail included.
        for len in [0, 1, 15, 16, 17, 1000] {
            let values: Vec<u64> = (0..len).map(|i| i * 3 + 1).collect();
            let want = values.iter().sum::<u64>();
            assert_eq!(sum_widest(&values), want, "len {len}");
            assert_eq!(sum(&values), want, "len {len}");
        }
    }
}
