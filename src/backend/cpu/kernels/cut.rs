//! What top-k and top-p keep of a draw (decision 201): a floor under the sanitized
//! logits, found by selection on integers, which the GPU's `draw_cut.wgsl` finds the
//! same way, so a step that draws on its device may cut like the sampler.
//!
//! Top-k keeps every logit at or above the k-th largest (ties at it kept, as Hugging
//! Face's and vLLM's top-k do). Top-p then keeps every logit at or above the largest
//! value whose logits, with all above it, hold at least the fraction p of the weight
//! of what top-k kept (ties kept again). The weights are counted as integers in units
//! of 2^-24 of the best's (truncated: a token below 6e-8 of the best counts 0 toward
//! the nucleus, though it is still drawn with its weight if the floor keeps it) and
//! p as a fraction of 2^16, so the sums are exact and their order does not matter:
//! here by selection (`select_nth_unstable`), on the GPU by a radix selection a byte
//! at a time, and both find the same floor.

use super::argmax::{sanitize, total_key};

/// Top-p's fraction as a multiple of 2^-16, at which it stops cutting.
const WHOLE: u32 = 1 << 16;
/// A weight of 1 (the best's) in the integer units the nucleus is summed in.
const UNIT: f32 = 16_777_216.0;

/// A draw's top-k and top-p as the kernels read them: top-k's count (0: off) and
/// top-p as a multiple of 2^-16 in `1..=65536` (65,536: off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    top_k: u32,
    top_p: u32,
}

impl Cut {
    /// Keeps everything.
    pub const NONE: Cut = Cut {
        top_k: 0,
        top_p: WHOLE,
    };

    /// Top-k `top_k` (0: off; counts past `u32::MAX` keep everything as 0 does) and
    /// top-p `top_p` (1 or more: off), rounded to a multiple of 2^-16 of at least one.
    pub fn new(top_k: usize, top_p: f32) -> Cut {
        let fraction = (f64::from(top_p) * f64::from(WHOLE)).round();
        Cut {
            top_k: u32::try_from(top_k).unwrap_or(0),
            top_p: fraction.clamp(1.0, f64::from(WHOLE)) as u32,
        }
    }

    /// The cut a row of a step's `draw` input carries (its two words, as
    /// [`Cut::words`] wrote them); out-of-range words are brought into range.
    pub fn from_words(top_k: u32, top_p: u32) -> Cut {
        Cut {
            top_k,
            top_p: top_p.clamp(1, WHOLE),
        }
    }

    /// Top-k's count, then top-p's multiple of 2^-16.
    pub fn words(self) -> [u32; 2] {
        [self.top_k, self.top_p]
    }

    /// Whether it keeps everything whatever the logits.
    pub fn is_none(self) -> bool {
        self.top_k == 0 && self.top_p >= WHOLE
    }
}

/// A sanitized logit's place in value order as an unsigned integer.
fn order_key(l: f32) -> u32 {
    (total_key(sanitize(l)) as u32) ^ 0x8000_0000
}

/// The value whose [`order_key`] is `key`.
fn key_value(key: u32) -> f32 {
    let k = (key ^ 0x8000_0000) as i32;
    f32::from_bits((k ^ (((k >> 31) as u32) >> 1) as i32) as u32)
}

/// What [`floor`] reuses between calls.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    keys: Vec<u32>,
    weights: Vec<f32>,
    sums: Vec<f32>,
    nucleus: Vec<(u32, u32)>,
}

/// Orders `(key, mass)` items by key, largest first.
fn by_key_desc(a: &(u32, u32), b: &(u32, u32)) -> std::cmp::Ordering {
    b.0.cmp(&a.0)
}

/// Ranges [`highest_key`] sorts rather than splitting further.
const SORT_BELOW: usize = 64;

/// The largest key `v` for which `reached(Σ mass of the items with key ≥ v)` holds
/// (`reached` monotone in the sum), or `None` when it holds for no key. A selection by
/// mass rather than a sort: each round splits the undecided range at its middle by
/// `select_nth_unstable` and keeps the half where the running sum is reached (linear
/// time in all), and only the last few are sorted. The sums are integers, so the
/// order they are taken in does not matter, and ties need no rule: the first item of
/// any descending order whose running sum is reached has the same key.
fn highest_key(items: &mut [(u32, u32)], reached: impl Fn(u64) -> bool) -> Option<u32> {
    // items[..lo] lie above the answer, with mass `above`; it lies within lo..hi.
    let (mut lo, mut hi, mut above) = (0, items.len(), 0u64);
    while hi - lo > SORT_BELOW {
        let mid = lo + (hi - lo) / 2;
        items[lo..hi].select_nth_unstable_by(mid - lo, by_key_desc);
        let upper: u64 = items[lo..=mid].iter().map(|&(_, m)| u64::from(m)).sum();
        if reached(above + upper) {
            hi = mid + 1;
        } else {
            above += upper;
            lo = mid + 1;
        }
    }
    items[lo..hi].sort_unstable_by(by_key_desc);
    items[lo..hi].iter().find_map(|&(key, mass)| {
        above += u64::from(mass);
        reached(above).then_some(key)
    })
}

