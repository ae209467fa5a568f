//! Quantized activations and the portable integer dot products of unpacked weights.
//!
//! Activations are quantized per row to [`BlockQ8`] (ggml's Q8_1: 32 `i8` with a scale
//! and the scaled sum), by an AVX2 kernel where the CPU has it (the packed kernels'
//! activations, `packed/`) or its scalar twin. Unpacked weights of the 32-weight formats
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL are dotted with them in integers, the way
//! llama.cpp does; prefill interleaves four activation rows per block ([`BlockQ8x4`]) so
//! each weight block serves four rows. Those weights are unpacked only where the CPU
//! has no packed kernel (no AVX2 + FMA + F16C, or the kernel set capped at `scalar`):
//! on every CPU with one, each such matmul weight is packed at compile time, so the dot
//! products here are the scalar ones (decision 175).

#[cfg(target_arch = "x86_64")]
mod avx2;
mod kquant;
mod scalar;
mod scalar_k;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_k;

use std::sync::OnceLock;

use bytemuck::{Pod, Zeroable};

#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::isa::{allows, Isa};
use crate::backend::BackendError;
use crate::graph::DType;

pub(crate) use kquant::{dot_rows_k, quantize_row_k, BlockQ8K, KQuantKind, QK_K};
pub(crate) use scalar_k::scales_mins;

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

/// The blocks at one position of four activation rows, interleaved. Missing rows (a
/// tail of fewer than four) are zero blocks and produce zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub(crate) struct BlockQ8x4 {
    /// Scales of rows 0..4, twice (one 8-lane load gives both 128-bit halves).
    pub d: [f32; 8],
    /// Scaled sums of rows 0..4.
    pub s: [f32; 4],
    /// Quantized values of rows 0..4.
    pub qs: [[i8; QK]; 4],
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

/// ggml `block_q5_0`: f16 scale, the fifth bits (bit `j` for weight `j`), 32 nibbles,
/// weights `(q − 16)·d`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ5_0 {
    d: [u8; 2],
    qh: [u8; 4],
    qs: [u8; 16],
}

/// ggml `block_q5_1`: f16 scale and minimum, the fifth bits, 32 nibbles, `q·d + m`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ5_1 {
    dm: [u8; 4],
    qh: [u8; 4],
    qs: [u8; 16],
}

/// ggml `block_iq4_nl`: f16 scale, 32 nibbles indexing [`IQ4_VALUES`](crate::backend::cpu::quant::IQ4_VALUES), weights
/// `IQ4_VALUES[q]·d`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockIQ4NL {
    d: [u8; 2],
    qs: [u8; 16],
}

/// `quantize(x, out, shared)`: [`scalar::quantize_row`]'s contract.
type QuantizeFn = fn(&[f32], &mut [BlockQ8], usize);

/// The activation quantizer of this CPU, chosen on first use: AVX2 where the CPU has
/// AVX2, FMA and F16C and the kernel set allows it (every packed kernel's activations
/// come through it), the scalar twin elsewhere.
fn quantizer() -> QuantizeFn {
    static QUANTIZE: OnceLock<QuantizeFn> = OnceLock::new();
    *QUANTIZE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if let Some(q) = avx2_quantizer() {
            return q;
        }
        scalar::quantize_row
    })
}

/// The AVX2 quantizer when this CPU supports it.
#[cfg(target_arch = "x86_64")]
fn avx2_quantizer() -> Option<QuantizeFn> {
    let ok = allows(Isa::Avx2)
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    ok.then_some(avx2_quantize as QuantizeFn)
}

/// Safe entry point to [`avx2::quantize_row`], handed out only by [`avx2_quantizer`]
/// after the features were detected.
#[cfg(target_arch = "x86_64")]
fn avx2_quantize(x: &[f32], out: &mut [BlockQ8], shared: usize) {
    // SAFETY: only reachable after detecting avx2/fma/f16c.
    unsafe { avx2::quantize_row(x, out, shared) }
}

