//! The fairness protocol with fake arms of known speed: every duration is computed, never
//! slept or measured, so each test checks exact orders, counts, medians and ratios.

mod bench_support;

use std::collections::HashSet;

use bench_support::{arm, config, constant_arms, run, sample, stamp, CallLog, GIB, PRECISION};
use switchyard::bench::arm::Arm;
use switchyard::bench::fairness::{
    run_arms, FairnessConfig, FairnessError, Phase, Progress, DEFAULT_TIMED_ROUNDS,
    DEFAULT_WARMUP_ROUNDS,
};
use switchyard::bench::guard::Force;
use switchyard::bench::plot::speedup_svg;
use switchyard::bench::report::markdown;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn every_round_runs_each_arm_once_in_a_seeded_shuffled_order() {
    let log = CallLog::default();
    let names = ["cpu", "gpu", "split", "gate"];
    let speeds: Vec<_> = names.iter().map(|&n| (n, 100, 20)).collect();
    let mut arms = constant_arms(&speeds, &log);
    let report = run(&mut arms, stamp(Some(64 * GIB)), &config(42)).unwrap();

    // The arms were called in whole rounds, warm-ups included: each block of four
    // calls is a permutation of the arms.
    let calls = log.borrow().clone();
    assert_eq!(
        calls.len(),
        4 * (DEFAULT_WARMUP_ROUNDS + DEFAULT_TIMED_ROUNDS)
    );
    let all: HashSet<&str> = names.into_iter().collect();
    for round in calls.chunks(4) {
        assert_eq!(
            round.iter().map(String::as_str).collect::<HashSet<_>>(),
            all
        );
    }
    // The recorded rounds are the timed ones, in the order the arms really ran.
    assert_eq!(report.rounds.len(), DEFAULT_TIMED_ROUNDS);
    for (round, called) in report
        .rounds
        .iter()
        .zip(calls.chunks(4).skip(DEFAULT_WARMUP_ROUNDS))
    {
        assert_eq!(&round.order, called);
        let ran: Vec<&String> = round.runs.iter().map(|r| &r.arm).collect();
        assert_eq!(ran, round.order.iter().collect::<Vec<_>>());
    }
    // Orders differ across rounds, and every arm sometimes goes first.
    let distinct: HashSet<&Vec<String>> = report.rounds.iter().map(|r| &r.order).collect();
    assert!(
        distinct.len() > 10,
        "only {} distinct orders",
        distinct.len()
    );
    let firsts: HashSet<&str> = report.rounds.iter().map(|r| r.order[0].as_str()).collect();
    assert_eq!(firsts, all);

    // The same seed replays the same orders; another seed does not.
    let orders = |seed| {
        let mut arms = constant_arms(&speeds, &CallLog::default());
        let report = run(&mut arms, stamp(Some(64 * GIB)), &config(seed)).unwrap();
        report
            .rounds
            .into_iter()
            .map(|r| r.order)
            .collect::<Vec<_>>()
    };
    let recorded: Vec<Vec<String>> = report.rounds.iter().map(|r| r.order.clone()).collect();
    assert_eq!(orders(42), recorded);
    assert_ne!(orders(43), recorded);
    assert_eq!(report.seed, 42);
}

#[test]
fn warm_ups_run_but_are_not_recorded() {
    let log = CallLog::default();
    // Every warm-up call takes 1000 s; timed calls take 10 ms.
    let slow_then_fast = |n: usize| {
        if n < 3 {
            sample(1_000_000_000, 1, 1_000_000_000)
        } else {
            sample(10_000, 10, 100_000)
        }
    };
    let mut arms = vec![
        arm("a", PRECISION, &log, slow_then_fast),
        arm("b", PRECISION, &log, slow_then_fast),
    ];
    let config = FairnessConfig {
        warmup_rounds: 3,
        timed_rounds: 7,
        ..config(1)
    };
    let mut events = Vec::new();
    let report = run_arms(
        &mut arms,
        stamp(Some(64 * GIB)),
        &config,
        &mut |p: &Progress| {
            events.push((p.phase, p.round, p.runs_done, p.runs_total));
        },
    )
    .unwrap();

    assert_eq!(log.borrow().len(), 2 * (3 + 7));
    assert_eq!(report.rounds.len(), 7);
    assert_eq!((report.warmup_rounds, report.timed_rounds), (3, 7));
    for run in report.rounds.iter().flat_map(|r| &r.runs) {
        assert!(close(run.ttft_ms, 10.0), "a warm-up was recorded: {run:?}");
        assert!(close(run.decode_tok_s, 100.0));
    }
    for arm in &report.arms {
        assert_eq!(arm.ttft_ms.n, 7);
        assert!(close(arm.ttft_ms.max, 10.0));
    }
    // Progress counts every run, warm-ups first.
    assert_eq!(events.len(), 20);
    assert!(events[..6].iter().all(|e| e.0 == Phase::Warmup));
    assert!(events[6..].iter().all(|e| e.0 == Phase::Timed));
    assert_eq!(events[6].1, 0);
    assert_eq!(events.last(), Some(&(Phase::Timed, 6, 20, 20)));
}

