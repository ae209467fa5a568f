//! Element-wise kernels: broadcasting add and multiply, SiLU, GELU and SwiGLU.

use rayon::prelude::*;

use super::{check_len, PARALLEL_MIN};
use crate::backend::BackendError;

/// A binary element-wise operation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Binary {
    /// `a + b`.
    Add,
    /// `a · b`.
    Mul,
}

/// `out = a ∘ b`, where `b` repeats over `a` (its shape is a suffix of `a`'s).
pub(crate) fn binary(
    op: Binary,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) -> Result<(), BackendError> {
    check_len("binary output", out.len(), a.len())?;
    if b.is_empty() || !a.len().is_multiple_of(b.len()) {
        return Err(BackendError::Input(format!(
            "{} elements do not broadcast over {}",
            b.len(),
            a.len()
        )));
    }
    let f = move |(o, x): (&mut [f32], &[f32])| {
        for ((o, &x), &y) in o.iter_mut().zip(x).zip(b) {
            *o = match op {
                Binary::Add => x + y,
                Binary::Mul => x * y,
            };
        }
    };
    if a.len() >= PARALLEL_MIN {
        out.par_chunks_mut(b.len())
            .zip(a.par_chunks(b.len()))
            .for_each(f);
    } else {
        out.chunks_mut(b.len()).zip(a.chunks(b.len())).for_each(f);
    }
    Ok(())
}

/// `x · sigmoid(x)`.
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU with the tanh approximation.
fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// Exact GELU, `½x(1 + erf(x/√2))`, evaluated in f64 (libm's erf) so the f32 result
/// is correctly rounded in all but rare ties.
fn gelu_erf(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// A unary element-wise operation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unary {
    /// SiLU.
    Silu,
    /// GELU (tanh).
    Gelu,
    /// GELU (erf, exact).
    GeluErf,
    /// `x · scale + bias`.
    Affine {
        /// Multiplier.
        scale: f32,
        /// Addend.
        bias: f32,
    },
    /// `cap · tanh(x / cap)`.
    SoftCap {
        /// The cap.
        cap: f32,
    },
}

impl Unary {
    /// The operation on one value.
    #[inline(always)]
    fn apply(self, v: f32) -> f32 {
        match self {
            Unary::Silu => silu(v),
            Unary::Gelu => gelu(v),
            Unary::GeluErf => gelu_erf(v),
            Unary::Affine { scale, bias } => v * scale + bias,
            Unary::SoftCap { cap } => cap * (v / cap).tanh(),
        }
    }
}

/// `out = f(x)` element-wise.
pub(crate) fn unary(op: Unary, x: &[f32], out: &mut [f32]) -> Result<(), BackendError> {
    check_len("unary output", out.len(), x.len())?;
    if x.len() >= PARALLEL_MIN {
        out.par_iter_mut()
            .zip(x)
            .for_each(|(o, &v)| *o = op.apply(v));
    } else {
        out.iter_mut().zip(x).for_each(|(o, &v)| *o = op.apply(v));
    }
    Ok(())
}

/// Elements per task of the vectorised SwiGLU.
#[cfg(target_arch = "x86_64")]
const SWIGLU_CHUNK: usize = 4096;

