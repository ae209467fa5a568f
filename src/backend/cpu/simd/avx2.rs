//! The AVX2 + FMA + F16C activation quantizer, twin of [`super::scalar::quantize_row`]
//! bit for bit: the activations of every packed kernel (`packed/`).

use std::arch::x86_64::*;

use super::{BlockQ8, QK};

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Quantizes each 32 values of `x` into a block of `out`, exactly as
/// [`super::scalar::quantize_row`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_row(x: &[f32], out: &mut [BlockQ8], shared: usize) {
    let sign = _mm256_set1_ps(-0.0);
    // SAFETY (every load below): each block of `x` is 32 readable f32, read as four
    // unaligned groups of 8.
    let load = |x: &[f32]| -> [__m256; 4] {
        std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x[8 * i..].as_ptr()) })
    };
    for (x, out) in x
        .chunks_exact(QK * shared)
        .zip(out.chunks_exact_mut(shared))
    {
        let mut a = _mm256_setzero_ps();
        for x in x.chunks_exact(QK) {
            let v = load(x);
            let a01 = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1]));
            let a23 = _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3]));
            a = _mm256_max_ps(a, _mm256_max_ps(a01, a23));
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        for (x, o) in x.chunks_exact(QK).zip(out) {
            let v = load(x);
            let q: [__m256i; 4] = std::array::from_fn(|i| {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(v[i], id),
                );
                _mm256_cvtps_epi32(r)
            });
            let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let sum = hsum(_mm256_cvtepi32_ps(sum));
            // packs interleave 128-bit lanes; the permute restores element order.
            let p = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            // SAFETY: `o.qs` is 32 writable bytes; `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_si256(o.qs.as_mut_ptr().cast(), p) };
            o.d = d;
            o.s = d * sum;
        }
    }
}