#[test]
fn medians_and_intervals_come_from_order_statistics() {
    let log = CallLog::default();
    // Timed call k (1..=50) has a TTFT of k ms and decodes 100 tokens in k·10 ms
    // (10000/k tok/s); warm-up calls are the same as call 1.
    let ramp = |n: usize| {
        let k = n.saturating_sub(DEFAULT_WARMUP_ROUNDS) as u64 + 1;
        sample(k * 1000, 100, k * 10_000)
    };
    let mut arms = vec![arm("only", PRECISION, &log, ramp)];
    let report = run(&mut arms, stamp(Some(64 * GIB)), &config(5)).unwrap();
    let arm = &report.arms[0];

    assert_eq!(arm.ttft_ms.n, 50);
    assert!(close(arm.ttft_ms.median, 25.5));
    // Ranks 18 and 33 of 50 bound the median with ≥ 95% probability.
    let [low, high] = arm.ttft_ms.ci95.unwrap();
    assert!(close(low, 18.0) && close(high, 33.0), "{low} {high}");
    // tok/s is 10000/k: its 18th and 33rd smallest are 10000/33 and 10000/18.
    let [low, high] = arm.decode_tok_s.ci95.unwrap();
    assert!(close(low, 10000.0 / 33.0) && close(high, 10000.0 / 18.0));
    assert!(close(
        arm.decode_tok_s.median,
        (10000.0 / 25.0 + 10000.0 / 26.0) / 2.0
    ));
    // The only arm is its own baseline.
    assert_eq!(arm.prefill_speedup.value, 1.0);
    assert_eq!(arm.decode_speedup.ci95, Some([1.0, 1.0]));
}

#[test]
fn speedups_compare_medians_with_the_baseline() {
    let speeds = [("cpu", 100, 20), ("split", 80, 20), ("gpu", 50, 40)];
    let mut arms = constant_arms(&speeds, &CallLog::default());
    let report = run(&mut arms, stamp(Some(64 * GIB)), &config(9)).unwrap();
    assert_eq!(report.baseline, "cpu");
    let by_name = |name: &str| report.arms.iter().find(|a| a.name == name).unwrap();
    // TTFT speedup is baseline / arm (above 1: faster); decode is arm / baseline.
    assert!(close(by_name("split").prefill_speedup.value, 1.25));
    assert!(close(by_name("split").decode_speedup.value, 1.0));
    assert!(close(by_name("gpu").prefill_speedup.value, 2.0));
    assert!(close(by_name("gpu").decode_speedup.value, 2.0));
    let [low, high] = by_name("gpu").prefill_speedup.ci95.unwrap();
    assert!(close(low, 2.0) && close(high, 2.0));
    assert_eq!(by_name("cpu").prefill_speedup.value, 1.0);

    // A configured baseline replaces the first arm.
    let mut arms = constant_arms(&speeds, &CallLog::default());
    let config = FairnessConfig {
        baseline: Some("gpu".into()),
        ..config(9)
    };
    let report = run(&mut arms, stamp(Some(64 * GIB)), &config).unwrap();
    assert_eq!(report.baseline, "gpu");
    assert!(close(report.arms[0].prefill_speedup.value, 0.5));
    assert!(close(report.arms[0].decode_speedup.value, 0.5));
}

