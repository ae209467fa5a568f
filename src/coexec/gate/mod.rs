//! The no-regression gate: for one step signature, pick among execution arms (the
//! capability-greedy baseline, the row split, single-backend plans) by measuring them.
//!
//! Probation runs every arm (warm-ups discarded, then the median of several timed
//! calls), except that an arm whose calls after its first take more than
//! `abandon_factor` times another arm's fastest call is measured no further; the fastest
//! becomes active only if it beats the incumbent (the baseline at first) by more than
//! the hysteresis. Then, without memory pressure, each arm keeps an exponential moving
//! average and inactive arms are re-probed on a schedule priced by what a probe costs:
//! an arm measured `r`× slower than the active one waits at least
//! `(arms − 1)·(r − 1) / regret_budget` calls between probes (and never fewer than
//! `reprobe_every`·(arms − 1)), so probes add at most `regret_budget` to the mean call
//! time. The schedule is recomputed from the averages at every call: when the active
//! arm slows (the environment changed), every other arm's ratio falls and its probe
//! comes sooner. A probe at under half an arm's average replaces the average (a regime
//! change, not noise). The gate switches when another arm's average beats the active
//! one's by more than the hysteresis. Under memory pressure the gate locks after
//! probation and starts a new probation only when the active arm's average drifts.
//!
//! **Invariant:** the baseline is always an arm, so the floor is the baseline minus
//! probe overhead bounded by the regret budget. No sequence of calls panics: a record that does not match
//! the pending choice is an error and changes nothing.

mod config;
mod log;

pub use config::{GateConfig, GateError, MemoryPressure};
pub use log::{ArmId, CallRecord, Choice, Decision, EventLog, GateReport, Reason};

use std::time::Duration;

/// The gate over the arms of one step signature. Call [`Gate::choose`], run the arm,
/// then [`Gate::record`] its wall time.
#[derive(Clone, Debug)]
pub struct Gate {
    arms: Vec<String>,
    baseline: ArmId,
    config: GateConfig,
    phase: Phase,
    ema_ns: Vec<Option<f64>>,
    pending: Option<Choice>,
    n_calls: u64,
    n_switches: u64,
    /// The call index of each arm's latest run.
    last_run: Vec<u64>,
    timeline: EventLog<CallRecord>,
    decisions: EventLog<Decision>,
}

/// Where the gate is in its cycle.
#[derive(Clone, Debug)]
enum Phase {
    /// Measuring every arm.
    Probation(Probation),
    /// Running the active arm; `locked_ns` is its average at lock time, `n_chosen` the
    /// calls chosen since this phase began.
    Active {
        arm: ArmId,
        locked_ns: f64,
        n_chosen: u64,
    },
}

/// One probation: a fixed schedule of calls and the timed samples per arm.
#[derive(Clone, Debug)]
struct Probation {
    after_drift: bool,
    incumbent: Option<ArmId>,
    schedule: Vec<(ArmId, bool)>,
    next: usize,
    samples_ns: Vec<Vec<f64>>,
    /// Calls each arm has run in this probation.
    calls: Vec<u32>,
    /// Each arm's fastest call (its first, compiling, one included).
    fastest_ns: Vec<f64>,
    /// Each arm's fastest call after its first.
    steady_ns: Vec<f64>,
}

impl Gate {
    /// A gate over `arms` (names for reports) whose arm `baseline` is the stock path.
    pub fn new(arms: Vec<String>, baseline: usize, config: GateConfig) -> Result<Gate, GateError> {
        if arms.is_empty() {
            return Err(GateError::NoArms);
        }
        if baseline >= arms.len() {
            let n_arms = arms.len();
            return Err(GateError::BaselineOutOfRange { baseline, n_arms });
        }
        config.check()?;
        let n_arms = arms.len();
        let baseline = ArmId(baseline);
        let probation = Probation::new(arms.len(), None, baseline, &config);
        Ok(Gate {
            ema_ns: vec![None; arms.len()],
            timeline: EventLog::new(config.log_capacity),
            decisions: EventLog::new(config.log_capacity),
            arms,
            baseline,
            config,
            phase: Phase::Probation(probation),
            pending: None,
            n_calls: 0,
            n_switches: 0,
            last_run: vec![0; n_arms],
        })
    }

