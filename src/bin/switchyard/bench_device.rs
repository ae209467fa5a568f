//! `switchyard bench`'s device counters: for each test and each backend that counts
//! (the GPU), what its timed runs cost the device per partition run — dispatches by
//! kind, passes, submits, buffers and bind groups created, bytes written and read
//! back, blocking waits, the host time to record a run on its step's path (median, and
//! per dispatch), the time inside the queue's submit, and the runs recorded ahead
//! beside the submit before them with that recording's time. The instruments for a GPU
//! step, whose time is mostly overhead that cannot be seen without the device.

use serde::Serialize;
use switchyard::backend::DeviceCounters;
use switchyard::step::Runner;

/// One backend's counters over one test's runs (warm-up and compiles included).
#[derive(Serialize)]
pub struct DeviceUse {
    /// The test, as in the results (`pp512`, `tg128`).
    pub test: String,
    /// The backend (`gpu`).
    pub backend: String,
    /// What happened during the test.
    pub counters: DeviceCounters,
    /// Median host µs to record one partition run.
    pub median_record_us: Option<f64>,
    /// That median over the dispatches of an average run, µs.
    pub record_us_per_dispatch: Option<f64>,
}

/// The counters of every backend of `runner` that keeps them, by name.
pub fn snapshot(runner: &Runner) -> Vec<(String, DeviceCounters)> {
    runner
        .backends()
        .iter()
        .filter_map(|b| Some((b.name().to_string(), b.counters()?)))
        .collect()
}

/// What each backend did between `before` and `after`, for `test`.
pub fn uses(
    test: &str,
    before: &[(String, DeviceCounters)],
    after: &[(String, DeviceCounters)],
) -> Vec<DeviceUse> {
    after
        .iter()
        .filter_map(|(name, now)| {
            let (_, then) = before.iter().find(|(n, _)| n == name)?;
            let counters = now.since(then);
            let median = counters.median_record_nanos().map(|n| n as f64 / 1e3);
            let per_run = counters.total_dispatches() as f64 / counters.runs.max(1) as f64;
            Some(DeviceUse {
                test: test.to_string(),
                backend: name.clone(),
                median_record_us: median,
                record_us_per_dispatch: median.filter(|_| per_run > 0.0).map(|m| m / per_run),
                counters,
            })
        })
        .filter(|u| u.counters.runs > 0)
        .collect()
}

/// Prints one line per test and device, then its dispatches by kind.
pub fn print(uses: &[DeviceUse]) {
    if uses.is_empty() {
        return;
    }
    println!(
        "\ndevice counters per partition run (warm-up and compiles included in the creations)"
    );
    println!(
        "{:<10} {:<6} {:>6} {:>10} {:>7} {:>8} {:>9} {:>11} {:>10} {:>9} {:>7} {:>10} {:>12} {:>10} {:>6} {:>9}",
        "test",
        "device",
        "runs",
        "dispatches",
        "passes",
        "submits",
        "buffers",
        "bind groups",
        "KB written",
        "KB read",
        "waits",
        "record µs",
        "µs/dispatch",
        "submit µs",
        "ahead",
        "ahead µs"
    );
    for u in uses {
        let c = &u.counters;
        let runs = c.runs.max(1) as f64;
        let per = |n: u64| n as f64 / runs;
        println!(
            "{:<10} {:<6} {:>6} {:>10.1} {:>7.2} {:>8.2} {:>9} {:>11} {:>10.1} {:>9.1} {:>7.2} {:>10} {:>12} {:>10.1} {:>6.2} {:>9.1}",
            u.test,
            u.backend,
            c.runs,
            per(c.total_dispatches()),
            per(c.passes),
            per(c.submits),
            c.buffers_created,
            c.bind_groups_created,
            per(c.bytes_written) / 1e3,
            per(c.bytes_read) / 1e3,
            per(c.waits),
            u.median_record_us
                .map_or("-".into(), |m| format!("{m:.1}")),
            u.record_us_per_dispatch
                .map_or("-".into(), |m| format!("{m:.2}")),
            per(c.submit_nanos) / 1e3,
            per(c.ahead_runs),
            per(c.ahead_nanos) / 1e3,
        );
        let kinds: Vec<String> = c
            .dispatches
            .iter()
            .map(|(k, n)| format!("{k} {:.1}", per(*n)))
            .collect();
        println!("{:<17} by kind: {}", "", kinds.join(", "));
    }
}
