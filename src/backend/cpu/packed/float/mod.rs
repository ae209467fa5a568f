//! f16 and bf16 weights in panels of [`PANEL`] rows. f16: per input column, the
//! panel's 16 values side by side (32 bytes); bf16: per pair of columns, each row's two
//! values side by side (64 bytes), the operand layout of `vdpbf16ps`. One conversion
//! (or none) gives 16 rows' weights for a column and each activation row adds them with
//! one FMA against its broadcast value, f32 throughout. Each row's dot product is two
//! partial sums, over even and odd columns (pairs, for `vdpbf16ps`), added at the end,
//! whatever the number of rows: results are batch-invariant, and one row has two chains
//! in flight.
//!
//! On CPUs with AVX-512 BF16 where it is the faster kernel (not Intel's: decision 128),
//! bf16 weights take `vdpbf16ps` on activations rounded to bf16, as llama.cpp does
//! (twice the products per instruction; ≤ 2⁻⁹ relative error per activation); elsewhere
//! they take the f32 FMA kernel, bit for bit its scalar twin.
//! With AVX2 alone, a product of many rows (prefill) first widens each panel to f32 in
//! a per-thread buffer and runs the same FMAs on it, the same sums in the same order.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(test)]
mod tests;

use super::lines::Lines;
use super::{for_panels, PackedKind, PackedWeight, PANEL, ROW_GROUP};
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::bf16_pairs::bf16_pairs_pay;
use crate::backend::BackendError;

/// Columns ahead of the loop whose line the SIMD kernels ask for when no next panel is
/// given (decode): 128, 4 KiB of the panel. Left to the hardware prefetcher, a one-row
/// product read 8–25 % slower (decision 120; the AVX2 one too, decision 124).
#[cfg(target_arch = "x86_64")]
const PREFETCH_COLUMNS: usize = 128;

/// One panel of a float [`PackedWeight`]: `k` columns of [`PANEL`] two-byte values
/// (bf16: `k` rounded up to whole pairs, the last padded with zero).
#[derive(Clone, Copy)]
struct FloatPanel<'a> {
    bf16: bool,
    w: &'a [u16],
    k: usize,
    /// The next panel (as many values as `w`), for the kernels to ask the caches for
    /// as they first walk `w` (AVX-512; AVX2 in its f16 pass over three rows and as it
    /// widens a panel; the portable twin takes no hint): given on a panel's first
    /// group of activation rows when more groups follow, since that pass otherwise
    /// waits on memory for each line while the later groups find it cached (decision
    /// 107); `None` where one pass per panel streams from memory in order (decode).
    ahead: Option<&'a [u16]>,
}

/// Two-byte values stored per row of a panel for `k` columns (bf16: whole pairs).
fn stored_columns(bf16: bool, k: usize) -> usize {
    if bf16 {
        k.div_ceil(2) * 2
    } else {
        k
    }
}

impl FloatPanel<'_> {
    /// Two-byte values stored per row.
    fn stored(&self) -> usize {
        stored_columns(self.bf16, self.k)
    }
}

/// Where column `c` of row `r` sits in a panel's values.
fn slot(bf16: bool, c: usize, r: usize) -> usize {
    if bf16 {
        ((c / 2) * PANEL + r) * 2 + c % 2
    } else {
        c * PANEL + r
    }
}

