//! AVX2 + FMA + F16C float kernels, twins of [`super::scalar`]: eight weights at a
//! time widened to f32 (`vcvtph2ps` for f16; a zero-extend and 16-bit shift for
//! bf16, whose bits are the top half of an f32) and multiplied into f32 accumulators
//! with FMA, each weight vector serving every activation row.

use std::arch::x86_64::*;

use super::scalar::{bf16_at, f16_at};

/// Elements per loop iteration: two 8-lane vectors, two independent FMA chains.
const STEP: usize = 16;

/// Eight weights from element `c` of the two-byte row `b` as f32 lanes (bf16 when
/// `BF`, else f16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen8<const BF: bool>(b: &[u8], c: usize) -> __m256 {
    let s = &b[2 * c..2 * c + 16];
    // SAFETY: `s` is 16 readable bytes (the slice above is bounds-checked); `loadu`
    // has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(s.as_ptr().cast()) };
    if BF {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v)))
    } else {
        _mm256_cvtph_ps(v)
    }
}

/// Eight f32 of `x` from index `c`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load8(x: &[f32], c: usize) -> __m256 {
    let s = &x[c..c + 8];
    // SAFETY: `s` is 8 readable f32 (bounds-checked above); no alignment needed.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// Sum of the eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `out[j·M + i] = w row j · x row i` for `M` activation rows of `k`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows_m<const M: usize, const BF: bool>(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    let body = k / STEP * STEP;
    let elem = if BF { bf16_at } else { f16_at };
    for (row, o) in w.chunks_exact(2 * k).zip(out.chunks_exact_mut(M)) {
        let mut acc = [[_mm256_setzero_ps(); 2]; M];
        for c in (0..body).step_by(STEP) {
            let w0 = widen8::<BF>(row, c);
            let w1 = widen8::<BF>(row, c + 8);
            for (i, a) in acc.iter_mut().enumerate() {
                a[0] = _mm256_fmadd_ps(w0, load8(x, i * k + c), a[0]);
                a[1] = _mm256_fmadd_ps(w1, load8(x, i * k + c + 8), a[1]);
            }
        }
        for (i, (a, o)) in acc.iter().zip(o).enumerate() {
            let tail: f32 = (body..k).map(|c| elem(row, c) * x[i * k + c]).sum();
            *o = hsum(_mm256_add_ps(a[0], a[1])) + tail;
        }
    }
}

/// [`rows_m`] for `m = x.len() / k` in `1..=4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows<const BF: bool>(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    match x.len() / k {
        1 => rows_m::<1, BF>(w, x, k, out),
        2 => rows_m::<2, BF>(w, x, k, out),
        3 => rows_m::<3, BF>(w, x, k, out),
        4 => rows_m::<4, BF>(w, x, k, out),
        m => unreachable!("float kernels take 1 to 4 activation rows, got {m}"),
    }
}

/// f16 weight rows times 1–4 f32 activation rows, as [`super::scalar::rows_f16`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_f16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    rows::<false>(w, x, k, out);
}

/// bf16 weight rows times 1–4 f32 activation rows, as [`super::scalar::rows_bf16`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_bf16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    rows::<true>(w, x, k, out);
}

/// A two-byte float row as f32, eight at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_row<const BF: bool>(w: &[u8], out: &mut [f32]) {
    let n = out.len();
    let body = n / 8 * 8;
    for c in (0..body).step_by(8) {
        let v = widen8::<BF>(w, c);
        let dst = &mut out[c..c + 8];
        // SAFETY: `dst` is 8 writable f32 (bounds-checked above); no alignment needed.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), v) };
    }
    let elem = if BF { bf16_at } else { f16_at };
    for (c, o) in out.iter_mut().enumerate().skip(body) {
        *o = elem(w, c);
    }
}

/// As [`super::scalar::f16_to_f32`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_to_f32(w: &[u8], out: &mut [f32]) {
    widen_row::<false>(w, out);
}

/// As [`super::scalar::bf16_to_f32`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bf16_to_f32(w: &[u8], out: &mut [f32]) {
    widen_row::<true>(w, out);
}
