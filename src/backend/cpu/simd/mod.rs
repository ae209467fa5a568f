//! Quantized dot-product kernels behind a dispatch table chosen once per process:
//! AVX2 (with FMA and F16C) where the CPU has it, the portable scalar twins elsewhere.
//!
//! Activations are quantized per row to [`BlockQ8`] (ggml's Q8_1: 32 `i8` with a scale
//! and the scaled sum), and each weight block is dotted with them in integers, the way
//! llama.cpp does for Q4_0, Q4_1 and Q8_0 weights.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod scalar;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use bytemuck::{Pod, Zeroable};

use crate::backend::BackendError;
use crate::graph::DType;

/// Elements per quantization block.
pub(crate) const QK: usize = 32;

/// 32 activations as `x ≈ d·q`, with `s = d·Σq` for formats whose weights carry an
/// offset (Q4_1's minimum, Q4_0's implicit −8).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub(crate) struct BlockQ8 {
    /// Scale.
    pub d: f32,
    /// `d` times the sum of `qs`.
    pub s: f32,
    /// Quantized values.
    pub qs: [i8; QK],
}

/// ggml `block_q4_0`: f16 scale, 32 nibbles (low nibbles first), weights `(q − 8)·d`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ4_0 {
    d: [u8; 2],
    qs: [u8; 16],
}

/// ggml `block_q4_1`: f16 scale and minimum, 32 nibbles, weights `q·d + m`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ4_1 {
    dm: [u8; 4],
    qs: [u8; 16],
}

/// ggml `block_q8_0`: f16 scale and 32 `i8`, weights `q·d`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ8_0 {
    d: [u8; 2],
    qs: [i8; 32],
}

/// `rows(w, x, out, stride)`: `out[j·stride + i] = w row j · x row i` for every weight
/// row `j` of `w` (rows of `x.len() / xr` blocks) and `i < xr`.
type RowsFn<B> = fn(&[B], &[BlockQ8], usize, &mut [f32], usize);

/// One implementation of every kernel.
#[derive(Clone, Copy)]
struct Table {
    quantize: fn(&[f32], &mut [BlockQ8]),
    q4_0: RowsFn<BlockQ4_0>,
    q4_1: RowsFn<BlockQ4_1>,
    q8_0: RowsFn<BlockQ8_0>,
}

impl Table {
    const SCALAR: Table = Table {
        quantize: scalar::quantize_row,
        q4_0: scalar::rows_q4_0,
        q4_1: scalar::rows_q4_1,
        q8_0: scalar::rows_q8_0,
    };

    /// The AVX2 table when this CPU supports it.
    #[cfg(target_arch = "x86_64")]
    fn avx2() -> Option<Table> {
        let ok = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        ok.then_some(Table {
            quantize: x86::quantize,
            q4_0: x86::q4_0,
            q4_1: x86::q4_1,
            q8_0: x86::q8_0,
        })
    }

    /// The best table for this CPU, chosen on first use.
    fn get() -> &'static Table {
        static TABLE: OnceLock<Table> = OnceLock::new();
        TABLE.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if let Some(t) = Table::avx2() {
                return t;
            }
            Table::SCALAR
        })
    }
}

/// Safe entry points to the AVX2 kernels, installed only by [`Table::avx2`] after the
/// features were detected.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{avx2, BlockQ4_0, BlockQ4_1, BlockQ8, BlockQ8_0};

    pub(super) fn quantize(x: &[f32], out: &mut [BlockQ8]) {
        // SAFETY: only reachable through a table built after detecting avx2/fma/f16c.
        unsafe { avx2::quantize_row(x, out) }
    }

    pub(super) fn q4_0(w: &[BlockQ4_0], x: &[BlockQ8], xr: usize, o: &mut [f32], s: usize) {
        // SAFETY: as in `quantize`.
        unsafe { avx2::rows_q4_0(w, x, xr, o, s) }
    }

    pub(super) fn q4_1(w: &[BlockQ4_1], x: &[BlockQ8], xr: usize, o: &mut [f32], s: usize) {
        // SAFETY: as in `quantize`.
        unsafe { avx2::rows_q4_1(w, x, xr, o, s) }
    }

    pub(super) fn q8_0(w: &[BlockQ8_0], x: &[BlockQ8], xr: usize, o: &mut [f32], s: usize) {
        // SAFETY: as in `quantize`.
        unsafe { avx2::rows_q8_0(w, x, xr, o, s) }
    }
}

