//! AVX2 + FMA + F16C kernels, twins of [`super::scalar`]. Integer dot products of
//! nibble or `i8` weights with `i8` activations via `maddubs` (u8×i8 → i16 pairs) and
//! `madd` (i16 pairs → i32), scaled in f32. The `_x4` entry points dot each unpacked
//! weight block with four interleaved activation rows, scaling all four at once.

use std::arch::x86_64::*;

use super::{
    BlockIQ4NL, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8x4, QK,
};
use crate::backend::cpu::quant::IQ4_VALUES;

/// 16 bytes as a vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load16(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// 32 bytes as a vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn load32(b: &[i8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// The 32 nibbles of `qs` as bytes 0..=15: low nibbles in lanes 0..16, high in 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn nibbles(qs: &[u8; 16]) -> __m256i {
    let b = load16(qs);
    let mask = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(b, mask);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(b), mask);
    _mm256_set_m128i(hi, lo)
}

/// `Σ a·b` over adjacent byte pairs and then pairs of those, as 8 f32 lanes: `a`
/// unsigned, `b` signed, with `|a·b| ≤ 128·127` so the i16 stage cannot saturate.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_u8_i8(a: __m256i, b: __m256i) -> __m256 {
    let pairs = _mm256_maddubs_epi16(a, b);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// The two f16 in `b` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn half2(b: [u8; 4]) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(b)));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The f16 in `b` as f32. Written as assembly so that the bits reach the vector
/// register by a full-width `vmovd`: from intrinsics the compiler emits a 16-bit
/// insert that merges into a stale register (an accumulator), chaining every loop
/// iteration to the previous one (measured: Q4_0 prefill ×1.5 slower than Q4_1).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn half(b: [u8; 2]) -> f32 {
    let bits = u32::from(u16::from_le_bytes(b));
    let v: __m128;
    // SAFETY: register-only instructions (no memory, no stack); F16C is enabled.
    unsafe {
        std::arch::asm!(
            "vmovd {v}, {r:e}",
            "vcvtph2ps {v}, {v}",
            r = in(reg) bits,
            v = out(xmm_reg) v,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    _mm_cvtss_f32(v)
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
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

/// One unpacked weight block: `(u8 or |i8| lanes, sign source, scale, offset)`; its
/// dot with an activation block is `scale·d_x·Σ lanes·sign(q_x) + offset·s_x`.
pub(super) type Unpacked = (__m256i, __m256i, f32, f32);

/// `lanes · (y, its signs flipped where the weight's are negative when SIGNED)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_dot<const SIGNED: bool>(lanes: __m256i, signs: __m256i, y: &[i8; QK]) -> __m256 {
    let mut y = load32(y);
    if SIGNED {
        y = _mm256_sign_epi8(y, signs);
    }
    dot_u8_i8(lanes, y)
}

/// Shared single-row kernel: `out[j] = w row j · x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows<B, const SIGNED: bool>(
    w: &[B],
    x: &[BlockQ8],
    out: &mut [f32],
    unpack: impl Fn(&B) -> Unpacked,
) {
    let nb = x.len();
    if nb == 0 {
        return;
    }
    for (row, o) in w.chunks_exact(nb).zip(out) {
        let (mut acc, mut off) = (_mm256_setzero_ps(), 0.0f32);
        for (wb, xb) in row.iter().zip(x) {
            let (lanes, signs, d, m) = unpack(wb);
            let p = block_dot::<SIGNED>(lanes, signs, &xb.qs);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * xb.d), p, acc);
            // Fused, as [`rows_x4`] does: a row's result never depends on its batch.
            off = m.mul_add(xb.s, off);
        }
        *o = hsum(acc) + off;
    }
}

/// Lane `I` of each 128-bit half of `v`, in every lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane<const I: i32>(v: __m256) -> __m256 {
    _mm256_shuffle_ps::<I>(v, v)
}

/// Shared four-row kernel: `out[j·stride + i] = w row j · x row i`. Per block, the four
/// scales `d_w·d_x` are one vector product and the offsets one FMA.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows_x4<B, const SIGNED: bool>(
    w: &[B],
    x: &[BlockQ8x4],
    out: &mut [f32],
    stride: usize,
    unpack: impl Fn(&B) -> Unpacked,
) {
    let nb = x.len();
    if nb == 0 {
        return;
    }
    for (row, o) in w.chunks_exact(nb).zip(out.chunks_mut(stride)) {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut off = _mm_setzero_ps();
        for (wb, xb) in row.iter().zip(x) {
            let (lanes, signs, d, m) = unpack(wb);
            // SAFETY: `xb.d` is 8 readable f32 and `xb.s` 4; `loadu` has no alignment
            // requirement.
            let (xd, xs) = unsafe { (_mm256_loadu_ps(xb.d.as_ptr()), _mm_loadu_ps(xb.s.as_ptr())) };
            let dd = _mm256_mul_ps(_mm256_set1_ps(d), xd);
            off = _mm_fmadd_ps(_mm_set1_ps(m), xs, off);
            let p = |i: usize| block_dot::<SIGNED>(lanes, signs, &xb.qs[i]);
            acc[0] = _mm256_fmadd_ps(lane::<0x00>(dd), p(0), acc[0]);
            acc[1] = _mm256_fmadd_ps(lane::<0x55>(dd), p(1), acc[1]);
            acc[2] = _mm256_fmadd_ps(lane::<0xAA>(dd), p(2), acc[2]);
            acc[3] = _mm256_fmadd_ps(lane::<0xFF>(dd), p(3), acc[3]);
        }
        let mut offs = [0.0f32; 4];
        // SAFETY: `offs` is 4 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_ps(offs.as_mut_ptr(), off) };
        for (o, (a, c)) in o.iter_mut().zip(acc.iter().zip(offs)) {
            *o = hsum(*a) + c;
        }
    }
}

