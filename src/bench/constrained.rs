//! What holding output to a grammar costs (`switchyard bench --json-schema`): decode
//! steps of a batch of sequences run through the real [`Scheduler`] step path, once
//! unconstrained and once constrained, in alternating rounds, and the per-token time of
//! the constraint itself.
//!
//! Only steps in which every sequence of the batch decodes and no prompt rides along
//! are timed: a sequence that ends is replaced by a new one with the same prompt (its
//! prefix cached, so it is one prompt token), and the steps that take it in are left
//! out. Both arms sample the same way (the server's default, temperature 1). Besides
//! its wall time, each timed step's process CPU time is taken (from `/proc/self/stat`,
//! in clock ticks): on a host shared with other work, the CPU a step used moves less
//! with the load than its wall time does. The
//! per-token constraint time is measured apart, by feeding each constrained
//! sequence's tokens again through a fresh [`Constraint`]: computing the mask
//! (`Constraint::prepare`, which the scheduler runs beside the forward pass),
//! applying it to a logit row (`Constraint::mask_into`) and taking the drawn token
//! (`Constraint::advance`), the last two done for each draw after the step.

use std::time::Instant;

use serde::Serialize;

use super::stats::{mean, ratio_of_medians, MedianSummary, Ratio};
use crate::decode::constraint::{Constraint, Grammar, Shape, TokenEnv};
use crate::decode::sampler::SamplerConfig;
use crate::decode::GenerateOptions;
use crate::model::tokenizer::Tokenizer;
use crate::model::ModelError;
use crate::sched::{Event, Limits, Request, Scheduler};
use crate::step::Runner;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Sequences decoding in each timed step.
    pub sequences: usize,
    /// Timed steps per arm and round.
    pub steps: usize,
    /// Timed rounds, after one warm-up round; each runs both arms, in alternating order.
    pub rounds: usize,
}

/// The two arms' decode steps and the constraint's per-token time.
#[derive(Clone, Debug, Serialize)]
pub struct ConstrainedReport {
    /// Sequences in each timed step.
    pub sequences: usize,
    /// Milliseconds of each timed step without a constraint.
    pub unconstrained_step_ms: MedianSummary,
    /// Milliseconds of each timed step with every sequence constrained.
    pub constrained_step_ms: MedianSummary,
    /// The constrained step's median over the unconstrained one's.
    pub step_ratio: Option<Ratio>,
    /// Mean process CPU milliseconds of a timed step without a constraint (`None`
    /// where `/proc/self/stat` cannot be read).
    pub unconstrained_cpu_ms: Option<f64>,
    /// The same with every sequence constrained.
    pub constrained_cpu_ms: Option<f64>,
    /// Per token, microseconds to compute the mask.
    pub mask_us: MedianSummary,
    /// Per token, microseconds to write a logit row with the refused tokens at -inf.
    pub apply_us: MedianSummary,
    /// Per token, microseconds for the engine to take the drawn token.
    pub advance_us: MedianSummary,
    /// Per token, the three together.
    pub constraint_us: MedianSummary,
}

