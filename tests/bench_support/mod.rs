//! Shared by the fairness-bench tests: a config and a stamp that pass the checks, and
//! fake arms whose samples are computed from their call count (never slept or timed).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use switchyard::bench::arm::{Arm, Sample};
use switchyard::bench::env::EnvStamp;
use switchyard::bench::fairness::{
    run_arms, FairnessConfig, FairnessError, Progress, DEFAULT_TIMED_ROUNDS, DEFAULT_WARMUP_ROUNDS,
};
use switchyard::bench::guard::Force;
use switchyard::bench::report::FairnessReport;

pub const GIB: u64 = 1 << 30;
pub const PRECISION: &str = "q4_1 weights, f16 kv";

/// A test's error type for arms.
pub type ArmError = String;

/// The order arms were called in, shared by every fake arm of a test.
pub type CallLog = Rc<RefCell<Vec<String>>>;

pub fn config(seed: u64) -> FairnessConfig {
    FairnessConfig {
        warmup_rounds: DEFAULT_WARMUP_ROUNDS,
        timed_rounds: DEFAULT_TIMED_ROUNDS,
        seed,
        baseline: None,
        estimated_working_set_bytes: GIB,
        force: Force::No,
    }
}

pub fn stamp(mem_available_bytes: Option<u64>) -> EnvStamp {
    let mut stamp = EnvStamp::capture();
    stamp.mem_available_bytes = mem_available_bytes;
    stamp
}

/// An arm whose n-th call (from 0) returns `sample(n)`, logging its name.
pub fn arm<'a>(
    name: &str,
    precision: &str,
    log: &CallLog,
    mut make: impl FnMut(usize) -> Sample + 'a,
) -> Arm<'a, ArmError> {
    let log = Rc::clone(log);
    let own_name = name.to_string();
    let mut calls = 0;
    Arm::new(name, precision, move || {
        log.borrow_mut().push(own_name.clone());
        calls += 1;
        Ok(make(calls - 1))
    })
}

pub fn sample(ttft_us: u64, decode_tokens: usize, decode_us: u64) -> Sample {
    Sample {
        ttft: Duration::from_micros(ttft_us),
        decode: Duration::from_micros(decode_us),
        decode_tokens,
    }
}

/// Arms of constant speed: TTFT in ms and decode tok/s (64 tokens per run).
pub fn constant_arms<'a>(speeds: &[(&str, u64, u64)], log: &CallLog) -> Vec<Arm<'a, ArmError>> {
    speeds
        .iter()
        .map(|&(name, ttft_ms, tok_s)| {
            arm(name, PRECISION, log, move |_| {
                sample(ttft_ms * 1000, 64, 64 * 1_000_000 / tok_s)
            })
        })
        .collect()
}

pub fn run(
    arms: &mut [Arm<'_, ArmError>],
    stamp: EnvStamp,
    config: &FairnessConfig,
) -> Result<FairnessReport, FairnessError<ArmError>> {
    run_arms(arms, stamp, config, &mut |_: &Progress| {})
}
