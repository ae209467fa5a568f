//! Calibration of the row-split ratio against a simulated backend pair of known speed,
//! timed on a fake clock: the lowest measured concurrent time wins, ρ = 0 included.

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use switchyard::backend::BackendId;
use switchyard::coexec::{calibrate, timed, Calibration, FakeClock, SplitKey, GRID_PERMILLE};
use switchyard::graph::DType;

const PAIR: (BackendId, BackendId) = (BackendId::CPU, BackendId::GPU);

/// A CPU+GPU pair splitting `work` rows: solo rates in rows per millisecond, the
/// fraction of each unit's rate lost while both run (shared bandwidth), and a fixed
/// cost for the eager boundary and the join whenever the split is used.
#[derive(Clone, Copy, Debug)]
struct SimPair {
    work: f64,
    cpu_rate: f64,
    gpu_rate: f64,
    cpu_contention: f64,
    gpu_contention: f64,
    split_overhead_ms: f64,
}

impl SimPair {
    /// Concurrent wall time at ρ: the slower half, plus the split's fixed cost.
    fn time(&self, rho_permille: u16) -> Duration {
        let rho = f64::from(rho_permille) / 1000.0;
        let ms = if rho_permille == 0 {
            self.work / self.gpu_rate
        } else {
            let cpu = rho * self.work / (self.cpu_rate * (1.0 - self.cpu_contention));
            let gpu = (1.0 - rho) * self.work / (self.gpu_rate * (1.0 - self.gpu_contention));
            cpu.max(gpu) + self.split_overhead_ms
        };
        Duration::from_secs_f64(ms / 1e3)
    }

    /// The ratio that composing solo rates predicts (what calibration must not use).
    fn solo_rate_rho(&self) -> f64 {
        self.cpu_rate / (self.cpu_rate + self.gpu_rate)
    }

    /// The grid point with the lowest modelled time; the smaller ρ on a tie.
    fn best_on_grid(&self) -> u16 {
        let mut best = GRID_PERMILLE[0];
        for rho in GRID_PERMILLE {
            if self.time(rho) < self.time(best) {
                best = rho;
            }
        }
        best
    }
}

fn key() -> SplitKey {
    SplitKey::new(512, 576, 1536, DType::Q4_1, PAIR)
}

