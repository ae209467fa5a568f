//! Rotary position embedding over `x [N, H, Dh]` at integer positions.

use rayon::prelude::*;

use super::{check_len, PARALLEL_MIN};
use crate::backend::BackendError;
use crate::graph::RopeMode;

/// RoPE attributes (see [`crate::graph::Op::Rope`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RopeParams {
    /// Pairing of dimensions.
    pub mode: RopeMode,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    /// Frequency base θ.
    pub freq_base: f32,
    /// Linear position scale.
    pub freq_scale: f32,
}

/// Rotates the first `n_rot` dims of every head of `x` (`[N, heads, head_dim]`) by
/// `pos · freq_scale · base^(-2i/n_rot)`; the remaining dims are copied.
pub(crate) fn rope(
    x: &[f32],
    positions: &[i32],
    head_dim: usize,
    p: RopeParams,
    out: &mut [f32],
) -> Result<(), BackendError> {
    check_len("rope output", out.len(), x.len())?;
    if !p.n_rot.is_multiple_of(2) || p.n_rot > head_dim || head_dim == 0 {
        return Err(BackendError::Input(format!(
            "rope: n_rot {} must be even and at most head dim {head_dim}",
            p.n_rot
        )));
    }
    let n = positions.len();
    if n == 0 || !x.len().is_multiple_of(n * head_dim) {
        return Err(BackendError::Input(format!(
            "rope: {} elements are not {n} tokens of heads of {head_dim}",
            x.len()
        )));
    }
    let half = p.n_rot / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| p.freq_base.powf(-2.0 * i as f32 / p.n_rot as f32))
        .collect();
    let token = x.len() / n;
    let rotate = |(t, (o, xs)): (usize, (&mut [f32], &[f32]))| {
        o.copy_from_slice(xs);
        let pos = positions[t] as f32 * p.freq_scale;
        for head in o.chunks_mut(head_dim) {
            for (i, &f) in inv_freq.iter().enumerate() {
                let (sin, cos) = (pos * f).sin_cos();
                let (a, b) = match p.mode {
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                    RopeMode::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    };
    if x.len() >= PARALLEL_MIN {
        out.par_chunks_mut(token)
            .zip(x.par_chunks(token))
            .enumerate()
            .for_each(rotate);
    } else {
        out.chunks_mut(token)
            .zip(x.chunks(token))
            .enumerate()
            .for_each(rotate);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, lcg};
    use super::*;

    fn naive(x: &[f32], pos: &[i32], heads: usize, dh: usize, p: RopeParams) -> Vec<f32> {
        let mut out = x.to_vec();
        for (t, &ps) in pos.iter().enumerate() {
            for h in 0..heads {
                let base = (t * heads + h) * dh;
                for i in 0..p.n_rot / 2 {
                    let theta = ps as f64
                        * p.freq_scale as f64
                        * (p.freq_base as f64).powf(-2.0 * i as f64 / p.n_rot as f64);
                    let (a, b) = match p.mode {
                        RopeMode::Normal => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + p.n_rot / 2),
                    };
                    let (x0, x1) = (x[base + a] as f64, x[base + b] as f64);
                    out[base + a] = (x0 * theta.cos() - x1 * theta.sin()) as f32;
                    out[base + b] = (x0 * theta.sin() + x1 * theta.cos()) as f32;
                }
            }
        }
        out
    }

    #[test]
    fn both_modes_match_naive_with_partial_rotation() {
        let (n, heads, dh) = (3, 5, 10);
        let x = lcg(11, n * heads * dh);
        let pos = [0, 7, 42];
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let p = RopeParams {
                mode,
                n_rot: 6,
                freq_base: 10000.0,
                freq_scale: 0.5,
            };
            let mut out = vec![0.0; x.len()];
            rope(&x, &pos, dh, p, &mut out).unwrap();
            assert_close(&out, &naive(&x, &pos, heads, dh, p), 1e-4);
            // Dims past n_rot pass through untouched.
            assert_eq!(out[6..10], x[6..10]);
        }
    }
}