    /// The arm to run next. Until its time is recorded, further calls return the same
    /// choice (so a caller may retry a failed run).
    pub fn choose(&mut self) -> Choice {
        if let Some(choice) = self.pending {
            return choice;
        }
        let choice = match &mut self.phase {
            Phase::Probation(probation) => probation.choice(),
            Phase::Active { arm, n_chosen, .. } => {
                *n_chosen += 1;
                let active = *arm;
                match self.due_reprobe(active) {
                    Some(arm) => Choice {
                        arm,
                        reason: Reason::Reprobe,
                    },
                    None => Choice {
                        arm: active,
                        reason: Reason::Active,
                    },
                }
            }
        };
        self.pending = Some(choice);
        choice
    }

    /// Records the wall time of the pending choice's arm. A different arm, or no
    /// pending choice, is [`GateError::UnexpectedRecord`] and the time is ignored.
    pub fn record(&mut self, arm: ArmId, duration: Duration) -> Result<(), GateError> {
        let choice = match self.pending {
            Some(choice) if choice.arm == arm => choice,
            expected => {
                let expected = expected.map(|c| c.arm);
                return Err(GateError::UnexpectedRecord { arm, expected });
            }
        };
        self.pending = None;
        let call_idx = self.n_calls;
        self.n_calls += 1;
        self.last_run[arm.0] = call_idx;
        let duration_ns = duration.as_nanos() as f64;
        match &mut self.phase {
            Phase::Probation(probation) => {
                let abandoned = probation.record(arm, duration_ns, self.config.abandon_factor);
                let finished = probation.finished();
                for (slow, ns, fastest_other_ns) in abandoned {
                    ::log::debug!("gate: abandoned arm {slow:?} in probation ({ns} ns)");
                    self.decisions.push(Decision::Abandoned {
                        call_idx,
                        arm: slow,
                        ns,
                        fastest_other_ns,
                    });
                }
                if finished {
                    self.end_probation(call_idx);
                }
            }
            Phase::Active { .. } => {
                let probe = choice.reason == Reason::Reprobe;
                self.track(call_idx, arm, duration_ns, probe);
            }
        }
        self.timeline.push(CallRecord {
            call_idx,
            arm,
            reason: choice.reason,
            duration_ns: u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            active_after: self.active(),
        });
        Ok(())
    }

    /// The active arm (during a drift probation, the arm that was locked; `None`
    /// during the first probation).
    pub fn active(&self) -> Option<ArmId> {
        match &self.phase {
            Phase::Probation(probation) => probation.incumbent,
            Phase::Active { arm, .. } => Some(*arm),
        }
    }

    /// The baseline arm.
    pub fn baseline(&self) -> ArmId {
        self.baseline
    }

    /// The name of `arm`, if it is one of this gate's arms.
    pub fn arm_name(&self, arm: ArmId) -> Option<&str> {
        self.arms.get(arm.0).map(String::as_str)
    }

    /// Times the active arm changed after the first probation.
    pub fn n_switches(&self) -> u64 {
        self.n_switches
    }

    /// The most recent calls, oldest first.
    pub fn timeline(&self) -> &EventLog<CallRecord> {
        &self.timeline
    }

    /// The most recent decisions, oldest first.
    pub fn decisions(&self) -> &EventLog<Decision> {
        &self.decisions
    }