#[test]
fn arms_of_another_precision_are_refused_unless_forced() {
    let log = CallLog::default();
    let make = |log: &CallLog| {
        vec![
            arm("cpu", PRECISION, log, |_| sample(1000, 1, 1000)),
            arm("gpu", "f16 weights, f16 kv", log, |_| sample(1000, 1, 1000)),
        ]
    };
    let err = run(&mut make(&log), stamp(Some(64 * GIB)), &config(0)).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, FairnessError::PrecisionMismatch { .. }));
    for part in ["gpu", "f16 weights, f16 kv", "cpu", PRECISION, "--force"] {
        assert!(message.contains(part), "{message}");
    }
    assert!(log.borrow().is_empty(), "no arm may run before the checks");

    let forced = FairnessConfig {
        force: Force::Yes,
        ..config(0)
    };
    let report = run(&mut make(&log), stamp(Some(64 * GIB)), &forced).unwrap();
    assert!(report.forced);
    assert_eq!(report.forced_reasons.len(), 1);
    assert!(report.forced_reasons[0].contains("f16 weights, f16 kv"));
    assert!(markdown(&report).contains("**FORCED:**"));
    assert!(speedup_svg(&report).contains("(FORCED)"));
}

#[test]
fn the_memory_guard_refuses_or_marks_the_run() {
    let log = CallLog::default();
    let small = stamp(Some(GIB / 2));
    let err = run(
        &mut constant_arms(&[("cpu", 10, 10)], &log),
        small.clone(),
        &config(0),
    )
    .unwrap_err();
    assert!(matches!(err, FairnessError::Memory(_)));
    let message = err.to_string();
    assert!(message.contains("1073741824 bytes") && message.contains("536870912 bytes"));
    assert!(message.contains("--force"));
    assert!(log.borrow().is_empty());

    let forced = FairnessConfig {
        force: Force::Yes,
        ..config(0)
    };
    let report = run(&mut constant_arms(&[("cpu", 10, 10)], &log), small, &forced).unwrap();
    assert!(report.forced);
    assert!(report.forced_reasons[0].contains("paging"));
    assert_eq!(report.stamp.mem_available_bytes, Some(GIB / 2));

    // Unknown memory is a note, not a refusal and not forced.
    let report = run(
        &mut constant_arms(&[("cpu", 10, 10)], &log),
        stamp(None),
        &config(0),
    )
    .unwrap();
    assert!(!report.forced);
    assert_eq!(report.notes.len(), 1);
}

#[test]
fn bad_setups_and_failing_arms_are_errors() {
    let log = CallLog::default();
    let two = |log: &CallLog| constant_arms(&[("a", 10, 10), ("b", 10, 10)], log);
    let zero_rounds = FairnessConfig {
        timed_rounds: 0,
        ..config(0)
    };
    let ok_stamp = || stamp(Some(64 * GIB));
    assert!(matches!(
        run(&mut two(&log), ok_stamp(), &zero_rounds),
        Err(FairnessError::NoTimedRounds)
    ));
    assert!(matches!(
        run(&mut [], ok_stamp(), &config(0)),
        Err(FairnessError::NoArms)
    ));
    let mut twins = constant_arms(&[("a", 10, 10), ("a", 10, 10)], &log);
    assert!(matches!(
        run(&mut twins, ok_stamp(), &config(0)),
        Err(FairnessError::DuplicateArm { .. })
    ));
    let unknown = FairnessConfig {
        baseline: Some("gate".into()),
        ..config(0)
    };
    let err = run(&mut two(&log), ok_stamp(), &unknown).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the baseline `gate` is not an arm (arms: a, b)"
    );

    // An arm's error stops the run and says where it happened.
    let mut calls = 0;
    let mut failing = vec![Arm::new("flaky", PRECISION, move || {
        calls += 1;
        if calls == 13 {
            Err("device lost".to_string())
        } else {
            Ok(sample(1000, 1, 1000))
        }
    })];
    let err = run(&mut failing, ok_stamp(), &config(0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "arm `flaky` failed in Timed round 2: device lost"
    );

    let mut zero = vec![arm("zero", PRECISION, &log, |_| sample(0, 1, 1000))];
    let err = run(&mut zero, ok_stamp(), &config(0)).unwrap_err();
    assert!(matches!(
        err,
        FairnessError::InvalidSample {
            round: 0,
            phase: Phase::Warmup,
            ..
        }
    ));
}
