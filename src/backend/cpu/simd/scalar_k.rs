//! Portable K-quant dot products of unpacked weights (see [`super::kquant`]), the
//! implementation on CPUs without packed kernels. Weight rows of
//! `x.len()` super-blocks; a tail that does not fill a row is ignored (callers check).

use half::f16;

use super::kquant::{BlockIQ4XS, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
use crate::backend::cpu::quant::IQ4_VALUES;

/// The two f16 at the start of `dm` as f32.
fn half2(dm: [u8; 4]) -> (f32, f32) {
    let h = |a, b| f16::from_le_bytes([a, b]).to_f32();
    (h(dm[0], dm[1]), h(dm[2], dm[3]))
}

/// The 6-bit scales and minima of the 8 sub-blocks from the 12 packed bytes of a
/// Q4_K/Q5_K block: sub-blocks 0..4 in the low 6 bits of bytes 0..4 (scales) and 4..8
/// (minima); 4..8 in the nibbles of bytes 8..12 with their top two bits in the top
/// bits of bytes 0..8.
pub(crate) fn scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        if j < 4 {
            sc[j] = q[j] & 63;
            m[j] = q[j + 4] & 63;
        } else {
            sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
    }
    (sc, m)
}

/// `Σ_s m[s]·(bsums[2s] + bsums[2s + 1])`: the activation sums each 32-weight
/// sub-block's minimum multiplies.
fn min_sum(m: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    (0..8)
        .map(|s| m[s] as i32 * (bsums[2 * s] as i32 + bsums[2 * s + 1] as i32))
        .sum()
}

/// Shared driver: `out[j] = Σ_b block(w[j, b], x[b])` for each weight row `j`.
fn rows<B>(w: &[B], x: &[BlockQ8K], out: &mut [f32], block: impl Fn(&B, &BlockQ8K) -> f32) {
    if x.is_empty() {
        return;
    }
    for (row, o) in w.chunks_exact(x.len()).zip(out) {
        *o = row.iter().zip(x).map(|(wb, xb)| block(wb, xb)).sum();
    }
}

/// Q4_K × Q8_K: `d·d_x·Σ_s sc[s]·Σ q·q_x − dmin·d_x·Σ_s m[s]·Σ q_x`.
fn q4_k(wb: &BlockQ4K, xb: &BlockQ8K) -> f32 {
    let (d, dmin) = half2(wb.dm);
    let (sc, m) = scales_mins(&wb.scales);
    let mut sumi = 0i32;
    for (c, q) in wb.qs.chunks_exact(32).enumerate() {
        let (y0, y1) = (
            &xb.qs[64 * c..64 * c + 32],
            &xb.qs[64 * c + 32..64 * c + 64],
        );
        let lo: i32 = q
            .iter()
            .zip(y0)
            .map(|(&q, &y)| (q & 0xF) as i32 * y as i32)
            .sum();
        let hi: i32 = q
            .iter()
            .zip(y1)
            .map(|(&q, &y)| (q >> 4) as i32 * y as i32)
            .sum();
        sumi += sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi;
    }
    xb.d * (d * sumi as f32 - dmin * min_sum(&m, &xb.bsums) as f32)
}

/// Q5_K × Q8_K: as Q4_K with the fifth bit adding 16.
fn q5_k(wb: &BlockQ5K, xb: &BlockQ8K) -> f32 {
    let (d, dmin) = half2(wb.dm);
    let (sc, m) = scales_mins(&wb.scales);
    let mut sumi = 0i32;
    for (c, q) in wb.qs.chunks_exact(32).enumerate() {
        let (y0, y1) = (
            &xb.qs[64 * c..64 * c + 32],
            &xb.qs[64 * c + 32..64 * c + 64],
        );
        let bit = |l: usize, s: usize| (((wb.qh[l] >> s) & 1) << 4) as i32;
        let (mut lo, mut hi) = (0i32, 0i32);
        for l in 0..32 {
            lo += ((q[l] & 0xF) as i32 + bit(l, 2 * c)) * y0[l] as i32;
            hi += ((q[l] >> 4) as i32 + bit(l, 2 * c + 1)) * y1[l] as i32;
        }
        sumi += sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi;
    }
    xb.d * (d * sumi as f32 - dmin * min_sum(&m, &xb.bsums) as f32)
}

/// Q6_K × Q8_K: `d·d_x·Σ_s sc[s]·Σ (q − 32)·q_x` over 16 sub-blocks of 16.
fn q6_k(wb: &BlockQ6K, xb: &BlockQ8K) -> f32 {
    let d = f16::from_le_bytes(wb.d).to_f32();
    let mut sumi = 0i32;
    for i in 0..QK_K {
        // Weight i: half h, quarter r (which nibble / bit pair), lane l.
        let (h, r, l) = (i / 128, (i % 128) / 32, i % 32);
        let ql = wb.ql[64 * h + l + 32 * (r % 2)];
        let low = if r < 2 { ql & 0xF } else { ql >> 4 };
        let high = (wb.qh[32 * h + l] >> (2 * r)) & 3;
        let q = (low | (high << 4)) as i32 - 32;
        sumi += wb.scales[i / 16] as i32 * q * xb.qs[i] as i32;
    }
    xb.d * d * sumi as f32
}

/// IQ4_XS × Q8_K: `d·d_x·Σ_s sc[s]·Σ IQ4_VALUES[q]·q_x` over 8 sub-blocks of 32.
fn iq4_xs(wb: &BlockIQ4XS, xb: &BlockQ8K) -> f32 {
    let d = f16::from_le_bytes(wb.d).to_f32();
    let v = |q: u8| IQ4_VALUES[q as usize] as i32;
    let mut sumi = 0i32;
    for (ib, q) in wb.qs.chunks_exact(16).enumerate() {
        let y = &xb.qs[32 * ib..32 * ib + 32];
        let dot: i32 = q
            .iter()
            .enumerate()
            .map(|(j, &q)| v(q & 0xF) * y[j] as i32 + v(q >> 4) * y[j + 16] as i32)
            .sum();
        sumi += wb.scale(ib) * dot;
    }
    xb.d * d * sumi as f32
}

/// Q4_K weights × one Q8_K row.
pub(super) fn rows_q4_k(w: &[BlockQ4K], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, q4_k);
}

/// Q5_K weights × one Q8_K row.
pub(super) fn rows_q5_k(w: &[BlockQ5K], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, q5_k);
}

/// Q6_K weights × one Q8_K row.
pub(super) fn rows_q6_k(w: &[BlockQ6K], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, q6_k);
}

/// IQ4_XS weights × one Q8_K row.
pub(super) fn rows_iq4_xs(w: &[BlockIQ4XS], x: &[BlockQ8K], out: &mut [f32]) {
    rows(w, x, out, iq4_xs);
}
