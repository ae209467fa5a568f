//! AVX-512 VNNI kernels, twins of [`super::scalar`] (and of the AVX2 kernels, whose
//! block unpacking and quantization they share). `vpdpbusd` multiplies unsigned by
//! signed bytes and sums groups of four straight into i32 lanes, replacing AVX2's
//! `maddubs` + `madd` pair (and its i16 stage). The single-row kernels use the 256-bit
//! (VL) form, one 32-weight block per vector; the four-row kernels broadcast each
//! unpacked weight block to 512 bits and dot it with two activation rows at a time,
//! rows 0–1 and 2–3 being contiguous 64 bytes in [`BlockQ8x4`].

use std::arch::x86_64::*;

use super::avx2::{
    half, half2, iq4_table, load32, unpack_iq4_nl, unpack_q4_0, unpack_q4_1, unpack_q5_0,
    unpack_q5_1, unpack_q8_0, Unpacked,
};
use super::{
    BlockIQ4NL, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8x4, QK,
};

/// `lanes · (y, its signs flipped where the weight's are negative when SIGNED)`, as 8
/// f32 lanes of i32 sums of four products each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn block_dot<const SIGNED: bool>(lanes: __m256i, signs: __m256i, y: &[i8; QK]) -> __m256 {
    let mut y = load32(y);
    if SIGNED {
        y = _mm256_sign_epi8(y, signs);
    }
    _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lanes, y))
}

/// Shared single-row kernel: `out[j] = w row j · x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
            // Fused and summed in [`sums4`]'s order, as [`rows_x4`] does: a row's
            // result never depends on which rows share its batch.
            off = m.mul_add(xb.s, off);
        }
        *o = hsum_pairs(acc) + off;
    }
}

/// 64 activation bytes (two rows of one interleaved block) as a vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn load64(b: &[[i8; QK]]) -> __m512i {
    assert!(b.len() >= 2);
    // SAFETY: `b` holds at least two contiguous 32-byte arrays (checked above, and
    // elided after inlining since callers pass fixed slices), 64 readable bytes;
    // `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// The upper 8 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn upper(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

/// Shared four-row kernel: `out[j·stride + i] = w row j · x row i`. Each unpacked
/// weight block is broadcast to both 256-bit halves and dotted with rows 0–1 and 2–3
/// as two 512-bit `vpdpbusd`; each half is scaled by its row's `d_w·d_x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows_x4<B, const SIGNED: bool>(
    w: &[B],
    x: &[BlockQ8x4],
    out: &mut [f32],
    stride: usize,
    unpack: impl Fn(&B) -> Unpacked512,
) {
    let nb = x.len();
    if nb == 0 {
        return;
    }
    // Lanes of the 8 scales `d_w·d_x[0..4]` (twice) feeding each output half.
    let idx01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let idx23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    let zero = _mm512_setzero_si512();
    for (row, o) in w.chunks_exact(nb).zip(out.chunks_mut(stride)) {
        let (mut acc01, mut acc23) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut off = _mm_setzero_ps();
        for (wb, xb) in row.iter().zip(x) {
            let (l, k, d, m) = unpack(wb);
            // SAFETY: `xb.d` is 8 readable f32 and `xb.s` 4; `loadu` has no alignment
            // requirement.
            let (xd, xs) = unsafe { (_mm256_loadu_ps(xb.d.as_ptr()), _mm_loadu_ps(xb.s.as_ptr())) };
            let (mut y01, mut y23) = (load64(&xb.qs[0..2]), load64(&xb.qs[2..4]));
            if SIGNED {
                y01 = _mm512_mask_sub_epi8(y01, k, zero, y01);
                y23 = _mm512_mask_sub_epi8(y23, k, zero, y23);
            }
            let dd = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(d), xd));
            off = _mm_fmadd_ps(_mm_set1_ps(m), xs, off);
            let p01 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, l, y01));
            let p23 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, l, y23));
            acc01 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx01, dd), p01, acc01);
            acc23 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx23, dd), p23, acc23);
        }
        let sums = _mm_add_ps(sums4(acc01, acc23), off);
        let o = &mut o[..4];
        // SAFETY: `o` is 4 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), sums) };
    }
}

/// Sum of the 8 lanes of `v` in [`sums4`]'s order: `((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn hsum_pairs(v: __m256) -> f32 {
    let h = _mm256_hadd_ps(v, v);
    let h = _mm256_hadd_ps(h, h);
    _mm_cvtss_f32(_mm_add_ss(
        _mm256_castps256_ps128(h),
        _mm256_extractf128_ps::<1>(h),
    ))
}

/// The sums of the four 256-bit halves of `a` and `b`: `[Σa_lo, Σa_hi, Σb_lo, Σb_hi]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sums4(a: __m512, b: __m512) -> __m128 {
    let u = _mm256_hadd_ps(_mm512_castps512_ps256(a), upper(a));
    let v = _mm256_hadd_ps(_mm512_castps512_ps256(b), upper(b));
    let w = _mm256_hadd_ps(u, v);
    _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps::<1>(w))
}

