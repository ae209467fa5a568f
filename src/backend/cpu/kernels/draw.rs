//! A draw from a vocabulary at a temperature (decisions 164, 195, 196, 201): the
//! sanitized maximum, the floor top-k and top-p set ([`cut`]), each token's weight
//! relative to the maximum (0 below the floor and min-p) with the weights' sums by
//! blocks, then the token at a uniform point of their total by inverse CDF, walking
//! blocks before tokens. The sampler and the graph's `Draw` (a step that returns
//! tokens instead of logits) both pick with [`draw`], so a seed draws the same tokens
//! either way; the passes are compiled for the widest vectors the CPU allows and
//! compute the same bits at every width.

use super::argmax::{greedy, sanitize};
use super::check_len;
use super::cut::{self, Cut};
use super::edit;
use crate::backend::BackendError;
use crate::graph::DRAW_PARAMS;

/// Defines `fn $name` to run `$body` (an `#[inline(always)]` function of the same
/// arguments) compiled for the widest vectors that the CPU and the CPU backend's kernel
/// set (`SWITCHYARD_ISA` caps it) allow. The bodies are plain arithmetic with no fused
/// multiply-add, which Rust never contracts, so every width computes the same bits and
/// a seed draws the same tokens on every host.
macro_rules! wide {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? = $body:ident;) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                use crate::backend::cpu::isa::{allows, Isa};
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if allows(Isa::Avx512) && is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512 F, checked above.
                    return unsafe { avx512($($arg),*) };
                }
                if allows(Isa::Avx2) && is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

/// Tokens per block of [`block_sums`].
pub const BLOCK: usize = 64;
/// Below this exponent a weight is 0: a token e^87 times less likely than the best
/// (f32's normal range ends at e^-87.3).
const EXP_FLOOR: f32 = -87.0;

/// `e^x` for `x ≤ 0` (−inf included), within 2.4e-7 of the exact value relative to it
/// (about 2 ulp), and 0 below [`EXP_FLOOR`]. Branch-free (Cephes' `expf` polynomial,
/// the power of two built in the exponent bits), so a pass over the vocabulary
/// vectorizes where libm's `expf`, a call per token, took most of a draw.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
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

/// The sums of `weights` by [`BLOCK`]s into `sums` (cleared first).
pub fn block_sums(weights: &[f32], sums: &mut Vec<f32>) {
    sums.clear();
    sums.extend(weights.chunks(BLOCK).map(block_sum));
}

/// Lanes of a block's sum: its tokens `i`, `i + LANES`, … add up in lane `i`, then the
/// lanes in order, so the sum is the same at every vector width.
const LANES: usize = 16;

