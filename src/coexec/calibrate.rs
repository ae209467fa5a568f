//! Calibration of the row-split ratio ρ under contention: time the real concurrent
//! split at every point of a fixed grid and keep the fastest.
//!
//! **Invariant:** ρ is only ever chosen from measured concurrent times, never composed
//! from solo rates. Under co-execution both units slow down (they share memory
//! bandwidth), so solo rates overstate what splitting gains; the grid includes ρ = 0,
//! so "do not split" wins whenever splitting does not pay.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Serialize;

use crate::backend::BackendId;
use crate::graph::DType;

/// The candidate shares of rows for the first backend, in permille: 0, 0.05, …, 0.50.
pub const GRID_PERMILLE: [u16; 11] = [0, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500];

/// The largest rows bucket; a matmul with more rows shares it.
const TOP_ROWS_BUCKET: u32 = 1 << 31;

/// What one ratio is calibrated for: a matmul shape class on a backend pair. Rows are
/// bucketed to the next power of two, matching the padded prefill chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SplitKey {
    rows_bucket: u32,
    k: u32,
    n: u32,
    dtype: DType,
    pair: (BackendId, BackendId),
}

impl SplitKey {
    /// The key of an `m × k` by `k × n` matmul with `dtype` weights whose first rows run
    /// on `pair.0` and the rest on `pair.1`.
    pub fn new(m: u32, k: u32, n: u32, dtype: DType, pair: (BackendId, BackendId)) -> SplitKey {
        SplitKey {
            rows_bucket: rows_bucket(m),
            k,
            n,
            dtype,
            pair,
        }
    }

    /// A key from a stored bucket; `None` unless the bucket is a power of two.
    pub(super) fn from_bucket(
        rows_bucket: u32,
        k: u32,
        n: u32,
        dtype: DType,
        pair: (BackendId, BackendId),
    ) -> Option<SplitKey> {
        rows_bucket.is_power_of_two().then_some(SplitKey {
            rows_bucket,
            k,
            n,
            dtype,
            pair,
        })
    }

    /// Rows bucket: the next power of two of M (1 for M = 0, at most 2^31).
    pub fn rows_bucket(&self) -> u32 {
        self.rows_bucket
    }

    /// Inner dimension of the matmul.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// Output columns of the matmul.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// Weight dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The backend running the first ρ·M rows, then the one running the rest.
    pub fn pair(&self) -> (BackendId, BackendId) {
        self.pair
    }
}

/// The rows bucket of a matmul with `m` rows: the next power of two, saturating at 2^31.
pub fn rows_bucket(m: u32) -> u32 {
    m.checked_next_power_of_two().unwrap_or(TOP_ROWS_BUCKET)
}

/// The outcome of calibrating one key: the chosen ratio and the median concurrent time
/// measured at every grid point (kept for `--json` and for the persisted table).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Calibration {
    key: SplitKey,
    rho_permille: u16,
    per_point: Vec<(u16, Duration)>,
}

impl Calibration {
    /// A calibration read back from storage; the table checks the values first.
    pub(super) fn from_parts(
        key: SplitKey,
        rho_permille: u16,
        per_point: Vec<(u16, Duration)>,
    ) -> Calibration {
        Calibration {
            key,
            rho_permille,
            per_point,
        }
    }

    /// The key this calibration is for.
    pub fn key(&self) -> &SplitKey {
        &self.key
    }

    /// The chosen share of rows for the first backend, in permille (0 = do not split).
    pub fn rho_permille(&self) -> u16 {
        self.rho_permille
    }

    /// Median measured time per grid point, in grid order.
    pub fn per_point(&self) -> &[(u16, Duration)] {
        &self.per_point
    }
}

/// Calibrates `key`: calls `measure(ρ‰)` `reps` times at each point of
/// [`GRID_PERMILLE`], takes each point's median, and picks the lowest (ties go to the
/// smaller ρ, so ρ = 0 wins unless splitting is strictly faster).
///
/// `measure` must run the real concurrent split at that ratio behind an eager boundary
/// (ρ = 0: everything on the second backend) and return its wall time. Points are
/// visited in rounds, ascending then descending, so a slow drift (heat, another
/// process) spreads over all points instead of biasing one end of the grid.
/// `progress(done, total)` is called after every measurement. The first error from
/// `measure` stops calibration and is returned.
pub fn calibrate<E>(
    key: SplitKey,
    reps: NonZeroU32,
    mut measure: impl FnMut(u16) -> Result<Duration, E>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Calibration, E> {
    let n_reps = reps.get() as usize;
    let total = n_reps * GRID_PERMILLE.len();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n_reps); GRID_PERMILLE.len()];
    let mut done = 0;
    for round in 0..n_reps {
        for step in 0..GRID_PERMILLE.len() {
            let point_idx = if round % 2 == 0 {
                step
            } else {
                GRID_PERMILLE.len() - 1 - step
            };
            samples[point_idx].push(measure(GRID_PERMILLE[point_idx])?);
            done += 1;
            progress(done, total);
        }
    }
    let per_point: Vec<(u16, Duration)> = GRID_PERMILLE
        .iter()
        .zip(samples.iter_mut())
        .map(|(&rho, times)| (rho, median(times)))
        .collect();
    let rho_permille = fastest_point(&per_point);
    log::debug!(
        "calibrated {key:?}: rho {rho_permille}‰ ({})",
        per_point
            .iter()
            .map(|(rho, t)| format!("{rho}‰ {:.3} ms", t.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Calibration {
        key,
        rho_permille,
        per_point,
    })
}

/// The grid point with the lowest time; the earlier (smaller ρ) point on a tie.
fn fastest_point(per_point: &[(u16, Duration)]) -> u16 {
    let mut best: Option<(u16, Duration)> = None;
    for &(rho, time) in per_point {
        if best.is_none_or(|(_, best_time)| time < best_time) {
            best = Some((rho, time));
        }
    }
    best.map_or(0, |(rho, _)| rho)
}

/// Median of `times` (mean of the middle two for an even count; zero when empty).
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let mid = times.len() / 2;
    match times.len() {
        0 => Duration::ZERO,
        len if len % 2 == 1 => times[mid],
        _ => times[mid - 1] + (times[mid] - times[mid - 1]) / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_bucket_is_the_next_power_of_two() {
        assert_eq!(rows_bucket(0), 1);
        assert_eq!(rows_bucket(1), 1);
        assert_eq!(rows_bucket(33), 64);
        assert_eq!(rows_bucket(64), 64);
        assert_eq!(rows_bucket(u32::MAX), 1 << 31);
    }

    #[test]
    fn median_handles_odd_even_and_empty() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(9), ms(1), ms(5)]), ms(5));
        assert_eq!(median(&mut [ms(4), ms(2)]), ms(3));
        assert_eq!(median(&mut []), Duration::ZERO);
    }

    #[test]
    fn stored_buckets_must_be_powers_of_two() {
        let pair = (BackendId::CPU, BackendId::GPU);
        assert!(SplitKey::from_bucket(48, 8, 8, DType::F32, pair).is_none());
        let key = SplitKey::from_bucket(64, 8, 8, DType::F32, pair);
        assert_eq!(key, Some(SplitKey::new(33, 8, 8, DType::F32, pair)));
    }
}
