//! SIMD kernels for f16 and bf16 weights behind a dispatch table chosen once per
//! process: AVX-512 (with BF16 pair dot products where present and faster, decision
//! 128), AVX2 + F16C, or the portable scalar twins. Decode multiplies 1–4 activation
//! rows by weight rows in their stored two-byte form, so the weights are read once at
//! their own size; prefill widens tiles of weight rows to f32 for the f32 GEMM.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use half::bf16;

#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::isa::{allows, Isa};
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
}

/// `rows(w, x, k, out)`: `out[j·m + i] = w row j · x row i`, rows of `k` elements,
/// `m = x.len() / k` in `1..=MAX_ROWS`.
type RowsFn<X> = fn(&[u8], &[X], usize, &mut [f32]);

/// A two-byte float row widened to f32.
type WidenFn = fn(&[u8], &mut [f32]);

/// One implementation of every kernel.
#[derive(Clone, Copy)]
struct Table {
    f16_rows: RowsFn<f32>,
    bf16_rows: RowsFn<f32>,
    /// bf16 weights times bf16-rounded activations, where the CPU dots bf16 pairs.
    bf16_dot: Option<RowsFn<u16>>,
    f16_widen: WidenFn,
    bf16_widen: WidenFn,
}

impl Table {
    const SCALAR: Table = Table {
        f16_rows: scalar::rows_f16,
        bf16_rows: scalar::rows_bf16,
        bf16_dot: None,
        f16_widen: scalar::f16_to_f32,
        bf16_widen: scalar::bf16_to_f32,
    };

    /// The AVX2 + FMA + F16C table when this CPU supports it.
    #[cfg(target_arch = "x86_64")]
    fn avx2() -> Option<Table> {
        let ok = allows(Isa::Avx2)
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        ok.then_some(Table {
            f16_rows: x86::avx2_rows_f16,
            bf16_rows: x86::avx2_rows_bf16,
            bf16_dot: None,
            f16_widen: x86::avx2_f16_to_f32,
            bf16_widen: x86::avx2_bf16_to_f32,
        })
    }

    /// The AVX-512 table when this CPU supports it (and AVX2), with the bf16 dot
    /// product when it has AVX-512 BF16.
    #[cfg(target_arch = "x86_64")]
    fn avx512() -> Option<Table> {
        let avx2 = Table::avx2()?;
        let ok = allows(Isa::Avx512)
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw");
        let bf16 = is_x86_feature_detected!("avx512bf16");
        ok.then_some(Table {
            f16_rows: x86::avx512_rows_f16,
            bf16_rows: x86::avx512_rows_bf16,
            bf16_dot: bf16.then_some(x86::avx512_rows_bf16_dot as RowsFn<u16>),
            ..avx2
        })
    }

    /// The best table for this CPU, chosen on first use.
    fn get() -> &'static Table {
        static TABLE: OnceLock<Table> = OnceLock::new();
        TABLE.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if let Some(t) = Table::avx512() {
                // The pair kernel where it beats the widened FMAs (decision 128).
                let pays = crate::backend::cpu::bf16_pairs::bf16_pairs_pay();
                return Table {
                    bf16_dot: t.bf16_dot.filter(|_| pays),
                    ..t
                };
            }
            if let Some(t) = Table::avx2() {
                return t;
            }
            Table::SCALAR
        })
    }
}

/// Safe entry points to the SIMD kernels, installed only by [`Table::avx2`] and
/// [`Table::avx512`] after the features were detected.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{avx2, avx512};

    /// Safe wrappers of `$m::$f` (as `$name`) for a table built after feature detection.
    macro_rules! wrap {
        ($($name:ident = $m:ident::$f:ident($($a:ident: $t:ty),*);)*) => {$(
            pub(super) fn $name($($a: $t),*) {
                // SAFETY: only reachable through a table built after detecting the
                // features `$m::$f` requires (avx2/fma/f16c, plus avx512f/bw for
                // `avx512`, plus avx512bf16 for its dot product).
                unsafe { $m::$f($($a),*) }
            }
        )*};
    }

    wrap! {
        avx2_rows_f16 = avx2::rows_f16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]);
        avx2_rows_bf16 = avx2::rows_bf16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]);
        avx2_f16_to_f32 = avx2::f16_to_f32(w: &[u8], out: &mut [f32]);
        avx2_bf16_to_f32 = avx2::bf16_to_f32(w: &[u8], out: &mut [f32]);
        avx512_rows_f16 = avx512::rows_f16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]);
        avx512_rows_bf16 = avx512::rows_bf16(w: &[u8], x: &[f32], k: usize, out: &mut [f32]);
        avx512_rows_bf16_dot = avx512::rows_bf16_dot(w: &[u8], x: &[u16], k: usize, out: &mut [f32]);
    }
}

/// Activation rows in the form the kernels for one weight kind take: f32, or rounded
/// to bf16 when the CPU dots bf16 weights in bf16 pairs (as llama.cpp does; the
/// rounding error, ≤ 2⁻⁹ relative per activation, is the price of `vdpbf16ps`).
pub(crate) enum Activations<'a> {
    /// As given.
    F32(&'a [f32]),
    /// Rounded to bf16 (to nearest even), as bits.
    Bf16(Vec<u16>),
}

impl<'a> Activations<'a> {
    /// `x` prepared for weights of `kind` on this CPU's table.
    pub(crate) fn prepare(kind: FloatKind, x: &'a [f32]) -> Activations<'a> {
        Activations::for_table(Table::get(), kind, x)
    }

    fn for_table(t: &Table, kind: FloatKind, x: &'a [f32]) -> Activations<'a> {
        if kind == FloatKind::Bf16 && t.bf16_dot.is_some() {
            Activations::Bf16(round_to_bf16(x))
        } else {
            Activations::F32(x)
        }
    }

    fn len(&self) -> usize {
        match self {
            Activations::F32(x) => x.len(),
            Activations::Bf16(x) => x.len(),
        }
    }
}

/// `x` rounded to bf16 (to nearest even), as bits.
fn round_to_bf16(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect()
}

/// `out[j·m + i] = Σ_c w[j, c]·x[i, c]` for every row `j` of `w` (raw little-endian
/// bytes of `kind`, rows of `k`) and the `m = x.len() / k` rows of `x`, `1 ≤ m ≤ 4`.
pub(crate) fn dot_rows(
    kind: FloatKind,
    w: &[u8],
    x: &Activations<'_>,
    k: usize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    dot_rows_with(Table::get(), kind, w, x, k, out)
}

fn dot_rows_with(
    t: &Table,
    kind: FloatKind,
    w: &[u8],
    x: &Activations<'_>,
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
    match (kind, x) {
        (FloatKind::F16, Activations::F32(x)) => (t.f16_rows)(w, x, k, out),
        (FloatKind::Bf16, Activations::F32(x)) => (t.bf16_rows)(w, x, k, out),
        (FloatKind::Bf16, Activations::Bf16(x)) => match t.bf16_dot {
            Some(f) => f(w, x, k, out),
            None => scalar::rows_bf16_dot(w, x, k, out),
        },
        (FloatKind::F16, Activations::Bf16(_)) => {
            return Err(BackendError::Input(
                "float dot: f16 weights need f32 activations, got bf16".into(),
            ))
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
    let t = Table::get();
    match kind {
        FloatKind::F16 => (t.f16_widen)(w, out),
        FloatKind::Bf16 => (t.bf16_widen)(w, out),
    }
    Ok(())
}