/// The lowest sanitized logit a draw at temperature `t` (> 0) from `logits`, whose
/// [`super::draw::sanitized_max`] is `max` (finite), keeps under `cut`; −∞ where it
/// keeps every logit.
pub fn floor(logits: &[f32], max: f32, t: f32, cut: Cut, scratch: &mut Scratch) -> f32 {
    let k = cut.top_k as usize;
    let p = u64::from(cut.top_p);
    let Scratch {
        keys,
        weights,
        sums,
        nucleus,
    } = scratch;
    nucleus.clear();
    if k > 0 && k <= logits.len() {
        keys.clear();
        keys.extend(logits.iter().map(|&l| order_key(l)));
        let (above, &mut kth, below) = keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
        if p >= u64::from(WHOLE) {
            return key_value(kth);
        }
        // What top-k keeps: the k largest keys and any tied with the k-th.
        let kept = above
            .iter()
            .chain([&kth])
            .chain(below.iter().filter(|&&b| b == kth));
        nucleus.extend(kept.filter_map(|&key| {
            let units = units(super::draw::weight_of(
                key_value(key),
                max,
                t,
                0.0,
                f32::NEG_INFINITY,
            ));
            (units > 0).then_some((key, units))
        }));
    } else if p >= u64::from(WHOLE) {
        return f32::NEG_INFINITY;
    } else {
        super::draw::weigh(logits, max, t, 0.0, f32::NEG_INFINITY, weights, sums);
        nucleus.extend(logits.iter().zip(weights.iter()).filter_map(|(&l, &w)| {
            let units = units(w);
            (units > 0).then(|| (order_key(l), units))
        }));
    }
    let total: u64 = nucleus.iter().map(|&(_, units)| u64::from(units)).sum();
    highest_key(nucleus, |sum| sum << 16 >= total * p).map_or(f32::NEG_INFINITY, key_value)
}

/// A weight (at most the best's 1) in the nucleus's integer units, truncated.
fn units(weight: f32) -> u32 {
    (weight * UNIT) as u32
}

#[cfg(test)]
mod tests {
    use super::super::testutil::stream;
    use super::*;

    /// The floor a sort finds: the k-th largest logit, then the logit at which the
    /// sorted weights' running sum reaches p of what top-k kept, both in the units the
    /// floor counts in.
    fn sorted_floor(logits: &[f32], t: f32, cut: Cut) -> f32 {
        let mut sorted: Vec<f32> = logits.iter().map(|&l| sanitize(l)).collect();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let max = sorted[0];
        let k = cut.top_k as usize;
        let kth = match k {
            0 => f32::NEG_INFINITY,
            k if k > sorted.len() => f32::NEG_INFINITY,
            k => sorted[k - 1],
        };
        if cut.top_p >= WHOLE {
            return kth;
        }
        let units = |l: f32| {
            (super::super::draw::weight_of(l, max, t, 0.0, f32::NEG_INFINITY) * UNIT) as u64
        };
        let kept: Vec<f32> = sorted
            .into_iter()
            .filter(|&l| l.total_cmp(&kth).is_ge())
            .collect();
        let total: u64 = kept.iter().map(|&l| units(l)).sum();
        let mut sum = 0;
        for &l in &kept {
            sum += units(l);
            if sum << 16 >= total * u64::from(cut.top_p) {
                return l;
            }
        }
        f32::NEG_INFINITY
    }

    #[test]
    fn the_selected_floor_is_the_one_a_sort_finds() {
        let mut state = stream(0xC0FF_EE00_1234_5678);
        let mut next = move || (state() >> 32) as u32;
        let mut scratch = Scratch::default();
        for len in [1, 2, 7, 64, 300, 5000, 49152] {
            let mut logits: Vec<f32> = (0..len)
                .map(|_| (next() % 4000) as f32 / 100.0 - 20.0)
                .collect();
            if len > 4 {
                logits[1] = f32::NAN;
                logits[2] = f32::NEG_INFINITY;
                logits[3] = logits[0];
            }
            let max = super::super::draw::sanitized_max(&logits);
            for (top_k, top_p) in [
                (0, 1.0),
                (1, 1.0),
                (2, 1.0),
                (40, 1.0),
                (len, 1.0),
                (len + 3, 1.0),
                (0, 0.9),
                (0, 0.5),
                (0, 1e-6),
                (40, 0.95),
                (3, 0.3),
            ] {
                for t in [1.0, 0.3, 2.5] {
                    let cut = Cut::new(top_k, top_p);
                    let want = sorted_floor(&logits, t, cut);
                    let got = floor(&logits, max, t, cut, &mut scratch);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{len} logits, top-k {top_k}, top-p {top_p}, T {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn ties_at_the_kth_logit_are_kept_and_out_of_range_settings_keep_all() {
        let logits = [1.0, 3.0, 2.0, 2.0, 0.5];
        let max = 3.0;
        let mut scratch = Scratch::default();
        assert_eq!(
            floor(&logits, max, 1.0, Cut::new(2, 1.0), &mut scratch),
            2.0
        );
        assert_eq!(
            floor(&logits, max, 1.0, Cut::new(1, 1.0), &mut scratch),
            3.0
        );
        let all = floor(&logits, max, 1.0, Cut::new(9, 1.0), &mut scratch);
        assert_eq!(all, f32::NEG_INFINITY);
        assert!(Cut::new(0, 1.0).is_none() && Cut::new(0, 7.0).is_none());
        assert_eq!(Cut::new(0, 0.0).words(), [0, 1]);
        assert_eq!(Cut::from_words(5, 0), Cut::from_words(5, 1));
        assert_eq!(Cut::new(0, 0.95).words(), [0, 62259]);
    }
}