/// `out[j] = w row j · x` with `kind`'s kernel, or `None` when the shapes do not fit
/// (see [`run`]).
fn dot(kind: QuantKind, w: &[u8], x: &[BlockQ8], out: &mut [f32]) -> Option<()> {
    let (nb, n) = (x.len(), out.len());
    match kind {
        QuantKind::Q4_0 => run(w, nb, n, 1, |w| scalar::rows_q4_0(w, x, out)),
        QuantKind::Q4_1 => run(w, nb, n, 1, |w| scalar::rows_q4_1(w, x, out)),
        QuantKind::Q8_0 => run(w, nb, n, 1, |w| scalar::rows_q8_0(w, x, out)),
        QuantKind::Q5_0 => run(w, nb, n, 1, |w| scalar::rows_q5_0(w, x, out)),
        QuantKind::Q5_1 => run(w, nb, n, 1, |w| scalar::rows_q5_1(w, x, out)),
        QuantKind::IQ4NL => run(w, nb, n, 1, |w| scalar::rows_iq4_nl(w, x, out)),
    }
}

/// `out[j·stride + i] = w row j · x row i` with `kind`'s four-row kernel, or `None`
/// when the shapes do not fit (see [`run`]).
fn dot_x4(kind: QuantKind, w: &[u8], x: &[BlockQ8x4], out: &mut [f32], st: usize) -> Option<()> {
    let (nb, n) = (x.len(), out.len());
    match kind {
        QuantKind::Q4_0 => run(w, nb, n, st, |w| scalar::rows_q4_0_x4(w, x, out, st)),
        QuantKind::Q4_1 => run(w, nb, n, st, |w| scalar::rows_q4_1_x4(w, x, out, st)),
        QuantKind::Q8_0 => run(w, nb, n, st, |w| scalar::rows_q8_0_x4(w, x, out, st)),
        QuantKind::Q5_0 => run(w, nb, n, st, |w| scalar::rows_q5_0_x4(w, x, out, st)),
        QuantKind::Q5_1 => run(w, nb, n, st, |w| scalar::rows_q5_1_x4(w, x, out, st)),
        QuantKind::IQ4NL => run(w, nb, n, st, |w| scalar::rows_iq4_nl_x4(w, x, out, st)),
    }
}

/// Weight formats with an integer dot-product kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuantKind {
    /// [`DType::Q4_0`].
    Q4_0,
    /// [`DType::Q4_1`].
    Q4_1,
    /// [`DType::Q8_0`].
    Q8_0,
    /// [`DType::Q5_0`].
    Q5_0,
    /// [`DType::Q5_1`].
    Q5_1,
    /// [`DType::IQ4NL`].
    IQ4NL,
}

impl QuantKind {
    /// The kind for `dtype`, if it has integer kernels.
    pub(crate) fn of(dtype: DType) -> Option<QuantKind> {
        match dtype {
            DType::Q4_0 => Some(QuantKind::Q4_0),
            DType::Q4_1 => Some(QuantKind::Q4_1),
            DType::Q8_0 => Some(QuantKind::Q8_0),
            DType::Q5_0 => Some(QuantKind::Q5_0),
            DType::Q5_1 => Some(QuantKind::Q5_1),
            DType::IQ4NL => Some(QuantKind::IQ4NL),
            _ => None,
        }
    }
}

/// The `m` rows of `x` (`k` values each, `k` a multiple of [`QK`]) quantized to Q8
/// blocks, rows in parallel when there are many values.
pub(crate) fn quantize_rows(x: &[f32], m: usize, k: usize) -> Result<Vec<BlockQ8>, BackendError> {
    quantize_rows_shared(x, m, k, 1)
}

