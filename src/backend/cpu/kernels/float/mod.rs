//! Portable kernels for f16 and bf16 weights that are not packed: matmul weights on
//! CPUs without the packed float panels (no AVX2 + FMA + F16C, or the kernel set capped
//! at `scalar`), where every F16 and BF16 matmul weight is packed otherwise
//! (`packed/float`). Decode multiplies 1–4 activation rows by weight rows in their
//! stored two-byte form, so the weights are read once at their own size; prefill widens
//! tiles of weight rows to f32 for the f32 GEMM.

#[cfg(test)]
mod tests;

use half::{bf16, f16};

use crate::backend::BackendError;
use crate::graph::DType;

/// Most activation rows one call of [`dot_rows`] takes.
pub(crate) const MAX_ROWS: usize = 4;

/// Two-byte float weight formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatKind {
    /// IEEE half precision, [`DType::F16`].
    F16,
    /// bfloat16, [`DType::BF16`].
    Bf16,
}

impl FloatKind {
    /// The kind for `dtype`, if it is a two-byte float.
    pub(crate) fn of(dtype: DType) -> Option<FloatKind> {
        match dtype {
            DType::F16 => Some(FloatKind::F16),
            DType::BF16 => Some(FloatKind::Bf16),
            _ => None,
        }
    }

    /// The element at `c` of the little-endian row `b`, as f32.
    fn at(self, b: &[u8], c: usize) -> f32 {
        let bytes = [b[2 * c], b[2 * c + 1]];
        match self {
            FloatKind::F16 => f16::from_le_bytes(bytes).to_f32(),
            FloatKind::Bf16 => bf16::from_le_bytes(bytes).to_f32(),
        }
    }
}

/// `out[j·m + i] = Σ_c w[j, c]·x[i, c]` for every row `j` of `w` (raw little-endian
/// bytes of `kind`, rows of `k`) and the `m = x.len() / k` rows of `x`, `1 ≤ m ≤ 4`.
pub(crate) fn dot_rows(
    kind: FloatKind,
    w: &[u8],
    x: &[f32],
    k: usize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let m = x.len().checked_div(k).unwrap_or(0);
    let rows = w.len().checked_div(2 * k).unwrap_or(0);
    if m == 0
        || m > MAX_ROWS
        || m * k != x.len()
        || rows * 2 * k != w.len()
        || rows * m != out.len()
    {
        return Err(BackendError::Input(format!(
            "float dot: {} weight bytes, {} activations and {} outputs are not rows of {k} \
             with 1 to {MAX_ROWS} activation rows",
            w.len(),
            x.len(),
            out.len()
        )));
    }
    for (row, o) in w.chunks_exact(2 * k).zip(out.chunks_exact_mut(m)) {
        for (xi, o) in x.chunks_exact(k).zip(o) {
            *o = xi
                .iter()
                .enumerate()
                .map(|(c, &v)| kind.at(row, c) * v)
                .sum();
        }
    }
    Ok(())
}

/// The weight row `w` (raw little-endian bytes of `kind`) widened to f32 into `out`.
pub(crate) fn widen(kind: FloatKind, w: &[u8], out: &mut [f32]) -> Result<(), BackendError> {
    if w.len() != 2 * out.len() {
        return Err(BackendError::Input(format!(
            "float widen: {} bytes do not hold {} two-byte values",
            w.len(),
            out.len()
        )));
    }
    for (c, o) in out.iter_mut().enumerate() {
        *o = kind.at(w, c);
    }
    Ok(())
}