    /// Everything the gate knows, serialisable for `--json`.
    pub fn report(&self) -> GateReport<'_> {
        GateReport {
            arms: &self.arms,
            baseline: self.baseline,
            config: &self.config,
            active: self.active(),
            ema_ns: &self.ema_ns,
            n_calls: self.n_calls,
            n_switches: self.n_switches,
            timeline: &self.timeline,
            decisions: &self.decisions,
        }
    }

    /// Finishes probation: every arm's average restarts at its median, and the fastest
    /// arm becomes active if it beats the incumbent by more than the hysteresis.
    fn end_probation(&mut self, call_idx: u64) {
        let Phase::Probation(probation) = &self.phase else {
            return;
        };
        let medians_ns: Vec<f64> = probation
            .samples_ns
            .iter()
            .map(|s| {
                if s.is_empty() {
                    f64::INFINITY
                } else {
                    median(s)
                }
            })
            .collect();
        let previous = probation.incumbent;
        let incumbent = previous.unwrap_or(self.baseline);
        let fastest = (0..medians_ns.len())
            .min_by(|&a, &b| medians_ns[a].total_cmp(&medians_ns[b]))
            .map_or(incumbent, ArmId);
        let keep = 1.0 - self.config.hysteresis;
        let chosen = if medians_ns[fastest.0] < medians_ns[incumbent.0] * keep {
            fastest
        } else {
            incumbent
        };
        for (ema, &median) in self.ema_ns.iter_mut().zip(&medians_ns) {
            *ema = median.is_finite().then_some(median);
        }
        if previous.is_some_and(|p| p != chosen) {
            self.n_switches += 1;
        }
        ::log::debug!("gate: probation ended, medians {medians_ns:?} ns, active {chosen:?}");
        self.decisions.push(Decision::ProbationEnded {
            call_idx,
            medians_ns: medians_ns.clone(),
            previous,
            chosen,
        });
        self.phase = Phase::Active {
            arm: chosen,
            locked_ns: medians_ns[chosen.0],
            n_chosen: 0,
        };
    }

    /// The inactive arm whose priced re-probe is due (the most overdue), if any;
    /// never under memory pressure.
    fn due_reprobe(&self, active: ArmId) -> Option<ArmId> {
        if self.config.memory_pressure != MemoryPressure::Absent {
            return None;
        }
        (0..self.arms.len())
            .filter(|&a| a != active.0)
            .map(|a| {
                let due = self.last_run[a].saturating_add(self.reprobe_interval(ArmId(a), active));
                (due, a)
            })
            .filter(|&(due, _)| due <= self.n_calls)
            .min()
            .map(|(_, a)| ArmId(a))
    }

    /// Calls between two probes of `arm` while `active` runs: `(arms − 1)·(r − 1) /
    /// regret_budget` for an arm `r`× slower, at least `reprobe_every`·(arms − 1).
    pub fn reprobe_interval(&self, arm: ArmId, active: ArmId) -> u64 {
        let others = self.arms.len().saturating_sub(1).max(1) as u64;
        let densest = u64::from(self.config.reprobe_every).saturating_mul(others);
        let (Some(arm_ns), Some(active_ns)) = (
            self.ema_ns.get(arm.0).copied().flatten(),
            self.ema_ns.get(active.0).copied().flatten(),
        ) else {
            return densest;
        };
        let priced = others as f64 * (arm_ns / active_ns - 1.0) / self.config.regret_budget;
        if priced > densest as f64 {
            // Float to integer saturates (and NaN is excluded by the comparison).
            priced.ceil() as u64
        } else {
            densest
        }
    }

    /// Folds a time into its arm's average (a probe at under half the average replaces
    /// it), then switches (continuous mode) or checks for drift (memory pressure).
    fn track(&mut self, call_idx: u64, arm: ArmId, duration_ns: f64, probe: bool) {
        let alpha = self.config.ema_alpha;
        let ema = &mut self.ema_ns[arm.0];
        *ema = Some(match *ema {
            Some(old) if probe && duration_ns < 0.5 * old => duration_ns,
            Some(old) => alpha * duration_ns + (1.0 - alpha) * old,
            None => duration_ns,
        });
        let Phase::Active {
            arm: active,
            locked_ns,
            ..
        } = self.phase
        else {
            return;
        };
        let Some(active_ns) = self.ema_ns[active.0] else {
            return;
        };
        match self.config.memory_pressure {
            MemoryPressure::Present => {
                if (active_ns - locked_ns).abs() > self.config.drift_threshold * locked_ns {
                    ::log::debug!("gate: arm {active:?} drifted {locked_ns} -> {active_ns} ns");
                    self.decisions.push(Decision::Drift {
                        call_idx,
                        arm: active,
                        locked_ema_ns: locked_ns,
                        ema_ns: active_ns,
                    });
                    let probation =
                        Probation::new(self.arms.len(), Some(active), self.baseline, &self.config);
                    self.phase = Phase::Probation(probation);
                }
            }
            MemoryPressure::Absent => {
                let best = (0..self.ema_ns.len())
                    .filter(|&i| i != active.0)
                    .filter_map(|i| self.ema_ns[i].map(|ns| (ArmId(i), ns)))
                    .min_by(|a, b| a.1.total_cmp(&b.1));
                if let Some((to, to_ns)) = best {
                    if to_ns < active_ns * (1.0 - self.config.hysteresis) {
                        self.switch_to(call_idx, active, active_ns, to, to_ns);
                    }
                }
            }
        }
    }

    /// Makes `to` the active arm and logs why.
    fn switch_to(&mut self, call_idx: u64, from: ArmId, from_ns: f64, to: ArmId, to_ns: f64) {
        ::log::debug!("gate: switch {from:?} ({from_ns} ns) -> {to:?} ({to_ns} ns)");
        self.decisions.push(Decision::Switched {
            call_idx,
            from,
            to,
            from_ema_ns: from_ns,
            to_ema_ns: to_ns,
        });
        self.n_switches += 1;
        if let Phase::Active { arm, locked_ns, .. } = &mut self.phase {
            *arm = to;
            *locked_ns = to_ns;
        }
    }
}

