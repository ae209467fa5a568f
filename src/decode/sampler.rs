//! Token sampling: picks the next token id from a step's logits.
//!
//! The pipeline is: logit biases (OpenAI's `logit_bias`), the repetition penalty
//! (llama.cpp style, over the recent prompt and generated tokens), the frequency and
//! presence penalties (OpenAI's, over the generated tokens), then top-k and top-p as a
//! floor under the logits ([`crate::backend::cpu::cut`]; ties at it kept), then a draw
//! at the temperature, min-p applied, from 32 bits of a seeded ChaCha RNG
//! ([`crate::backend::cpu::draw`]), so the same seed and inputs give the same tokens,
//! and a device that draws after its head picks with the same rule. Temperature 0 (the
//! default) is greedy argmax of the adjusted logits.
//!
//! Non-finite logits are sanitized rather than rejected: NaN counts as -inf (the token
//! can never be chosen) and +inf as the largest finite value. Only when no token has a
//! finite logit does sampling fail.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::cpu::greedy;

use crate::backend::cpu::cut::Cut;
use crate::backend::cpu::draw::{draw, Scratch};
use crate::backend::cpu::edit::{self, Edit, EditOp, Edits};
use crate::step::DrawSettings;

pub use crate::model::SamplerError;

/// Sampling settings. Each filter has a neutral value that switches it off.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; `0` means greedy argmax (ties go to the lowest id).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` = off, `1` = greedy.
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability sums to `top_p`; `1` = off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; `0` = off.
    pub min_p: f32,
    /// Divides positive / multiplies negative logits of recent tokens; `1` = off.
    pub repetition_penalty: f32,
    /// How many of the most recent history tokens the penalty looks at; `0` = none.
    pub repeat_last_n: usize,
    /// Subtracted from a token's logit once per time it was generated; `0` = off
    /// (OpenAI's `frequency_penalty`).
    pub frequency_penalty: f32,
    /// Subtracted from the logit of every token generated at least once; `0` = off
    /// (OpenAI's `presence_penalty`).
    pub presence_penalty: f32,
    /// `(token id, bias)` pairs added to those tokens' logits before anything else
    /// (OpenAI's `logit_bias`; -inf bans the token); ids outside the logits are
    /// ignored. Empty = off.
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// Greedy decoding: deterministic and comparable with reference runs.
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

/// The ids a generation has seen, which the penalties look at: its prompt's, then the
/// ones it generated.
#[derive(Debug, Clone, Copy, Default)]
pub struct History<'a> {
    ids: &'a [u32],
    generated: usize,
}

impl<'a> History<'a> {
    /// `ids` whose last `generated` were generated (all of them if fewer).
    pub fn new(ids: &'a [u32], generated: usize) -> Self {
        Self {
            ids,
            generated: generated.min(ids.len()),
        }
    }

    /// Prompt ids only: nothing generated yet.
    pub fn prompt(ids: &'a [u32]) -> Self {
        Self::new(ids, 0)
    }

    /// The last `n` ids, prompt and generated alike.
    fn recent(&self, n: usize) -> &'a [u32] {
        &self.ids[self.ids.len().saturating_sub(n)..]
    }

    /// The generated ids.
    fn generated(&self) -> &'a [u32] {
        &self.ids[self.ids.len() - self.generated..]
    }
}

/// Picks tokens according to a [`SamplerConfig`]; owns the RNG state.
#[derive(Debug, Clone)]
pub struct Sampler {
    config: SamplerConfig,
    rng: ChaCha8Rng,
    /// What each draw reuses: block sums and the floor's selection buffers.
    scratch: Scratch,
    /// The random bits of the next draw, once asked for by a step that picks on its
    /// device ([`Sampler::device_pick`]), until a pick takes them.
    pending: Option<u32>,
}

