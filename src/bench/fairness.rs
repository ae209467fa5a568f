//! The fairness protocol (FusionML §5.1) as a runner over measured arms: arms of one
//! precision, warm-up rounds, then timed rounds in which every arm runs once in an order
//! shuffled from a recorded seed, summarized as medians with 95% intervals and speedups
//! over a baseline arm.
//!
//! **Invariant:** the runner never reads a clock. Each arm measures itself and returns
//! a [`Sample`]; so fake arms of known speed test the whole protocol, and how a backend
//! syncs before stopping its clock stays with the caller.

use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::arm::{Arm, Sample};
use super::env::EnvStamp;
use super::guard::{check_memory, Force, MemoryRefusal};
use super::report::{ArmSummary, FairnessReport, Round, Run};
use super::stats::{ratio_of_medians, MedianSummary, Ratio};

/// Warm-up rounds before timing, as in the paper.
pub const DEFAULT_WARMUP_ROUNDS: usize = 10;
/// Timed rounds, as in the paper.
pub const DEFAULT_TIMED_ROUNDS: usize = 50;

/// How to run the protocol. Defaults are [`DEFAULT_WARMUP_ROUNDS`] and
/// [`DEFAULT_TIMED_ROUNDS`]; the seed is the caller's to choose and record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FairnessConfig {
    /// Rounds run first and not recorded.
    pub warmup_rounds: usize,
    /// Rounds recorded (at least 1; 6 or more for a 95% median interval).
    pub timed_rounds: usize,
    /// Seed of the per-round shuffles.
    pub seed: u64,
    /// Name of the arm to compare with; `None` for the first arm.
    pub baseline: Option<String>,
    /// Bytes the arms need resident together, checked against the stamp's available memory.
    pub estimated_working_set_bytes: u64,
    /// Whether failed checks (precision, memory) refuse the run or mark it.
    pub force: Force,
}

/// Which part of the protocol a run belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not recorded.
    Warmup,
    /// Recorded.
    Timed,
}

/// Reported after every run, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress<'a> {
    /// The phase of the run just finished.
    pub phase: Phase,
    /// Its round within the phase, from 0.
    pub round: usize,
    /// The arm that ran.
    pub arm: &'a str,
    /// Runs finished so far, warm-ups included.
    pub runs_done: usize,
    /// Runs in the whole protocol.
    pub runs_total: usize,
}

