//! Portable twins of the SIMD float kernels: the reference each of them is tested
//! against, and the kernels on CPUs without AVX2/F16C.

use half::{bf16, f16};

/// The f16 at element `c` of the little-endian row `b`, as f32.
pub(super) fn f16_at(b: &[u8], c: usize) -> f32 {
    f16::from_le_bytes([b[2 * c], b[2 * c + 1]]).to_f32()
}

/// The bf16 at element `c` of the little-endian row `b`, as f32.
pub(super) fn bf16_at(b: &[u8], c: usize) -> f32 {
    bf16::from_le_bytes([b[2 * c], b[2 * c + 1]]).to_f32()
}

/// `out[j·m + i] = Σ_c elem(row j, c) · x[i·k + c]` for every row of `w` (rows of
/// `k` two-byte elements) and the `m = x.len() / k` rows of `x`.
fn rows(w: &[u8], x: &[f32], k: usize, out: &mut [f32], elem: fn(&[u8], usize) -> f32) {
    let m = x.len() / k;
    for (row, o) in w.chunks_exact(2 * k).zip(out.chunks_exact_mut(m)) {
        for (xi, o) in x.chunks_exact(k).zip(o) {
            *o = xi.iter().enumerate().map(|(c, &v)| elem(row, c) * v).sum();
        }
    }
}

/// f16 weight rows times f32 activation rows (see [`rows`]).
pub(super) fn rows_f16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    rows(w, x, k, out, f16_at);
}

/// bf16 weight rows times f32 activation rows (see [`rows`]).
pub(super) fn rows_bf16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
    rows(w, x, k, out, bf16_at);
}

/// bf16 weight rows times bf16 activation rows (`x` as bf16 bits), products and
/// sums in f32: the twin of AVX-512 BF16's `vdpbf16ps`.
pub(super) fn rows_bf16_dot(w: &[u8], x: &[u16], k: usize, out: &mut [f32]) {
    let m = x.len() / k;
    for (row, o) in w.chunks_exact(2 * k).zip(out.chunks_exact_mut(m)) {
        for (xi, o) in x.chunks_exact(k).zip(o) {
            *o = xi
                .iter()
                .enumerate()
                .map(|(c, &v)| bf16_at(row, c) * bf16::from_bits(v).to_f32())
                .sum();
        }
    }
}

/// The f16 row `w` as f32 into `out` (one value per two bytes).
pub(super) fn f16_to_f32(w: &[u8], out: &mut [f32]) {
    for (c, o) in out.iter_mut().enumerate() {
        *o = f16_at(w, c);
    }
}

/// The bf16 row `w` as f32 into `out` (one value per two bytes).
pub(super) fn bf16_to_f32(w: &[u8], out: &mut [f32]) {
    for (c, o) in out.iter_mut().enumerate() {
        *o = bf16_at(w, c);
    }
}
