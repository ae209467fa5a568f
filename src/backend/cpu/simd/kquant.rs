//! Integer dot products for the 256-weight formats Q4_K, Q5_K, Q6_K and IQ4_XS with
//! activations quantized per row to [`BlockQ8K`] (ggml's Q8_K: one f32 scale, 256
//! `i8`, the sums of each 16), the way llama.cpp does: sub-block scales multiply
//! integer partial sums, minima and offsets come from the block sums, and each
//! super-block costs one f32 multiply-add. Portable: where the CPU has packed kernels,
//! every such matmul weight is packed (`packed/`), so these serve only CPUs without
//! them and the scalar cap (decision 175).

use bytemuck::{Pod, Zeroable};

use super::scalar_k;
use crate::backend::BackendError;
use crate::graph::DType;

/// Weights per K-quant super-block.
pub(crate) const QK_K: usize = 256;

/// 256 activations as `x ≈ d·q`, with `bsums[i]` the sum of `qs[16i..16i + 16]` for
/// the formats whose weights carry a minimum or an offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub(crate) struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Quantized values.
    pub qs: [i8; QK_K],
    /// Sums of each 16 consecutive `qs`.
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

/// ggml `block_q4_k`: f16 scale and minimum scale, 8 packed 6-bit sub-block scales and
/// minima, 256 nibbles (32-byte chunk `c`: sub-block `2c` in the low nibbles, `2c + 1`
/// in the high); weight `d·sc·q − dmin·m`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ4K {
    pub(super) dm: [u8; 4],
    pub(super) scales: [u8; 12],
    pub(super) qs: [u8; 128],
}

/// ggml `block_q5_k`: Q4_K plus a fifth bit per weight (`qh[l]` bit `s` for weight `l`
/// of sub-block `s`).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ5K {
    pub(super) dm: [u8; 4],
    pub(super) scales: [u8; 12],
    pub(super) qh: [u8; 32],
    pub(super) qs: [u8; 128],
}

/// ggml `block_q6_k`: low nibbles, high bit pairs, 16 `i8` sub-block scales, f16
/// scale; weight `d·sc·(q − 32)`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockQ6K {
    pub(super) ql: [u8; 128],
    pub(super) qh: [u8; 64],
    pub(super) scales: [i8; 16],
    pub(super) d: [u8; 2],
}

/// ggml `block_iq4_xs`: f16 scale, 8 six-bit sub-block scales (low nibbles in
/// `scales_l`, two high bits each in `scales_h`) minus 32, and 8 IQ4_NL-style
/// sub-blocks of 32 nibbles indexing [`IQ4_VALUES`](crate::backend::cpu::quant::IQ4_VALUES).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct BlockIQ4XS {
    pub(super) d: [u8; 2],
    pub(super) scales_h: [u8; 2],
    pub(super) scales_l: [u8; 4],
    pub(super) qs: [u8; 128],
}

impl BlockIQ4XS {
    /// The scale of sub-block `ib` (`−32..32`).
    pub(super) fn scale(&self, ib: usize) -> i32 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
        let high = (u16::from_le_bytes(self.scales_h) >> (2 * ib)) & 3;
        (low as i32 | (high as i32) << 4) - 32
    }
}

/// `out[j] = w row j · x` with `kind`'s kernel, or `None` when `w` is not whole rows of
/// `x.len() ≥ 1` super-blocks with one output each.
fn dot(kind: KQuantKind, w: &[u8], x: &[BlockQ8K], out: &mut [f32]) -> Option<()> {
    match kind {
        KQuantKind::Q4K => run(w, x.len(), out.len(), |w| scalar_k::rows_q4_k(w, x, out)),
        KQuantKind::Q5K => run(w, x.len(), out.len(), |w| scalar_k::rows_q5_k(w, x, out)),
        KQuantKind::Q6K => run(w, x.len(), out.len(), |w| scalar_k::rows_q6_k(w, x, out)),
        KQuantKind::IQ4XS => run(w, x.len(), out.len(), |w| scalar_k::rows_iq4_xs(w, x, out)),
    }
}

/// Runs `f` on `w` as blocks `B` when it is whole rows of `nb ≥ 1` blocks and there is
/// one output per row.
fn run<B: Pod>(w: &[u8], nb: usize, n_out: usize, f: impl FnOnce(&[B])) -> Option<()> {
    let w: &[B] = bytemuck::try_cast_slice(w).ok()?;
    let rows = w.len().checked_div(nb)?;
    (rows * nb == w.len() && n_out == rows).then(|| f(w))
}

/// K-quant weight formats with an integer dot-product kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KQuantKind {
    /// [`DType::Q4K`].
    Q4K,
    /// [`DType::Q5K`].
    Q5K,
    /// [`DType::Q6K`].
    Q6K,
    /// [`DType::IQ4XS`].
    IQ4XS,
}

impl KQuantKind {
    /// The kind for `dtype`, if it has K-quant integer kernels.
    pub(crate) fn of(dtype: DType) -> Option<KQuantKind> {
        match dtype {
            DType::Q4K => Some(KQuantKind::Q4K),
            DType::Q5K => Some(KQuantKind::Q5K),
            DType::Q6K => Some(KQuantKind::Q6K),
            DType::IQ4XS => Some(KQuantKind::IQ4XS),
            _ => None,
        }
    }
}

/// Quantizes `x` (a whole number of 256-blocks) into `out`: `d = max|x| / 127`,
/// `q = round(x / d)` (ties to even), and the block sums. Scalar: it is O(k) per row
/// against the dot products' O(n·k).
pub(crate) fn quantize_row_k(x: &[f32], out: &mut [BlockQ8K]) -> Result<(), BackendError> {
    if x.len() != out.len() * QK_K {
        return Err(BackendError::Input(format!(
            "cannot quantize {} values into {} blocks of {QK_K}",
            x.len(),
            out.len()
        )));
    }
    for (x, o) in x.chunks_exact(QK_K).zip(out) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        for (q, &v) in o.qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
        }
        for (s, q) in o.bsums.iter_mut().zip(o.qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
        o.d = amax / 127.0;
    }
    Ok(())
}

/// `out[j] = Σ_k w[j, k]·x[k]` for every row `j` of `w` (raw bytes of `kind`), with `x`
/// one row quantized by [`quantize_row_k`].
pub(crate) fn dot_rows_k(
    kind: KQuantKind,
    w: &[u8],
    x: &[BlockQ8K],
    out: &mut [f32],
) -> Result<(), BackendError> {
    let n = out.len();
    dot(kind, w, x, out).ok_or_else(|| {
        BackendError::Input(format!(
            "K-quant dot: {} weight bytes are not {n} rows of {} super-blocks",
            w.len(),
            x.len()
        ))
    })
}
