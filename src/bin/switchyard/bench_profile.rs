//! `switchyard bench --profile`: after the timed tests, each test runs once more (a
//! warm-up and one repetition) with the CPU backend timing every node and a GPU whose
//! adapter writes timestamps inside passes timing every dispatch, and a table per test,
//! backend and row count says where a step's time goes: op (a GPU's dispatch kind),
//! calls per step, µs per call, share of the step and, for CPU products, the weight
//! bytes read and multiply-adds done per second. Apart from the timed tests, so the
//! timers never touch their numbers. Beside each `tg` test's step it also sets the time
//! the sampler's default path (temperature 1, no top-k or top-p) takes for that step's
//! sequences one after the other, as when their logits come back
//! ([`switchyard::bench::sampling`]; a step whose sequences need only their tokens
//! draws them on its device instead, decision 196).

use anyhow::{bail, Result};
use serde::Serialize;
use switchyard::backend::RowsProfile;
use switchyard::bench::llm::{run_test, BenchTest, Decode, TestResult};
use switchyard::bench::sampling::{default_sampling_cost, SamplingCost, SAMPLING_REPS};
use switchyard::step::Runner;

/// The node times of one test's profiled run.
#[derive(Serialize)]
pub struct TestProfile {
    /// The test, as in the results (`pp512`, `tg128`, `tg128x16`).
    pub test: String,
    /// The backend that timed these steps (`cpu`, `gpu`).
    pub backend: String,
    /// One entry per row count the test's steps had (a `tg` test's prompt, then its
    /// one-row decode steps).
    pub steps: Vec<RowsProfile>,
}

/// Runs every test once more with node timing on and returns what each recorded.
pub fn profile_tests(
    runner: &mut Runner,
    prompt: &[u32],
    tests: &[BenchTest],
    decode: Decode,
) -> Result<Vec<TestProfile>> {
    let timing: Vec<_> = runner
        .backends()
        .iter()
        .filter(|b| b.op_profile().is_some())
        .cloned()
        .collect();
    if timing.is_empty() {
        bail!("--profile: none of this run's backends times its nodes (the CPU does)");
    }
    let profiles = || {
        timing
            .iter()
            .filter_map(|b| Some((b.name(), b.op_profile()?)))
    };
    let mut out = Vec::with_capacity(tests.len());
    for &test in tests {
        for (_, profile) in profiles() {
            profile.take();
            profile.set_enabled(true);
        }
        let result = run_test(runner, prompt, test, 1, decode, &mut || {});
        // Off again before a failure propagates.
        for (_, profile) in profiles() {
            profile.set_enabled(false);
        }
        for (backend, profile) in profiles() {
            let steps = profile.take();
            if !steps.is_empty() {
                out.push(TestProfile {
                    test: test.name(),
                    backend: backend.to_string(),
                    steps,
                });
            }
        }
        result?;
    }
    Ok(out)
}

/// Prints one table per test and row count.
pub fn print_profiles(profiles: &[TestProfile], others_in_use: bool) {
    println!(
        "\nwhere the time goes (one more warm-up and repetition of each test, every CPU \
         node timed, and every GPU dispatch where the adapter has timestamps{})",
        if others_in_use {
            "; nodes on other backends are not in these tables"
        } else {
            ""
        }
    );
    for p in profiles {
        for steps in &p.steps {
            print_steps(&p.test, &p.backend, steps);
        }
    }
}

/// One table: the row count's runs, every op, then the time between ops.
fn print_steps(test: &str, backend: &str, steps: &RowsProfile) {
    let runs = steps.runs.max(1) as f64;
    let step_us = steps.nanos as f64 / 1e3 / runs;
    println!(
        "\n{test} on {backend}: {} runs of {} rows, {step_us:.1} µs each",
        steps.runs, steps.rows
    );
    println!(
        "| {:<36} | {:>10} | {:>10} | {:>6} | {:>7} | {:>7} |",
        "op", "calls/run", "µs/call", "share", "GB/s", "GMAC/s"
    );
    println!(
        "| {:-<36} | {:->10} | {:->10} | {:->6} | {:->7} | {:->7} |",
        ":", ":", ":", ":", ":", ":"
    );
    let share = |nanos: u64| 100.0 * nanos as f64 / steps.nanos.max(1) as f64;
    for op in &steps.ops {
        let calls = op.calls.max(1) as f64;
        // Per nanosecond of the op: GB/s of weights, GMAC/s of products.
        let rate = |per_call: u64| match (per_call, op.nanos) {
            (0, _) | (_, 0) => String::new(),
            _ => format!("{:.1}", per_call as f64 * op.calls as f64 / op.nanos as f64),
        };
        let (gb_s, gmac_s) = (rate(op.label.weight_bytes), rate(op.label.macs));
        println!(
            "| {:<36} | {:>10.1} | {:>10.2} | {:>5.1}% | {:>7} | {:>7} |",
            op.label.op,
            op.calls as f64 / runs,
            op.nanos as f64 / 1e3 / calls,
            share(op.nanos),
            gb_s,
            gmac_s
        );
    }
    println!(
        "| {:<36} | {:>10} | {:>10} | {:>5.1}% | {:>7} | {:>7} |",
        "(between ops, outputs)",
        "",
        "",
        share(steps.outside_nanos()),
        "",
        ""
    );
}

/// The default path's sampling beside one `tg` test's decode step.
#[derive(Serialize)]
pub struct SamplingShare {
    /// The test (`tg128`, `tg128x16`).
    pub test: String,
    /// Sampling its step's rows, timed.
    #[serde(flatten)]
    pub cost: SamplingCost,
    /// Microseconds of one of its decode steps, from the test's median tok/s.
    pub decode_step_us: f64,
    /// The median sampling time as a percentage of that step.
    pub percent_of_step: f64,
}

/// Times the default sampling for the rows of each `tg` test in `results`.
pub fn sampling_shares(
    runner: &mut Runner,
    prompt: &[u32],
    tests: &[BenchTest],
    results: &[TestResult],
) -> Result<Vec<SamplingShare>> {
    let mut out = Vec::new();
    for (test, result) in tests.iter().zip(results) {
        let rows = match *test {
            BenchTest::Generate(_) => 1,
            BenchTest::Batch { sequences, .. } => sequences,
            BenchTest::Prompt(_) => continue,
        };
        let cost = default_sampling_cost(runner, prompt, rows, SAMPLING_REPS)?;
        let decode_step_us = 1e6 * rows as f64 / result.summary.median;
        out.push(SamplingShare {
            test: test.name(),
            percent_of_step: 100.0 * cost.step_us.median / decode_step_us,
            cost,
            decode_step_us,
        });
    }
    Ok(out)
}

/// Prints one line per `tg` test: sampling's time against its step's.
pub fn print_sampling(shares: &[SamplingShare]) {
    if shares.is_empty() {
        return;
    }
    println!(
        "\nsampling on the server's default path (temperature 1, no top-k or top-p), every \
         row of a step one after the other, median (p99) of {SAMPLING_REPS} steps:"
    );
    for s in shares {
        println!(
            "{}: {} rows {:.1} µs ({:.1}) = {:.2} % of its {:.0} µs decode step",
            s.test,
            s.cost.rows,
            s.cost.step_us.median,
            s.cost.step_us.p99,
            s.percent_of_step,
            s.decode_step_us
        );
    }
}