/// One weight block unpacked for [`rows_x4`]: `(u8 or |i8| lanes of the block in
/// both 256-bit halves, mask of the negative weights in both halves, scale, offset)`.
type Unpacked512 = (__m512i, u64, f32, f32);

/// The 32 nibbles of `qs` as bytes 0..=15 in both 256-bit halves (low nibbles, then
/// high): one broadcast load, one variable shift, one mask.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn nibbles512(qs: &[u8; 16]) -> __m512i {
    // SAFETY: `qs` is 16 readable bytes; `loadu` has no alignment requirement.
    let b = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(qs.as_ptr().cast()) });
    let shifts = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    _mm512_and_si512(_mm512_srlv_epi64(b, shifts), _mm512_set1_epi8(0x0F))
}

/// Q4_0 for [`rows_x4`]: nibbles, scale `d`, offset `−8·d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack512_q4_0(b: &BlockQ4_0) -> Unpacked512 {
    let d = half(b.d);
    (nibbles512(&b.qs), 0, d, -8.0 * d)
}

/// Q4_1 for [`rows_x4`]: nibbles, scale `d`, offset `m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack512_q4_1(b: &BlockQ4_1) -> Unpacked512 {
    let (d, m) = half2(b.dm);
    (nibbles512(&b.qs), 0, d, m)
}

/// Q8_0 for [`rows_x4`]: `|q|` and the mask of negative `q`, scale `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack512_q8_0(b: &BlockQ8_0) -> Unpacked512 {
    let (lanes, signs, d, m) = unpack_q8_0(b);
    let k = u64::from(_mm256_movepi8_mask(signs));
    (_mm512_broadcast_i64x4(lanes), k | (k << 32), d, m)
}

/// `nibbles` plus 16 where the fifth bit in `qh` is set, in both 256-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn five_bits512(qh: [u8; 4], nibbles: __m512i) -> __m512i {
    let k = u64::from(u32::from_le_bytes(qh));
    _mm512_mask_add_epi8(nibbles, k | (k << 32), nibbles, _mm512_set1_epi8(0x10))
}

/// Q5_0 for [`rows_x4`]: five-bit values, scale `d`, offset `−16·d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack512_q5_0(b: &BlockQ5_0) -> Unpacked512 {
    let d = half(b.d);
    (five_bits512(b.qh, nibbles512(&b.qs)), 0, d, -16.0 * d)
}

/// Q5_1 for [`rows_x4`]: five-bit values, scale `d`, offset `m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack512_q5_1(b: &BlockQ5_1) -> Unpacked512 {
    let (d, m) = half2(b.dm);
    (five_bits512(b.qh, nibbles512(&b.qs)), 0, d, m)
}

/// IQ4_NL for [`rows_x4`]: `|v|` of the table values and the mask of negative `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack512_iq4_nl(b: &BlockIQ4NL) -> Unpacked512 {
    let v = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(iq4_table()), nibbles512(&b.qs));
    (_mm512_abs_epi8(v), _mm512_movepi8_mask(v), half(b.d), 0.0)
}

/// Declares the `unsafe` entry points, one per weight format and layout.
macro_rules! entry_points {
    ($($name:ident, $x4:ident, $b:ty, $unpack:ident, $unpack512:ident, $signed:literal;)*) => {$(
        #[doc = concat!("`", stringify!($b), "` weights × one quantized row, as the scalar twin.")]
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA, F16C, AVX-512 F/BW/VL and AVX-512 VNNI.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn $name(w: &[$b], x: &[BlockQ8], out: &mut [f32]) {
            rows::<_, $signed>(w, x, out, |b| $unpack(b));
        }

        #[doc = concat!("`", stringify!($b), "` weights × four interleaved rows, as the scalar twin.")]
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA, F16C, AVX-512 F/BW/VL and AVX-512 VNNI.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn $x4(w: &[$b], x: &[BlockQ8x4], out: &mut [f32], stride: usize) {
            rows_x4::<_, $signed>(w, x, out, stride, |b| $unpack512(b));
        }
    )*};
}

entry_points! {
    q4_0, q4_0_x4, BlockQ4_0, unpack_q4_0, unpack512_q4_0, false;
    q4_1, q4_1_x4, BlockQ4_1, unpack_q4_1, unpack512_q4_1, false;
    q8_0, q8_0_x4, BlockQ8_0, unpack_q8_0, unpack512_q8_0, true;
    q5_0, q5_0_x4, BlockQ5_0, unpack_q5_0, unpack512_q5_0, false;
    q5_1, q5_1_x4, BlockQ5_1, unpack_q5_1, unpack512_q5_1, false;
    iq4_nl, iq4_nl_x4, BlockIQ4NL, unpack_iq4_nl, unpack512_iq4_nl, true;
}
