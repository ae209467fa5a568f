//! Causal grouped-query attention over a sequence's KV cache.

use rayon::prelude::*;

use super::check_len;
use super::norm::softmax_row;
use crate::backend::{BackendError, StepState};

/// Attention attributes (see [`crate::graph::Op::Attention`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttentionParams {
    /// KV cache layer.
    pub layer: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Score scale.
    pub scale: f32,
}

/// Appends this step's `k`, `v` rows (`[N, n_kv_heads·head_dim]`) to layer `p.layer` of
/// the cache at `state.kv_len`, then writes to `out` (`[N, n_heads·head_dim]`) the
/// attention of each query token `t` over cache positions `0..=kv_len + t`.
pub(crate) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: AttentionParams,
    state: &mut StepState<'_>,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if p.n_heads == 0
        || p.n_kv_heads == 0
        || p.head_dim == 0
        || !p.n_heads.is_multiple_of(p.n_kv_heads)
    {
        return Err(BackendError::Input(format!(
            "attention: {} heads do not group over {} kv heads of dim {}",
            p.n_heads, p.n_kv_heads, p.head_dim
        )));
    }
    let (q_width, kv_width) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    let n = q.len() / q_width.max(1);
    check_len("attention q", q.len(), n * q_width)?;
    check_len("attention k", k.len(), n * kv_width)?;
    check_len("attention v", v.len(), n * kv_width)?;
    check_len("attention output", out.len(), q.len())?;
    let kv_len = state.kv_len;
    let cache = state
        .kv
        .as_deref_mut()
        .ok_or_else(|| BackendError::KvCache("attention needs a KV cache".into()))?;
    let layout = cache.layout();
    if layout.n_kv_heads != p.n_kv_heads || layout.head_dim != p.head_dim {
        return Err(BackendError::KvCache(format!(
            "cache has {} kv heads of dim {}, layer {} needs {} of dim {}",
            layout.n_kv_heads, layout.head_dim, p.layer, p.n_kv_heads, p.head_dim
        )));
    }
    if kv_len + n > layout.capacity {
        return Err(BackendError::KvCache(format!(
            "{kv_len} cached + {n} new positions exceed capacity {}",
            layout.capacity
        )));
    }
    let (keys, values) = cache.layer_mut(p.layer)?;
    let fresh = kv_len * kv_width..(kv_len + n) * kv_width;
    keys[fresh.clone()].copy_from_slice(k);
    values[fresh].copy_from_slice(v);
    let (keys, values) = (&*keys, &*values);
    let group = p.n_heads / p.n_kv_heads;
    let dh = p.head_dim;
    out.par_chunks_mut(dh).enumerate().for_each_init(
        || {
            (
                Vec::with_capacity(kv_len + n),
                Vec::with_capacity(kv_len + n),
            )
        },
        |(scores, probs), (row, o)| {
            let (t, h) = (row / p.n_heads, row % p.n_heads);
            let query = &q[row * dh..(row + 1) * dh];
            let kv_off = (h / group) * dh;
            let seen = kv_len + t + 1;
            scores.clear();
            scores.extend((0..seen).map(|j| {
                let key = &keys[j * kv_width + kv_off..][..dh];
                p.scale * query.iter().zip(key).map(|(a, b)| a * b).sum::<f32>()
            }));
            probs.resize(seen, 0.0);
            softmax_row(scores, probs);
            o.fill(0.0);
            for (j, &pj) in probs.iter().enumerate() {
                let value = &values[j * kv_width + kv_off..][..dh];
                o.iter_mut().zip(value).for_each(|(o, &x)| *o += pj * x);
            }
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, lcg};
    use super::*;
    use crate::backend::{KvCache, KvLayout};

    const P: AttentionParams = AttentionParams {
        layer: 1,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 5,
        scale: 0.4,
    };

    /// Attention of all `total` tokens with full (non-cached) causal masking.
    fn naive(q: &[f32], k: &[f32], v: &[f32], total: usize) -> Vec<f32> {
        let (dh, qw, kw) = (
            P.head_dim,
            P.n_heads * P.head_dim,
            P.n_kv_heads * P.head_dim,
        );
        let mut out = vec![0.0; total * qw];
        for t in 0..total {
            for h in 0..P.n_heads {
                let kh = h / (P.n_heads / P.n_kv_heads);
                let s: Vec<f64> = (0..=t)
                    .map(|j| {
                        (0..dh)
                            .map(|d| (q[t * qw + h * dh + d] * k[j * kw + kh * dh + d]) as f64)
                            .sum::<f64>()
                            * P.scale as f64
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::MIN, f64::max);
                let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
                for d in 0..dh {
                    let acc: f64 = (0..=t)
                        .map(|j| (s[j] - max).exp() / sum * v[j * kw + kh * dh + d] as f64)
                        .sum();
                    out[t * qw + h * dh + d] = acc as f32;
                }
            }
        }
        out
    }

    #[test]
    fn prefill_then_decode_matches_naive_gqa() {
        let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
        let (q, k, v) = (lcg(20, 4 * qw), lcg(21, 4 * kw), lcg(22, 4 * kw));
        let want = naive(&q, &k, &v, 4);
        let mut cache = KvCache::new(KvLayout {
            n_layers: 2,
            capacity: 6,
            n_kv_heads: 2,
            head_dim: 5,
        });
        let mut out = vec![0.0; 3 * qw];
        let mut state = StepState {
            kv_len: 0,
            kv: Some(&mut cache),
        };
        attention(
            &q[..3 * qw],
            &k[..3 * kw],
            &v[..3 * kw],
            P,
            &mut state,
            &mut out,
        )
        .unwrap();
        assert_close(&out, &want[..3 * qw], 1e-5);
        state.kv_len = 3;
        let mut last = vec![0.0; qw];
        attention(
            &q[3 * qw..],
            &k[3 * kw..],
            &v[3 * kw..],
            P,
            &mut state,
            &mut last,
        )
        .unwrap();
        assert_close(&last, &want[3 * qw..], 1e-5);
        state.kv_len = 6;
        let full = attention(
            &q[3 * qw..],
            &k[3 * kw..],
            &v[3 * kw..],
            P,
            &mut state,
            &mut last,
        );
        assert!(matches!(full, Err(BackendError::KvCache(_))));
    }

    #[test]
    fn missing_cache_or_layer_is_an_error() {
        let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
        let (q, kv) = (vec![0.0; qw], vec![0.0; kw]);
        let mut out = vec![0.0; qw];
        let mut state = StepState::stateless();
        let err = attention(&q, &kv, &kv, P, &mut state, &mut out);
        assert!(matches!(err, Err(BackendError::KvCache(_))));
        let mut one_layer = KvCache::new(KvLayout {
            n_layers: 1,
            capacity: 4,
            n_kv_heads: 2,
            head_dim: 5,
        });
        let mut state = StepState {
            kv_len: 0,
            kv: Some(&mut one_layer),
        };
        let err = attention(&q, &kv, &kv, P, &mut state, &mut out);
        assert!(matches!(err, Err(BackendError::KvCache(_))));
    }
}
