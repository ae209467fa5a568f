//! f16 and bf16 weights in panels of [`PANEL`] rows: per input column, the panel's 16
//! values side by side (32 bytes), so one conversion gives 16 rows' weights for that
//! column and each activation row adds them with one FMA against its broadcast value.
//! Activations stay f32 (no rounding to the weights' type). Each row's dot product is
//! two partial sums, over even and odd columns, added at the end, whatever the number
//! of rows: results are batch-invariant, and one row has two FMA chains in flight.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(test)]
mod tests;

use super::{for_panels, CacheLine, PackedKind, PackedWeight, PANEL};
use crate::backend::BackendError;

/// One panel of a float [`PackedWeight`]: `k` columns of [`PANEL`] two-byte values.
#[derive(Clone, Copy)]
struct FloatPanel<'a> {
    bf16: bool,
    w: &'a [u16],
    k: usize,
}

#[cfg(test)]
impl FloatPanel<'_> {
    /// Value `i` of the panel (column `i / PANEL`, row `i % PANEL`) as f32, exactly.
    fn value(&self, i: usize) -> f32 {
        let v = self.w[i];
        if self.bf16 {
            f32::from_bits((v as u32) << 16)
        } else {
            half::f16::from_bits(v).to_f32()
        }
    }
}

/// `panel(w, x, rows, out)`: `out[i·PANEL + r] = panel row r · x row i` for `rows`
/// (1 to 8) rows of `x`, each `w.k` values.
type FloatPanelFn = fn(FloatPanel<'_>, &[f32], usize, &mut [f32]);

/// Whether this CPU has a float panel kernel.
pub(super) fn available() -> bool {
    kernel().is_some()
}

/// The float panel kernel of this CPU, if it has one: AVX-512 F, else AVX2 with FMA
/// and F16C.
fn kernel() -> Option<FloatPanelFn> {
    #[cfg(target_arch = "x86_64")]
    {
        static KERNEL: std::sync::OnceLock<Option<FloatPanelFn>> = std::sync::OnceLock::new();
        *KERNEL.get_or_init(|| avx512::kernel().or_else(avx2::kernel))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Lays the `[n, k]` two-byte values in `bytes` out as panels (the caller checked the
/// size); the last panel's missing rows are zeros.
pub(super) fn pack(kind: PackedKind, bytes: &[u8], n: usize, k: usize) -> PackedWeight {
    let panels = n.div_ceil(PANEL);
    let mut lines = vec![CacheLine([0; 64]); (panels * k * PANEL * 2).div_ceil(64)];
    let values: &mut [u16] = bytemuck::cast_slice_mut(&mut lines);
    for (row, src) in bytes.chunks_exact(2 * k).enumerate() {
        let (p, r) = (row / PANEL, row % PANEL);
        for (c, v) in src.chunks_exact(2).enumerate() {
            values[(p * k + c) * PANEL + r] = u16::from_le_bytes([v[0], v[1]]);
        }
    }
    PackedWeight {
        kind,
        n,
        k,
        qs: lines,
        d: Vec::new(),
        m: Vec::new(),
        sub: [Vec::new(), Vec::new()],
    }
}

/// `out [m, n] = x [m, k] · wᵀ` for a float packed weight with `kernel`, panels in
/// parallel on the current rayon pool (sizes checked by the caller).
fn matmul_with(kernel: FloatPanelFn, x: &[f32], m: usize, w: &PackedWeight, out: &mut [f32]) {
    let k = w.k;
    let values: &[u16] = bytemuck::cast_slice(&w.qs);
    let bf16 = w.kind == PackedKind::BF16;
    for_panels(m, w.n, out, |p, r0, rows, o| {
        let panel = FloatPanel {
            bf16,
            w: &values[p * k * PANEL..(p + 1) * k * PANEL],
            k,
        };
        kernel(panel, &x[r0 * k..(r0 + rows) * k], rows, o);
    });
}

/// `out [m, n] = x [m, k] · wᵀ` with this CPU's float panel kernel.
pub(super) fn matmul(
    x: &[f32],
    m: usize,
    w: &PackedWeight,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let kernel = kernel().ok_or_else(|| {
        BackendError::Device(
            "packed f16/bf16 weights need AVX2 and FMA, which this CPU lacks".into(),
        )
    })?;
    matmul_with(kernel, x, m, w, out);
    Ok(())
}

/// The portable twin: the same FMAs in the same order, so the SIMD kernels must match
/// it bit for bit.
#[cfg(test)]
fn scalar(w: FloatPanel<'_>, x: &[f32], rows: usize, out: &mut [f32]) {
    let k = w.k;
    for i in 0..rows {
        for r in 0..PANEL {
            let mut acc = [0.0f32; 2];
            for c in 0..k {
                acc[c % 2] = w.value(c * PANEL + r).mul_add(x[i * k + c], acc[c % 2]);
            }
            out[i * PANEL + r] = acc[0] + acc[1];
        }
    }
}
