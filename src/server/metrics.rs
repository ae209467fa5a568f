//! The server's counters, gauges and histograms, written out in the Prometheus text
//! exposition format (version 0.0.4) by hand.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::backend::DeviceCounters;
use crate::cache::CacheStats;
use crate::decode::FinishReason;
use crate::sched::PrefixStats;
use crate::step::PhaseStats;

/// Upper bounds (seconds) of the time-to-first-token buckets.
const TTFT_BUCKETS: [f64; 12] = [
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Upper bounds (seconds) of the per-output-token latency buckets.
const TPOT_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
];

/// Upper bounds (seconds) of the step-duration buckets: a decode step of one sequence
/// takes milliseconds, a step of many or a long prompt chunk tens to hundreds.
const STEP_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// A cumulative histogram with fixed buckets.
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, "histogram", help);
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

/// The graph cache's counters as the engine last saw them.
#[derive(Default, Clone, Copy)]
struct CacheSnapshot {
    total: CacheStats,
    prefill: PhaseStats,
    decode: PhaseStats,
}

/// Everything `/metrics` reports; shared by the handlers and the engine thread.
pub(crate) struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    finished: Mutex<BTreeMap<&'static str, u64>>,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    queue_depth: AtomicI64,
    running: AtomicI64,
    batch_size: AtomicI64,
    steps: AtomicU64,
    step_sequences: AtomicU64,
    step_tokens: AtomicU64,
    prefixes: Mutex<PrefixStats>,
    kv_reserved: AtomicI64,
    kv_bytes: AtomicI64,
    /// Positions free under a KV budget; `None` without one (then not rendered).
    kv_free: Mutex<Option<usize>>,
    ttft: Mutex<Histogram>,
    tpot: Mutex<Histogram>,
    step_seconds: Mutex<Histogram>,
    cache: Mutex<CacheSnapshot>,
    gates: Mutex<Vec<GateSnapshot>>,
    failovers: AtomicU64,
    live_backends: AtomicI64,
    recoveries: AtomicU64,
    devices: Mutex<Vec<(String, DeviceCounters)>>,
}

/// One prefill bucket's co-execution gate, as `/metrics` shows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GateSnapshot {
    /// Tokens per prefill chunk.
    pub bucket: u32,
    /// The arm it runs now (`None` during its first probation).
    pub active: Option<String>,
    /// Calls it has timed.
    pub calls: u64,
    /// Times its active arm changed.
    pub switches: u64,
}