/// One block's sum, in [`LANES`] so that it vectorizes.
#[inline(always)]
fn block_sum(block: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let whole = block.chunks_exact(LANES);
    let tail: f32 = whole.remainder().iter().sum();
    for c in whole {
        for l in 0..LANES {
            lanes[l] += c[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

wide! {
    /// The largest [`sanitize`]d logit (−inf when none is above it): in 32 lanes so
    /// that it vectorizes, where a fold through `f32::max` is one long dependent chain
    /// (decision 195). A maximum is the same in any order.
    fn sanitized_max(logits: &[f32]) -> f32 = sanitized_max_body;
}

#[inline(always)]
fn sanitized_max_body(logits: &[f32]) -> f32 {
    // Sanitized values hold no NaN, so a comparison is the maximum.
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let mut lanes = [f32::NEG_INFINITY; 32];
    let whole = logits.chunks_exact(32);
    let tail = whole
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &l| larger(m, sanitize(l)));
    for c in whole {
        for l in 0..32 {
            lanes[l] = larger(lanes[l], sanitize(c[l]));
        }
    }
    lanes.into_iter().fold(tail, larger)
}

wide! {
    /// Each token's weight `e^((l − max)/T)` relative to the best (`max`, the
    /// [`sanitized_max`]), 0 below `min_p` (0 for none) and for a logit below `lowest`
    /// (the [`cut::floor`]; −∞ for none), into `weights`, and their sums by [`BLOCK`]s
    /// into `sums` (both cleared first), in one pass. Divided, not multiplied by 1/T:
    /// a tiny T makes 1/T infinite and 0·inf NaN.
    fn weigh(
        logits: &[f32],
        max: f32,
        t: f32,
        min_p: f32,
        lowest: f32,
        weights: &mut Vec<f32>,
        sums: &mut Vec<f32>
    ) = weigh_body;
}

#[inline(always)]
fn weigh_body(
    logits: &[f32],
    max: f32,
    t: f32,
    min_p: f32,
    lowest: f32,
    weights: &mut Vec<f32>,
    sums: &mut Vec<f32>,
) {
    weigh_into(logits, max, t, min_p, lowest, Some(weights), sums)
}

wide! {
    /// [`weigh`]'s block sums alone, the weights not kept: what a draw needs before it
    /// recomputes the weights of the one block its point falls in.
    fn sum_weights(
        logits: &[f32],
        max: f32,
        t: f32,
        min_p: f32,
        lowest: f32,
        sums: &mut Vec<f32>
    ) = sum_weights_body;
}

#[inline(always)]
fn sum_weights_body(
    logits: &[f32],
    max: f32,
    t: f32,
    min_p: f32,
    lowest: f32,
    sums: &mut Vec<f32>,
) {
    weigh_into(logits, max, t, min_p, lowest, None, sums)
}

/// [`weigh`], keeping the weights only where `weights` is given.
#[inline(always)]
fn weigh_into(
    logits: &[f32],
    max: f32,
    t: f32,
    min_p: f32,
    lowest: f32,
    weights: Option<&mut Vec<f32>>,
    sums: &mut Vec<f32>,
) {
    // x / 1 is x: the default temperature skips the division, and a min-p of 0 keeps
    // every weight (none is below 0): same bits as [`weight_of`], less work.
    let kept = |l: f32| kept(l, lowest);
    match (t == 1.0, min_p > 0.0) {
        (true, false) => weigh_by(logits, weights, sums, |l| exp_nonpositive(kept(l) - max)),
        (false, false) => weigh_by(logits, weights, sums, |l| {
            exp_nonpositive((kept(l) - max) / t)
        }),
        (true, true) => weigh_by(logits, weights, sums, |l| {
            at_floor(exp_nonpositive(kept(l) - max), min_p)
        }),
        (false, true) => weigh_by(logits, weights, sums, |l| {
            at_floor(exp_nonpositive((kept(l) - max) / t), min_p)
        }),
    }
}

/// One logit's weight as [`weigh`] computes it, token by token.
#[inline(always)]
pub(super) fn weight_of(l: f32, max: f32, t: f32, min_p: f32, lowest: f32) -> f32 {
    at_floor(exp_nonpositive((kept(l, lowest) - max) / t), min_p)
}

/// The [`sanitize`]d logit `l`, or −∞ (weight 0) where it lies below `lowest` (at most
/// `f32::MAX`): one comparison does both, as NaN compares false.
#[inline(always)]
fn kept(l: f32, lowest: f32) -> f32 {
    if l >= lowest {
        l.min(f32::MAX)
    } else {
        f32::NEG_INFINITY
    }
}

/// A weight `w` under min-p's `floor` (relative to the best's 1) as 0.
#[inline(always)]
fn at_floor(w: f32, floor: f32) -> f32 {
    if w < floor {
        0.0
    } else {
        w
    }
}

/// [`weigh`]'s pass with the weight of a logit given.
#[inline(always)]
fn weigh_by(
    logits: &[f32],
    mut weights: Option<&mut Vec<f32>>,
    sums: &mut Vec<f32>,
    weight: impl Fn(f32) -> f32,
) {
    if let Some(w) = weights.as_deref_mut() {
        w.clear();
        w.reserve(logits.len());
    }
    sums.clear();
    // Each block is computed into a buffer and copied out (`Vec::extend` is a call,
    // not compiled for the caller's vectors), its sum taken in registers on the way
    // in the order of [`block_sum`].
    let mut buf = [0f32; BLOCK];
    for block in logits.chunks(BLOCK) {
        let buf = &mut buf[..block.len()];
        let mut lanes = [0f32; LANES];
        let mut whole = buf.chunks_exact_mut(LANES);
        let mut from = block.chunks_exact(LANES);
        for (w, l) in (&mut whole).zip(&mut from) {
            for i in 0..LANES {
                w[i] = weight(l[i]);
                lanes[i] += w[i];
            }
        }
        let mut tail = 0f32;
        for (w, &l) in whole.into_remainder().iter_mut().zip(from.remainder()) {
            *w = weight(l);
            tail += *w;
        }
        sums.push(lanes.iter().sum::<f32>() + tail);
        if let Some(w) = weights.as_deref_mut() {
            w.extend_from_slice(buf);
        }
    }
}

/// The token at `r` (in `[0, Σ sums)`) of the cumulative `weights` whose block sums
/// are `sums`: the block whose span holds `r`, then the token within it. Where the
/// sums' rounding puts `r` past every span, the last token of weight is taken.
pub fn locate(weights: &[f32], sums: &[f32], r: f64) -> usize {
    let (b, r) = locate_block(sums, r);
    let start = b * BLOCK;
    start + within(&weights[start..weights.len().min(start + BLOCK)], r)
}

/// The block of `sums` whose span holds `r`, and `r` into it; where rounding puts `r`
/// past every span, the last block of weight and an infinite `r`.
fn locate_block(sums: &[f32], mut r: f64) -> (usize, f64) {
    let mut last = 0;
    for (b, &s) in sums.iter().enumerate() {
        let s = f64::from(s);
        if r < s {
            return (b, r);
        }
        r -= s;
        if s > 0.0 {
            last = b;
        }
    }
    (last, f64::INFINITY)
}

/// The token of `block` at `r` into its weight; its last token of weight where `r`
/// reaches past them.
fn within(block: &[f32], mut r: f64) -> usize {
    let mut last = 0;
    for (i, &w) in block.iter().enumerate().filter(|&(_, &w)| w > 0.0) {
        let w = f64::from(w);
        if r < w {
            return i;
        }
        r -= w;
        last = i;
    }
    last
}

/// A draw's uniform point in `[0, 1)` from 32 random bits: what the sampler's RNG
/// gives and a step's `Draw` input carries.
pub fn unit(bits: u32) -> f64 {
    f64::from(bits) / 4_294_967_296.0
}

/// What a draw reuses between calls: its block sums and [`cut::floor`]'s scratch.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    sums: Vec<f32>,
    cut: cut::Scratch,
}

/// The token a draw at temperature `t` (> 0) picks from `logits` at the uniform point
/// `unit(bits)` of the total of the weights at or above `min_p` (the best's weight is
/// 1; 0 keeps all) of the logits `cut` keeps: `None` when no logit is above −inf. Only
/// the block sums are kept; the weights of the one block the point falls in are
/// computed again, to the same bits.
pub fn draw(
    logits: &[f32],
    t: f32,
    min_p: f32,
    cut: Cut,
    bits: u32,
    scratch: &mut Scratch,
) -> Option<usize> {
    let max = sanitized_max(logits);
    if max == f32::NEG_INFINITY {
        return None;
    }
    let lowest = if cut.is_none() {
        f32::NEG_INFINITY
    } else {
        cut::floor(logits, max, t, cut, &mut scratch.cut)
    };
    let sums = &mut scratch.sums;
    sum_weights(logits, max, t, min_p, lowest, sums);
    let total: f64 = sums.iter().map(|&s| f64::from(s)).sum();
    let (b, r) = locate_block(sums, unit(bits) * total);
    let start = b * BLOCK;
    let block = &logits[start..logits.len().min(start + BLOCK)];
    let mut weights = [0f32; BLOCK];
    for (w, &l) in weights.iter_mut().zip(block) {
        *w = weight_of(l, max, t, min_p, lowest);
    }
    Some(start + within(&weights[..block.len()], r))
}

/// The graph's `Draw`: each `width`-wide row of `x` picked by [`draw`] at its row of
/// `params` ([`DRAW_PARAMS`] words: temperature bits, min-p bits, uniform bits, then the
/// [`Cut`]'s two words, then the row's [`edit::Edits`], applied first), or by
/// [`super::argmax::greedy`] where the temperature is 0; -1 for a row with no pick. Rows
/// run in parallel.
pub(in crate::backend::cpu) fn draw_rows(
    x: &[f32],
    width: usize,
    params: &[i32],
    out: &mut [i32],
) -> Result<(), BackendError> {
    use rayon::prelude::*;
    if width == 0 {
        return Err(BackendError::Input("draw over rows of no values".into()));
    }
    check_len("draw input", x.len(), out.len() * width)?;
    check_len("draw parameters", params.len(), out.len() * DRAW_PARAMS)?;
    x.par_chunks_exact(width)
        .zip(params.par_chunks_exact(DRAW_PARAMS))
        .zip(out.par_iter_mut())
        .try_for_each_init(
            || (Scratch::default(), Vec::new()),
            |(scratch, edited), ((row, p), pick)| {
                let (t, min_p) = (f32::from_bits(p[0] as u32), f32::from_bits(p[1] as u32));
                let cut = Cut::from_words(p[3] as u32, p[4] as u32);
                let row = match p[5] {
                    0 => row,
                    _ => {
                        edited.clear();
                        edited.extend_from_slice(row);
                        edit::apply_words(&p[5..], edited).map_err(BackendError::Input)?;
                        &edited[..]
                    }
                };
                let picked = if t > 0.0 {
                    draw(row, t, min_p, cut, p[2] as u32, scratch)
                } else {
                    greedy(row)
                };
                *pick = picked.map_or(-1, |i| i as i32);
                Ok(())
            },
        )
}

#[cfg(test)]
mod tests {
    use super::super::testutil::stream;
    use super::*;

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

    /// A draw keeps only the block sums and recomputes its block's weights, yet picks
    /// the token that locating the point in every kept weight picks, top-k and top-p
    /// cutting or not; what they cut is never drawn.
    #[test]
    fn a_draw_picks_what_locating_in_every_weight_picks() {
        let mut state = stream(0x0BAD_5EED);
        let mut next = move || (state() >> 32) as u32;
        let mut scratch = Scratch::default();
        for len in [1, 63, 64, 65, 1000, 49152] {
            let logits: Vec<f32> = (0..len)
                .map(|_| (next() % 24_000) as f32 / 1000.0)
                .collect();
            let max = sanitized_max(&logits);
            for (t, min_p, cut) in [
                (1.0, 0.0, Cut::NONE),
                (0.6, 0.0, Cut::NONE),
                (1.4, 0.1, Cut::NONE),
                (1.0, 0.0, Cut::new(40, 1.0)),
                (0.8, 0.0, Cut::new(0, 0.9)),
                (1.2, 0.05, Cut::new(50, 0.95)),
            ] {
                let (mut weights, mut sums) = (Vec::new(), Vec::new());
                let lowest = match cut.is_none() {
                    true => f32::NEG_INFINITY,
                    false => cut::floor(&logits, max, t, cut, &mut cut::Scratch::default()),
                };
                weigh(&logits, max, t, min_p, lowest, &mut weights, &mut sums);
                let total: f64 = sums.iter().map(|&s| f64::from(s)).sum();
                for _ in 0..50 {
                    let bits = next();
                    let want = locate(&weights, &sums, unit(bits) * total);
                    let got = draw(&logits, t, min_p, cut, bits, &mut scratch);
                    assert_eq!(got, Some(want), "{len} logits at T {t}, min-p {min_p}");
                    assert!(sanitize(logits[want]) >= lowest, "{cut:?} cut {want}");
                }
            }
        }
        let none = [f32::NAN, f32::NEG_INFINITY];
        assert_eq!(
            draw(&none, 1.0, 0.0, Cut::new(1, 0.5), 7, &mut scratch),
            None
        );
    }

    /// The vectorized passes compute, at whatever width this process's kernel set runs
    /// (CI runs the library's tests capped at avx2 and at scalar too), the bits of the
    /// token-by-token arithmetic: the maximum, each weight, and each block's sum in the
    /// order of `block_sum`.
    #[test]
    fn the_wide_passes_match_the_token_by_token_arithmetic_bit_for_bit() {
        let mut state = stream(0x00DD_BA11_5EED_1234);
        let mut next = move || state() >> 16;
        for len in [1, 15, 16, 17, 63, 64, 65, 200, 4097] {
            let mut logits: Vec<f32> = (0..len)
                .map(|_| (next() % 60_000) as f32 / 1000.0 - 30.0)
                .collect();
            if len > 3 {
                logits[1] = f32::NAN;
                logits[2] = f32::NEG_INFINITY;
            }
            let want_max = logits
                .iter()
                .map(|&l| sanitize(l))
                .fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(sanitized_max(&logits).to_bits(), want_max.to_bits());
            for (t, floor) in [
                (1.0, 0.0),
                (0.7, 0.0),
                (1.3, 0.0),
                (1e-30, 0.0),
                (1.0, 0.05),
                (0.8, 0.3),
            ] {
                let (mut weights, mut sums) = (Vec::new(), Vec::new());
                weigh(
                    &logits,
                    want_max,
                    t,
                    floor,
                    f32::NEG_INFINITY,
                    &mut weights,
                    &mut sums,
                );
                let want: Vec<u32> = logits
                    .iter()
                    .map(|&l| exp_nonpositive((sanitize(l) - want_max) / t))
                    .map(|w| if w < floor { 0.0f32 } else { w }.to_bits())
                    .collect();
                let got: Vec<u32> = weights.iter().map(|w| w.to_bits()).collect();
                assert_eq!(got, want, "weights of {len} at T {t}");
                let mut want_sums = Vec::new();
                block_sums(&weights, &mut want_sums);
                assert_eq!(sums, want_sums, "block sums of {len} at T {t}");
            }
        }
        let mut none = vec![f32::NAN; 40];
        none[7] = f32::NEG_INFINITY;
        assert_eq!(sanitized_max(&none), f32::NEG_INFINITY);
        assert_eq!(sanitized_max(&[f32::INFINITY, 1.0]), f32::MAX);
    }
}
