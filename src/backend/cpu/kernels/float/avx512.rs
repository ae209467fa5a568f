//! AVX-512 float kernels, twins of [`super::scalar`]: sixteen weights at a time
//! widened to f32 (`vcvtph2ps zmm` for f16, zero-extend and shift for bf16) into
//! FMA accumulators; and, where the CPU has AVX-512 BF16, bf16 weights dotted with
//! bf16-rounded activations by `vdpbf16ps` (pairs of bf16 products summed into f32
//! lanes), the way llama.cpp runs BF16 models, with no widening at all.

use std::arch::x86_64::*;

use super::scalar::{bf16_at, f16_at};

/// Elements per loop iteration of the widening kernels: two 16-lane vectors.
const STEP: usize = 32;
/// Elements per loop iteration of the bf16 dot kernel: two 32-pair vectors.
const DOT_STEP: usize = 64;

/// Sixteen weights from element `c` of the two-byte row `b` as f32 (bf16 when `BF`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn widen16<const BF: bool>(b: &[u8], c: usize) -> __m512 {
    let s = &b[2 * c..2 * c + 32];
    // SAFETY: `s` is 32 readable bytes (bounds-checked above); no alignment needed.
    let v = unsafe { _mm256_loadu_si256(s.as_ptr().cast()) };
    if BF {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
    } else {
        _mm512_cvtph_ps(v)
    }
}

/// Sixteen f32 of `x` from index `c`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn load16(x: &[f32], c: usize) -> __m512 {
    let s = &x[c..c + 16];
    // SAFETY: `s` is 16 readable f32 (bounds-checked above); no alignment needed.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// `out[j·M + i] = w row j · x row i` for `M` f32 activation rows of `k`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn rows_m<const M: usize, const BF: bool>(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    let body = k / STEP * STEP;
    let elem = if BF { bf16_at } else { f16_at };
    for (row, o) in w.chunks_exact(2 * k).zip(out.chunks_exact_mut(M)) {
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        for c in (0..body).step_by(STEP) {
            let w0 = widen16::<BF>(row, c);
            let w1 = widen16::<BF>(row, c + 16);
            for (i, a) in acc.iter_mut().enumerate() {
                a[0] = _mm512_fmadd_ps(w0, load16(x, i * k + c), a[0]);
                a[1] = _mm512_fmadd_ps(w1, load16(x, i * k + c + 16), a[1]);
            }
        }
        for (i, (a, o)) in acc.iter().zip(o).enumerate() {
            let tail: f32 = (body..k).map(|c| elem(row, c) * x[i * k + c]).sum();
            *o = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])) + tail;
        }
    }
}

/// [`rows_m`] for `m = x.len() / k` in `1..=4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
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
/// The CPU must support AVX2, FMA, F16C, AVX-512F and AVX-512BW.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn rows_f16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    rows::<false>(w, x, k, out);
}

/// bf16 weight rows times 1–4 f32 activation rows, as [`super::scalar::rows_bf16`].
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C, AVX-512F and AVX-512BW.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn rows_bf16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    rows::<true>(w, x, k, out);
}

/// 32 bf16 from element `c` of `b` (two bytes each) as a `vdpbf16ps` operand.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512bf16")]
fn load_bh(b: &[u8], c: usize) -> __m512bh {
    let s = &b[2 * c..2 * c + 64];
    // SAFETY: `s` is 64 readable bytes (bounds-checked above), read unaligned; any
    // bit pattern is a valid `__m512bh`.
    unsafe { s.as_ptr().cast::<__m512bh>().read_unaligned() }
}

/// `out[j·M + i] = w row j · x row i` for `M` bf16 activation rows of `k`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512bf16")]
fn dot_m<const M: usize>(w: &[u8], x: &[u8], k: usize, out: &mut [f32]) {
    let body = k / DOT_STEP * DOT_STEP;
    for (row, o) in w.chunks_exact(2 * k).zip(out.chunks_exact_mut(M)) {
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        for c in (0..body).step_by(DOT_STEP) {
            let w0 = load_bh(row, c);
            let w1 = load_bh(row, c + 32);
            for (i, a) in acc.iter_mut().enumerate() {
                a[0] = _mm512_dpbf16_ps(a[0], w0, load_bh(x, i * k + c));
                a[1] = _mm512_dpbf16_ps(a[1], w1, load_bh(x, i * k + c + 32));
            }
        }
        for (i, (a, o)) in acc.iter().zip(o).enumerate() {
            let tail: f32 = (body..k)
                .map(|c| bf16_at(row, c) * bf16_at(x, i * k + c))
                .sum();
            *o = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])) + tail;
        }
    }
}

/// bf16 weight rows times 1–4 bf16 activation rows (`x` as bf16 bits), as
/// [`super::scalar::rows_bf16_dot`].
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C, AVX-512F, AVX-512BW and AVX-512 BF16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn rows_bf16_dot(w: &[u8], x: &[u16], k: usize, out: &mut [f32]) {
    let xb: &[u8] = bytemuck::cast_slice(x);
    match x.len() / k {
        1 => dot_m::<1>(w, xb, k, out),
        2 => dot_m::<2>(w, xb, k, out),
        3 => dot_m::<3>(w, xb, k, out),
        4 => dot_m::<4>(w, xb, k, out),
        m => unreachable!("float kernels take 1 to 4 activation rows, got {m}"),
    }
}
