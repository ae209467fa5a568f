//! The portable twin of the packed kernels: the same integer sums and the same f32
//! operations in the same order, so the SIMD kernels must match it bit for bit.

use half::f16;

use super::{PackedKind, Panel, PANEL};
use crate::backend::cpu::quant::IQ4_VALUES;
use crate::backend::cpu::simd::{BlockQ8, QK, QK_K};

/// `out[i·PANEL + r] = w row r of the panel · x row i` for `rows` rows of `x`.
pub(super) fn panel(w: Panel<'_>, x: &[BlockQ8], sums: &[i32], rows: usize, out: &mut [f32]) {
    let nb = w.nb;
    let groups = match w.kind {
        PackedKind::Q8_0 => 8,
        _ => 4,
    };
    for i in 0..rows {
        for r in 0..PANEL {
            let mut acc = 0.0f32;
            for b in 0..nb {
                let xb = &x[i * nb + b];
                let qs = &w.qs[b * w.kind.panel_qs()..];
                let half = |v: &[u16], b: usize| f16::from_bits(v[b * PANEL + r]).to_f32();
                if w.kind == PackedKind::Q6K {
                    let sum = |h: usize| sums[(i * nb + b) * 2 + h];
                    let dot = q6k_dot(qs, r, &xb.qs, w.sub, b * PANEL + r, sum);
                    acc = (dot as f32).mul_add(half(w.d, b / (QK_K / QK)) * xb.d, acc);
                    continue;
                }
                let mut dot = 0i32;
                for g in 0..groups {
                    for t in 0..4 {
                        let byte = qs[(g * PANEL + r) * 4 + t];
                        // Q5_0, Q5_1, Q5_K: the fifth bits of groups g and g + 4 in the plane after
                        // the nibbles.
                        let fifth = |g: usize| match w.kind.has_fifth_bits() {
                            true => ((qs[(4 * PANEL + r) * 4 + t] >> g) & 1) << 4,
                            false => 0,
                        };
                        let iq4 = |q: u8| IQ4_VALUES[q as usize] as i32 + 128;
                        let (lo, hi) = match w.kind {
                            PackedKind::Q8_0 => (byte as i32, None),
                            _ if w.kind.is_iq4() => (iq4(byte & 0x0F), Some(iq4(byte >> 4))),
                            _ => (
                                ((byte & 0x0F) | fifth(g)) as i32,
                                Some(((byte >> 4) | fifth(g + 4)) as i32),
                            ),
                        };
                        dot += lo * xb.qs[4 * g + t] as i32;
                        if let Some(hi) = hi {
                            dot += hi * xb.qs[QK / 2 + 4 * g + t] as i32;
                        }
                    }
                }
                dot -= w.kind.int_offset() * sums[i * nb + b];
                if w.kind.has_sub_minimum() {
                    let (sb, at) = (b / (QK_K / QK), b * PANEL + r);
                    let d = half(w.d, sb) * w.sub[0][at] as f32;
                    let m = half(w.m, sb) * w.sub[1][at] as f32;
                    acc = (dot as f32).mul_add(d * xb.d, acc);
                    acc = (-m).mul_add(xb.s, acc);
                    continue;
                }
                if w.kind == PackedKind::IQ4XS {
                    let d = half(w.d, b / (QK_K / QK)) * w.sub[0][b * PANEL + r] as i8 as f32;
                    acc = (dot as f32).mul_add(d * xb.d, acc);
                    continue;
                }
                acc = (dot as f32).mul_add(half(w.d, b) * xb.d, acc);
                if w.kind.has_minimum() {
                    acc = half(w.m, b).mul_add(xb.s, acc);
                }
            }
            out[i * PANEL + r] = acc;
        }
    }
}

/// Row `r`'s Q6_K block in the panel's quants `qs` dotted with `x`: each 16-weight
/// half's `Σ q·x − 32·Σx` (`sum(h)`) times its `i8` scale (`sub[h][at]`).
fn q6k_dot(
    qs: &[u8],
    r: usize,
    x: &[i8; QK],
    sub: [&[u8]; 2],
    at: usize,
    sum: impl Fn(usize) -> i32,
) -> i32 {
    let byte = |g: usize, t: usize| qs[(g * PANEL + r) * 4 + t];
    let mut halves = [0i32; 2];
    for (e, &xe) in x.iter().enumerate() {
        let (h, j, t) = (e / 16, (e % 16) / 4, e % 4);
        let low = (byte(j, t) >> (4 * h)) & 0x0F;
        let high = (byte(4 + h, t) >> (2 * j)) & 3;
        halves[h] += (low | (high << 4)) as i32 * xe as i32;
    }
    (0..2)
        .map(|h| (halves[h] - 32 * sum(h)) * sub[h][at] as i8 as i32)
        .sum()
}