impl Probation {
    /// The schedule for `n_arms` arms, the incumbent (else the baseline) first. Without
    /// memory pressure the arms are interleaved in rotating rounds, so a slow drift
    /// touches all of them alike; under memory pressure each arm runs all its calls in
    /// a block, so its warm-ups absorb the reload of its evicted working set.
    fn new(
        n_arms: usize,
        incumbent: Option<ArmId>,
        baseline: ArmId,
        config: &GateConfig,
    ) -> Probation {
        let first = incumbent.unwrap_or(baseline);
        let order: Vec<ArmId> = std::iter::once(first)
            .chain((0..n_arms).map(ArmId).filter(|&a| a != first))
            .collect();
        let warmups = config.warmup_calls as usize;
        let per_arm = warmups + config.probation_samples as usize;
        let mut schedule = Vec::with_capacity(per_arm * n_arms);
        match config.memory_pressure {
            MemoryPressure::Absent => {
                for round in 0..per_arm {
                    for i in 0..n_arms {
                        schedule.push((order[(i + round) % n_arms], round >= warmups));
                    }
                }
            }
            MemoryPressure::Present => {
                for &arm in &order {
                    schedule.extend((0..per_arm).map(|call| (arm, call >= warmups)));
                }
            }
        }
        Probation {
            after_drift: incumbent.is_some(),
            incumbent,
            schedule,
            next: 0,
            samples_ns: vec![Vec::new(); n_arms],
            calls: vec![0; n_arms],
            fastest_ns: vec![f64::INFINITY; n_arms],
            steady_ns: vec![f64::INFINITY; n_arms],
        }
    }

    /// The next scheduled call.
    fn choice(&self) -> Choice {
        let (arm, timed) = self.schedule[self.next.min(self.schedule.len() - 1)];
        let reason = match (self.after_drift, timed) {
            (false, false) => Reason::Warmup,
            (false, true) => Reason::Probation,
            (true, false) => Reason::DriftWarmup,
            (true, true) => Reason::DriftReprobe,
        };
        Choice { arm, reason }
    }

    /// Whether the schedule is complete.
    fn finished(&self) -> bool {
        self.next >= self.schedule.len()
    }

    /// Records the scheduled call's time, then drops the remaining calls of every arm
    /// whose calls after its first all took more than `abandon_factor` times another
    /// arm's fastest call; returns those arms with both times.
    fn record(
        &mut self,
        arm: ArmId,
        duration_ns: f64,
        abandon_factor: f64,
    ) -> Vec<(ArmId, f64, f64)> {
        let a = arm.0;
        if let Some(&(_, true)) = self.schedule.get(self.next) {
            self.samples_ns[a].push(duration_ns);
        }
        if self.calls[a] > 0 {
            self.steady_ns[a] = self.steady_ns[a].min(duration_ns);
        }
        self.calls[a] += 1;
        self.fastest_ns[a] = self.fastest_ns[a].min(duration_ns);
        self.next += 1;
        let mut abandoned = Vec::new();
        for slow in 0..self.calls.len() {
            let fastest_other = (0..self.calls.len())
                .filter(|&b| b != slow)
                .map(|b| self.fastest_ns[b])
                .fold(f64::INFINITY, f64::min);
            let steady = self.steady_ns[slow];
            let rest = self.schedule.get(self.next..).unwrap_or_default();
            let pending = rest.iter().any(|(x, _)| x.0 == slow);
            if pending && steady.is_finite() && steady > abandon_factor * fastest_other {
                let tail = self.schedule.split_off(self.next.min(self.schedule.len()));
                self.schedule
                    .extend(tail.into_iter().filter(|(x, _)| x.0 != slow));
                if self.samples_ns[slow].is_empty() {
                    self.samples_ns[slow].push(steady);
                }
                abandoned.push((ArmId(slow), steady, fastest_other));
            }
        }
        abandoned
    }
}

/// Median of `values` (mean of the middle two for an even count; 0 when empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        len if len % 2 == 1 => sorted[mid],
        _ => (sorted[mid - 1] + sorted[mid]) / 2.0,
    }
}