/// [`quantize_rows`] with one scale for each `shared` consecutive blocks of a row (the
/// largest |x| of their `32·shared` values): 8 gives llama.cpp's Q8_K scaling, one per
/// 256 values, whose products a K-quant kernel sums in integers across a super-block.
pub(crate) fn quantize_rows_shared(
    x: &[f32],
    m: usize,
    k: usize,
    shared: usize,
) -> Result<Vec<BlockQ8>, BackendError> {
    use rayon::prelude::*;
    if shared == 0 || !k.is_multiple_of(QK * shared) || x.len() != m * k {
        return Err(BackendError::Input(format!(
            "cannot quantize {} values as {m} rows of {k} in groups of {shared} blocks of {QK}",
            x.len()
        )));
    }
    let nb = k / QK;
    let mut xq = vec![BlockQ8::default(); m * nb];
    if nb == 0 || m == 0 {
        return Ok(xq);
    }
    let quantize = quantizer();
    if m * k >= QUANTIZE_PARALLEL_MIN {
        xq.par_chunks_mut(nb)
            .zip(x.par_chunks(k))
            .for_each(|(q, x)| quantize(x, q, shared));
    } else {
        quantize(x, &mut xq, shared);
    }
    Ok(xq)
}

/// Values below which [`quantize_rows`] stays on the calling thread.
const QUANTIZE_PARALLEL_MIN: usize = 1 << 14;

/// `out[j] = Σ_k w[j, k]·x[k]` for every row `j` of `w` (raw bytes of `kind`), with `x`
/// one quantized row.
pub(crate) fn dot_rows(
    kind: QuantKind,
    w: &[u8],
    x: &[BlockQ8],
    out: &mut [f32],
) -> Result<(), BackendError> {
    let n = out.len();
    dot(kind, w, x, out).ok_or_else(|| shape_error(w.len(), x.len(), n, 1))
}

/// `out[j·stride + i] = Σ_k w[j, k]·x[i, k]` for every row `j` of `w` and the four
/// interleaved rows `i` of `x`; `stride ≥ 4`.
pub(crate) fn dot_rows_x4(
    kind: QuantKind,
    w: &[u8],
    x: &[BlockQ8x4],
    out: &mut [f32],
    stride: usize,
) -> Result<(), BackendError> {
    let n = out.len();
    dot_x4(kind, w, x, out, stride).ok_or_else(|| shape_error(w.len(), x.len(), n, stride))
}

/// Runs `f` on `w` as blocks `B` when it is whole rows of `nb ≥ 1` blocks and `n_out`
/// outputs at `stride` (1, or ≥ 4 for four rows) cover every row.
fn run<B: Pod>(
    w: &[u8],
    nb: usize,
    n_out: usize,
    stride: usize,
    f: impl FnOnce(&[B]),
) -> Option<()> {
    let w: &[B] = bytemuck::try_cast_slice(w).ok()?;
    let rows = w.len().checked_div(nb)?;
    let width = if stride == 1 { 1 } else { 4 };
    let fits = rows == 0 || n_out >= (rows - 1) * stride + width;
    (rows * nb == w.len() && stride >= width && fits).then(|| f(w))
}

/// The error for shapes [`run`] refused.
fn shape_error(w: usize, x: usize, out: usize, stride: usize) -> BackendError {
    BackendError::Input(format!(
        "quantized dot: {w} weight bytes are not whole rows of {x} blocks, or {out} outputs \
         at stride {stride} do not cover them"
    ))
}

/// Interleaves the quantized rows `x` (`m` rows of `nb` blocks) into groups of four,
/// zero-padding the last group: group `g` holds rows `4g..4g + 4`, `nb` blocks each.
pub(crate) fn interleave_x4(x: &[BlockQ8], m: usize, nb: usize) -> Vec<BlockQ8x4> {
    let groups = m.div_ceil(4);
    let mut out = vec![BlockQ8x4::default(); groups * nb];
    for (g, blocks) in out.chunks_mut(nb.max(1)).enumerate() {
        for (b, o) in blocks.iter_mut().enumerate() {
            for i in 0..4 {
                if let Some(xb) = x.get((4 * g + i) * nb + b).filter(|_| 4 * g + i < m) {
                    o.d[i] = xb.d;
                    o.d[i + 4] = xb.d;
                    o.s[i] = xb.s;
                    o.qs[i] = xb.qs;
                }
            }
        }
    }
    out
}
