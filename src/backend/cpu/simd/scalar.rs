//! Portable kernels: the activation quantizer (the AVX2 one's twin) and the integer
//! dot products of unpacked weights, weight rows of `x.len()` blocks; any tail that does
//! not fill a whole row or block is ignored (callers check sizes).

use half::f16;

use super::{
    BlockIQ4NL, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8x4, QK,
};
use crate::backend::cpu::quant::IQ4_VALUES;

/// Quantizes each 32 values of `x` to one block: `d = max|x| / 127` over each `shared`
/// consecutive blocks (one scale for all of them), `q = round(x / d)` (ties to even, as
/// the SIMD rounding does), `s = d·Σq`.
pub(super) fn quantize_row(x: &[f32], out: &mut [BlockQ8], shared: usize) {
    for (x, out) in x
        .chunks_exact(QK * shared)
        .zip(out.chunks_exact_mut(shared))
    {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        for (x, o) in x.chunks_exact(QK).zip(out) {
            let mut sum = 0i32;
            for (q, &v) in o.qs.iter_mut().zip(x) {
                *q = (v * id).round_ties_even() as i8;
                sum += *q as i32;
            }
            o.d = d;
            o.s = d * sum as f32;
        }
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

/// Σ of the 32 five-bit values (nibbles of `qs` plus bit `j` of `qh` as 16) times `y`.
fn dot_five_bits(qh: [u8; 4], qs: &[u8; 16], y: &[i8; QK]) -> i32 {
    let qh = u32::from_le_bytes(qh);
    let high = |j: usize| (((qh >> j) & 1) << 4) as i32;
    qs.iter()
        .enumerate()
        .map(|(j, &q)| {
            ((q & 0xF) as i32 + high(j)) * y[j] as i32
                + ((q >> 4) as i32 + high(j + 16)) * y[j + 16] as i32
        })
        .sum()
}

/// One activation block as the kernels see it: scale, scaled sum, values.
type XBlock<'a> = (f32, f32, &'a [i8; QK]);

/// Shared driver: for each weight row and each activation row (`x_rows(b)` lists the
/// rows' blocks at position `b`), sums `block(w block, x block)` → `(scaled integer
/// dot, offset term)` along the row, the offsets separately, into `out[j·stride + i]`.
fn rows<'x, B, const R: usize>(
    w: &[B],
    nb: usize,
    out: &mut [f32],
    stride: usize,
    x_rows: impl Fn(usize) -> [XBlock<'x>; R],
    block: impl Fn(&B, XBlock<'_>) -> (f32, f32),
) {
    if nb == 0 {
        return;
    }
    for (row, o) in w.chunks_exact(nb).zip(out.chunks_mut(stride)) {
        let (mut acc, mut off) = ([0.0f32; R], [0.0f32; R]);
        for (b, wb) in row.iter().enumerate() {
            for (i, xb) in x_rows(b).into_iter().enumerate() {
                let (a, c) = block(wb, xb);
                acc[i] += a;
                off[i] += c;
            }
        }
        for (o, (a, c)) in o.iter_mut().zip(acc.iter().zip(off)) {
            *o = a + c;
        }
    }
}

/// The four rows' blocks at one interleaved position.
fn x4(x: &BlockQ8x4) -> [XBlock<'_>; 4] {
    std::array::from_fn(|i| (x.d[i], x.s[i], &x.qs[i]))
}

/// Q4_0 block: `d_w·d_x·Σ q_w·q_x − 8·d_w·s_x`.
fn q4_0(wb: &BlockQ4_0, (xd, xs, xq): XBlock<'_>) -> (f32, f32) {
    let d = half(wb.d);
    (d * xd * dot_nibbles(&wb.qs, xq) as f32, -8.0 * d * xs)
}

/// Q4_1 block: `d_w·d_x·Σ q_w·q_x + m_w·s_x`.
fn q4_1(wb: &BlockQ4_1, (xd, xs, xq): XBlock<'_>) -> (f32, f32) {
    let (d, m) = (half([wb.dm[0], wb.dm[1]]), half([wb.dm[2], wb.dm[3]]));
    (d * xd * dot_nibbles(&wb.qs, xq) as f32, m * xs)
}

/// Q8_0 block: `d_w·d_x·Σ q_w·q_x`.
fn q8_0(wb: &BlockQ8_0, (xd, _, xq): XBlock<'_>) -> (f32, f32) {
    let dot: i32 = wb
        .qs
        .iter()
        .zip(xq)
        .map(|(&a, &b)| a as i32 * b as i32)
        .sum();
    (half(wb.d) * xd * dot as f32, 0.0)
}

/// Q5_0 block: `d_w·d_x·Σ q_w·q_x − 16·d_w·s_x`.
fn q5_0(wb: &BlockQ5_0, (xd, xs, xq): XBlock<'_>) -> (f32, f32) {
    let d = half(wb.d);
    (
        d * xd * dot_five_bits(wb.qh, &wb.qs, xq) as f32,
        -16.0 * d * xs,
    )
}

/// Q5_1 block: `d_w·d_x·Σ q_w·q_x + m_w·s_x`.
fn q5_1(wb: &BlockQ5_1, (xd, xs, xq): XBlock<'_>) -> (f32, f32) {
    let (d, m) = (half([wb.dm[0], wb.dm[1]]), half([wb.dm[2], wb.dm[3]]));
    (d * xd * dot_five_bits(wb.qh, &wb.qs, xq) as f32, m * xs)
}

/// IQ4_NL block: `d_w·d_x·Σ IQ4_VALUES[q_w]·q_x`.
fn iq4_nl(wb: &BlockIQ4NL, (xd, _, xq): XBlock<'_>) -> (f32, f32) {
    let v = |q: u8| IQ4_VALUES[q as usize] as i32;
    let dot: i32 = wb
        .qs
        .iter()
        .enumerate()
        .map(|(j, &q)| v(q & 0xF) * xq[j] as i32 + v(q >> 4) * xq[j + 16] as i32)
        .sum();
    (half(wb.d) * xd * dot as f32, 0.0)
}

/// Q4_0 weights × one quantized row.
pub(super) fn rows_q4_0(w: &[BlockQ4_0], x: &[BlockQ8], out: &mut [f32]) {
    rows(w, x.len(), out, 1, |b| [(x[b].d, x[b].s, &x[b].qs)], q4_0);
}

/// Q4_1 weights × one quantized row.
pub(super) fn rows_q4_1(w: &[BlockQ4_1], x: &[BlockQ8], out: &mut [f32]) {
    rows(w, x.len(), out, 1, |b| [(x[b].d, x[b].s, &x[b].qs)], q4_1);
}

/// Q8_0 weights × one quantized row.
pub(super) fn rows_q8_0(w: &[BlockQ8_0], x: &[BlockQ8], out: &mut [f32]) {
    rows(w, x.len(), out, 1, |b| [(x[b].d, x[b].s, &x[b].qs)], q8_0);
}

/// Q4_0 weights × four interleaved rows.
pub(super) fn rows_q4_0_x4(w: &[BlockQ4_0], x: &[BlockQ8x4], out: &mut [f32], st: usize) {
    rows(w, x.len(), out, st, |b| x4(&x[b]), q4_0);
}

/// Q4_1 weights × four interleaved rows.
pub(super) fn rows_q4_1_x4(w: &[BlockQ4_1], x: &[BlockQ8x4], out: &mut [f32], st: usize) {
    rows(w, x.len(), out, st, |b| x4(&x[b]), q4_1);
}

/// Q8_0 weights × four interleaved rows.
pub(super) fn rows_q8_0_x4(w: &[BlockQ8_0], x: &[BlockQ8x4], out: &mut [f32], st: usize) {
    rows(w, x.len(), out, st, |b| x4(&x[b]), q8_0);
}

/// Q5_0 weights × one quantized row.
pub(super) fn rows_q5_0(w: &[BlockQ5_0], x: &[BlockQ8], out: &mut [f32]) {
    rows(w, x.len(), out, 1, |b| [(x[b].d, x[b].s, &x[b].qs)], q5_0);
}

/// Q5_1 weights × one quantized row.
pub(super) fn rows_q5_1(w: &[BlockQ5_1], x: &[BlockQ8], out: &mut [f32]) {
    rows(w, x.len(), out, 1, |b| [(x[b].d, x[b].s, &x[b].qs)], q5_1);
}

/// IQ4_NL weights × one quantized row.
pub(super) fn rows_iq4_nl(w: &[BlockIQ4NL], x: &[BlockQ8], out: &mut [f32]) {
    rows(w, x.len(), out, 1, |b| [(x[b].d, x[b].s, &x[b].qs)], iq4_nl);
}

/// Q5_0 weights × four interleaved rows.
pub(super) fn rows_q5_0_x4(w: &[BlockQ5_0], x: &[BlockQ8x4], out: &mut [f32], st: usize) {
    rows(w, x.len(), out, st, |b| x4(&x[b]), q5_0);
}

/// Q5_1 weights × four interleaved rows.
pub(super) fn rows_q5_1_x4(w: &[BlockQ5_1], x: &[BlockQ8x4], out: &mut [f32], st: usize) {
    rows(w, x.len(), out, st, |b| x4(&x[b]), q5_1);
}

/// IQ4_NL weights × four interleaved rows.
pub(super) fn rows_iq4_nl_x4(w: &[BlockIQ4NL], x: &[BlockQ8x4], out: &mut [f32], st: usize) {
    rows(w, x.len(), out, st, |b| x4(&x[b]), iq4_nl);
}