/// Runs both arms over `prompt` (the constrained arm's sequences held to `grammar` over
/// `env`, each request compiling its own [`Shape`] as the server's do; `stop_ids` end
/// both arms' sequences) and measures the constraint's per-token time on logit rows of
/// `vocab` (the model's output size).
pub fn compare(
    runner: &mut Runner,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    (env, grammar): (&TokenEnv, &Grammar),
    stop_ids: &[u32],
    vocab: usize,
    plan: Plan,
) -> Result<ConstrainedReport, ModelError> {
    if plan.steps == 0 || plan.rounds == 0 {
        return Err(ModelError::Input(
            "a constrained benchmark needs at least one step and one round".into(),
        ));
    }
    let limits = Limits::parallel(plan.sequences).map_err(ModelError::Input)?;
    let arm = |grammar| Arm {
        tokenizer,
        prompt,
        env,
        grammar,
        stop_ids,
        limits,
        plan,
    };
    let (free, held) = (arm(None), arm(Some(grammar)));
    let (mut free_ms, mut held_ms) = (Vec::new(), Vec::new());
    let (mut free_cpu, mut held_cpu) = (Some(Vec::new()), Some(Vec::new()));
    let mut outputs = Vec::new();
    for round in 0..=plan.rounds {
        let timed = round > 0;
        // Alternating which arm goes first, so neither always follows the other.
        for constrained in [round % 2 == 1, round % 2 == 0] {
            let (arm, times, cpu) = match constrained {
                false => (&free, &mut free_ms, &mut free_cpu),
                true => (&held, &mut held_ms, &mut held_cpu),
            };
            let (ms, cpu_ms, tokens) = arm.run(runner, round as u64)?;
            if timed {
                times.extend(ms);
                match (cpu.as_mut(), cpu_ms) {
                    (Some(all), Some(these)) => all.extend(these),
                    _ => *cpu = None,
                }
                if constrained {
                    outputs.extend(tokens);
                }
            }
        }
    }
    let per_token = replay(env, grammar, &outputs, vocab)?;
    let summary = |values: &[f64], what: &str| {
        MedianSummary::of(values)
            .ok_or_else(|| ModelError::internal(format!("no finite {what} timings")))
    };
    Ok(ConstrainedReport {
        sequences: plan.sequences,
        unconstrained_step_ms: summary(&free_ms, "unconstrained step")?,
        constrained_step_ms: summary(&held_ms, "constrained step")?,
        step_ratio: ratio_of_medians(&held_ms, &free_ms),
        unconstrained_cpu_ms: free_cpu.as_deref().and_then(mean),
        constrained_cpu_ms: held_cpu.as_deref().and_then(mean),
        mask_us: summary(&per_token.mask, "mask")?,
        apply_us: summary(&per_token.apply, "mask application")?,
        advance_us: summary(&per_token.advance, "advance")?,
        constraint_us: summary(&per_token.total(), "constraint")?,
    })
}

/// One arm: a scheduler kept full of sequences on the same prompt.
struct Arm<'a> {
    tokenizer: &'a Tokenizer,
    prompt: &'a [u32],
    env: &'a TokenEnv,
    grammar: Option<&'a Grammar>,
    stop_ids: &'a [u32],
    limits: Limits,
    plan: Plan,
}

impl Arm<'_> {
    /// A request on the prompt, sampled at temperature 1 with seed `seed`.
    fn request(&self, seed: u64) -> Result<Request, ModelError> {
        let constraint = match self.grammar {
            Some(grammar) => Some(shape(self.env, grammar)?),
            None => None,
        };
        Ok(Request {
            prompt: self.prompt.to_vec(),
            options: GenerateOptions {
                max_tokens: self.plan.steps,
                stop_ids: self.stop_ids.to_vec(),
                constraint,
                ..GenerateOptions::default()
            },
            sampler: SamplerConfig {
                temperature: 1.0,
                seed,
                ..SamplerConfig::default()
            },
            score: None,
        })
    }

    /// Steps a fresh scheduler until `plan.steps` steps had every sequence decoding and
    /// no prompt; returns those steps' wall milliseconds, their process CPU
    /// milliseconds (when readable) and the tokens of every sequence that ran (each
    /// one's generated ids, in order).
    fn run(&self, runner: &mut Runner, round: u64) -> Result<ArmRun, ModelError> {
        let mut scheduler: Scheduler<'_, u64> = Scheduler::new(self.tokenizer, self.limits);
        let mut ms = Vec::with_capacity(self.plan.steps);
        let mut cpu_ms = Some(Vec::with_capacity(self.plan.steps));
        let mut ends = Ends::default();
        let mut next_id = 0;
        // Each sequence runs at least one full step before it can end, so this many
        // steps always suffice; more means the arm is broken.
        let most_steps = 4 * self.plan.steps + 64 * self.plan.sequences;
        for _ in 0..most_steps {
            if ms.len() >= self.plan.steps {
                break;
            }
            while scheduler.running() + scheduler.waiting() < self.limits.max_parallel() {
                let seed = round << 32 | next_id;
                scheduler.submit(next_id, self.request(seed)?);
                ends.running.push(next_id);
                next_id += 1;
            }
            let cpu_start = process_cpu_ms();
            let start = Instant::now();
            let report = scheduler.step(runner, &mut |&id, event| ends.on(id, event));
            let elapsed = start.elapsed().as_secs_f64() * 1e3;
            let cpu = cpu_start.zip(process_cpu_ms()).map(|(a, b)| b - a);
            if let Some(e) = ends.failure.take() {
                return Err(e);
            }
            if report.sequences == self.plan.sequences && report.prompt_tokens == 0 {
                ms.push(elapsed);
                match (cpu_ms.as_mut(), cpu) {
                    (Some(all), Some(this)) => all.push(this),
                    _ => cpu_ms = None,
                }
            }
        }
        if ms.len() < self.plan.steps {
            return Err(ModelError::internal(format!(
                "only {} of {} steps had every sequence decoding",
                ms.len(),
                self.plan.steps
            )));
        }
        let running = ends.running.clone();
        scheduler.cancel_where(|id| running.contains(id), &mut |&id, event| {
            ends.on(id, event)
        });
        Ok((ms, cpu_ms, ends.outputs))
    }
}

