//! The arithmetic of sampling over a whole vocabulary without sorting it (decision
//! 164): each token's weight relative to the best in one vectorizable pass, the
//! weights summed in blocks so that a draw by inverse CDF walks blocks before tokens,
//! and the top-p nucleus found by selection on mass instead of a sort.

/// Tokens per block of [`block_sums`].
pub(super) const BLOCK: usize = 64;

/// Candidates [`nucleus`] sorts rather than splitting further.
const NUCLEUS_SORT: usize = 64;

/// Below this exponent a weight is 0: a token e^87 times less likely than the best
/// (f32's normal range ends at e^-87.3).
const EXP_FLOOR: f32 = -87.0;

/// `e^x` for `x ≤ 0` (−inf included), within 2.4e-7 of the exact value relative to it
/// (about 2 ulp), and 0 below [`EXP_FLOOR`]. Branch-free (Cephes' `expf` polynomial,
/// the power of two built in the exponent bits), so a pass over the vocabulary
/// vectorizes where libm's `expf`, a call per token, took most of a draw.
#[inline(always)]
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    // Adding 1.5·2^23 rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let clamped = x.max(EXP_FLOOR);
    let shifted = clamped * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    let r = clamped - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_2e-4_f32;
    let p = p * r + 1.398_2e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let k = shifted.to_bits() as i32 - MAGIC.to_bits() as i32;
    let scaled = e * f32::from_bits(((k + 127) << 23) as u32);
    if x < EXP_FLOOR {
        0.0
    } else {
        scaled
    }
}

/// The sums of `weights` by [`BLOCK`]s into `sums` (cleared first), each in eight
/// lanes so that it vectorizes.
pub(super) fn block_sums(weights: &[f32], sums: &mut Vec<f32>) {
    sums.clear();
    sums.extend(weights.chunks(BLOCK).map(|block| {
        let mut lanes = [0f32; 8];
        let whole = block.chunks_exact(8);
        let tail: f32 = whole.remainder().iter().sum();
        for c in whole {
            for l in 0..8 {
                lanes[l] += c[l];
            }
        }
        lanes.iter().sum::<f32>() + tail
    }));
}

/// The token at `r` (in `[0, Σ sums)`) of the cumulative `weights` whose block sums
/// are `sums`: the block whose span holds `r`, then the token within it. Where the
/// sums' rounding puts `r` past every span, the last token of weight is taken.
pub(super) fn locate(weights: &[f32], sums: &[f32], mut r: f64) -> usize {
    let mut last = 0;
    for (b, &s) in sums.iter().enumerate() {
        let s = f64::from(s);
        if r < s {
            return within(weights, b, r);
        }
        r -= s;
        if s > 0.0 {
            last = b;
        }
    }
    within(weights, last, f64::INFINITY)
}

/// The token of block `b` at `r` into the block's weight; its last token of weight
/// where `r` reaches past them.
fn within(weights: &[f32], b: usize, mut r: f64) -> usize {
    let start = b * BLOCK;
    let block = &weights[start..weights.len().min(start + BLOCK)];
    let mut last = 0;
    for (i, &w) in block.iter().enumerate().filter(|&(_, &w)| w > 0.0) {
        let w = f64::from(w);
        if r < w {
            return start + i;
        }
        r -= w;
        last = i;
    }
    start + last
}