fn reps(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// Calibrates against `pair`, each measurement "running" on the fake clock.
fn calibrate_sim(pair: SimPair, n_reps: u32) -> Calibration {
    let clock = FakeClock::new();
    let measure = |rho| Ok::<_, Infallible>(timed(&clock, || clock.advance(pair.time(rho))).1);
    let Ok(calibration) = calibrate(key(), reps(n_reps), measure, &mut |_, _| {});
    calibration
}

const SPLIT_PAYS: SimPair = SimPair {
    work: 1000.0,
    cpu_rate: 45.0,
    gpu_rate: 100.0,
    cpu_contention: 0.0,
    gpu_contention: 0.0,
    split_overhead_ms: 0.2,
};

#[test]
fn calibration_picks_the_grid_point_with_the_lowest_concurrent_time() {
    let calibration = calibrate_sim(SPLIT_PAYS, 3);
    assert_eq!(calibration.rho_permille(), 300);
    assert_eq!(calibration.rho_permille(), SPLIT_PAYS.best_on_grid());
    let points: Vec<u16> = calibration.per_point().iter().map(|p| p.0).collect();
    assert_eq!(points, GRID_PERMILLE);
    for &(rho, time) in calibration.per_point() {
        assert_eq!(time, SPLIT_PAYS.time(rho), "rho {rho}");
    }
    assert_eq!(calibration.key(), &key());
}

#[test]
fn calibration_keeps_rho_zero_when_splitting_does_not_pay() {
    let slow_cpu = SimPair {
        cpu_rate: 3.0,
        split_overhead_ms: 0.5,
        ..SPLIT_PAYS
    };
    let heavy_contention = SimPair {
        cpu_contention: 0.5,
        gpu_contention: 0.45,
        ..SPLIT_PAYS
    };
    for (case, pair) in [
        ("slow CPU", slow_cpu),
        ("heavy contention", heavy_contention),
    ] {
        assert_eq!(calibrate_sim(pair, 1).rho_permille(), 0, "{case}");
    }
}

#[test]
fn calibration_follows_contended_times_not_solo_rates() {
    let contended = SimPair {
        cpu_contention: 0.35,
        gpu_contention: 0.15,
        ..SPLIT_PAYS
    };
    let rho = calibrate_sim(contended, 1).rho_permille();
    assert_eq!(rho, contended.best_on_grid());
    let solo = (contended.solo_rate_rho() * 20.0).round() as u16 * 50;
    assert_eq!(solo, 300);
    assert!(rho < solo, "calibrated {rho}‰, solo rates predict {solo}‰");
}

#[test]
fn ties_go_to_the_smaller_ratio() {
    let measure = |_| Ok::<_, Infallible>(Duration::from_millis(5));
    let calibration = calibrate(key(), reps(2), measure, &mut |_, _| {});
    assert_eq!(calibration.map(|c| c.rho_permille()), Ok(0));
}

#[test]
fn the_median_of_repetitions_rejects_outliers() {
    let mut calls_at = [0usize; 11];
    let measure = |rho: u16| {
        let point_idx = usize::from(rho / 50);
        calls_at[point_idx] += 1;
        let first_call = calls_at[point_idx] == 1;
        let time = match (rho, first_call) {
            (300, true) => SPLIT_PAYS.time(rho) * 10,
            (500, true) => Duration::from_micros(1),
            _ => SPLIT_PAYS.time(rho),
        };
        Ok::<_, Infallible>(time)
    };
    let calibration = calibrate(key(), reps(3), measure, &mut |_, _| {});
    assert_eq!(calibration.map(|c| c.rho_permille()), Ok(300));
}

#[test]
fn points_are_measured_in_alternating_rounds_with_progress() {
    let mut order = Vec::new();
    let mut progress = Vec::new();
    let measure = |rho| {
        order.push(rho);
        Ok::<_, Infallible>(SPLIT_PAYS.time(rho))
    };
    let calibration = calibrate(key(), reps(3), measure, &mut |done, total| {
        progress.push((done, total))
    });
    assert!(calibration.is_ok());
    let descending: Vec<u16> = GRID_PERMILLE.iter().rev().copied().collect();
    assert_eq!(
        order,
        [&GRID_PERMILLE[..], &descending, &GRID_PERMILLE].concat()
    );
    let expected: Vec<(usize, usize)> = (1..=33).map(|done| (done, 33)).collect();
    assert_eq!(progress, expected);
}

#[test]
fn a_measurement_error_stops_calibration() {
    let mut measured = Vec::new();
    let measure = |rho| {
        measured.push(rho);
        if rho == 200 {
            Err(format!("split at {rho} failed"))
        } else {
            Ok(Duration::from_millis(1))
        }
    };
    let result = calibrate(key(), reps(2), measure, &mut |_, _| {});
    assert_eq!(result, Err("split at 200 failed".to_string()));
    assert_eq!(measured, [0, 50, 100, 150, 200]);
}

proptest! {
    #[test]
    fn calibration_always_picks_the_measured_minimum(
        cpu_rate in 1.0f64..200.0,
        gpu_rate in 1.0f64..200.0,
        cpu_contention in 0.0f64..0.6,
        gpu_contention in 0.0f64..0.6,
        split_overhead_ms in 0.0f64..3.0,
    ) {
        let pair = SimPair { work: 1000.0, cpu_rate, gpu_rate, cpu_contention, gpu_contention, split_overhead_ms };
        let calibration = calibrate_sim(pair, 1);
        prop_assert_eq!(calibration.rho_permille(), pair.best_on_grid());
        let best = calibration.per_point().iter().map(|p| p.1).min();
        let chosen = calibration.per_point().iter().find(|p| p.0 == calibration.rho_permille()).map(|p| p.1);
        prop_assert_eq!(chosen, best);
    }
}
