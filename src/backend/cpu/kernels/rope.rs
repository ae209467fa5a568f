//! Rotary position embedding over `x [N, H, Dh]` at integer positions, with
//! frequencies from a base θ or from a per-pair table (band-wise scaled RoPE).

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
    if !p.n_rot.is_multiple_of(2) || p.n_rot > head_dim || head_dim == 0 {
        return Err(BackendError::Input(format!(
            "rope: n_rot {} must be even and at most head dim {head_dim}",
            p.n_rot
        )));
    }
    let inv_freq: Vec<f32> = (0..p.n_rot / 2)
        .map(|i| p.freq_base.powf(-2.0 * i as f32 / p.n_rot as f32))
        .collect();
    let table = RopeTable {
        mode: p.mode,
        inv_freq: &inv_freq,
        freq_scale: p.freq_scale,
        attn_factor: 1.0,
    };
    rope_table(x, positions, head_dim, table, out)
}

/// RoPE by a table of per-pair inverse frequencies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RopeTable<'a> {
    /// Pairing of dimensions.
    pub mode: RopeMode,
    /// Inverse frequency of each rotated pair.
    pub inv_freq: &'a [f32],
    /// Linear position scale.
    pub freq_scale: f32,
    /// Multiplier of cos and sin.
    pub attn_factor: f32,
}