/// One arm's run: each timed step's wall and CPU milliseconds, and the sequences'
/// generated ids.
type ArmRun = (Vec<f64>, Option<Vec<f64>>, Vec<Vec<u32>>);

/// Clock ticks a second of `/proc/self/stat`'s times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// CPU milliseconds this process has used (user and system, every thread), to the
/// clock tick; `None` where `/proc/self/stat` cannot be read.
fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses: utime and
    // stime are the 14th and 15th of the line, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some((user + system) * 1e3 / USER_HZ)
}

/// What an arm's scheduler reported of its sequences.
#[derive(Default)]
struct Ends {
    /// Ids not yet ended.
    running: Vec<u64>,
    /// The generated ids of each ended sequence.
    outputs: Vec<Vec<u32>>,
    /// A sequence's failure, if any.
    failure: Option<ModelError>,
}

impl Ends {
    /// Takes one scheduler event; never cancels.
    fn on(&mut self, id: u64, event: Event<'_>) -> bool {
        if let Event::Done(result) = event {
            self.running.retain(|&r| r != id);
            match result {
                Ok(generation) => self.outputs.push(generation.tokens),
                Err(e) => self.failure = Some(e),
            }
        }
        true
    }
}

/// Per-token constraint times, microseconds.
#[derive(Default)]
struct PerToken {
    mask: Vec<f64>,
    apply: Vec<f64>,
    advance: Vec<f64>,
}

impl PerToken {
    /// Each token's mask, application and advance together.
    fn total(&self) -> Vec<f64> {
        (self.mask.iter().zip(&self.apply).zip(&self.advance))
            .map(|((m, a), t)| m + a + t)
            .collect()
    }
}

/// `grammar` over `env`, as a request's own.
fn shape(env: &TokenEnv, grammar: &Grammar) -> Result<Shape, ModelError> {
    Shape::new(env, grammar).map_err(|e| ModelError::Input(e.to_string()))
}

/// Feeds each of `outputs` through a constraint of its own `grammar` shape (compiled
/// afresh, as each request's is), timing each token's mask, its application to a
/// `vocab`-long logit row (written to a buffer kept from token to token, as each
/// sequence's decoding keeps one) and taking the token.
fn replay(
    env: &TokenEnv,
    grammar: &Grammar,
    outputs: &[Vec<u32>],
    vocab: usize,
) -> Result<PerToken, ModelError> {
    let row = vec![0.0f32; vocab];
    let mut masked = Vec::new();
    let mut times = PerToken::default();
    for tokens in outputs {
        let mut constraint = Constraint::new(&shape(env, grammar)?);
        for &token in tokens {
            let start = Instant::now();
            constraint.prepare()?;
            let prepared = Instant::now();
            constraint.mask_into(&row, &mut masked)?;
            std::hint::black_box(&masked);
            let applied = Instant::now();
            constraint.advance(token)?;
            let advanced = Instant::now();
            let us = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1e6;
            times.mask.push(us(start, prepared));
            times.apply.push(us(prepared, applied));
            times.advance.push(us(applied, advanced));
        }
    }
    Ok(times)
}