impl Sampler {
    /// A sampler with a freshly seeded RNG; rejects out-of-range settings.
    pub fn new(config: SamplerConfig) -> Result<Self, SamplerError> {
        let c = &config;
        let (t, p, penalty) = (c.temperature, c.top_p, c.repetition_penalty);
        let worst_bias = c
            .logit_bias
            .iter()
            .map(|&(_, b)| b)
            .find(|&b| b.is_nan() || b == f32::INFINITY)
            .unwrap_or(0.0);
        let rules = [
            (
                "temperature",
                t,
                t.is_finite() && t >= 0.0,
                "finite and >= 0",
            ),
            ("top_p", p, p > 0.0 && p <= 1.0, "in (0, 1]"),
            (
                "min_p",
                c.min_p,
                (0.0..=1.0).contains(&c.min_p),
                "in [0, 1]",
            ),
            (
                "repetition_penalty",
                penalty,
                penalty.is_finite() && penalty > 0.0,
                "finite and > 0",
            ),
            (
                "frequency_penalty",
                c.frequency_penalty,
                c.frequency_penalty.is_finite(),
                "finite",
            ),
            (
                "presence_penalty",
                c.presence_penalty,
                c.presence_penalty.is_finite(),
                "finite",
            ),
            (
                "logit_bias",
                worst_bias,
                worst_bias.is_finite(),
                "finite, or -inf to ban a token",
            ),
        ];
        if let Some(&(field, value, _, expected)) = rules.iter().find(|r| !r.2) {
            return Err(SamplerError::InvalidConfig {
                field,
                value,
                expected,
            });
        }
        let seed = config.seed;
        Ok(Self {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            scratch: Scratch::default(),
            pending: None,
        })
    }

    /// The settings this sampler was built with.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Picks the next token from `logits` (indexed by id). `history` holds the ids seen
    /// so far (prompt and generated); ids outside `logits` are ignored by the penalties.
    pub fn sample(&mut self, logits: &[f32], history: History<'_>) -> Result<u32, SamplerError> {
        if logits.is_empty() {
            return Err(SamplerError::EmptyLogits);
        }
        // Read in place unless a bias or penalty edits a copy. The edits sanitize the
        // logits they change, and `greedy` and `draw` every logit they read: the graph's
        // `Draw` picks the same way after the same edits.
        let edited: Vec<f32>;
        let logits = if self.adjusts() {
            let mut copy = logits.to_vec();
            edit::apply(&self.edits(history), &mut copy);
            edited = copy;
            &edited[..]
        } else {
            logits
        };
        let picked = if self.picks_greedily() {
            greedy(logits)
        } else {
            let (t, min_p) = (self.config.temperature, self.config.min_p);
            let (cut, bits) = (self.cut(), self.take_bits());
            draw(logits, t, min_p, cut, bits, &mut self.scratch)
        };
        picked
            .map(|id| id as u32)
            .ok_or(SamplerError::NoCandidates(logits.len()))
    }

    /// Whether each pick is the greatest logit (temperature 0 or top-k 1), after any
    /// bias and penalties.
    fn picks_greedily(&self) -> bool {
        self.config.temperature == 0.0 || self.config.top_k == 1
    }

    /// What top-k and top-p keep, as a draw cuts it ([`crate::backend::cpu::cut`]).
    fn cut(&self) -> Cut {
        Cut::new(self.config.top_k, self.config.top_p)
    }

    /// The random bits of the next draw: those a step asked for ([`Sampler::device_bits`])
    /// and has not yet returned a pick for, else fresh ones.
    fn take_bits(&mut self) -> u32 {
        self.pending.take().unwrap_or_else(|| self.rng.next_u32())
    }

    /// The logit edits of this sampler's bias and penalties after `history`, held
    /// inline for a step's `Draw` settings: `None` when they are more than
    /// [`crate::graph::DRAW_EDITS`] (the logits then come back for the CPU to edit).
    fn device_edits(&self, history: History<'_>) -> Option<Edits> {
        if !self.adjusts() {
            return Some(Edits::NONE);
        }
        Edits::of(&self.edits(history))
    }

