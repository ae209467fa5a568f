//! The machine's DRAM read bandwidth, the ceiling of memory-bound decode: persistent
//! threads (default 2, like the decode benchmarks; `SWITCHYARD_BW_THREADS` to change)
//! each sum their share of a 1 GiB buffer (far beyond L3), 10 passes after one warm-up
//! pass; prints the best and median pass in GB/s (10⁹ bytes/s). `switchyard bench`
//! runs the same probe (best of 5 passes) between its decode repetitions;
//! `scripts/read-bandwidth.c` is an independent reader to check it against.
//!
//! Run: `cargo bench --bench read_bandwidth`.

use switchyard::bench::bandwidth::{read_passes, touched_buffer};

/// Buffer size: 1 GiB.
const BYTES: usize = 1 << 30;
/// Timed passes.
const PASSES: usize = 10;

fn main() {
    let threads: usize = std::env::var("SWITCHYARD_BW_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
        .max(1);
    let buf = touched_buffer(BYTES);
    let mut gb_s = read_passes(&buf, threads, PASSES + 1).split_off(1);
    gb_s.sort_by(f64::total_cmp);
    println!(
        "read bandwidth, {threads} threads, 1 GiB buffer, {PASSES} passes: best {:.1} GB/s, median {:.1} GB/s",
        gb_s[PASSES - 1],
        gb_s[PASSES / 2]
    );
}
