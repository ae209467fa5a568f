//! AVX2 + FMA + F16C K-quant kernels, twins of [`super::scalar_k`]: per 32 weights,
//! `maddubs` multiplies the unsigned weight values by the `i8` activations into i16
//! pairs and `madd` multiplies those by the sub-block scale into i32 lanes, so each
//! 256-weight super-block ends in one f32 multiply-add; minima and offsets come from
//! the activation block sums.

use std::arch::x86_64::*;

use super::avx2::{half, half2, hsum, iq4_table, load32, nibbles};
use super::kquant::{BlockIQ4XS, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
use super::scalar_k::scales_mins;

/// 32 bytes as a vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_u8(b: &[u8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// `Σ a·b` over pairs of bytes (`a` unsigned ≤ 63, `b` signed), each pair then times
/// the i16 `scale` of its lane and summed in pairs: 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scaled_dot(a: __m256i, b: &[i8; 32], scale: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, load32(b)), scale)
}

/// Shared driver: `out[j] = Σ_b block(w[j, b], x[b])`, `block` returning the
/// super-block's scaled integer sums as 8 f32 lanes and a scalar term.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows<B>(
    w: &[B],
    x: &[BlockQ8K],
    out: &mut [f32],
    block: impl Fn(&B, &BlockQ8K) -> (__m256, f32),
) {
    if x.is_empty() {
        return;
    }
    for (row, o) in w.chunks_exact(x.len()).zip(out) {
        let (mut acc, mut off) = (_mm256_setzero_ps(), 0.0f32);
        for (wb, xb) in row.iter().zip(x) {
            let (v, c) = block(wb, xb);
            acc = _mm256_add_ps(acc, v);
            off += c;
        }
        *o = hsum(acc) + off;
    }
}

/// `Σ_s m[s]·(bsums[2s] + bsums[2s + 1])` (see the scalar twin).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn min_sum(m: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    // SAFETY: `bsums` is 32 readable bytes; `loadu` has no alignment requirement.
    let b = unsafe { _mm256_loadu_si256(bsums.as_ptr().cast()) };
    let pairs = _mm256_madd_epi16(b, _mm256_set1_epi16(1));
    // SAFETY: `m` is 8 readable bytes; `loadl` reads 8 with no alignment requirement.
    let m = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(m.as_ptr().cast()) });
    hsum(_mm256_cvtepi32_ps(_mm256_mullo_epi32(pairs, m))) as i32
}

/// The 32 fifth bits of sub-block `s` of a Q5_K block as 16 or 0 per byte, for the
/// `qh` vector already shifted right by `s` bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth(qh_shifted: __m256i) -> __m256i {
    _mm256_slli_epi16::<4>(_mm256_and_si256(qh_shifted, _mm256_set1_epi8(1)))
}

/// Q4_K (or, with `qh`, Q5_K) super-block: the scaled integer sum and the minimum term.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q45_k(
    dm: [u8; 4],
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: Option<&[u8; 32]>,
    xb: &BlockQ8K,
) -> (__m256, f32) {
    let (d, dmin) = half2(dm);
    let (sc, m) = scales_mins(scales);
    let low = _mm256_set1_epi8(0x0F);
    let (q, _) = qs.as_chunks::<32>();
    let (y, _) = xb.qs.as_chunks::<32>();
    let mut h = qh.map(|b| load_u8(b));
    let mut acc = _mm256_setzero_si256();
    for c in 0..4 {
        let v = load_u8(&q[c]);
        let mut lo = _mm256_and_si256(v, low);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
        if let Some(bits) = h {
            lo = _mm256_or_si256(lo, fifth(bits));
            hi = _mm256_or_si256(hi, fifth(_mm256_srli_epi16::<1>(bits)));
            h = Some(_mm256_srli_epi16::<2>(bits));
        }
        let p0 = scaled_dot(lo, &y[2 * c], _mm256_set1_epi16(sc[2 * c] as i16));
        let p1 = scaled_dot(hi, &y[2 * c + 1], _mm256_set1_epi16(sc[2 * c + 1] as i16));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
    }
    let v = _mm256_mul_ps(_mm256_set1_ps(d * xb.d), _mm256_cvtepi32_ps(acc));
    (v, -dmin * xb.d * min_sum(&m, &xb.bsums) as f32)
}