    /// The settings of the pick a device makes from the logits it computed (the
    /// graph's `Draw`), after `history`: the greedy pick or a draw ([`draw`]'s rule, with
    /// the random bits it will use), after the edits the bias and penalties make; `None`
    /// when those are too many to carry. Plain greedy decoding is
    /// [`Sampler::is_greedy`]'s.
    pub fn device_pick(&mut self, history: History<'_>) -> Option<DrawSettings> {
        let edits = self.device_edits(history)?;
        if self.picks_greedily() {
            return Some(DrawSettings::greedy(edits));
        }
        let c = &self.config;
        let (t, min_p, cut) = (c.temperature, c.min_p, self.cut());
        let settings = DrawSettings::new(t, min_p, cut, self.device_bits())?;
        Some(settings.with_edits(edits))
    }

    /// The random bits the next pick draws with, for a step that picks on its device:
    /// drawn once and kept until [`Sampler::took_device_pick`] (or a pick here) uses
    /// them, so the stream is consumed alike wherever the pick is made.
    pub fn device_bits(&mut self) -> u32 {
        *self.pending.get_or_insert_with(|| self.rng.next_u32())
    }

    /// A device's pick used the bits [`Sampler::device_bits`] gave (a greedy pick
    /// asked for none).
    pub fn took_device_pick(&mut self) {
        self.pending = None;
    }

    /// Whether every pick is plain greedy decoding (temperature 0 or top-k 1, nothing
    /// adjusting the logits): [`crate::backend::cpu::greedy`]'s rule, which a device's
    /// argmax after the head computes the same, so the logits need not come back.
    pub fn is_greedy(&self) -> bool {
        self.picks_greedily() && !self.adjusts()
    }

    /// Whether any bias or penalty can change a logit.
    fn adjusts(&self) -> bool {
        let c = &self.config;
        (c.repetition_penalty != 1.0 && c.repeat_last_n != 0)
            || c.frequency_penalty != 0.0
            || c.presence_penalty != 0.0
            || !c.logit_bias.is_empty()
    }

