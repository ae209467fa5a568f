//! The machine's DRAM read bandwidth, the ceiling of memory-bound decode: threads
//! (default 2, like the decode benchmarks; `SWITCHYARD_BW_THREADS` to change) each
//! sum their share of a 1 GiB buffer (far beyond L3), 10 passes after one warm-up
//! pass; prints the best and median pass in GB/s (10⁹ bytes/s).
//!
//! Run: `cargo bench --bench read_bandwidth`.

use std::hint::black_box;
use std::time::Instant;

/// Buffer size: 1 GiB of u64.
const BYTES: usize = 1 << 30;
/// Timed passes.
const PASSES: usize = 10;

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

fn main() {
    let threads: usize = std::env::var("SWITCHYARD_BW_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
        .max(1);
    let buf: Vec<u64> = (0..BYTES / 8).map(|i| i as u64).collect();
    let share = buf.len().div_ceil(threads);
    let mut gb_s = Vec::with_capacity(PASSES);
    for pass in 0..=PASSES {
        let start = Instant::now();
        std::thread::scope(|s| {
            for part in buf.chunks(share) {
                s.spawn(move || black_box(sum(black_box(part))));
            }
        });
        if pass > 0 {
            gb_s.push(BYTES as f64 / start.elapsed().as_secs_f64() / 1e9);
        }
    }
    gb_s.sort_by(f64::total_cmp);
    println!(
        "read bandwidth, {threads} threads, 1 GiB buffer, {PASSES} passes: best {:.1} GB/s, median {:.1} GB/s",
        gb_s[PASSES - 1],
        gb_s[PASSES / 2]
    );
}