/// Why the protocol did not run or did not finish; `E` is the arms' error type.
#[derive(Debug, thiserror::Error)]
pub enum FairnessError<E> {
    /// There was nothing to compare.
    #[error("no arms to run")]
    NoArms,
    /// Zero timed rounds would summarize nothing.
    #[error("the number of timed rounds must be at least 1")]
    NoTimedRounds,
    /// Two arms share a name, so the report could not tell them apart.
    #[error("two arms are called `{name}`; arm names must be unique")]
    DuplicateArm {
        /// The repeated name.
        name: String,
    },
    /// The configured baseline is not one of the arms.
    #[error("the baseline `{name}` is not an arm (arms: {})", arms.join(", "))]
    UnknownBaseline {
        /// The configured name.
        name: String,
        /// The arms' names.
        arms: Vec<String>,
    },
    /// An arm computes at another precision than the baseline, and the run was not forced.
    #[error(
        "arm `{arm}` computes at `{precision}` but the baseline `{baseline}` at \
         `{baseline_precision}`; comparisons must be precision-matched (pass --force to run \
         anyway and mark the result)"
    )]
    PrecisionMismatch {
        /// The baseline arm.
        baseline: String,
        /// Its precision.
        baseline_precision: String,
        /// The arm that differs.
        arm: String,
        /// Its precision.
        precision: String,
    },
    /// The memory guard refused the run.
    #[error(transparent)]
    Memory(#[from] MemoryRefusal),
    /// An arm returned a sample that cannot be summarized.
    #[error("arm `{arm}` returned an unusable sample in {phase:?} round {round}: {reason}")]
    InvalidSample {
        /// The arm.
        arm: String,
        /// The phase.
        phase: Phase,
        /// The round within the phase, from 0.
        round: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// An arm failed.
    #[error("arm `{arm}` failed in {phase:?} round {round}: {error}")]
    Arm {
        /// The arm.
        arm: String,
        /// The phase.
        phase: Phase,
        /// The round within the phase, from 0.
        round: usize,
        /// The arm's error.
        error: E,
    },
}

/// Runs the protocol: checks the arms' precisions and the memory guard against
/// `stamp` (take it before loading the models, so it describes the start), runs
/// `config.warmup_rounds` unrecorded rounds and `config.timed_rounds` recorded ones, each
/// with every arm once in a seeded shuffled order, and summarizes them. `progress` is
/// called after every run.
pub fn run_arms<E>(
    arms: &mut [Arm<'_, E>],
    stamp: EnvStamp,
    config: &FairnessConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<FairnessReport, FairnessError<E>> {
    let baseline_idx = validate(arms, config)?;
    let mut forced_reasons = precision_check(arms, baseline_idx, config.force)?;
    let mut notes = Vec::new();
    if let Some(warning) = check_memory(
        config.estimated_working_set_bytes,
        stamp.mem_available_bytes,
        config.force,
    )? {
        if warning.is_forced() {
            forced_reasons.push(warning.to_string());
        } else {
            notes.push(warning.to_string());
        }
    }

    let n_rounds = config.warmup_rounds.saturating_add(config.timed_rounds);
    let runs_total = n_rounds.saturating_mul(arms.len());
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); arms.len()];
    let mut rounds = Vec::new();
    let orders = shuffled_orders(arms.len(), config.seed).take(n_rounds);
    for (round_idx, order) in orders.enumerate() {
        let (phase, round) = match round_idx.checked_sub(config.warmup_rounds) {
            None => (Phase::Warmup, round_idx),
            Some(timed) => (Phase::Timed, timed),
        };
        let mut runs = Vec::with_capacity(order.len());
        for (position, &arm_idx) in order.iter().enumerate() {
            let arm = &mut arms[arm_idx];
            let sample = run_once(arm, phase, round)?;
            progress(&Progress {
                phase,
                round,
                arm: arm.name(),
                runs_done: round_idx * order.len() + position + 1,
                runs_total,
            });
            if phase == Phase::Timed {
                samples[arm_idx].push(sample);
                runs.push(run_record(arm.name(), &sample));
            }
        }
        if phase == Phase::Timed {
            let order = order.iter().map(|&i| arms[i].name().to_string()).collect();
            rounds.push(Round { order, runs });
        }
    }

    Ok(FairnessReport {
        stamp,
        seed: config.seed,
        warmup_rounds: config.warmup_rounds,
        timed_rounds: config.timed_rounds,
        baseline: arms[baseline_idx].name().to_string(),
        forced: !forced_reasons.is_empty(),
        forced_reasons,
        notes,
        arms: summarize(arms, &samples, baseline_idx),
        rounds,
    })
}

/// The baseline's index, after checking the arms and rounds make a comparison.
fn validate<E>(arms: &[Arm<'_, E>], config: &FairnessConfig) -> Result<usize, FairnessError<E>> {
    if arms.is_empty() {
        return Err(FairnessError::NoArms);
    }
    if config.timed_rounds == 0 {
        return Err(FairnessError::NoTimedRounds);
    }
    for (i, arm) in arms.iter().enumerate() {
        if arms[..i].iter().any(|earlier| earlier.name() == arm.name()) {
            return Err(FairnessError::DuplicateArm {
                name: arm.name().to_string(),
            });
        }
    }
    match &config.baseline {
        None => Ok(0),
        Some(name) => arms
            .iter()
            .position(|arm| arm.name() == name)
            .ok_or_else(|| FairnessError::UnknownBaseline {
                name: name.clone(),
                arms: arms.iter().map(|arm| arm.name().to_string()).collect(),
            }),
    }
}

/// Refuses arms whose precision differs from the baseline's, or, forced, lists them.
fn precision_check<E>(
    arms: &[Arm<'_, E>],
    baseline_idx: usize,
    force: Force,
) -> Result<Vec<String>, FairnessError<E>> {
    let baseline = &arms[baseline_idx];
    let mut reasons = Vec::new();
    for arm in arms
        .iter()
        .filter(|arm| arm.precision() != baseline.precision())
    {
        let mismatch = FairnessError::PrecisionMismatch {
            baseline: baseline.name().to_string(),
            baseline_precision: baseline.precision().to_string(),
            arm: arm.name().to_string(),
            precision: arm.precision().to_string(),
        };
        match force {
            Force::No => return Err(mismatch),
            Force::Yes => reasons.push(format!(
                "arm `{}` computes at `{}` but the baseline `{}` at `{}`",
                arm.name(),
                arm.precision(),
                baseline.name(),
                baseline.precision()
            )),
        }
    }
    Ok(reasons)
}

/// Endless orders of `0..n_arms`, each a Fisher–Yates shuffle drawn from one ChaCha8
/// stream seeded with `seed`. Written out rather than `SliceRandom::shuffle` so that a
/// recorded seed replays the same orders whatever `rand`'s version.
fn shuffled_orders(n_arms: usize, seed: u64) -> impl Iterator<Item = Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    std::iter::repeat_with(move || {
        let mut order: Vec<usize> = (0..n_arms).collect();
        for i in (1..n_arms).rev() {
            // The modulo bias is below n_arms / 2^64: negligible.
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        order
    })
}

fn run_once<E>(
    arm: &mut Arm<'_, E>,
    phase: Phase,
    round: usize,
) -> Result<Sample, FairnessError<E>> {
    let sample = arm.run().map_err(|error| FairnessError::Arm {
        arm: arm.name().to_string(),
        phase,
        round,
        error,
    })?;
    match sample.defect() {
        None => Ok(sample),
        Some(reason) => Err(FairnessError::InvalidSample {
            arm: arm.name().to_string(),
            phase,
            round,
            reason,
        }),
    }
}

fn run_record(arm: &str, sample: &Sample) -> Run {
    Run {
        arm: arm.to_string(),
        ttft_ms: millis(sample.ttft),
        decode_ms: millis(sample.decode),
        decode_tokens: sample.decode_tokens,
        decode_tok_s: sample.decode_tok_s(),
    }
}

/// Milliseconds, exact for whole microseconds (`90 ms` is `90.0`, not `89.999…`).
fn millis(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e6
}

/// Medians, intervals and speedups per arm. Every sample passed [`Sample::defect`] and
/// every arm has `timed_rounds ≥ 1` of them, so every value is finite and positive.
fn summarize<E>(
    arms: &[Arm<'_, E>],
    samples: &[Vec<Sample>],
    baseline_idx: usize,
) -> Vec<ArmSummary> {
    let ttft: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| s.iter().map(|s| millis(s.ttft)).collect())
        .collect();
    let tok_s: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| s.iter().map(Sample::decode_tok_s).collect())
        .collect();
    const INVARIANT: &str = "validated samples are finite, positive and at least one per arm";
    let speedup = |numerator: &[f64], denominator: &[f64], arm_idx: usize| {
        if arm_idx == baseline_idx {
            // The baseline against itself is exactly 1, with no uncertainty.
            Ratio {
                value: 1.0,
                ci95: Some([1.0, 1.0]),
            }
        } else {
            ratio_of_medians(numerator, denominator).expect(INVARIANT)
        }
    };
    arms.iter()
        .enumerate()
        .map(|(i, arm)| ArmSummary {
            name: arm.name().to_string(),
            precision: arm.precision().to_string(),
            ttft_ms: MedianSummary::of(&ttft[i]).expect(INVARIANT),
            decode_tok_s: MedianSummary::of(&tok_s[i]).expect(INVARIANT),
            prefill_speedup: speedup(&ttft[baseline_idx], &ttft[i], i),
            decode_speedup: speedup(&tok_s[i], &tok_s[baseline_idx], i),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_are_permutations_replayed_by_their_seed() {
        let take = |n_arms, n_rounds, seed| -> Vec<Vec<usize>> {
            shuffled_orders(n_arms, seed).take(n_rounds).collect()
        };
        let orders = take(5, 40, 7);
        for order in &orders {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3, 4]);
        }
        assert_eq!(orders, take(5, 40, 7));
        assert_ne!(orders, take(5, 40, 8));
        // A longer run starts with the same orders: warm-up and timed rounds share a stream.
        assert_eq!(take(5, 60, 7)[..40], orders[..]);
        assert_eq!(take(1, 3, 0), vec![vec![0]; 3]);
    }
}