#[cfg(test)]
impl FloatPanel<'_> {
    /// Column `c` of row `r` as f32, exactly.
    fn value(&self, c: usize, r: usize) -> f32 {
        let v = self.w[slot(self.bf16, c, r)];
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

/// As [`FloatPanelFn`] for bf16 panels, `x` as bf16 pairs (`k / 2` rounded up per row,
/// the low half the even column).
type Bf16DotFn = fn(FloatPanel<'_>, &[u32], usize, &mut [f32]);

/// `round(x, out)`: leading values of `x` rounded to bf16 bits into `out`, as many as
/// the kernel takes at once (returned).
type Bf16RoundFn = fn(&[f32], &mut [u16]) -> usize;

/// `widen(w, out)`: panel `w`'s values as f32 into `out`, column by column
/// (`c·PANEL + r`, `k·PANEL` values), exactly.
type WidenFn = fn(FloatPanel<'_>, &mut Vec<f32>);

/// As [`FloatPanelFn`] over a panel [`WidenFn`] widened: `(w, k, x, rows, out)`.
type WidenedPanelFn = fn(&[f32], usize, &[f32], usize, &mut [f32]);

/// A float panel kernel: f32 FMAs, bf16 pair dot products, or f32 FMAs over panels
/// widened to f32 once per product.
#[derive(Clone, Copy)]
enum Kernel {
    Fma(FloatPanelFn),
    Bf16Dot(Bf16DotFn),
    Widened(WidenFn, WidenedPanelFn),
}

/// Largest widened panel (f32 bytes) a product widens rather than converting as it
/// goes: 256 KiB, `k` up to 4096, so it stays in a core's L2 beside the activations
/// (decision 126).
const WIDEN_MAX_BYTES: usize = 256 << 10;

/// Activation rows a call over a widened panel takes: 12, four passes of three rows,
/// where the 8 of the other kernels left a pass of two in every call (1B F16 pp128
/// 112.7 / 113.8 / 111.1 → 114.6 / 115.4 / 117.2 tok/s, decision 126).
const WIDENED_ROW_GROUP: usize = 12;

/// Fewest activation rows a product widens its panels for: 32. Prefill chunks (64
/// rows) gained; a 16-sequence decode step lost 15 %, too few passes to pay for
/// writing and rereading a panel twice the size (decision 126).
const WIDEN_MIN_ROWS: usize = 32;

/// Whether this CPU has float panel kernels.
pub(super) fn available() -> bool {
    fma_kernel().is_some()
}

/// The f32 FMA panel kernel of this CPU, if it has one: AVX-512 F, else AVX2 with FMA
/// and F16C.
fn fma_kernel() -> Option<FloatPanelFn> {
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

/// The kernel for `kind`'s panels on this CPU for a product of `m` activation rows
/// of `k` columns. With AVX2 but not AVX-512, a product of many rows widens each
/// panel to f32 once, so its passes over the panel spend no slot on conversions
/// (decision 126).
fn kernel(kind: PackedKind, m: usize, k: usize) -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    if kind == PackedKind::BF16 && bf16_pairs_pay() {
        if let Some(dot) = avx512::bf16_dot_kernel() {
            return Some(Kernel::Bf16Dot(dot));
        }
    }
    if m >= WIDEN_MIN_ROWS && k * PANEL * 4 <= WIDEN_MAX_BYTES {
        if let Some((widen, f)) = widened_kernel() {
            return Some(Kernel::Widened(widen, f));
        }
    }
    fma_kernel().map(Kernel::Fma)
}

/// The widening and its kernel where this CPU has AVX2 but not AVX-512 F (whose own
/// passes already convert once per 16 FMAs), looked up once.
fn widened_kernel() -> Option<(WidenFn, WidenedPanelFn)> {
    #[cfg(target_arch = "x86_64")]
    {
        static KERNEL: std::sync::OnceLock<Option<(WidenFn, WidenedPanelFn)>> =
            std::sync::OnceLock::new();
        *KERNEL.get_or_init(|| {
            avx512::kernel()
                .is_none()
                .then(avx2::widened_kernel)
                .flatten()
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Lays the `[n, k]` two-byte values in `bytes` out as panels (the caller checked the
/// size); the last panel's missing rows are zeros.
pub(super) fn pack(
    kind: PackedKind,
    bytes: &[u8],
    n: usize,
    k: usize,
    done: &mut dyn FnMut(std::ops::Range<usize>),
) -> PackedWeight {
    let bf16 = kind == PackedKind::BF16;
    let (panels, cols) = (n.div_ceil(PANEL), stored_columns(bf16, k));
    let mut lines = Lines::zeroed((panels * cols * PANEL * 2).div_ceil(64));
    let values: &mut [u16] = bytemuck::cast_slice_mut(&mut lines[..]);
    for (row, src) in bytes.chunks_exact(2 * k).enumerate() {
        let (p, r) = (row / PANEL, row % PANEL);
        for (c, v) in src.chunks_exact(2).enumerate() {
            values[p * cols * PANEL + slot(bf16, c, r)] = u16::from_le_bytes([v[0], v[1]]);
        }
        if (row + 1) % super::RELEASE_ROWS == 0 || row + 1 == n {
            let first = row - row % super::RELEASE_ROWS;
            done(first * 2 * k..(row + 1) * 2 * k);
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

/// `outs[i] [m, n_i] = x [m, k] · ws[i]ᵀ` for float packed weights of one kind and
/// width with `kernel`, all their panels in parallel on the current rayon pool (sizes
/// checked by the caller).
fn matmul_with(kernel: Kernel, x: &[f32], m: usize, ws: &[&PackedWeight], outs: &mut [&mut [f32]]) {
    let Some(first) = ws.first() else {
        return;
    };
    let bf16 = first.kind == PackedKind::BF16;
    let (k, cols) = (first.k, stored_columns(bf16, first.k));
    let rows: Vec<usize> = ws.iter().map(|w| w.n).collect();
    let size = cols * PANEL;
    let panel = |i: usize, p: usize, r0: usize| {
        let values: &[u16] = bytemuck::cast_slice(&ws[i].qs);
        let w = &values[p * size..(p + 1) * size];
        let next = values.get((p + 1) * size..(p + 2) * size);
        FloatPanel {
            bf16,
            w,
            k,
            ahead: next.filter(|_| r0 == 0 && m > ROW_GROUP),
        }
    };
    match kernel {
        Kernel::Fma(f) => for_panels(m, &rows, outs, ROW_GROUP, |i, p, r0, rows, o| {
            f(panel(i, p, r0), &x[r0 * k..(r0 + rows) * k], rows, o);
        }),
        Kernel::Widened(widen, f) => {
            // Each task widens a panel when its first group of rows comes and keeps it
            // for the rest, keyed by this call and the panel.
            let call = WIDEN_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for_panels(m, &rows, outs, WIDENED_ROW_GROUP, |i, p, r0, rows, o| {
                WIDENED.with_borrow_mut(|(key, wide)| {
                    if *key != Some((call, i, p)) {
                        widen(panel(i, p, r0), wide);
                        *key = Some((call, i, p));
                    }
                    f(wide, k, &x[r0 * k..(r0 + rows) * k], rows, o);
                });
            });
        }
        Kernel::Bf16Dot(f) => {
            let pairs = k.div_ceil(2);
            let xb = bf16_pairs(x, m, k);
            for_panels(m, &rows, outs, ROW_GROUP, |i, p, r0, rows, o| {
                f(
                    panel(i, p, r0),
                    &xb[r0 * pairs..(r0 + rows) * pairs],
                    rows,
                    o,
                );
            });
        }
    }
}

/// Products run with [`Kernel::Widened`], numbering them so that a thread's widened
/// panel is never taken for another product's.
static WIDEN_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Which (product, weight, panel) a thread's widened panel holds.
type WidenKey = Option<(u64, usize, usize)>;

thread_local! {
    /// This thread's last widened panel (at most [`WIDEN_MAX_BYTES`], kept for the
    /// next product) and which it is.
    static WIDENED: std::cell::RefCell<(WidenKey, Vec<f32>)> =
        const { std::cell::RefCell::new((None, Vec::new())) };
}

/// The `[m, k]` activations rounded to bf16 (to nearest, ties to even), two columns a
/// word, each row padded to whole pairs with zero. Sixteen values at a time where the
/// CPU has AVX-512 F (the same bits as [`half::bf16::from_f32`]); a per-value loop ran
/// on one thread before every bf16 product and took 13 % of a 135M pp512.
fn bf16_pairs(x: &[f32], m: usize, k: usize) -> Vec<u32> {
    let pairs = k.div_ceil(2);
    let mut out = vec![0u32; m * pairs];
    let round = round_to_bf16_kernel();
    for (row, dst) in x.chunks_exact(k).zip(out.chunks_exact_mut(pairs)) {
        // Each word's two halves, rounded in place; an odd row's last half stays zero.
        round_to_bf16(
            round,
            row,
            &mut bytemuck::cast_slice_mut::<u32, u16>(dst)[..k],
        );
        if cfg!(target_endian = "big") {
            dst.iter_mut().for_each(|d| *d = d.rotate_left(16));
        }
    }
    out
}

/// This CPU's kernel for [`round_to_bf16`], if it has one.
fn round_to_bf16_kernel() -> Option<Bf16RoundFn> {
    #[cfg(target_arch = "x86_64")]
    {
        avx512::round_to_bf16_kernel()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// `out[i]` = the bits of `x[i]` rounded to bf16, to nearest, ties to even (NaN stays
/// NaN); `x` and `out` of one length. `kernel` takes what fills its registers, the rest
/// goes one by one.
fn round_to_bf16(kernel: Option<Bf16RoundFn>, x: &[f32], out: &mut [u16]) {
    let done = kernel.map_or(0, |round| round(x, out));
    for (o, &v) in out[done..].iter_mut().zip(&x[done..]) {
        *o = half::bf16::from_f32(v).to_bits();
    }
}

/// `outs[i] [m, n_i] = x [m, k] · ws[i]ᵀ` with this CPU's float panel kernel for
/// weights of one kind and width (sizes checked by the caller).
pub(super) fn matmul(
    x: &[f32],
    m: usize,
    ws: &[&PackedWeight],
    outs: &mut [&mut [f32]],
) -> Result<(), BackendError> {
    let Some(first) = ws.first() else {
        return Ok(());
    };
    let kernel = kernel(first.kind, m, first.k).ok_or_else(|| {
        BackendError::Bug("packed f16/bf16 weights need AVX2 and FMA, which this CPU lacks".into())
    })?;
    matmul_with(kernel, x, m, ws, outs);
    Ok(())
}

/// The portable twin of the FMA kernels: the same FMAs in the same order, so those
/// must match it bit for bit.
#[cfg(test)]
fn scalar(w: FloatPanel<'_>, x: &[f32], rows: usize, out: &mut [f32]) {
    let k = w.k;
    for i in 0..rows {
        for r in 0..PANEL {
            let mut acc = [0.0f32; 2];
            for c in 0..k {
                acc[c % 2] = w.value(c, r).mul_add(x[i * k + c], acc[c % 2]);
            }
            out[i * PANEL + r] = acc[0] + acc[1];
        }
    }
}
