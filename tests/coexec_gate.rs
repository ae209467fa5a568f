//! The no-regression gate against simulated arms of known speed on a fake clock:
//! convergence, no flapping under noise, falling back to the baseline, re-probes priced
//! so that a far slower arm cannot dominate the mean, abandoning such an arm in
//! probation, and the probation-then-lock behaviour under memory pressure.

use std::time::Duration;

use proptest::prelude::*;
use switchyard::coexec::{
    timed, ArmId, Choice, Clock, Decision, FakeClock, Gate, GateConfig, GateError, MemoryPressure,
    Reason,
};

const BASELINE: ArmId = ArmId(0);
const SPLIT: ArmId = ArmId(1);
const GPU: ArmId = ArmId(2);
/// Calls in one probation of three arms with the paper's settings (2 + 5 per arm).
const PROBATION_CALLS: usize = 21;

fn ms(value: f64) -> Duration {
    Duration::from_secs_f64(value / 1e3)
}

fn gate(memory_pressure: MemoryPressure) -> Gate {
    gate_of(memory_pressure)
}

/// The three-arm gate with the default settings.
fn gate_of(memory_pressure: MemoryPressure) -> Gate {
    let arms = ["baseline", "split", "gpu"].map(String::from).to_vec();
    Gate::new(arms, 0, GateConfig::fusionml(memory_pressure)).unwrap()
}

/// Deterministic noise: a SplitMix64 stream scaled to ±`spread` around 1.
struct Noise {
    state: u64,
    spread: f64,
}

impl Noise {
    fn new(seed: u64, spread: f64) -> Noise {
        Noise {
            state: seed,
            spread,
        }
    }

    fn apply(&mut self, time: Duration) -> Duration {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        time.mul_f64(1.0 + self.spread * (2.0 * unit - 1.0))
    }
}

/// Runs `n_calls` calls: each chosen arm "runs" by advancing the fake clock by
/// `time_of(call_idx, arm)`, and the gate records what the clock measured.
fn drive(
    gate: &mut Gate,
    clock: &FakeClock,
    first_call: usize,
    n_calls: usize,
    mut time_of: impl FnMut(usize, ArmId) -> Duration,
) -> Vec<Choice> {
    (first_call..first_call + n_calls)
        .map(|call_idx| {
            let choice = gate.choose();
            let ((), took) = timed(clock, || clock.advance(time_of(call_idx, choice.arm)));
            gate.record(choice.arm, took).unwrap();
            choice
        })
        .collect()
}

fn speeds(baseline: f64, split: f64, gpu: f64) -> impl Fn(ArmId) -> Duration {
    move |arm| ms([baseline, split, gpu][arm.0])
}

