//! Tests of the attention kernel: against naive f64 attention, its vectorised loops
//! against the portable ones, and batched steps against each sequence alone.

use super::super::testutil::{assert_close, lcg};
use super::*;

/// A cache layout with [`P`]'s 2 kv heads of dimension 5.
fn layout(n_layers: usize, capacity: usize, dtype: KvDType) -> KvLayout {
    KvLayout {
        n_layers,
        capacity,
        n_kv_heads: 2,
        head_dim: 5,
        dtype,
    }
}
use crate::backend::{KvCache, KvDType, KvLayout};

/// `values` as cache blocks of [`KV_BLOCK`] positions `width` wide, the rest of the last
/// block NaN (so a read past the positions written shows).
fn cache_blocks(values: &[f32], width: usize) -> Vec<Arc<Vec<f32>>> {
    values
        .chunks(KV_BLOCK * width)
        .map(|b| {
            let mut b = b.to_vec();
            b.resize(KV_BLOCK * width, f32::NAN);
            Arc::new(b)
        })
        .collect()
}

/// The same blocks stored as f16.
fn halved(blocks: &[Arc<Vec<f32>>]) -> Vec<Arc<Vec<f16>>> {
    blocks
        .iter()
        .map(|b| Arc::new(b.iter().map(|&v| f16::from_f32(v)).collect()))
        .collect()
}

const P: AttentionParams = AttentionParams {
    layer: 1,
    n_heads: 4,
    n_kv_heads: 2,
    head_dim: 5,
    scale: 0.4,
    window: None,
    softcap: None,
};

/// Attention of all `total` tokens with full (non-cached) causal masking, each
/// token seeing the last `window` positions when given.
fn naive(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    total: usize,
    window: Option<usize>,
    softcap: Option<f64>,
) -> Vec<f32> {
    let (dh, qw, kw) = (
        P.head_dim,
        P.n_heads * P.head_dim,
        P.n_kv_heads * P.head_dim,
    );
    let mut out = vec![0.0; total * qw];
    for t in 0..total {
        let first = window.map_or(0, |w| (t + 1).saturating_sub(w));
        for h in 0..P.n_heads {
            let kh = h / (P.n_heads / P.n_kv_heads);
            let s: Vec<f64> = (first..=t)
                .map(|j| {
                    let s = (0..dh)
                        .map(|d| (q[t * qw + h * dh + d] * k[j * kw + kh * dh + d]) as f64)
                        .sum::<f64>()
                        * P.scale as f64;
                    softcap.map_or(s, |c| c * (s / c).tanh())
                })
                .collect();
            let max = s.iter().copied().fold(f64::MIN, f64::max);
            let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
            for d in 0..dh {
                let acc: f64 = (first..=t)
                    .map(|j| (s[j - first] - max).exp() / sum * v[j * kw + kh * dh + d] as f64)
                    .sum();
                out[t * qw + h * dh + d] = acc as f32;
            }
        }
    }
    out
}