    /// The edits, in order, that add the logit biases, then apply the repetition penalty
    /// once to each distinct id among the last `repeat_last_n` history entries, then
    /// subtract the frequency penalty per generation of each generated id and the
    /// presence penalty once. The biased logits are what the penalties see (vLLM's
    /// order); a biased -inf stays so.
    fn edits(&self, history: History<'_>) -> Vec<Edit> {
        let c = &self.config;
        let mut out = Vec::new();
        let bias = c.logit_bias.iter();
        out.extend(bias.map(|&(id, bias)| Edit::new(id, EditOp::Add, bias)));
        if c.repetition_penalty != 1.0 && c.repeat_last_n != 0 {
            let mut recent = history.recent(c.repeat_last_n).to_vec();
            recent.sort_unstable();
            recent.dedup();
            let penalty = c.repetition_penalty;
            out.extend(
                recent
                    .into_iter()
                    .map(|id| Edit::new(id, EditOp::Scale, penalty)),
            );
        }
        if c.frequency_penalty != 0.0 || c.presence_penalty != 0.0 {
            let mut generated = history.generated().to_vec();
            generated.sort_unstable();
            for run in generated.chunk_by(|a, b| a == b) {
                let times = run.len() as f32;
                let amount = times * c.frequency_penalty + c.presence_penalty;
                out.push(Edit::new(run[0], EditOp::Sub, amount));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{argmax, sanitize};

    fn sampler(config: SamplerConfig) -> Sampler {
        Sampler::new(config).unwrap()
    }

    fn with_temp(temperature: f32) -> SamplerConfig {
        SamplerConfig {
            temperature,
            seed: 7,
            ..SamplerConfig::default()
        }
    }

    /// Logits whose softmax at temperature 1 is exactly `probs`.
    fn logits_for(probs: &[f32]) -> Vec<f32> {
        probs.iter().map(|p| p.ln()).collect()
    }

    /// How often each id is drawn in `n` samples.
    fn histogram(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<usize> {
        let mut counts = vec![0; logits.len()];
        for _ in 0..n {
            counts[s.sample(logits, History::default()).unwrap() as usize] += 1;
        }
        counts
    }

    #[test]
    fn greedy_is_argmax_with_ties_to_lowest_id() {
        let mut s = sampler(SamplerConfig::default());
        assert_eq!(
            s.sample(&[0.1, 3.0, -2.0, 3.0], History::default())
                .unwrap(),
            1
        );
        assert_eq!(s.sample(&[5.0, 5.0], History::default()).unwrap(), 0);
        assert_eq!(
            s.sample(&[-1.0, -0.5, -0.5], History::default()).unwrap(),
            1
        );
    }

    /// The pairwise rule `argmax` replaces: the largest by `total_cmp`, ties to the
    /// lowest index.
    fn argmax_by_comparisons(values: &[f32]) -> Option<usize> {
        (0..values.len()).min_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)))
    }

    /// A xorshift64 generator started at `state`.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// `len` logits drawn with `next`: five in eight from a few distinct values (so the
    /// maximum repeats across chunks), `specials` in eight from `special`, the rest
    /// random bit patterns.
    fn mixed_logits(
        next: &mut impl FnMut() -> u64,
        len: usize,
        special: &[f32],
        specials: u64,
    ) -> Vec<f32> {
        (0..len)
            .map(|_| match next() % 8 {
                0..=4 => (next() % 5) as f32 - 2.0,
                r if r < 5 + specials => special[(next() % special.len() as u64) as usize],
                _ => f32::from_bits(next() as u32),
            })
            .collect()
    }

    #[test]
    fn argmax_is_the_total_order_maximum_with_ties_to_the_lowest_index() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let special = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MAX,
            f32::MIN_POSITIVE,
        ];
        for len in [0, 1, 2, 63, 64, 65, 200, 49152] {
            for round in 0..20 {
                let values = mixed_logits(&mut next, len, &special, 1);
                assert_eq!(
                    argmax(&values),
                    argmax_by_comparisons(&values),
                    "len {len}, round {round}"
                );
            }
        }
        assert_eq!(argmax(&[-0.0, 0.0, 0.0]), Some(1));
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), Some(0));
    }

    /// Greedy sampling reads the logits in place; it picks what the copy it replaced
    /// picked: the total-order maximum of the sanitized logits, ties to the lowest id.
    #[test]
    fn greedy_in_place_is_the_maximum_of_the_sanitized_logits() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let special = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MAX,
        ];
        let mut greedy = sampler(SamplerConfig::default());
        for len in [1, 2, 63, 64, 65, 200, 49152] {
            for round in 0..20 {
                let values = mixed_logits(&mut next, len, &special, 2);
                let sanitized: Vec<f32> = values.iter().copied().map(sanitize).collect();
                let expected = argmax_by_comparisons(&sanitized)
                    .filter(|&i| sanitized[i] > f32::NEG_INFINITY)
                    .map(|i| i as u32);
                assert_eq!(
                    greedy.sample(&values, History::default()).ok(),
                    expected,
                    "len {len}, round {round}"
                );
            }
        }
    }

    #[test]
    fn greedy_fails_only_when_every_logit_is_minus_infinity_or_nan() {
        let mut s = sampler(SamplerConfig::default());
        let none = [f32::NEG_INFINITY, f32::NAN, f32::NEG_INFINITY];
        assert_eq!(
            s.sample(&none, History::default()),
            Err(SamplerError::NoCandidates(3))
        );
        let one = [f32::NAN, f32::NEG_INFINITY, -1e30, f32::NAN];
        assert_eq!(s.sample(&one, History::default()).unwrap(), 2);
        assert_eq!(
            s.sample(&[f32::INFINITY, f32::MAX], History::default())
                .unwrap(),
            0
        );
    }

    #[test]
    fn top_k_one_equals_greedy_at_any_temperature() {
        let logits = [0.3, 2.5, 2.5, 1.0, -4.0];
        for temperature in [0.1, 1.0, 5.0, 100.0] {
            let mut s = sampler(SamplerConfig {
                top_k: 1,
                ..with_temp(temperature)
            });
            for _ in 0..50 {
                assert_eq!(s.sample(&logits, History::default()).unwrap(), 1);
            }
        }
    }

    #[test]
    fn same_seed_reproduces_the_sequence() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = sampler(SamplerConfig {
                seed,
                ..with_temp(1.0)
            });
            (0..64)
                .map(|_| s.sample(&logits, History::default()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn draws_follow_the_distribution() {
        let mut s = sampler(with_temp(1.0));
        let counts = histogram(&mut s, &logits_for(&[0.75, 0.25]), 4000);
        let share = counts[0] as f64 / 4000.0;
        assert!((0.72..0.78).contains(&share), "{counts:?}");
    }

    /// Pearson's chi-square of `counts` against the probabilities `expected`.
    fn chi_square(counts: &[usize], expected: &[f64]) -> f64 {
        let n = counts.iter().sum::<usize>() as f64;
        let terms = counts.iter().zip(expected);
        terms
            .map(|(&c, &p)| (c as f64 - n * p).powi(2) / (n * p))
            .sum()
    }

    /// Temperature sampling draws by the softmax of the logits over T: the frequencies
    /// of 20000 seeded draws pass a chi-square test at p = 0.001 (a wrong temperature
    /// or a biased draw gives hundreds).
    #[test]
    fn temperature_draws_pass_a_chi_square_test() {
        let probs = [0.3, 0.25, 0.2, 0.15, 0.07, 0.03];
        for (temperature, seed) in [(1.0f32, 7), (0.7, 8), (2.5, 9)] {
            let mut s = sampler(SamplerConfig {
                seed,
                ..with_temp(temperature)
            });
            let counts = histogram(&mut s, &logits_for(&probs), 20_000);
            let weights: Vec<f64> = probs
                .iter()
                .map(|&p| f64::from(p).powf(1.0 / f64::from(temperature)))
                .collect();
            let total: f64 = weights.iter().sum();
            let expected: Vec<f64> = weights.iter().map(|w| w / total).collect();
            // 20.52: the 0.999 quantile of chi-square with 5 degrees of freedom.
            let chi2 = chi_square(&counts, &expected);
            assert!(chi2 < 20.52, "T {temperature}: chi2 {chi2}, {counts:?}");
        }
    }

    /// Top-p draws only from the nucleus, in proportion to the nucleus's own weights.
    #[test]
    fn top_p_draws_pass_a_chi_square_test_over_the_nucleus() {
        let mut s = sampler(SamplerConfig {
            top_p: 0.75,
            ..with_temp(1.0)
        });
        let counts = histogram(&mut s, &logits_for(&[0.2, 0.4, 0.1, 0.3]), 20_000);
        assert_eq!(counts[2], 0, "{counts:?}");
        let kept = [counts[0], counts[1], counts[3]];
        // 13.82: the 0.999 quantile of chi-square with 2 degrees of freedom.
        let chi2 = chi_square(&kept, &[2.0 / 9.0, 4.0 / 9.0, 3.0 / 9.0]);
        assert!(chi2 < 13.82, "chi2 {chi2}, {counts:?}");
    }

    #[test]
    fn top_p_half_keeps_only_the_top_token() {
        let logits = logits_for(&[0.6, 0.3, 0.1]);
        let mut s = sampler(SamplerConfig {
            top_p: 0.5,
            ..with_temp(1.0)
        });
        assert_eq!(histogram(&mut s, &logits, 500), vec![500, 0, 0]);
        let mut s = sampler(SamplerConfig {
            top_p: 0.85,
            ..with_temp(1.0)
        });
        let counts = histogram(&mut s, &logits, 500);
        assert!(
            counts[0] > 0 && counts[1] > 0 && counts[2] == 0,
            "{counts:?}"
        );
    }

    #[test]
    fn min_p_drops_tokens_below_the_fraction_of_the_best() {
        let logits = logits_for(&[0.5, 0.3, 0.2]);
        let mut s = sampler(SamplerConfig {
            min_p: 0.5,
            ..with_temp(1.0)
        });
        let counts = histogram(&mut s, &logits, 1000);
        assert!(
            counts[0] > 0 && counts[1] > 0 && counts[2] == 0,
            "{counts:?}"
        );
    }

    #[test]
    fn top_k_limits_candidates() {
        let logits = logits_for(&[0.4, 0.3, 0.2, 0.1]);
        let mut s = sampler(SamplerConfig {
            top_k: 2,
            ..with_temp(1.0)
        });
        let counts = histogram(&mut s, &logits, 1000);
        assert!(
            counts[0] > 0 && counts[1] > 0 && counts[2] + counts[3] == 0,
            "{counts:?}"
        );
    }

    /// Top-k keeps every token tied with the k-th (as Hugging Face's and vLLM's do), so
    /// a device can cut by a floor alone.
    #[test]
    fn top_k_keeps_every_token_tied_with_the_kth() {
        let logits = [2.0, 1.0, 1.0, 0.0];
        let mut s = sampler(SamplerConfig {
            top_k: 2,
            ..with_temp(1.0)
        });
        let counts = histogram(&mut s, &logits, 2000);
        assert!(
            counts[0] > 0 && counts[1] > 0 && counts[2] > 0 && counts[3] == 0,
            "{counts:?}"
        );
    }

    /// Bias and penalties travel to a device as the edits the CPU makes, in its order,
    /// for a draw or a greedy pick; past the limit the logits come back instead.
    #[test]
    fn bias_and_penalties_travel_to_the_device_as_edits_up_to_a_limit() {
        let config = SamplerConfig {
            repetition_penalty: 1.3,
            repeat_last_n: 4,
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            logit_bias: vec![(5, 2.0)],
            ..with_temp(0.8)
        };
        let ids = [9, 1, 2, 2, 3, 1, 3];
        let history = History::new(&ids, 3);
        let mut s = sampler(config.clone());
        let pick = s.device_pick(history).unwrap();
        let want = [
            Edit::new(5, EditOp::Add, 2.0),
            Edit::new(1, EditOp::Scale, 1.3),
            Edit::new(2, EditOp::Scale, 1.3),
            Edit::new(3, EditOp::Scale, 1.3),
            Edit::new(1, EditOp::Sub, 0.75),
            Edit::new(3, EditOp::Sub, 1.25),
        ];
        assert_eq!(pick.edits(), want);
        assert_eq!(pick.temperature(), 0.8);
        // Their arithmetic is the sampler's: the same pick from the same logits.
        let logits: Vec<f32> = (0..10).map(|i| (i % 4) as f32 * 0.7 - 1.0).collect();
        let mut edited = logits.clone();
        edit::apply(pick.edits(), &mut edited);
        let greedy = SamplerConfig {
            temperature: 0.0,
            ..config.clone()
        };
        let mut g = sampler(greedy.clone());
        let on_device = g.device_pick(history).unwrap();
        assert_eq!(
            (on_device.temperature(), on_device.edits()),
            (0.0, &want[..])
        );
        let picked = g.sample(&logits, history).unwrap();
        assert_eq!(Some(picked as usize), crate::backend::cpu::greedy(&edited));
        // More edits than a step carries: the logits come back.
        let long: Vec<u32> = (0..crate::graph::DRAW_EDITS as u32 + 1).collect();
        let many = SamplerConfig {
            repeat_last_n: long.len(),
            ..greedy
        };
        let mut m = sampler(many);
        assert!(m.device_pick(History::prompt(&long)).is_none());
        assert!(m.device_pick(History::prompt(&long[..8])).is_some());
    }

    #[test]
    fn repetition_penalty_changes_the_choice() {
        let config = SamplerConfig {
            repetition_penalty: 1.2,
            repeat_last_n: 2,
            ..SamplerConfig::default()
        };
        let mut s = sampler(config);
        // 2.0 / 1.2 < 1.9: the repeated token loses.
        assert_eq!(s.sample(&[2.0, 1.9], History::prompt(&[0])).unwrap(), 1);
        assert_eq!(s.sample(&[2.0, 1.9], History::default()).unwrap(), 0);
        // Negative logits are multiplied: -1.0 * 1.2 < -1.1.
        assert_eq!(
            s.sample(&[-1.0, -1.1], History::prompt(&[0, 0, 0]))
                .unwrap(),
            1
        );
        // Outside the last-n window, and ids beyond the vocabulary, are ignored.
        assert_eq!(
            s.sample(&[2.0, 1.9], History::prompt(&[0, 5, 9999]))
                .unwrap(),
            0
        );
    }

    #[test]
    fn logit_bias_moves_and_bans_tokens() {
        let biased = |logit_bias: Vec<(u32, f32)>| {
            sampler(SamplerConfig {
                logit_bias,
                ..SamplerConfig::default()
            })
        };
        let logits = [2.0, 1.9, 1.0];
        assert_eq!(
            biased(vec![(2, 1.5)]).sample(&logits, History::default()),
            Ok(2)
        );
        // -100 all but bans the best token, as OpenAI documents; ids past the logits
        // are ignored.
        let mut banned = biased(vec![(0, -100.0), (7, 100.0)]);
        assert_eq!(banned.sample(&logits, History::default()), Ok(1));
        // Sampling draws only from what the bias leaves likely.
        let mut s = sampler(SamplerConfig {
            logit_bias: vec![(1, -100.0)],
            ..with_temp(1.0)
        });
        let counts = histogram(&mut s, &logits_for(&[0.5, 0.5]), 500);
        assert_eq!(counts, [500, 0]);
    }

    #[test]
    fn frequency_and_presence_penalties_count_generated_tokens_only() {
        let penalised = |frequency_penalty: f32, presence_penalty: f32| {
            sampler(SamplerConfig {
                frequency_penalty,
                presence_penalty,
                ..SamplerConfig::default()
            })
        };
        // Token 0 generated twice: 2.0 - 2·0.3 = 1.4 < 1.5.
        let logits = [2.0, 1.5];
        let ids = [1, 0, 0];
        let mut frequency = penalised(0.3, 0.0);
        assert_eq!(frequency.sample(&logits, History::new(&ids, 2)), Ok(1));
        // Generated once: 2.0 - 0.3 = 1.7 > 1.5.
        assert_eq!(frequency.sample(&logits, History::new(&ids, 1)), Ok(0));
        // In the prompt only: no penalty.
        assert_eq!(frequency.sample(&logits, History::prompt(&ids)), Ok(0));
        // Presence counts once however often: 2.0 - 0.4 = 1.6 > 1.5, 2.0 - 0.6 < 1.5.
        assert_eq!(
            penalised(0.0, 0.4).sample(&logits, History::new(&ids, 2)),
            Ok(0)
        );
        assert_eq!(
            penalised(0.0, 0.6).sample(&logits, History::new(&ids, 2)),
            Ok(1)
        );
        // Negative values reward repeats: 1.5 + 2·0.3 > 2.0.
        let rewarded = penalised(-0.3, 0.0).sample(&[2.0, 1.5], History::new(&[1, 1], 2));
        assert_eq!(rewarded, Ok(1));
    }

    #[test]
    fn nan_counts_as_minus_infinity() {
        let mut s = sampler(with_temp(1.0));
        for _ in 0..50 {
            assert_eq!(
                s.sample(&[f32::NAN, 0.5, f32::NAN], History::default())
                    .unwrap(),
                1
            );
        }
        let mut greedy = sampler(SamplerConfig::default());
        assert_eq!(
            greedy
                .sample(&[1.0, f32::INFINITY, f32::NAN], History::default())
                .unwrap(),
            1
        );
        let err = s
            .sample(&[f32::NAN, f32::NEG_INFINITY], History::default())
            .unwrap_err();
        assert_eq!(err, SamplerError::NoCandidates(2));
        assert_eq!(
            s.sample(&[], History::default()).unwrap_err(),
            SamplerError::EmptyLogits
        );
    }

    #[test]
    fn invalid_settings_are_named() {
        let bad = [
            SamplerConfig {
                temperature: -1.0,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                top_p: 0.0,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                min_p: 1.5,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                repetition_penalty: f32::NAN,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                frequency_penalty: f32::INFINITY,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                presence_penalty: f32::NAN,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                logit_bias: vec![(3, f32::NEG_INFINITY), (4, f32::INFINITY)],
                ..SamplerConfig::default()
            },
        ];
        let fields = [
            "temperature",
            "top_p",
            "min_p",
            "repetition_penalty",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
        ];
        for (config, field) in bad.into_iter().zip(fields) {
            let err = Sampler::new(config).unwrap_err();
            assert!(err.to_string().contains(field), "{err}");
        }
    }
}