/// `out = silu(gate) · up` (AVX-512 or AVX2 with a vectorised `exp` where the CPU has
/// them).
pub(crate) fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<(), BackendError> {
    check_len("swiglu up", up.len(), gate.len())?;
    check_len("swiglu output", out.len(), gate.len())?;
    #[cfg(target_arch = "x86_64")]
    if super::vexp::avx512_available() || super::vexp::avx2_available() {
        let wide = |((o, g), u): ((&mut [f32], &[f32]), &[f32])| super::vexp::swiglu_wide(g, u, o);
        if gate.len() >= PARALLEL_MIN {
            out.par_chunks_mut(SWIGLU_CHUNK)
                .zip(gate.par_chunks(SWIGLU_CHUNK))
                .zip(up.par_chunks(SWIGLU_CHUNK))
                .for_each(wide);
        } else {
            wide(((out, gate), up));
        }
        return Ok(());
    }
    let f = |((o, &g), &u): ((&mut f32, &f32), &f32)| *o = silu(g) * u;
    if gate.len() >= PARALLEL_MIN {
        out.par_iter_mut().zip(gate).zip(up).for_each(f);
    } else {
        out.iter_mut().zip(gate).zip(up).for_each(f);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, lcg};
    use super::*;

    #[test]
    fn broadcast_add_and_mul_match_naive() {
        for n in [7 * 13, 3 * PARALLEL_MIN + 39] {
            let (rows, cols) = (n / 13, 13);
            let a = lcg(1, rows * cols);
            let b = lcg(2, cols);
            let mut out = vec![0.0; a.len()];
            binary(Binary::Add, &a, &b, &mut out).unwrap();
            let want: Vec<f32> = (0..a.len()).map(|i| a[i] + b[i % cols]).collect();
            assert_close(&out, &want, 0.0);
            binary(Binary::Mul, &a, &b, &mut out).unwrap();
            let want: Vec<f32> = (0..a.len()).map(|i| a[i] * b[i % cols]).collect();
            assert_close(&out, &want, 0.0);
        }
        assert!(binary(Binary::Add, &[1.0; 6], &[1.0; 4], &mut [0.0; 6]).is_err());
    }

    #[test]
    fn activations_match_naive() {
        let x = lcg(3, 101);
        let up = lcg(4, 101);
        let mut out = vec![0.0; x.len()];
        unary(Unary::Silu, &x, &mut out).unwrap();
        let want: Vec<f32> = x.iter().map(|&v| v * (1.0 / (1.0 + (-v).exp()))).collect();
        assert_close(&out, &want, 1e-6);
        unary(
            Unary::Affine {
                scale: 8.0,
                bias: 1.0,
            },
            &x,
            &mut out,
        )
        .unwrap();
        let want: Vec<f32> = x.iter().map(|&v| (v as f64 * 8.0 + 1.0) as f32).collect();
        assert_close(&out, &want, 1e-6);
        let big: Vec<f32> = x.iter().map(|&v| v * 100.0).collect();
        unary(Unary::SoftCap { cap: 30.0 }, &big, &mut out).unwrap();
        let want: Vec<f32> = big
            .iter()
            .map(|&v| (30.0 * (v as f64 / 30.0).tanh()) as f32)
            .collect();
        assert_close(&out, &want, 1e-5);
        assert!(out.iter().all(|v| v.abs() < 30.0));
        unary(Unary::Gelu, &x, &mut out).unwrap();
        let want: Vec<f32> = x
            .iter()
            .map(|&v| {
                let inner = (2.0f32 / std::f32::consts::PI).sqrt() * (v + 0.044715 * v.powi(3));
                0.5 * v * (1.0 + inner.tanh())
            })
            .collect();
        assert_close(&out, &want, 1e-6);
        swiglu(&x, &up, &mut out).unwrap();
        let want: Vec<f32> = x
            .iter()
            .zip(&up)
            .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        assert_close(&out, &want, 1e-6);
    }

    /// `x · Φ(x)` at points where the standard normal CDF is tabulated:
    /// Φ(1) = 0.8413447460685429, Φ(-1) = 0.15865525393145707, Φ(2) =
    /// 0.9772498680518208, Φ(-3) = 0.0013498980316301035, Φ(0.5) = 0.6914624612740131.
    #[test]
    fn exact_gelu_matches_the_normal_cdf() {
        let x = [1.0f32, -1.0, 2.0, -3.0, 0.5, 0.0];
        let phi = [
            0.841_344_746_068_542_9,
            0.158_655_253_931_457_07,
            0.977_249_868_051_820_8,
            0.001_349_898_031_630_103_5,
            0.691_462_461_274_013_1,
            0.5,
        ];
        let mut out = [0f32; 6];
        unary(Unary::GeluErf, &x, &mut out).unwrap();
        for ((&v, &p), &got) in x.iter().zip(&phi).zip(&out) {
            assert_eq!(got, (f64::from(v) * p) as f32, "gelu_erf({v})");
        }
    }

    #[test]
    fn swiglu_matches_f64_at_every_length_and_extreme_inputs() {
        for n in [1, 15, 17, 4099, 3 * PARALLEL_MIN + 5] {
            let mut gate: Vec<f32> = lcg(7, n).iter().map(|v| 12.0 * v).collect();
            for (i, extreme) in [-200.0, -89.0, 89.0, 200.0, 0.0].into_iter().enumerate() {
                if i < n {
                    gate[i] = extreme;
                }
            }
            let up = lcg(8, n);
            let mut out = vec![f32::NAN; n];
            swiglu(&gate, &up, &mut out).unwrap();
            let want: Vec<f32> = gate
                .iter()
                .zip(&up)
                .map(|(&g, &u)| (g as f64 / (1.0 + (-g as f64).exp()) * u as f64) as f32)
                .collect();
            assert_close(&out, &want, 1e-6);
        }
    }
}
