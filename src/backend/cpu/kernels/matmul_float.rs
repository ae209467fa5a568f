//! `x · Wᵀ` for f16 and bf16 weights that are not packed (see [`super::float`]). Decode
//! (`M ≤ 4`) dots the weight rows in their stored two-byte form, rows in parallel, so
//! each weight byte is read once; prefill widens tiles of weight rows to f32 and runs
//! the f32 GEMM on each tile.

use rayon::prelude::*;

use super::float::{dot_rows, widen, FloatKind, MAX_ROWS};
use super::matmul::{task_rows, tiled, transpose_into, Weight};
use crate::backend::BackendError;

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
        // Many rows: tiles widened to f32, then the f32 GEMM.
        tiled(x, m, w, 2 * w.k, out, |b, o| widen(kind, b, o))
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
    let task_rows = task_rows(n);
    let weights = w.bytes.par_chunks(task_rows * 2 * k);
    if m == 1 {
        return out
            .par_chunks_mut(task_rows)
            .zip(weights)
            .try_for_each(|(o, wb)| dot_rows(kind, wb, x, k, o));
    }
    let mut out_t = vec![0.0f32; n * m];
    out_t
        .par_chunks_mut(task_rows * m)
        .zip(weights)
        .try_for_each(|(o, wb)| dot_rows(kind, wb, x, k, o))?;
    transpose_into(&out_t, m, m, n, out);
    Ok(())
}
