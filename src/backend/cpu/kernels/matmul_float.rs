//! `x · Wᵀ` for f16 and bf16 weights. Decode (`M ≤ 4`) dots the weight rows in their
//! stored two-byte form with SIMD conversion ([`super::float`]), rows in parallel, so
//! each weight byte is read once; prefill widens tiles of weight rows to f32 with
//! the same SIMD conversion and runs the f32 GEMM on each tile.

use rayon::prelude::*;

use super::float::{dot_rows, widen, Activations, FloatKind, MAX_ROWS};
use super::matmul::{gemm_xwt, transpose_into, Weight};
use crate::backend::BackendError;

/// Fewest weight rows per rayon task on the decode path.
const MIN_TASK_ROWS: usize = 16;
/// Rayon tasks per pool thread on the decode path: a few, so a thread slowed by other
/// work on the machine is balanced by the others.
const TASKS_PER_THREAD: usize = 4;
/// Weight rows widened per GEMM call on the prefill path (with `k` = 576, 576 KiB of
/// f32: the tile stays in L2 while the GEMM streams the activations past it).
const TILE_ROWS: usize = 256;

/// `out [m, n] = x [m, k] · wᵀ` for `w` of `kind`; `w.bytes` holds `n` rows of `k`
/// two-byte values (checked by the caller) and `x`, `out` are `[m, k]`, `[m, n]`.
pub(super) fn matmul(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    kind: FloatKind,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if m <= MAX_ROWS {
        decode(x, m, w, kind, out)
    } else {
        prefill(x, m, w, kind, out)
    }
}

/// Few activation rows: each task dots its weight rows with every row of `x`, into
/// `out` transposed when `m > 1`.
fn decode(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    kind: FloatKind,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let (n, k) = (w.n, w.k);
    let act = Activations::prepare(kind, x);
    let tasks = rayon::current_num_threads() * TASKS_PER_THREAD;
    let task_rows = n.div_ceil(tasks).max(MIN_TASK_ROWS);
    let weights = w.bytes.par_chunks(task_rows * 2 * k);
    if m == 1 {
        return out
            .par_chunks_mut(task_rows)
            .zip(weights)
            .try_for_each(|(o, wb)| dot_rows(kind, wb, &act, k, o));
    }
    let mut out_t = vec![0.0f32; n * m];
    out_t
        .par_chunks_mut(task_rows * m)
        .zip(weights)
        .try_for_each(|(o, wb)| dot_rows(kind, wb, &act, k, o))?;
    transpose_into(&out_t, m, m, n, out);
    Ok(())
}

/// Many activation rows: tiles of [`TILE_ROWS`] weight rows widened to f32 (rows in
/// parallel), each multiplied by the f32 GEMM.
fn prefill(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    kind: FloatKind,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let k = w.k;
    let mut tile = vec![0.0f32; TILE_ROWS.min(w.n) * k];
    for n0 in (0..w.n).step_by(TILE_ROWS) {
        let rows = TILE_ROWS.min(w.n - n0);
        let src = &w.bytes[n0 * 2 * k..(n0 + rows) * 2 * k];
        let dst = &mut tile[..rows * k];
        dst.par_chunks_mut(k)
            .zip(src.par_chunks(2 * k))
            .try_for_each(|(o, b)| widen(kind, b, o))?;
        gemm_xwt(x, m, dst, rows, k, out, n0);
    }
    Ok(())
}