#[test]
fn vectorised_and_portable_loops_agree() {
    // Head sizes the register-resident AVX-512 loops take (64, 128) and one they
    // leave to the AVX2 loops (13); one token (decode) and blocks of several, with
    // and without a sliding window.
    for (dh, tokens, window) in [
        (13, 1, None),
        (64, 1, None),
        (64, 5, None),
        (64, 6, Some(4)),
        (128, 3, None),
    ] {
        let positions = 9 + tokens - 1;
        let (queries, keys, values) = (
            lcg(30, tokens * 3 * dh),
            lcg(31, positions * 2 * dh),
            lcg(32, positions * 2 * dh),
        );
        // One block each, the positions past the last never read.
        let (keys32, values32) = (cache_blocks(&keys, 2 * dh), cache_blocks(&values, 2 * dh));
        let (keys16, values16) = (halved(&keys32), halved(&values32));
        let scratch = Scratch::default;
        let mut by_storage = Vec::new();
        for (k, v) in [
            (Rows::F32(&keys32, 2 * dh), Rows::F32(&values32, 2 * dh)),
            (Rows::F16(&keys16, 2 * dh), Rows::F16(&values16, 2 * dh)),
        ] {
            let task = GroupTask {
                queries: &queries,
                q_width: 3 * dh,
                head_off: 0,
                group: 3,
                keys: k,
                values: v,
                kv_off: dh,
                first_seen: 9,
                head_dim: dh,
                scale: 0.3,
                window,
                softcap: None,
            };
            let mut portable = vec![0.0; tokens * 3 * dh];
            task.run::<false>(&mut scratch(), &mut portable);
            if super::super::vexp::avx2_available() {
                let mut wide = vec![0.0; portable.len()];
                // SAFETY: checked just above.
                unsafe { task.run_avx2(&mut scratch(), &mut wide) };
                assert_close(&wide, &portable, 1e-6);
                // Read straight from the cache or widened first: the same bits.
                for direct_rows in [0, usize::MAX] {
                    let mut other = vec![0.0; portable.len()];
                    // SAFETY: as above.
                    unsafe { task.run_avx2_direct_to(direct_rows, &mut scratch(), &mut other) };
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&other), bits(&wide), "dh {dh}, {tokens} tokens");
                }
            }
            if super::super::vexp::avx512_available() {
                let mut widest = vec![0.0; portable.len()];
                // SAFETY: checked just above.
                unsafe { task.run_avx512(&mut scratch(), &mut widest) };
                assert_close(&widest, &portable, 1e-5);
            }
            by_storage.push(portable);
        }
        assert_close(&by_storage[1], &by_storage[0], 3e-3);
    }
}

/// The AVX2 loops reading keys and values straight from a cache of several blocks (the
/// last partly filled, the rest of it NaN) give the bits of widening them first: one
/// and two query rows, f16 and f32 storage, head sizes 64 and 128.
#[test]
fn cache_reads_across_blocks_match_widened_ones() {
    if !super::super::vexp::avx2_available() {
        println!("skipped: this CPU lacks AVX2");
        return;
    }
    let positions = 2 * KV_BLOCK + 7;
    for dh in [64, 128] {
        let blocks = |seed: u64| cache_blocks(&lcg(seed, positions * 2 * dh), 2 * dh);
        let (keys32, values32) = (blocks(51), blocks(52));
        let (keys16, values16) = (halved(&keys32), halved(&values32));
        for (k, v) in [
            (Rows::F32(&keys32, 2 * dh), Rows::F32(&values32, 2 * dh)),
            (Rows::F16(&keys16, 2 * dh), Rows::F16(&values16, 2 * dh)),
        ] {
            for (tokens, group) in [(1, 1), (1, 2), (2, 1)] {
                let queries = lcg(50, tokens * group * dh);
                let task = GroupTask {
                    queries: &queries,
                    q_width: group * dh,
                    head_off: 0,
                    group,
                    keys: k,
                    values: v,
                    kv_off: dh,
                    first_seen: positions - tokens + 1,
                    head_dim: dh,
                    scale: 0.1,
                    window: None,
                    softcap: None,
                };
                let run = |direct_rows: usize| {
                    let mut out = vec![0.0; tokens * group * dh];
                    // SAFETY: AVX2 checked above.
                    unsafe {
                        task.run_avx2_direct_to(direct_rows, &mut Scratch::default(), &mut out)
                    };
                    out.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
                };
                assert_eq!(run(usize::MAX), run(0), "dh {dh}, {tokens}×{group} rows");
            }
        }
    }
}