/// Q4_0: nibbles, scale `d`, offset `−8·d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_q4_0(b: &BlockQ4_0) -> Unpacked {
    let d = half(b.d);
    (nibbles(&b.qs), _mm256_setzero_si256(), d, -8.0 * d)
}

/// Q4_1: nibbles, scale `d`, offset `m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_q4_1(b: &BlockQ4_1) -> Unpacked {
    let (d, m) = half2(b.dm);
    (nibbles(&b.qs), _mm256_setzero_si256(), d, m)
}

/// Q8_0: `|q|` with the signs of `q` moved onto the activations, scale `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_q8_0(b: &BlockQ8_0) -> Unpacked {
    let q = load32(&b.qs);
    (_mm256_sign_epi8(q, q), q, half(b.d), 0.0)
}

/// Byte `j` of the result is 0x10 where bit `j` of `qh` (little-endian) is set: each
/// byte gets the `qh` byte holding its bit, all bits but that one are set, and only
/// bytes that end up all ones compare equal.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(qh: [u8; 4]) -> __m256i {
    let bytes = _mm256_set1_epi32(i32::from_le_bytes(qh));
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bytes = _mm256_shuffle_epi8(bytes, spread);
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    let set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi8(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Q5_0: five-bit values, scale `d`, offset `−16·d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_q5_0(b: &BlockQ5_0) -> Unpacked {
    let d = half(b.d);
    let q = _mm256_or_si256(nibbles(&b.qs), fifth_bits(b.qh));
    (q, _mm256_setzero_si256(), d, -16.0 * d)
}

/// Q5_1: five-bit values, scale `d`, offset `m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_q5_1(b: &BlockQ5_1) -> Unpacked {
    let (d, m) = half2(b.dm);
    let q = _mm256_or_si256(nibbles(&b.qs), fifth_bits(b.qh));
    (q, _mm256_setzero_si256(), d, m)
}

/// [`IQ4_VALUES`] in both 128-bit halves, for `shuffle_epi8` lookups.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn iq4_table() -> __m128i {
    // SAFETY: `IQ4_VALUES` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(IQ4_VALUES.as_ptr().cast()) }
}

/// IQ4_NL: the table values of the nibbles as `|v|` with the signs of `v` moved onto
/// the activations, scale `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unpack_iq4_nl(b: &BlockIQ4NL) -> Unpacked {
    let table = _mm256_broadcastsi128_si256(iq4_table());
    let v = _mm256_shuffle_epi8(table, nibbles(&b.qs));
    (_mm256_sign_epi8(v, v), v, half(b.d), 0.0)
}

/// Declares the `unsafe` entry points, one per weight format and layout.
macro_rules! entry_points {
    ($($name:ident, $x4:ident, $b:ty, $unpack:ident, $signed:literal;)*) => {$(
        #[doc = concat!("`", stringify!($b), "` weights × one quantized row, as the scalar twin.")]
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $name(w: &[$b], x: &[BlockQ8], out: &mut [f32]) {
            rows::<_, $signed>(w, x, out, |b| $unpack(b));
        }

        #[doc = concat!("`", stringify!($b), "` weights × four interleaved rows, as the scalar twin.")]
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $x4(w: &[$b], x: &[BlockQ8x4], out: &mut [f32], stride: usize) {
            rows_x4::<_, $signed>(w, x, out, stride, |b| $unpack(b));
        }
    )*};
}

entry_points! {
    q4_0, q4_0_x4, BlockQ4_0, unpack_q4_0, false;
    q4_1, q4_1_x4, BlockQ4_1, unpack_q4_1, false;
    q8_0, q8_0_x4, BlockQ8_0, unpack_q8_0, true;
    q5_0, q5_0_x4, BlockQ5_0, unpack_q5_0, false;
    q5_1, q5_1_x4, BlockQ5_1, unpack_q5_1, false;
    iq4_nl, iq4_nl_x4, BlockIQ4NL, unpack_iq4_nl, true;
}
