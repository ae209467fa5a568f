//! Portable twins of the SIMD kernels: the reference the SIMD versions are tested
//! against, and the implementation on CPUs without them. Same contracts as the
//! [`super::Table`] entries: rows of `x.len() / xr` blocks; any tail that does not
//! fill a whole row or block is ignored (callers check sizes).

use half::f16;

use super::{BlockQ4_0, BlockQ4_1, BlockQ8, BlockQ8_0, QK};

/// Quantizes each 32 values of `x` to one block: `d = max|x| / 127`, `q = round(x / d)`
/// (ties to even, as the SIMD rounding does), `s = d·Σq`.
pub(super) fn quantize_row(x: &[f32], out: &mut [BlockQ8]) {
    for (x, o) in x.chunks_exact(QK).zip(out) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in o.qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
            sum += *q as i32;
        }
        o.d = d;
        o.s = d * sum as f32;
    }
}

/// The f16 in `b` as f32.
fn half(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

/// Σ of the 32 unsigned nibbles of `qs` (low nibbles first) times `y`.
fn dot_nibbles(qs: &[u8; 16], y: &[i8; QK]) -> i32 {
    qs.iter()
        .enumerate()
        .map(|(j, &q)| (q & 0xF) as i32 * y[j] as i32 + (q >> 4) as i32 * y[j + 16] as i32)
        .sum()
}

/// Shared driver: for each weight row and each of the `xr` activation rows, sums
/// `block(w block, x block)` → `(scale·integer dot, offset term)` over the row.
fn rows<B>(
    w: &[B],
    x: &[BlockQ8],
    xr: usize,
    out: &mut [f32],
    stride: usize,
    block: impl Fn(&B, &BlockQ8) -> (f32, f32),
) {
    let nb = x.len().checked_div(xr).unwrap_or(0);
    if nb == 0 {
        return;
    }
    for (row, o) in w.chunks_exact(nb).zip(out.chunks_mut(stride)) {
        for (o, xrow) in o.iter_mut().zip(x.chunks_exact(nb)) {
            let (mut acc, mut off) = (0.0f32, 0.0f32);
            for (wb, xb) in row.iter().zip(xrow) {
                let (a, b) = block(wb, xb);
                acc += a;
                off += b;
            }
            *o = acc + off;
        }
    }
}

/// Q4_0 weights: `d_w·d_x·Σ q_w·q_x − 8·d_w·s_x`.
pub(super) fn rows_q4_0(w: &[BlockQ4_0], x: &[BlockQ8], xr: usize, out: &mut [f32], st: usize) {
    rows(w, x, xr, out, st, |wb, xb| {
        let d = half(wb.d);
        let dot = dot_nibbles(&wb.qs, &xb.qs);
        (d * xb.d * dot as f32, -8.0 * d * xb.s)
    });
}

/// Q4_1 weights: `d_w·d_x·Σ q_w·q_x + m_w·s_x`.
pub(super) fn rows_q4_1(w: &[BlockQ4_1], x: &[BlockQ8], xr: usize, out: &mut [f32], st: usize) {
    rows(w, x, xr, out, st, |wb, xb| {
        let (d, m) = (half([wb.dm[0], wb.dm[1]]), half([wb.dm[2], wb.dm[3]]));
        let dot = dot_nibbles(&wb.qs, &xb.qs);
        (d * xb.d * dot as f32, m * xb.s)
    });
}

/// Q8_0 weights: `d_w·d_x·Σ q_w·q_x`.
pub(super) fn rows_q8_0(w: &[BlockQ8_0], x: &[BlockQ8], xr: usize, out: &mut [f32], st: usize) {
    rows(w, x, xr, out, st, |wb, xb| {
        let dot: i32 = wb
            .qs
            .iter()
            .zip(&xb.qs)
            .map(|(&a, &b)| a as i32 * b as i32)
            .sum();
        (half(wb.d) * xb.d * dot as f32, 0.0)
    });
}