/// One decoding token's AVX-512 loops (`avx512.rs`) give the bits of the general
/// register loops on the same task: head sizes 64 and 128, every group they take, f16
/// and f32 storage, cache lengths within one block, at its edges and across several
/// (the rest of the last block NaN), with a sliding window and with soft-capping.
#[cfg(target_arch = "x86_64")]
#[test]
fn decode_loops_give_the_register_loops_bits() {
    if !super::super::vexp::avx512_available() {
        println!("skipped: this CPU lacks AVX-512");
        return;
    }
    /// Runs `task` both ways; `None` where the decode loops declined it.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn both(task: &GroupTask<'_>, dh: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let (mut decoded, mut general) = (vec![0.0; task.group * dh], vec![0.0; task.group * dh]);
        let taken = match dh {
            64 => task.try_decode::<4>(&mut Scratch::default(), &mut decoded),
            _ => task.try_decode::<8>(&mut Scratch::default(), &mut decoded),
        };
        match dh {
            64 => task.run_in_registers::<4, 4>(&mut Scratch::default(), &mut general),
            _ => task.run_in_registers::<8, 2>(&mut Scratch::default(), &mut general),
        }
        taken.then(|| (bits(&decoded), bits(&general)))
    }
    for (dh, groups) in [(64, 1..=4), (128, 1..=2)] {
        for seen in [1, 3, 4, 5, 31, 32, 33, 2 * KV_BLOCK + 7, 100] {
            let blocks = |seed: u64| cache_blocks(&lcg(seed, seen * 2 * dh), 2 * dh);
            let (keys32, values32) = (blocks(61), blocks(62));
            let (keys16, values16) = (halved(&keys32), halved(&values32));
            for (k, v) in [
                (Rows::F32(&keys32, 2 * dh), Rows::F32(&values32, 2 * dh)),
                (Rows::F16(&keys16, 2 * dh), Rows::F16(&values16, 2 * dh)),
            ] {
                for group in groups.clone() {
                    for (window, softcap) in [(None, None), (Some(5), None), (None, Some(2.0))] {
                        let queries = lcg(60 + group as u64, group * dh);
                        let task = GroupTask {
                            queries: &queries,
                            q_width: group * dh,
                            head_off: 0,
                            group,
                            keys: k,
                            values: v,
                            kv_off: dh,
                            first_seen: seen,
                            head_dim: dh,
                            scale: 0.7,
                            window,
                            softcap,
                        };
                        // SAFETY: AVX-512 checked above.
                        let (decoded, general) = unsafe { both(&task, dh) }
                            .unwrap_or_else(|| panic!("dh {dh}, group {group}: not taken"));
                        assert_eq!(decoded, general, "dh {dh}, group {group}, {seen} seen");
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn vector_softmax_matches_the_portable_one() {
    // SAFETY (both closures): each runs only where its CPU features were checked.
    if super::super::vexp::avx512_available() {
        softmax_matches_the_portable_one(|row| unsafe { softmax_avx512(row) });
    }
    if super::super::vexp::avx2_available() {
        softmax_matches_the_portable_one(|row| unsafe { avx2::softmax_avx2(row) });
    }
}

/// `softmax` equals the portable softmax on rows of several lengths (whole vectors and
/// tails), a position masked with −∞ getting exactly 0.
#[cfg(target_arch = "x86_64")]
fn softmax_matches_the_portable_one(softmax: impl Fn(&mut [f32])) {
    for n in [1, 2, 7, 8, 16, 17, 40] {
        let row: Vec<f32> = lcg(n as u64, n).iter().map(|v| 8.0 * v).collect();
        let mut want = row.clone();
        softmax_in_place(&mut want);
        let mut got = row.clone();
        if n > 1 {
            got[0] = f32::NEG_INFINITY;
            want[0] = 0.0;
            let rest: f32 = want.iter().sum();
            want.iter_mut().for_each(|w| *w /= rest);
        }
        softmax(&mut got);
        assert_close(&got, &want, 1e-6);
        if n > 1 {
            assert_eq!(got[0], 0.0);
        }
    }
}

#[test]
fn prefill_then_decode_matches_naive_gqa() {
    prefill_then_decode(KvDType::F32, 1e-5);
    prefill_then_decode(KvDType::F16, 3e-3);
}

#[test]
fn a_prefill_longer_than_a_token_block_matches_naive() {
    let total = 2 * TOKEN_BLOCK + 5;
    let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
    let (q, k, v) = (
        lcg(40, total * qw),
        lcg(41, total * kw),
        lcg(42, total * kw),
    );
    let want = naive(&q, &k, &v, total, None, None);
    let mut cache = KvCache::new(layout(2, total, KvDType::F32)).unwrap();
    let split = total - 3;
    let mut state = StepState::single(&mut cache, 0);
    let mut out = vec![0.0; split * qw];
    attention(
        &q[..split * qw],
        &k[..split * kw],
        &v[..split * kw],
        P,
        &mut state,
        &mut out,
    )
    .unwrap();
    assert_close(&out, &want[..split * qw], 1e-5);
    state.segments_mut()[0].kv_len = split;
    let mut rest = vec![0.0; 3 * qw];
    attention(
        &q[split * qw..],
        &k[split * kw..],
        &v[split * kw..],
        P,
        &mut state,
        &mut rest,
    )
    .unwrap();
    assert_close(&rest, &want[split * qw..], 1e-5);
}

fn prefill_then_decode(dtype: KvDType, tolerance: f32) {
    let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
    let (q, k, v) = (lcg(20, 4 * qw), lcg(21, 4 * kw), lcg(22, 4 * kw));
    let want = naive(&q, &k, &v, 4, None, None);
    let mut cache = KvCache::new(layout(2, 6, dtype)).unwrap();
    let mut out = vec![0.0; 3 * qw];
    let mut state = StepState::single(&mut cache, 0);
    attention(
        &q[..3 * qw],
        &k[..3 * kw],
        &v[..3 * kw],
        P,
        &mut state,
        &mut out,
    )
    .unwrap();
    assert_close(&out, &want[..3 * qw], tolerance);
    state.segments_mut()[0].kv_len = 3;
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
    assert_close(&last, &want[3 * qw..], tolerance);
    state.segments_mut()[0].kv_len = 6;
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

/// A prefill spanning several token blocks, then single-token decodes, with a
/// window shorter than the sequence and soft-capped scores: every step matches the
/// masked, capped reference.
#[test]
fn a_sliding_window_with_soft_capping_matches_naive() {
    let total = TOKEN_BLOCK + 9;
    let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
    let (q, k, v) = (
        lcg(50, total * qw),
        lcg(51, total * kw),
        lcg(52, total * kw),
    );
    let (window, cap) = (5, 0.5);
    let want = naive(&q, &k, &v, total, Some(window), Some(cap));
    let full = naive(&q, &k, &v, total, None, Some(cap));
    let p = AttentionParams {
        window: Some(window),
        softcap: Some(cap as f32),
        ..P
    };
    let mut cache = KvCache::new(layout(2, total, KvDType::F32)).unwrap();
    let split = total - 4;
    let mut state = StepState::single(&mut cache, 0);
    let mut out = vec![0.0; total * qw];
    let (head, tail) = out.split_at_mut(split * qw);
    attention(
        &q[..split * qw],
        &k[..split * kw],
        &v[..split * kw],
        p,
        &mut state,
        head,
    )
    .unwrap();
    for (i, t) in (split..total).enumerate() {
        state.segments_mut()[0].kv_len = t;
        let rows = t * qw..(t + 1) * qw;
        let kv = t * kw..(t + 1) * kw;
        let dst = &mut tail[i * qw..(i + 1) * qw];
        attention(&q[rows], &k[kv.clone()], &v[kv], p, &mut state, dst).unwrap();
    }
    assert_close(&out, &want, 1e-5);
    // The window matters: past it, full attention differs.
    let past = window * qw..;
    let diff = out[past.clone()]
        .iter()
        .zip(&full[past])
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff > 1e-3, "{diff}");
}

/// Three sequences of different lengths in one step (a prefill, two decodes, and a
/// padding row between them) get exactly what each gets in a step of its own, and
/// the padding row gets zeros.
#[test]
fn a_batched_step_equals_each_sequence_alone() {
    let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
    let layout = layout(2, 40, KvDType::F16);
    // Each sequence's history (`before` positions) and its new rows this step.
    let shapes = [(7usize, 1usize), (0, TOKEN_BLOCK + 3), (20, 1)];
    let mut alone_caches = Vec::new();
    let mut batch_caches = Vec::new();
    let mut want = Vec::new();
    let mut new_rows = Vec::new();
    for (i, &(before, n)) in shapes.iter().enumerate() {
        let seed = 70 + 10 * i as u64;
        let total = before + n;
        let (q, k, v) = (
            lcg(seed, total * qw),
            lcg(seed + 1, total * kw),
            lcg(seed + 2, total * kw),
        );
        let (mut a, mut b) = (KvCache::new(layout).unwrap(), KvCache::new(layout).unwrap());
        for cache in [&mut a, &mut b] {
            if before > 0 {
                let mut out = vec![0.0; before * qw];
                let (qh, kh, vh) = (&q[..before * qw], &k[..before * kw], &v[..before * kw]);
                attention(qh, kh, vh, P, &mut StepState::single(cache, 0), &mut out).unwrap();
            }
        }
        let mut out = vec![0.0; n * qw];
        let (qn, kn, vn) = (&q[before * qw..], &k[before * kw..], &v[before * kw..]);
        attention(
            qn,
            kn,
            vn,
            P,
            &mut StepState::single(&mut a, before),
            &mut out,
        )
        .unwrap();
        want.push(out);
        new_rows.push((qn.to_vec(), kn.to_vec(), vn.to_vec()));
        alone_caches.push(a);
        batch_caches.push(b);
    }
    // Rows: sequence 0, one padding row, sequence 1, sequence 2.
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    let mut segments = Vec::new();
    let mut row = 0;
    for (i, (cache, (qn, kn, vn))) in batch_caches.iter_mut().zip(&new_rows).enumerate() {
        let n = shapes[i].1;
        segments.push(crate::backend::Segment {
            rows: row..row + n,
            kv_len: shapes[i].0,
            kv: cache,
        });
        q.extend_from_slice(qn);
        k.extend_from_slice(kn);
        v.extend_from_slice(vn);
        row += n;
        if i == 0 {
            q.extend(vec![1.0; qw]);
            k.extend(vec![1.0; kw]);
            v.extend(vec![1.0; kw]);
            row += 1;
        }
    }
    let mut out = vec![f32::NAN; row * qw];
    let mut state = StepState::batch(segments).unwrap();
    attention(&q, &k, &v, P, &mut state, &mut out).unwrap();
    let (first, rest) = out.split_at(qw);
    let (pad, rest) = rest.split_at(qw);
    assert_eq!(first, &want[0][..]);
    assert!(pad.iter().all(|&x| x == 0.0));
    let (second, third) = rest.split_at(shapes[1].1 * qw);
    assert_eq!(second, &want[1][..]);
    assert_eq!(third, &want[2][..]);
}

#[test]
fn overlapping_segments_are_refused() {
    let layout = layout(1, 4, KvDType::F32);
    let (mut a, mut b) = (KvCache::new(layout).unwrap(), KvCache::new(layout).unwrap());
    let segments = vec![
        crate::backend::Segment {
            rows: 0..2,
            kv_len: 0,
            kv: &mut a,
        },
        crate::backend::Segment {
            rows: 1..3,
            kv_len: 0,
            kv: &mut b,
        },
    ];
    assert!(StepState::batch(segments).is_err());
}

#[test]
fn missing_cache_or_layer_is_an_error() {
    let (qw, kw) = (P.n_heads * P.head_dim, P.n_kv_heads * P.head_dim);
    let (q, kv) = (vec![0.0; qw], vec![0.0; kw]);
    let mut out = vec![0.0; qw];
    let mut state = StepState::stateless();
    let err = attention(&q, &kv, &kv, P, &mut state, &mut out);
    assert!(matches!(err, Err(BackendError::KvCache(_))));
    let mut one_layer = KvCache::new(layout(1, 4, KvDType::F32)).unwrap();
    let mut state = StepState::single(&mut one_layer, 0);
    let err = attention(&q, &kv, &kv, P, &mut state, &mut out);
    assert!(matches!(err, Err(BackendError::KvCache(_))));
}
