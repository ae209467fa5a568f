//! The portable twin of the packed kernels: the same integer sums and the same f32
//! operations in the same order, so the SIMD kernels must match it bit for bit.

use half::f16;

use super::{sub_index, PackedKind, Panel, PANEL};
use crate::backend::cpu::quant::IQ4_VALUES;
use crate::backend::cpu::simd::{BlockQ8, QK, QK_K};

/// `out[i·PANEL + r] = w row r of the panel · x row i` for `rows` rows of `x`.
pub(super) fn panel(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    rows: usize,
    out: &mut [f32],
    _again: bool,
) {
    let nb = w.nb;
    let units = w.kind.sums_per_block();
    let half = |v: &[u16], at: usize, r: usize| f16::from_bits(v[at * PANEL + r]).to_f32();
    for i in 0..rows {
        let sum = |u: usize| sums[i * nb * units + u] as i32;
        for r in 0..PANEL {
            let mut acc = 0.0f32;
            if w.kind.is_super() {
                // Per super-block: Σ sc·dot over its scale units and Σ c·Σx (the
                // minimums, or the offset times the scale) in integers, then converted
                // once with the super-block's shared activation scale.
                for s in 0..nb / (QK_K / QK) {
                    let (mut dots, mut less) = (0i32, 0i32);
                    for b in s * (QK_K / QK)..(s + 1) * (QK_K / QK) {
                        let dot = unit_dots(w, b, r, &x[i * nb + b].qs);
                        for (h, dot) in dot.iter().take(units).enumerate() {
                            let u = b * units + h;
                            let sc = w.sub[0][sub_index(u, r)] as i8 as i32;
                            dots += sc * dot;
                            let c = match w.kind.has_sub_minimum() {
                                true => w.sub[1][sub_index(u, r)] as i32,
                                false => w.kind.int_offset() * sc,
                            };
                            less += c * sum(u);
                        }
                    }
                    let xd = x[i * nb + s * (QK_K / QK)].d;
                    let d = half(w.d, s, r) * xd;
                    if w.kind.has_sub_minimum() {
                        acc = (dots as f32).mul_add(d, acc);
                        acc = (-(less as f32)).mul_add(half(w.m, s, r) * xd, acc);
                    } else {
                        acc = ((dots - less) as f32).mul_add(d, acc);
                    }
                }
            } else {
                for b in 0..nb {
                    let xb = &x[i * nb + b];
                    let dot = unit_dots(w, b, r, &xb.qs)[0] - w.kind.int_offset() * sum(b);
                    acc = (dot as f32).mul_add(half(w.d, b, r) * xb.d, acc);
                    if w.kind.has_minimum() {
                        acc = half(w.m, b, r).mul_add(xb.s, acc);
                    }
                }
            }
            out[i * PANEL + r] = acc;
        }
    }
}

/// Row `r`'s block `b` dotted with `x` per scale unit, before any offset: the stored
/// (unsigned) values times `x`, over the whole block or, for Q6_K, each 16-weight half.
fn unit_dots(w: Panel<'_>, b: usize, r: usize, x: &[i8; QK]) -> [i32; 2] {
    let qs = &w.qs[b * w.kind.panel_qs()..];
    let byte = |g: usize, t: usize| qs[(g * PANEL + r) * 4 + t];
    let mut dots = [0i32; 2];
    if w.kind == PackedKind::Q6K {
        for (e, &xe) in x.iter().enumerate() {
            let (h, j, t) = (e / 16, (e % 16) / 4, e % 4);
            let low = (byte(j, t) >> (4 * h)) & 0x0F;
            let high = (byte(4 + h, t) >> (2 * j)) & 3;
            dots[h] += (low | (high << 4)) as i32 * xe as i32;
        }
        return dots;
    }
    let groups = match w.kind {
        PackedKind::Q8_0 => 8,
        _ => 4,
    };
    for g in 0..groups {
        for t in 0..4 {
            let byte = byte(g, t);
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
            dots[0] += lo * x[4 * g + t] as i32;
            if let Some(hi) = hi {
                dots[0] += hi * x[QK / 2 + 4 * g + t] as i32;
            }
        }
    }
    dots
}
