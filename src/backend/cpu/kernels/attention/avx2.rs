//! AVX2 attention loops for head sizes of whole registers (64 and 128): scores of eight
//! cache positions at a time in eight vertical accumulators, summed across with one
//! transpose (no horizontal sum per position); the softmax with a vectorised `exp`;
//! each output row held in eight registers while the positions stream past. Keys and
//! values are widened to f32 once per task, then read by every query row of it.

use std::arch::x86_64::*;

use super::{GroupTask, Rows, Scratch};
use crate::backend::cpu::kernels::vexp::exp_avx2;
use crate::backend::KV_BLOCK;

impl GroupTask<'_> {
    /// The tiled loops where the head size allows, else the plain ones compiled for
    /// AVX2. Same results as [`Self::run`] but for the order of each dot product's sum
    /// and the vectorised `exp`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn run_avx2(&self, scratch: &mut Scratch, out: &mut [f32]) {
        match self.head_dim {
            64 => self.tiled::<8>(scratch, out),
            128 => self.tiled::<16>(scratch, out),
            _ => self.run::<true>(scratch, out),
        }
    }

    /// [`Self::run_avx2`] for head size `8·D`.
    #[inline(always)]
    unsafe fn tiled<const D: usize>(&self, scratch: &mut Scratch, out: &mut [f32]) {
        let dh = 8 * D;
        let rows = out.len() / dh;
        let tokens = rows / self.group;
        let seen_max = self.first_seen + tokens - 1;
        let seen = |r: usize| self.first_seen + r / self.group;
        let Scratch {
            scores,
            keys,
            values,
            ..
        } = scratch;
        // Keys padded with zeros to whole blocks of eight positions.
        widen_all(
            self.keys,
            self.kv_off,
            dh,
            seen_max.next_multiple_of(8),
            seen_max,
            keys,
        );
        widen_all(self.values, self.kv_off, dh, seen_max, seen_max, values);
        scores.clear();
        scores.resize(rows * seen_max, 0.0);
        let scale = _mm256_set1_ps(self.scale);
        for r in 0..rows {
            let q = self.query(r).as_ptr();
            let n = seen(r);
            let row = &mut scores[r * seen_max..][..n];
            for j0 in (0..n).step_by(8) {
                let k = keys.as_ptr().add(j0 * dh);
                let mut acc = [_mm256_setzero_ps(); 8];
                for c in 0..D {
                    let qc = _mm256_loadu_ps(q.add(8 * c));
                    for (p, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k.add(p * dh + 8 * c)), *acc);
                    }
                }
                let s = _mm256_mul_ps(scale, sum_across(acc));
                if j0 + 8 <= n {
                    _mm256_storeu_ps(row.as_mut_ptr().add(j0), s);
                } else {
                    let mut tail = [0f32; 8];
                    _mm256_storeu_ps(tail.as_mut_ptr(), s);
                    row[j0..].copy_from_slice(&tail[..n - j0]);
                }
            }
        }
        self.normalise(scores, seen_max, |probs| {
            // SAFETY: this function's caller has AVX2 and FMA.
            unsafe { softmax_avx2(probs) }
        });
        for r in 0..rows {
            let probs = &scores[r * seen_max..][..seen(r)];
            for c0 in (0..D).step_by(8) {
                let mut acc = [_mm256_setzero_ps(); 8];
                for (j, &p) in probs.iter().enumerate() {
                    let p = _mm256_set1_ps(p);
                    let v = values.as_ptr().add(j * dh + 8 * c0);
                    for (c, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(p, _mm256_loadu_ps(v.add(8 * c)), *acc);
                    }
                }
                let dst = out.as_mut_ptr().add(r * dh + 8 * c0);
                for (c, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(dst.add(8 * c), *acc);
                }
            }
        }
    }
}

/// `buf` = positions `0..positions` of `rows` (each `dh` values from `off`) as f32,
/// zeros for the positions from `filled`.
#[inline(always)]
fn widen_all(
    rows: Rows<'_>,
    off: usize,
    dh: usize,
    positions: usize,
    filled: usize,
    buf: &mut Vec<f32>,
) {
    buf.clear();
    buf.resize(positions * dh, 0.0);
    for (j, dst) in buf.chunks_exact_mut(dh).take(filled).enumerate() {
        match rows {
            Rows::F32(b, width) => {
                dst.copy_from_slice(&b[j / KV_BLOCK][(j % KV_BLOCK) * width + off..][..dh])
            }
            Rows::F16(..) => {
                rows.get::<true>(j, off, dst);
            }
        }
    }
}

/// The eight sums of the eight vectors' lanes, in their order: two rounds of pairwise
/// horizontal adds, then the two 128-bit halves added.
#[inline(always)]
unsafe fn sum_across(v: [__m256; 8]) -> __m256 {
    let h01 = _mm256_hadd_ps(v[0], v[1]);
    let h23 = _mm256_hadd_ps(v[2], v[3]);
    let h45 = _mm256_hadd_ps(v[4], v[5]);
    let h67 = _mm256_hadd_ps(v[6], v[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let low = _mm256_permute2f128_ps::<0x20>(h0123, h4567);
    let high = _mm256_permute2f128_ps::<0x31>(h0123, h4567);
    _mm256_add_ps(low, high)
}

/// Softmax of `row` in place, max-subtracted, eight lanes at a time with [`exp_avx2`]
/// (the tail through a vector padded with −∞, whose `exp` is 0).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn softmax_avx2(row: &mut [f32]) {
    let n = row.len();
    let whole = n / 8 * 8;
    let ptr = row.as_mut_ptr();
    let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..whole).step_by(8) {
        max = _mm256_max_ps(max, _mm256_loadu_ps(ptr.add(i)));
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), max);
    let max = lanes
        .iter()
        .chain(&row[whole..])
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let max = _mm256_set1_ps(max);
    let mut sum = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(ptr.add(i)), max));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(ptr.add(i), e);
    }
    let mut tail = [f32::NEG_INFINITY; 8];
    tail[..n - whole].copy_from_slice(&row[whole..]);
    let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(tail.as_ptr()), max));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(tail.as_mut_ptr(), e);
    row[whole..].copy_from_slice(&tail[..n - whole]);
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    let inv = 1.0 / lanes.iter().sum::<f32>();
    for i in (0..whole).step_by(8) {
        let v = _mm256_loadu_ps(ptr.add(i));
        _mm256_storeu_ps(ptr.add(i), _mm256_mul_ps(v, _mm256_set1_ps(inv)));
    }
    row[whole..].iter_mut().for_each(|v| *v *= inv);
}