/// Rotates pair `i` of the first `2 · inv_freq.len()` dims of every head of `x` by
/// `pos · freq_scale · inv_freq[i]`, cos and sin times `attn_factor`; the remaining
/// dims are copied.
pub(crate) fn rope_table(
    x: &[f32],
    positions: &[i32],
    head_dim: usize,
    t: RopeTable<'_>,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let (mode, half) = (t.mode, t.inv_freq.len());
    check_len("rope output", out.len(), x.len())?;
    if 2 * half > head_dim || head_dim == 0 {
        return Err(BackendError::Input(format!(
            "rope: {half} rotated pairs do not fit head dim {head_dim}"
        )));
    }
    let n = positions.len();
    if n == 0 || !x.len().is_multiple_of(n * head_dim) {
        return Err(BackendError::Input(format!(
            "rope: {} elements are not {n} tokens of heads of {head_dim}",
            x.len()
        )));
    }
    let token = x.len() / n;
    // Taken out while in use: a pool thread waiting inside the parallel loop below may
    // run another partition's RoPE, which then finds none and makes its own.
    let mut angles = ANGLES.take();
    angles.update(positions, &t);
    let rotate = |(tok, (o, xs)): (usize, (&mut [f32], &[f32]))| {
        o.copy_from_slice(xs);
        let at = tok * half..(tok + 1) * half;
        let (sin, cos) = (&angles.sin[at.clone()], &angles.cos[at]);
        // One loop per pairing, over whole slices, so the compiler vectorizes it.
        for head in o.chunks_exact_mut(head_dim) {
            match mode {
                RopeMode::Normal => {
                    for ((pair, &s), &c) in head[..2 * half].chunks_exact_mut(2).zip(sin).zip(cos) {
                        let (x0, x1) = (pair[0], pair[1]);
                        pair[0] = x0 * c - x1 * s;
                        pair[1] = x0 * s + x1 * c;
                    }
                }
                RopeMode::Neox => {
                    let (low, high) = head[..2 * half].split_at_mut(half);
                    for (((a, b), &s), &c) in low.iter_mut().zip(high).zip(sin).zip(cos) {
                        let (x0, x1) = (*a, *b);
                        *a = x0 * c - x1 * s;
                        *b = x0 * s + x1 * c;
                    }
                }
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
    ANGLES.set(angles);
    Ok(())
}

thread_local! {
    /// The sines and cosines of this thread's last RoPE call. A step rotates the
    /// queries and keys of every layer at the same positions by the same table, so all
    /// but its first call find them here (computing them per call was 4 % of a 135M
    /// prompt chunk).
    static ANGLES: std::cell::RefCell<Angles> = std::cell::RefCell::default();
}

/// Sine and cosine times `attn_factor` of every pair at every position of one call,
/// and what they were computed from.
#[derive(Default)]
struct Angles {
    positions: Vec<i32>,
    inv_freq: Vec<f32>,
    freq_scale: f32,
    attn_factor: f32,
    /// `[positions, pairs]`.
    sin: Vec<f32>,
    /// `[positions, pairs]`.
    cos: Vec<f32>,
}

impl Angles {
    /// Makes `sin` and `cos` hold the angles of `positions` under `t`, unless they
    /// already do (parameters compared bit for bit: the same bits give the same table).
    fn update(&mut self, positions: &[i32], t: &RopeTable<'_>) {
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        if self.positions == positions
            && same(&self.inv_freq, t.inv_freq)
            && same(
                &[self.freq_scale, self.attn_factor],
                &[t.freq_scale, t.attn_factor],
            )
        {
            return;
        }
        self.positions = positions.to_vec();
        self.inv_freq = t.inv_freq.to_vec();
        (self.freq_scale, self.attn_factor) = (t.freq_scale, t.attn_factor);
        let half = t.inv_freq.len();
        let len = positions.len() * half;
        for v in [&mut self.sin, &mut self.cos] {
            v.clear();
            v.resize(len, 0.0);
        }
        if half == 0 {
            return;
        }
        let fill = |((pos, sin), cos): ((&i32, &mut [f32]), &mut [f32])| {
            let pos = *pos as f32 * t.freq_scale;
            for ((s, c), &f) in sin.iter_mut().zip(cos.iter_mut()).zip(t.inv_freq) {
                let (sine, cosine) = (pos * f).sin_cos();
                (*s, *c) = (sine * t.attn_factor, cosine * t.attn_factor);
            }
        };
        if len >= PARALLEL_MIN / 16 {
            positions
                .par_iter()
                .zip(self.sin.par_chunks_mut(half))
                .zip(self.cos.par_chunks_mut(half))
                .for_each(fill);
        } else {
            positions
                .iter()
                .zip(self.sin.chunks_mut(half))
                .zip(self.cos.chunks_mut(half))
                .for_each(fill);
        }
    }
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

    /// A table rotation equals the reference with each pair's own frequency, in f64.
    #[test]
    fn table_frequencies_match_naive() {
        let (n, heads, dh) = (2, 3, 8);
        let x = lcg(12, n * heads * dh);
        let pos = [5, 300];
        let inv_freq = [1.0f32, 0.25, 0.003];
        let m = 1.2;
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let mut out = vec![0.0; x.len()];
            let table = RopeTable {
                mode,
                inv_freq: &inv_freq,
                freq_scale: 1.0,
                attn_factor: m as f32,
            };
            rope_table(&x, &pos, dh, table, &mut out).unwrap();
            let mut want = x.clone();
            for (t, &p) in pos.iter().enumerate() {
                for h in 0..heads {
                    let base = (t * heads + h) * dh;
                    for (i, &f) in inv_freq.iter().enumerate() {
                        let theta = p as f64 * f as f64;
                        let (a, b) = match mode {
                            RopeMode::Normal => (2 * i, 2 * i + 1),
                            RopeMode::Neox => (i, i + 3),
                        };
                        let (x0, x1) = (x[base + a] as f64, x[base + b] as f64);
                        want[base + a] = (m * (x0 * theta.cos() - x1 * theta.sin())) as f32;
                        want[base + b] = (m * (x0 * theta.sin() + x1 * theta.cos())) as f32;
                    }
                }
            }
            assert_close(&out, &want, 1e-4);
            // The two dims past the table pass through, unscaled.
            assert_eq!(out[6..8], x[6..8]);
        }
    }

    /// The angles kept from one call serve the next only when positions and table
    /// match: each call in a run of changing ones agrees with its own reference.
    #[test]
    fn kept_angles_follow_every_change_of_positions_and_parameters() {
        let (heads, dh) = (2, 8);
        let calls: [(&[i32], f32, f32); 5] = [
            (&[3, 4], 10000.0, 1.0),
            (&[3, 4], 10000.0, 1.0),
            (&[3, 5], 10000.0, 1.0),
            (&[3, 5], 500.0, 1.0),
            (&[3, 5], 500.0, 0.25),
        ];
        for (pos, freq_base, freq_scale) in calls {
            let x = lcg(13, pos.len() * heads * dh);
            let p = RopeParams {
                mode: RopeMode::Neox,
                n_rot: dh,
                freq_base,
                freq_scale,
            };
            let mut out = vec![0.0; x.len()];
            rope(&x, pos, dh, p, &mut out).unwrap();
            assert_close(&out, &naive(&x, pos, heads, dh, p), 1e-4);
        }
    }
}