/// Q6_K super-block: `Σ_s sc[s]·Σ q·q_x` with `q` in 0..64 (unsigned for `maddubs`),
/// the `−32` offset taken as `−32·Σ_s sc[s]·bsums[s]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_q6_k(wb: &BlockQ6K, xb: &BlockQ8K) -> (__m256, f32) {
    let d = half(wb.d);
    let (ql, _) = wb.ql.as_chunks::<32>();
    let (qh, _) = wb.qh.as_chunks::<32>();
    let (y, _) = xb.qs.as_chunks::<32>();
    let (low, two) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
    let sc = |s: usize| _mm_set1_epi16(wb.scales[s] as i16);
    let mut acc = _mm256_setzero_si256();
    for h in 0..2 {
        let (a, b, bits) = (
            load_u8(&ql[2 * h]),
            load_u8(&ql[2 * h + 1]),
            load_u8(&qh[h]),
        );
        let nib = [
            _mm256_and_si256(a, low),
            _mm256_and_si256(b, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(a), low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(b), low),
        ];
        let mut bits = bits;
        for (r, nib) in nib.into_iter().enumerate() {
            let high = _mm256_slli_epi16::<4>(_mm256_and_si256(bits, two));
            bits = _mm256_srli_epi16::<2>(bits);
            let q = _mm256_or_si256(nib, high);
            let s = 8 * h + 2 * r;
            let scale = _mm256_set_m128i(sc(s + 1), sc(s));
            acc = _mm256_add_epi32(acc, scaled_dot(q, &y[4 * h + r], scale));
        }
    }
    // SAFETY: `scales` is 16 and `bsums` 32 readable bytes; `loadu` has no alignment
    // requirement.
    let (scales, bsums) = unsafe {
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(wb.scales.as_ptr().cast())),
            _mm256_loadu_si256(xb.bsums.as_ptr().cast()),
        )
    };
    let offset = hsum(_mm256_cvtepi32_ps(_mm256_madd_epi16(scales, bsums)));
    let dd = d * xb.d;
    let v = _mm256_mul_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(acc));
    (v, -32.0 * dd * offset)
}

/// IQ4_XS super-block: per sub-block, the table values of the nibbles (signs moved
/// onto the activations, as for Q8_0) dotted with `maddubs` and scaled by `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_iq4_xs(wb: &BlockIQ4XS, xb: &BlockQ8K) -> (__m256, f32) {
    let table = _mm256_broadcastsi128_si256(iq4_table());
    let (q, _) = wb.qs.as_chunks::<16>();
    let (y, _) = xb.qs.as_chunks::<32>();
    let mut acc = _mm256_setzero_si256();
    for ib in 0..8 {
        let v = _mm256_shuffle_epi8(table, nibbles(&q[ib]));
        let y = _mm256_sign_epi8(load32(&y[ib]), v);
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), y);
        let scale = _mm256_set1_epi16(wb.scale(ib) as i16);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale));
    }
    let dd = half(wb.d) * xb.d;
    (
        _mm256_mul_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(acc)),
        0.0,
    )
}

/// Q4_K weights × one Q8_K row, as the scalar twin.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k(w: &[BlockQ4K], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, |b, xb| q45_k(b.dm, &b.scales, &b.qs, None, xb));
}

/// Q5_K weights × one Q8_K row, as the scalar twin.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_k(w: &[BlockQ5K], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, |b, xb| {
        q45_k(b.dm, &b.scales, &b.qs, Some(&b.qh), xb)
    });
}

/// Q6_K weights × one Q8_K row, as the scalar twin.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k(w: &[BlockQ6K], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, |b, xb| block_q6_k(b, xb));
}

/// IQ4_XS weights × one Q8_K row, as the scalar twin.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_xs(w: &[BlockIQ4XS], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, |b, xb| block_iq4_xs(b, xb));
}