/// Most activation rows one [`dot_rows`] call takes (the micro-kernel's height).
pub(crate) const MAX_XR: usize = 4;

/// Weight formats with an integer dot-product kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuantKind {
    /// [`DType::Q4_0`].
    Q4_0,
    /// [`DType::Q4_1`].
    Q4_1,
    /// [`DType::Q8_0`].
    Q8_0,
}

impl QuantKind {
    /// The kind for `dtype`, if it has integer kernels.
    pub(crate) fn of(dtype: DType) -> Option<QuantKind> {
        match dtype {
            DType::Q4_0 => Some(QuantKind::Q4_0),
            DType::Q4_1 => Some(QuantKind::Q4_1),
            DType::Q8_0 => Some(QuantKind::Q8_0),
            _ => None,
        }
    }
}

/// Quantizes `x` (a whole number of 32-blocks) into `out`, one block per 32 values.
pub(crate) fn quantize_row(x: &[f32], out: &mut [BlockQ8]) -> Result<(), BackendError> {
    if x.len() != out.len() * QK {
        return Err(BackendError::Input(format!(
            "cannot quantize {} values into {} blocks of {QK}",
            x.len(),
            out.len()
        )));
    }
    (Table::get().quantize)(x, out);
    Ok(())
}

/// `out[j·stride + i] = Σ_k w[j, k]·x[i, k]` for every row `j` of `w` (raw bytes of
/// `kind`) and `i < xr ≤ MAX_XR`, where `x` holds `xr` quantized rows of equal length.
pub(crate) fn dot_rows(
    kind: QuantKind,
    w: &[u8],
    x: &[BlockQ8],
    xr: usize,
    out: &mut [f32],
    stride: usize,
) -> Result<(), BackendError> {
    let nb = x.len().checked_div(xr).unwrap_or(0);
    let n_out = out.len();
    let bad = |what: &str| {
        BackendError::Input(format!(
            "dot_rows: {what} ({} weight bytes, {} x blocks, {xr} rows, {n_out} outputs, stride {stride})",
            w.len(),
            x.len(),
        ))
    };
    if xr == 0 || xr > MAX_XR || nb == 0 || nb * xr != x.len() || stride < xr {
        return Err(bad("bad activation shape"));
    }
    let t = Table::get();
    let done = match kind {
        QuantKind::Q4_0 => run(t.q4_0, w, x, xr, out, stride),
        QuantKind::Q4_1 => run(t.q4_1, w, x, xr, out, stride),
        QuantKind::Q8_0 => run(t.q8_0, w, x, xr, out, stride),
    };
    done.ok_or_else(|| bad("weights are not whole rows or the output is too short"))
}

/// Runs kernel `f` when `w` is whole rows of blocks `B` and `out` covers every row.
fn run<B: Pod>(
    f: RowsFn<B>,
    w: &[u8],
    x: &[BlockQ8],
    xr: usize,
    out: &mut [f32],
    stride: usize,
) -> Option<()> {
    let nb = x.len() / xr;
    let w: &[B] = bytemuck::try_cast_slice(w).ok()?;
    let rows = w.len() / nb;
    if rows * nb != w.len() || (rows > 0 && out.len() < (rows - 1) * stride + xr) {
        return None;
    }
    f(w, x, xr, out, stride);
    Some(())
}