/// Orders candidates by logit, highest first; equal logits by lowest id.
pub(super) fn by_logit_desc(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Moves the nucleus of `cands` (ids with sanitized logits) to the front and returns
/// its size: the fewest best tokens, by logit then lowest id, whose weights
/// (`weights[id]`) reach `target`, else all of them. A selection by mass rather than
/// a sort: each round splits the undecided range at its middle by
/// `select_nth_unstable` and keeps the half where the running sum crosses `target`
/// (linear time in all), and only the last 64 are sorted. The nucleus's tokens end up
/// ahead of every other, in no particular order before its last few.
pub(super) fn nucleus(cands: &mut [(u32, f32)], weights: &[f32], target: f64) -> usize {
    let weight = |c: &(u32, f32)| f64::from(weights[c.0 as usize]);
    // cands[..lo] are in the nucleus with weight `cum` < target; it ends within lo..hi.
    let (mut lo, mut hi, mut cum) = (0, cands.len(), 0.0f64);
    while hi - lo > NUCLEUS_SORT {
        let mid = lo + (hi - lo) / 2;
        cands[lo..hi].select_nth_unstable_by(mid - lo, by_logit_desc);
        let upper: f64 = cands[lo..=mid].iter().map(weight).sum();
        if cum + upper >= target {
            hi = mid + 1;
        } else {
            cum += upper;
            lo = mid + 1;
        }
    }
    cands[lo..hi].sort_unstable_by(by_logit_desc);
    for (i, c) in cands[lo..hi].iter().enumerate() {
        cum += weight(c);
        if cum >= target {
            return lo + i + 1;
        }
    }
    // Summed in another order, the halves' weights may round past `target` where the
    // token-by-token sum stops just short of it: then the range is the nucleus.
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_down_to_the_floor_and_zero_below() {
        let mut x = 0.0f32;
        while x > EXP_FLOOR {
            let want = f64::from(x).exp();
            let got = f64::from(exp_nonpositive(x));
            assert!(
                ((got - want) / want).abs() < 2.4e-7,
                "e^{x}: {got} against {want}"
            );
            x -= 0.001_37;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        for below in [-87.01, -100.0, f32::MIN, f32::NEG_INFINITY] {
            assert_eq!(exp_nonpositive(below), 0.0, "{below}");
        }
    }

    #[test]
    fn a_point_is_located_in_the_span_of_its_token() {
        // Blocks of zeros, a partial last block, and tokens of weight 0 inside blocks.
        let weights: Vec<f32> = (0..300)
            .map(|i| {
                if i % 7 == 0 || (64..128).contains(&i) {
                    0.0
                } else {
                    (i % 5) as f32 + 0.5
                }
            })
            .collect();
        let mut sums = Vec::new();
        block_sums(&weights, &mut sums);
        assert_eq!(sums.len(), 5);
        assert_eq!(sums[1], 0.0);
        let mut start = 0.0f64;
        for (i, &w) in weights.iter().enumerate() {
            if w > 0.0 {
                // The middle of each token's span is that token.
                assert_eq!(locate(&weights, &sums, start + f64::from(w) / 2.0), i);
                start += f64::from(w);
            }
        }
        // Past the end: the last token of weight.
        assert_eq!(locate(&weights, &sums, start * 2.0), 299);
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

    /// The nucleus selected by mass holds the tokens of the prefix a full sort gives,
    /// across the splits and with tied logits.
    #[test]
    fn the_selected_nucleus_is_the_sorted_prefix() {
        let mut next = xorshift(0x51A7_E5EE_D00D_F00D);
        for len in [1, 5, 64, 65, 200, 1000, 5000] {
            for top_p in [0.05, 0.3, 0.9, 0.99, 0.9999] {
                let logits: Vec<f32> = (0..len)
                    .map(|_| (next() % 400) as f32 / 40.0 - 5.0)
                    .collect();
                let weights: Vec<f32> = logits.iter().map(|&l| (l - 5.0).exp()).collect();
                let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
                let target = top_p * total;
                let mut all: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| (i as u32, l))
                    .collect();
                let mut cands = all.clone();
                all.sort_unstable_by(by_logit_desc);
                let mut cum = 0.0;
                let want = all
                    .iter()
                    .position(|&(id, _)| {
                        cum += f64::from(weights[id as usize]);
                        cum >= target
                    })
                    .map_or(len, |i| i + 1);
                let keep = nucleus(&mut cands, &weights, target);
                assert_eq!(keep, want, "len {len}, top_p {top_p}");
                cands[..keep].sort_unstable_by(by_logit_desc);
                assert_eq!(cands[..keep], all[..want], "len {len}, top_p {top_p}");
            }
        }
    }
}