/// Writes the `# HELP` and `# TYPE` lines of a metric family.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Metrics {
    /// Zeroed metrics.
    pub fn new() -> Metrics {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            finished: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
            queue_depth: AtomicI64::new(0),
            running: AtomicI64::new(0),
            batch_size: AtomicI64::new(0),
            steps: AtomicU64::new(0),
            step_sequences: AtomicU64::new(0),
            step_tokens: AtomicU64::new(0),
            prefixes: Mutex::new(PrefixStats::default()),
            kv_reserved: AtomicI64::new(0),
            kv_bytes: AtomicI64::new(0),
            kv_free: Mutex::new(None),
            ttft: Mutex::new(Histogram::new(&TTFT_BUCKETS)),
            tpot: Mutex::new(Histogram::new(&TPOT_BUCKETS)),
            step_seconds: Mutex::new(Histogram::new(&STEP_BUCKETS)),
            cache: Mutex::new(CacheSnapshot::default()),
            gates: Mutex::new(Vec::new()),
            failovers: AtomicU64::new(0),
            live_backends: AtomicI64::new(0),
            devices: Mutex::new(Vec::new()),
            recoveries: AtomicU64::new(0),
        }
    }

    /// Counts a response of `status` from `endpoint`.
    pub fn request(&self, endpoint: &'static str, status: u16) {
        *lock(&self.requests).entry((endpoint, status)).or_default() += 1;
    }

    /// Adds `delta` to the number of requests waiting for the engine.
    pub fn queue_add(&self, delta: i64) {
        self.queue_depth.fetch_add(delta, Ordering::Relaxed);
    }

    /// Stores the number of generations running (the scheduler's count).
    pub fn running(&self, running: usize) {
        self.running.store(running as i64, Ordering::Relaxed);
    }

    /// Records a batched step of `sequences` sequences evaluating `tokens` tokens that
    /// took `seconds` (model, sampling and delivery: every running stream waits that long
    /// for its next token, so the histogram's tail is the server's side of inter-token
    /// latency; a step with no sequence to run is not timed).
    pub fn step(&self, sequences: usize, tokens: usize, seconds: f64) {
        if sequences > 0 {
            lock(&self.step_seconds).observe(seconds);
        }
        self.batch_size.store(sequences as i64, Ordering::Relaxed);
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.step_sequences
            .fetch_add(sequences as u64, Ordering::Relaxed);
        self.step_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// Stores the KV positions the running sequences reserve, the bytes they hold and,
    /// under a `--kv-memory` budget, the positions still free.
    pub fn kv(&self, reserved: usize, bytes: usize, free: Option<usize>) {
        self.kv_reserved.store(reserved as i64, Ordering::Relaxed);
        self.kv_bytes.store(bytes as i64, Ordering::Relaxed);
        *lock(&self.kv_free) = free;
    }

    /// Stores the prefix cache's counters.
    pub fn prefixes(&self, stats: PrefixStats) {
        *lock(&self.prefixes) = stats;
    }

    /// Records a finished generation: its token counts, why it ended, its time to first
    /// token (from submission) and its mean decode time per token.
    pub fn generation(
        &self,
        prompt: usize,
        completion: usize,
        reason: FinishReason,
        ttft_s: f64,
        per_token_s: Option<f64>,
    ) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion as u64, Ordering::Relaxed);
        let reason = match reason {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        };
        *lock(&self.finished).entry(reason).or_default() += 1;
        if completion > 0 {
            lock(&self.ttft).observe(ttft_s);
        }
        if let Some(t) = per_token_s {
            lock(&self.tpot).observe(t);
        }
    }

    /// Stores the graph cache's counters.
    pub fn cache(&self, total: CacheStats, (prefill, decode): (PhaseStats, PhaseStats)) {
        *lock(&self.cache) = CacheSnapshot {
            total,
            prefill,
            decode,
        };
    }

    /// Stores how many backends the runner dropped after a device failure, and how many
    /// it still runs on.
    pub fn backends(&self, failovers: usize, live: usize) {
        self.failovers.store(failovers as u64, Ordering::Relaxed);
        self.live_backends.store(live as i64, Ordering::Relaxed);
    }

    /// Counts a step that panicked, after which the engine rebuilt its runner state.
    pub fn recovered(&self) {
        self.recoveries.fetch_add(1, Ordering::Relaxed);
    }

    /// Stores the device counters of the backends that keep them (the GPU), by name.
    pub fn devices(&self, devices: Vec<(String, DeviceCounters)>) {
        *lock(&self.devices) = devices;
    }

    /// Stores the co-execution gates' state.
    pub fn gates(&self, gates: Vec<GateSnapshot>) {
        *lock(&self.gates) = gates;
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let name = "switchyard_requests_total";
        header(
            &mut out,
            name,
            "counter",
            "HTTP responses by endpoint and status code.",
        );
        for ((endpoint, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "{name}{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
            );
        }
        let name = "switchyard_generations_total";
        header(
            &mut out,
            name,
            "counter",
            "Finished generations by finish reason (cancelled: client gone or shutdown).",
        );
        for (reason, n) in lock(&self.finished).iter() {
            let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {n}");
        }
        let simple = [
            (
                "switchyard_prompt_tokens_total",
                "counter",
                "Prompt tokens evaluated.",
                self.prompt_tokens.load(Ordering::Relaxed) as i64,
            ),
            (
                "switchyard_completion_tokens_total",
                "counter",
                "Tokens generated.",
                self.completion_tokens.load(Ordering::Relaxed) as i64,
            ),
            (
                "switchyard_queue_depth",
                "gauge",
                "Requests waiting for the engine.",
                self.queue_depth.load(Ordering::Relaxed).max(0),
            ),
            (
                "switchyard_requests_running",
                "gauge",
                "Generations the engine is running.",
                self.running.load(Ordering::Relaxed).max(0),
            ),
            (
                "switchyard_batch_size",
                "gauge",
                "Sequences in the engine's latest step.",
                self.batch_size.load(Ordering::Relaxed).max(0),
            ),
            (
                "switchyard_steps_total",
                "counter",
                "Steps the engine ran (each evaluates every running sequence once).",
                self.steps.load(Ordering::Relaxed) as i64,
            ),
            (
                "switchyard_step_sequences_total",
                "counter",
                "Sum of the steps' batch sizes; divided by steps_total, the mean batch.",
                self.step_sequences.load(Ordering::Relaxed) as i64,
            ),
            (
                "switchyard_step_tokens_total",
                "counter",
                "Tokens the steps evaluated (decodes and prompt chunks).",
                self.step_tokens.load(Ordering::Relaxed) as i64,
            ),
        ];
        let p = *lock(&self.prefixes);
        let prefix = [
            (
                "switchyard_prefix_cache_lookups_total",
                "counter",
                "Prompts looked up in the prefix cache.",
                p.lookups as i64,
            ),
            (
                "switchyard_prefix_cache_hits_total",
                "counter",
                "Prompts that started from a cached prefix (hit rate: hits / lookups).",
                p.hits as i64,
            ),
            (
                "switchyard_prefix_cache_reused_tokens_total",
                "counter",
                "Prompt tokens not evaluated because a cached prefix held them.",
                p.reused_tokens as i64,
            ),
            (
                "switchyard_kv_positions_reserved",
                "gauge",
                "KV positions the running sequences reserve (prompt plus max_tokens each).",
                self.kv_reserved.load(Ordering::Relaxed),
            ),
            (
                "switchyard_kv_bytes",
                "gauge",
                "Bytes the running sequences' KV caches hold.",
                self.kv_bytes.load(Ordering::Relaxed),
            ),
            (
                "switchyard_prefix_cache_entries",
                "gauge",
                "Evaluated prompts the prefix cache holds for reuse.",
                p.entries as i64,
            ),
        ];
        let faults = [
            (
                "switchyard_backend_failovers_total",
                "counter",
                "Backends dropped after a device failure (the step re-ran on the others).",
                self.failovers.load(Ordering::Relaxed) as i64,
            ),
            (
                "switchyard_backends",
                "gauge",
                "Backends the engine runs on now.",
                self.live_backends.load(Ordering::Relaxed),
            ),
            (
                "switchyard_step_panics_total",
                "counter",
                "Steps that panicked; each failed its generations and reset the runner.",
                self.recoveries.load(Ordering::Relaxed) as i64,
            ),
        ];
        let budget = lock(&self.kv_free).map(|free| {
            (
                "switchyard_kv_positions_free",
                "gauge",
                "KV positions a new request can still reserve under --kv-memory (shown only with it).",
                i64::try_from(free).unwrap_or(i64::MAX),
            )
        });
        for (name, kind, help, value) in
            simple.into_iter().chain(prefix).chain(budget).chain(faults)
        {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        lock(&self.ttft).write(
            &mut out,
            "switchyard_time_to_first_token_seconds",
            "Time from submission to the first generated token.",
        );
        lock(&self.tpot).write(
            &mut out,
            "switchyard_time_per_output_token_seconds",
            "Mean decode time per generated token, one observation per generation.",
        );
        lock(&self.step_seconds).write(
            &mut out,
            "switchyard_step_duration_seconds",
            "Wall time of each engine step (model, sampling, delivery); a running stream's time between tokens.",
        );
        self.render_cache(&mut out);
        self.render_gates(&mut out);
        self.render_devices(&mut out);
        out
    }

    fn render_devices(&self, out: &mut String) {
        let devices = lock(&self.devices);
        if devices.is_empty() {
            return;
        }
        let name = "switchyard_device_dispatches_total";
        header(
            out,
            name,
            "counter",
            "Compute dispatches a device ran, by kernel kind.",
        );
        for (backend, c) in devices.iter() {
            for (kind, n) in &c.dispatches {
                let _ = writeln!(out, "{name}{{backend=\"{backend}\",kind=\"{kind}\"}} {n}");
            }
        }
        type Read = fn(&DeviceCounters) -> u64;
        let families: [(&str, &str, Read); 12] = [
            ("runs", "Compiled partitions a device ran.", |c| c.runs),
            ("passes", "Compute passes a device began.", |c| c.passes),
            ("submits", "Command buffers submitted to a device.", |c| {
                c.submits
            }),
            ("buffers_created", "Device buffers created.", |c| {
                c.buffers_created
            }),
            ("bind_groups_created", "Bind groups created.", |c| {
                c.bind_groups_created
            }),
            (
                "bytes_written",
                "Bytes written from the host to a device.",
                |c| c.bytes_written,
            ),
            ("bytes_read", "Bytes read back from a device.", |c| {
                c.bytes_read
            }),
            (
                "waits",
                "Times the host blocked waiting for a device.",
                |c| c.waits,
            ),
            (
                "record_nanoseconds",
                "Host time spent recording a device's runs.",
                |c| c.record_nanos,
            ),
            (
                "ahead_runs",
                "Device runs whose commands were recorded ahead, beside the previous run's submit.",
                |c| c.ahead_runs,
            ),
            (
                "ahead_nanoseconds",
                "Host time spent recording a device's runs ahead, off their steps' path.",
                |c| c.ahead_nanos,
            ),
            (
                "submit_nanoseconds",
                "Host time spent inside a device's queue submits.",
                |c| c.submit_nanos,
            ),
        ];
        for (what, help, read) in families {
            let name = format!("switchyard_device_{what}_total");
            header(out, &name, "counter", help);
            for (backend, c) in devices.iter() {
                let _ = writeln!(out, "{name}{{backend=\"{backend}\"}} {}", read(c));
            }
        }
    }

    fn render_gates(&self, out: &mut String) {
        let gates = lock(&self.gates);
        let families = [
            (
                "switchyard_coexec_active_arm",
                "gauge",
                "1 for the arm each prefill bucket's co-execution gate runs now.",
            ),
            (
                "switchyard_coexec_gate_calls_total",
                "counter",
                "Prefill calls timed by each bucket's gate.",
            ),
            (
                "switchyard_coexec_gate_switches_total",
                "counter",
                "Times each bucket's gate changed its active arm.",
            ),
        ];
        for (name, kind, help) in families {
            header(out, name, kind, help);
            for g in gates.iter() {
                let bucket = g.bucket;
                let _ = match name {
                    "switchyard_coexec_active_arm" => match &g.active {
                        Some(arm) => writeln!(out, "{name}{{bucket=\"{bucket}\",arm=\"{arm}\"}} 1"),
                        None => Ok(()),
                    },
                    "switchyard_coexec_gate_calls_total" => {
                        writeln!(out, "{name}{{bucket=\"{bucket}\"}} {}", g.calls)
                    }
                    _ => writeln!(out, "{name}{{bucket=\"{bucket}\"}} {}", g.switches),
                };
            }
        }
    }

    fn render_cache(&self, out: &mut String) {
        let c = *lock(&self.cache);
        let totals = [
            (
                "hits",
                c.total.hits,
                "Graph-cache lookups answered from the cache.",
            ),
            ("misses", c.total.misses, "Graph-cache lookups that missed."),
            ("compiles", c.total.compiles, "Executors compiled."),
            (
                "evictions",
                c.total.evictions,
                "Graph-cache entries evicted.",
            ),
        ];
        for (what, value, help) in totals {
            let name = format!("switchyard_graph_cache_{what}_total");
            header(out, &name, "counter", help);
            let _ = writeln!(out, "{name} {value}");
        }
        let name = "switchyard_graph_cache_phase_lookups_total";
        header(
            out,
            name,
            "counter",
            "Graph-cache lookups by step phase and outcome.",
        );
        for (phase, s) in [("prefill", c.prefill), ("decode", c.decode)] {
            for (outcome, n) in [("hit", s.hits), ("miss", s.misses), ("compile", s.compiles)] {
                let _ = writeln!(out, "{name}{{phase=\"{phase}\",outcome=\"{outcome}\"}} {n}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_family() {
        let m = Metrics::new();
        m.request("/v1/completions", 200);
        m.request("/v1/completions", 429);
        m.generation(5, 3, FinishReason::Length, 0.3, Some(0.07));
        m.queue_add(2);
        m.step(4, 67, 0.012);
        m.prefixes(PrefixStats {
            lookups: 3,
            hits: 2,
            reused_tokens: 64,
            entries: 5,
        });
        m.gates(vec![GateSnapshot {
            bucket: 64,
            active: Some("split".into()),
            calls: 30,
            switches: 1,
        }]);
        m.devices(vec![(
            "gpu".into(),
            DeviceCounters {
                runs: 3,
                dispatches: [("matmul".to_string(), 12)].into(),
                waits: 3,
                ahead_runs: 2,
                ..DeviceCounters::default()
            },
        )]);
        let text = m.render();
        for line in [
            "switchyard_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 1",
            "switchyard_generations_total{reason=\"length\"} 1",
            "switchyard_prompt_tokens_total 5",
            "switchyard_completion_tokens_total 3",
            "switchyard_queue_depth 2",
            "switchyard_batch_size 4",
            "switchyard_steps_total 1",
            "switchyard_step_tokens_total 67",
            "switchyard_prefix_cache_hits_total 2",
            "switchyard_prefix_cache_reused_tokens_total 64",
            "switchyard_time_to_first_token_seconds_bucket{le=\"0.5\"} 1",
            "switchyard_time_to_first_token_seconds_bucket{le=\"0.25\"} 0",
            "switchyard_time_per_output_token_seconds_count 1",
            "switchyard_step_duration_seconds_bucket{le=\"0.01\"} 0",
            "switchyard_step_duration_seconds_bucket{le=\"0.0125\"} 1",
            "switchyard_step_duration_seconds_count 1",
            "switchyard_graph_cache_compiles_total 0",
            "switchyard_graph_cache_phase_lookups_total{phase=\"decode\",outcome=\"hit\"} 0",
            "switchyard_coexec_active_arm{bucket=\"64\",arm=\"split\"} 1",
            "switchyard_coexec_gate_calls_total{bucket=\"64\"} 30",
            "switchyard_coexec_gate_switches_total{bucket=\"64\"} 1",
            "switchyard_device_dispatches_total{backend=\"gpu\",kind=\"matmul\"} 12",
            "switchyard_device_runs_total{backend=\"gpu\"} 3",
            "switchyard_device_waits_total{backend=\"gpu\"} 3",
            "switchyard_device_ahead_runs_total{backend=\"gpu\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