fn switches(gate: &Gate) -> Vec<(ArmId, ArmId)> {
    gate.decisions()
        .entries()
        .filter_map(|d| match d {
            Decision::Switched { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_gate_converges_to_the_fastest_arm() {
    let mut gate = gate(MemoryPressure::Absent);
    let clock = FakeClock::new();
    let speed = speeds(10.0, 7.0, 12.0);
    let choices = drive(&mut gate, &clock, 0, 1000, |_, arm| speed(arm));
    let probation = &choices[..PROBATION_CALLS];
    assert!(probation
        .iter()
        .all(|c| matches!(c.reason, Reason::Warmup | Reason::Probation)));
    for arm in [BASELINE, SPLIT, GPU] {
        assert_eq!(probation.iter().filter(|c| c.arm == arm).count(), 7);
    }
    assert_eq!(gate.active(), Some(SPLIT));
    let after = &choices[PROBATION_CALLS..];
    assert!(after
        .iter()
        .filter(|c| c.arm != SPLIT)
        .all(|c| c.reason == Reason::Reprobe));
    // What the probes cost beyond running the split every time stays inside the
    // regret budget (2 % of the active arm's time).
    let extra: f64 = after.iter().map(|c| [10.0, 7.0, 12.0][c.arm.0] - 7.0).sum();
    let budget = 0.02 * 7.0 * after.len() as f64;
    assert!(
        extra > 0.0 && extra <= budget,
        "{extra} ms over {budget} ms"
    );
    assert_eq!(gate.n_switches(), 0);
}

#[test]
fn reprobes_are_spaced_by_what_they_cost() {
    let mut gate = gate(MemoryPressure::Absent);
    let clock = FakeClock::new();
    let speed = speeds(10.0, 7.0, 12.0);
    let choices = drive(&mut gate, &clock, 0, PROBATION_CALLS + 400, |_, arm| {
        speed(arm)
    });
    let probes_of = |arm: ArmId| -> Vec<usize> {
        (PROBATION_CALLS..choices.len())
            .filter(|&i| choices[i].reason == Reason::Reprobe && choices[i].arm == arm)
            .collect()
    };
    // (arms − 1)·(r − 1) / 2 %: the baseline (r = 10/7) every 43 calls, the GPU
    // (r = 12/7) every 72.
    for (arm, interval) in [(BASELINE, 43), (GPU, 72)] {
        assert_eq!(gate.reprobe_interval(arm, SPLIT), interval);
        let probes = probes_of(arm);
        assert!(probes.len() >= 4, "{arm:?}: {probes:?}");
        assert!(
            probes.windows(2).all(|w| (w[1] - w[0]) as u64 == interval),
            "{arm:?}: {probes:?}"
        );
    }
    // Arms about as fast as the active one are probed at the paper's densest rate: one
    // call in 10, each of the two inactive arms every 20.
    let mut gate = gate_of(MemoryPressure::Absent);
    let equal = drive(
        &mut gate,
        &FakeClock::new(),
        0,
        PROBATION_CALLS + 200,
        |_, _| ms(10.0),
    );
    let probes = equal[PROBATION_CALLS..]
        .iter()
        .filter(|c| c.reason == Reason::Reprobe)
        .count();
    assert_eq!(probes, 20);
}

#[test]
fn a_hundredfold_slower_arm_is_abandoned_in_probation_and_costs_under_two_percent() {
    let arms = ["gpu", "cpu"].map(String::from).to_vec();
    let mut gate = Gate::new(arms, 0, GateConfig::fusionml(MemoryPressure::Absent)).unwrap();
    let clock = FakeClock::new();
    // The baseline is a software GPU: 1 s a call against the CPU's 8 ms (2 s to compile).
    let mut calls = [0usize; 2];
    let choices = drive(&mut gate, &clock, 0, 3000, |_, arm| {
        calls[arm.0] += 1;
        match (arm.0, calls[arm.0]) {
            (0, 1) => ms(2000.0),
            (0, _) => ms(1000.0),
            _ => ms(8.0),
        }
    });
    let abandoned: Vec<ArmId> = gate
        .decisions()
        .entries()
        .filter_map(|d| match d {
            Decision::Abandoned { arm, .. } => Some(*arm),
            _ => None,
        })
        .collect();
    assert_eq!(abandoned, [BASELINE]);
    assert_eq!(gate.active(), Some(ArmId(1)));
    let on_gpu: Vec<usize> = (0..choices.len())
        .filter(|&i| choices[i].arm == BASELINE)
        .collect();
    assert_eq!(on_gpu, [0, 3], "two probation calls, no re-probe in 3000");
    assert!(gate.reprobe_interval(BASELINE, ArmId(1)) > 3000);
    // After warm-up (the probation), the mean is the CPU's.
    let after = &choices[14..];
    assert!(after.iter().all(|c| c.arm == ArmId(1)));
}

#[test]
fn when_the_active_arm_slows_a_slow_arm_is_probed_sooner_and_can_win() {
    let arms = ["gpu", "cpu"].map(String::from).to_vec();
    let mut gate = Gate::new(arms, 0, GateConfig::fusionml(MemoryPressure::Absent)).unwrap();
    let clock = FakeClock::new();
    let change_at = 2000;
    drive(&mut gate, &clock, 0, 2200, |call_idx, arm| match arm.0 {
        0 => ms(100.0),
        _ if call_idx < change_at => ms(10.0),
        // A second process now loads the CPU.
        _ => ms(150.0),
    });
    assert_eq!(gate.active(), Some(BASELINE));
    let back_at = gate
        .timeline()
        .entries()
        .find(|r| r.call_idx as usize >= change_at && r.active_after == Some(BASELINE))
        .map(|r| r.call_idx as usize);
    assert!(
        back_at.is_some_and(|c| c < change_at + 40),
        "moved at {back_at:?}"
    );
}

#[test]
fn the_gate_does_not_flap_under_two_percent_noise() {
    for (case, (baseline, split, gpu), winner) in [
        ("split clearly fastest", (10.0, 7.0, 12.0), SPLIT),
        ("all arms equal", (10.0, 10.0, 10.0), BASELINE),
        ("split 4% faster", (10.0, 9.6, 12.0), SPLIT),
    ] {
        for seed in 0..8 {
            let mut gate = gate(MemoryPressure::Absent);
            let clock = FakeClock::new();
            let speed = speeds(baseline, split, gpu);
            let mut noise = Noise::new(seed, 0.02);
            drive(&mut gate, &clock, 0, 5000, |_, arm| noise.apply(speed(arm)));
            assert_eq!(gate.active(), Some(winner), "{case}, seed {seed}");
            assert_eq!(
                gate.n_switches(),
                0,
                "{case}, seed {seed}: {:?}",
                switches(&gate)
            );
        }
    }
}

#[test]
fn the_baseline_holds_when_another_arm_wins_by_less_than_the_hysteresis() {
    let mut gate = gate(MemoryPressure::Absent);
    let clock = FakeClock::new();
    let speed = speeds(10.0, 9.8, 12.0);
    drive(&mut gate, &clock, 0, 2000, |_, arm| speed(arm));
    assert_eq!(gate.active(), Some(BASELINE));
    assert_eq!(gate.n_switches(), 0);
}

#[test]
fn the_gate_returns_to_the_baseline_when_the_split_slows_down() {
    let mut gate = gate(MemoryPressure::Absent);
    let clock = FakeClock::new();
    let mut noise = Noise::new(7, 0.02);
    let change_at = 500;
    let choices = drive(&mut gate, &clock, 0, 2000, |call_idx, arm| {
        let split = if call_idx < change_at { 7.0 } else { 13.0 };
        noise.apply(speeds(10.0, split, 12.0)(arm))
    });
    assert_eq!(switches(&gate), [(SPLIT, BASELINE)]);
    let back_at = gate
        .timeline()
        .entries()
        .find(|r| r.call_idx as usize >= change_at && r.active_after == Some(BASELINE))
        .map(|r| r.call_idx as usize);
    assert!(
        back_at.is_some_and(|c| c < change_at + 10),
        "back at {back_at:?}"
    );
    assert_eq!(gate.active(), Some(BASELINE));
    let late = &choices[change_at + 10..];
    assert!(late
        .iter()
        .filter(|c| c.arm == SPLIT)
        .all(|c| c.reason == Reason::Reprobe));
}

#[test]
fn the_gate_moves_to_an_inactive_arm_that_became_faster() {
    let mut gate = gate(MemoryPressure::Absent);
    let clock = FakeClock::new();
    let change_at = 300;
    drive(&mut gate, &clock, 0, 1000, |call_idx, arm| {
        let gpu = if call_idx < change_at { 12.0 } else { 5.0 };
        speeds(10.0, 7.0, gpu)(arm)
    });
    assert_eq!(switches(&gate), [(SPLIT, GPU)]);
    assert_eq!(gate.active(), Some(GPU));
}

#[test]
fn under_memory_pressure_probation_runs_arm_by_arm_then_locks() {
    let mut gate = gate(MemoryPressure::Present);
    let clock = FakeClock::new();
    let speed = speeds(10.0, 7.0, 12.0);
    let mut noise = Noise::new(3, 0.02);
    let choices = drive(&mut gate, &clock, 0, 3000, |_, arm| noise.apply(speed(arm)));
    let probation_arms: Vec<usize> = choices[..PROBATION_CALLS].iter().map(|c| c.arm.0).collect();
    assert_eq!(probation_arms, [[0; 7], [1; 7], [2; 7]].concat());
    assert_eq!(gate.active(), Some(SPLIT));
    assert!(choices[PROBATION_CALLS..].iter().all(|c| *c
        == Choice {
            arm: SPLIT,
            reason: Reason::Active
        }));
}

#[test]
fn under_memory_pressure_drift_starts_a_new_probation() {
    let mut gate = gate(MemoryPressure::Present);
    let clock = FakeClock::new();
    let change_at = 1000;
    let mut noise = Noise::new(11, 0.02);
    let choices = drive(&mut gate, &clock, 0, 2000, |call_idx, arm| {
        let split = if call_idx < change_at { 7.0 } else { 11.0 };
        noise.apply(speeds(10.0, split, 12.0)(arm))
    });
    let drift = gate.decisions().entries().find_map(|d| match d {
        Decision::Drift { call_idx, arm, .. } => Some((*call_idx as usize, *arm)),
        _ => None,
    });
    let (drift_at, drifted) = drift.expect("drift detected");
    assert_eq!(drifted, SPLIT);
    assert!(
        (change_at..change_at + 5).contains(&drift_at),
        "drift at {drift_at}"
    );
    assert!(choices[..=drift_at]
        .iter()
        .all(|c| !matches!(c.reason, Reason::Reprobe | Reason::DriftReprobe)));
    let reprobe = &choices[drift_at + 1..drift_at + 1 + PROBATION_CALLS];
    let reprobe_arms: Vec<usize> = reprobe.iter().map(|c| c.arm.0).collect();
    assert_eq!(
        reprobe_arms,
        [[1; 7], [0; 7], [2; 7]].concat(),
        "incumbent first"
    );
    assert!(reprobe
        .iter()
        .all(|c| matches!(c.reason, Reason::DriftWarmup | Reason::DriftReprobe)));
    assert_eq!(gate.active(), Some(BASELINE));
    assert_eq!(gate.n_switches(), 1);
    assert!(choices[drift_at + 1 + PROBATION_CALLS..].iter().all(|c| *c
        == Choice {
            arm: BASELINE,
            reason: Reason::Active
        }));
}

/// The paper's observer effect: with working sets that do not fit together, a call
/// on an arm other than the previous call's reloads its working set (×1.7).
fn evicting(speed: impl Fn(ArmId) -> Duration) -> impl FnMut(usize, ArmId) -> Duration {
    let mut previous: Option<ArmId> = None;
    move |_, arm| {
        let reload = previous.is_some_and(|p| p != arm);
        previous = Some(arm);
        if reload {
            speed(arm).mul_f64(1.7)
        } else {
            speed(arm)
        }
    }
}

#[test]
fn under_eviction_lock_mode_costs_less_than_continuous_probing() {
    let speed = || speeds(10.0, 7.0, 12.0);
    let total = |memory_pressure| {
        let mut gate = gate(memory_pressure);
        let clock = FakeClock::new();
        drive(&mut gate, &clock, 0, 2000, evicting(speed()));
        assert_eq!(gate.active(), Some(SPLIT), "{memory_pressure:?}");
        clock.now()
    };
    let locked = total(MemoryPressure::Present);
    let continuous = total(MemoryPressure::Absent);
    // Priced re-probes make continuous probing cheap too: here 3.5 % dearer than
    // locking, where a re-probe every 10th call cost more than 5 %.
    assert!(locked < continuous, "{locked:?} vs {continuous:?}");
}

#[test]
fn records_that_do_not_match_the_choice_are_rejected_without_effect() {
    let mut gate = gate(MemoryPressure::Absent);
    let unexpected = |arm, expected| Err(GateError::UnexpectedRecord { arm, expected });
    assert_eq!(gate.record(SPLIT, ms(1.0)), unexpected(SPLIT, None));
    let choice = gate.choose();
    assert_eq!(
        choice,
        Choice {
            arm: BASELINE,
            reason: Reason::Warmup
        }
    );
    assert_eq!(gate.record(GPU, ms(1.0)), unexpected(GPU, Some(BASELINE)));
    assert_eq!(
        gate.record(ArmId(99), ms(1.0)),
        unexpected(ArmId(99), Some(BASELINE))
    );
    assert_eq!(gate.choose(), choice, "a pending choice is repeated");
    assert_eq!(gate.timeline().entries().count(), 0);
    assert_eq!(gate.record(BASELINE, ms(1.0)), Ok(()));
    assert_eq!(gate.timeline().entries().count(), 1);
}

#[test]
fn invalid_gates_are_refused() {
    let config = GateConfig::fusionml(MemoryPressure::Absent);
    assert_eq!(
        Gate::new(Vec::new(), 0, config.clone()).err(),
        Some(GateError::NoArms)
    );
    let arms = vec!["a".to_string(), "b".to_string()];
    assert_eq!(
        Gate::new(arms, 2, config).err(),
        Some(GateError::BaselineOutOfRange {
            baseline: 2,
            n_arms: 2
        })
    );
}

#[test]
fn a_single_arm_gate_always_runs_it() {
    for memory_pressure in [MemoryPressure::Absent, MemoryPressure::Present] {
        let mut gate =
            Gate::new(vec!["cpu".into()], 0, GateConfig::fusionml(memory_pressure)).unwrap();
        let clock = FakeClock::new();
        let choices = drive(&mut gate, &clock, 0, 100, |call_idx, _| {
            ms(1.0 + call_idx as f64)
        });
        assert!(choices.iter().all(|c| c.arm == BASELINE));
        assert_eq!(gate.n_switches(), 0);
    }
}

#[test]
fn the_logs_stay_bounded_and_the_report_serializes() {
    let config = GateConfig {
        log_capacity: 16,
        ..GateConfig::fusionml(MemoryPressure::Absent)
    };
    let arms = ["baseline", "split", "gpu"].map(String::from).to_vec();
    let mut gate = Gate::new(arms, 0, config).unwrap();
    let clock = FakeClock::new();
    let speed = speeds(10.0, 7.0, 12.0);
    drive(&mut gate, &clock, 0, 1000, |_, arm| speed(arm));
    assert_eq!(gate.timeline().entries().count(), 16);
    assert_eq!(gate.timeline().n_dropped(), 1000 - 16);
    let last = gate.timeline().entries().last().copied().unwrap();
    assert_eq!((last.call_idx, last.active_after), (999, Some(SPLIT)));
    let json = serde_json::to_value(gate.report()).unwrap();
    assert_eq!(json["active"], 1);
    assert_eq!(json["arms"][1], "split");
    assert_eq!(json["decisions"]["entries"][0]["kind"], "probation_ended");
    assert_eq!(json["decisions"]["entries"][0]["chosen"], 1);
    assert_eq!(json["timeline"]["entries"][15]["reason"], "Active");
    assert_eq!(json["config"]["memory_pressure"], "Absent");
}

#[derive(Clone, Debug)]
enum Step {
    Choose,
    Record(usize, u64),
    RecordChosen(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Choose),
        (0usize..5, any::<u64>()).prop_map(|(arm, ns)| Step::Record(arm, ns)),
        prop_oneof![Just(0u64), 1u64..50_000_000, Just(u64::MAX)].prop_map(Step::RecordChosen),
    ]
}

proptest! {
    #[test]
    fn no_sequence_of_calls_panics(
        n_arms in 1usize..5,
        pressure in any::<bool>(),
        warmup_calls in 0u32..3,
        probation_samples in 1u32..4,
        steps in proptest::collection::vec(step(), 0..400),
    ) {
        let memory_pressure = if pressure { MemoryPressure::Present } else { MemoryPressure::Absent };
        let config = GateConfig {
            warmup_calls,
            probation_samples,
            log_capacity: 32,
            ..GateConfig::fusionml(memory_pressure)
        };
        let arms = (0..n_arms).map(|i| format!("arm{i}")).collect();
        let mut gate = Gate::new(arms, n_arms - 1, config).unwrap();
        for step in steps {
            match step {
                Step::Choose => prop_assert!(gate.choose().arm.0 < n_arms),
                Step::Record(arm, ns) => {
                    let _ = gate.record(ArmId(arm), Duration::from_nanos(ns));
                }
                Step::RecordChosen(ns) => {
                    let arm = gate.choose().arm;
                    prop_assert_eq!(gate.record(arm, Duration::from_nanos(ns)), Ok(()));
                }
            }
            prop_assert!(gate.active().is_none_or(|a| a.0 < n_arms));
            prop_assert!(gate.timeline().entries().count() <= 32);
        }
        prop_assert!(serde_json::to_string(&gate.report()).is_ok());
    }
}
