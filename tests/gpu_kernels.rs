//! Every GPU kernel against the CPU backend on random inputs of odd sizes: relative
//! error max|diff| / max|ref| ≤ 1e-4 for f32 and ≤ 3e-3 for f16 weights. Block-format
//! matmuls are also checked against an f64 product written here (activations quantized
//! to 8 bits, as both backends do), and embeddings against exact dequantization.
//! Attention runs a prefill and decode steps, and moves a cache between CPU and GPU
//! mid-sequence, with f32 and f16 caches; batched steps of several sequences at
//! different positions, with padding rows, run over the GPU's paged pool, which grows,
//! forks and rounds f16 as the CPU does. A linear row-split across CPU and GPU
//! (co-execution) matches the whole linear within 3e-3.
#![cfg(feature = "gpu")]

mod gpu_data;
mod gpu_single_op;
mod gpu_support;

use gpu_data::{quantized, Lcg};
use gpu_single_op::{both, cpu, executor, f64_product, matmul_graph, relative_error, Weights};

use std::sync::Arc;

use half::f16;
use switchyard::backend::cpu::cut::{floor, Cut, Scratch};
use switchyard::backend::cpu::draw::sanitized_max;
use switchyard::backend::cpu::edit::{self, Edit, EditOp, Edits};
use switchyard::backend::cpu::greedy;
use switchyard::backend::{
    Backend, BackendId, BackendSet, KvCache, KvDType, KvLayout, StepState, Tensor,
};
use switchyard::cache::WeightStore;
use switchyard::coexec::{split_graph, SplitRule};
use switchyard::exec::Executor;
use switchyard::graph::{
    AttentionParams, AttentionVariant, DType, Graph, GraphBuilder, OpKind, RopeMode, ValueId,
    DRAW_PARAMS,
};
use switchyard::plan::{partition_pinned, Placement, Policy};

fn set(backends: Vec<Arc<dyn Backend>>) -> BackendSet {
    BackendSet::new(backends).unwrap()
}

/// Adds an f32 weight.
fn put_f32(weights: &mut Weights, name: &str, shape: &[usize], values: &[f32]) {
    weights.put(
        name,
        DType::F32,
        shape,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
}

fn open() -> Option<Arc<dyn Backend>> {
    gpu_support::gpu().map(|g| Arc::new(g) as Arc<dyn Backend>)
}

fn one(build: impl FnOnce(&mut GraphBuilder) -> ValueId) -> Graph {
    let mut b = GraphBuilder::new();
    let out = build(&mut b);
    b.finish(vec![out]).unwrap()
}

#[test]
fn elementwise_norm_softmax_and_rope_match_the_cpu() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(1);
    let (rows, d) = (7, 37);
    let a = rng.vec(rows * d, 4.0);
    let b_full = rng.vec(rows * d, 4.0);
    let b_row = rng.vec(d, 4.0);
    let x = |name: &str, v: &[f32], shape: &[usize]| {
        (
            name.to_string(),
            Tensor::from_f32(shape.to_vec(), v).unwrap(),
        )
    };
    type Op = fn(&mut GraphBuilder, ValueId, ValueId) -> ValueId;
    let binary: [(&str, Op, bool); 5] = [
        ("add", |g, a, b| g.add(a, b).unwrap(), false),
        ("add-broadcast", |g, a, b| g.add(a, b).unwrap(), true),
        ("mul-broadcast", |g, a, b| g.mul(a, b).unwrap(), true),
        ("swiglu", |g, a, b| g.swiglu(a, b).unwrap(), false),
        ("mul", |g, a, b| g.mul(a, b).unwrap(), false),
    ];
    for (name, op, broadcast) in binary {
        let bshape: Vec<usize> = if broadcast { vec![d] } else { vec![rows, d] };
        let bvals = if broadcast { &b_row } else { &b_full };
        let inputs = [x("a", &a, &[rows, d]), x("b", bvals, &bshape)];
        let inputs: Vec<(&str, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        let build = || {
            one(|g| {
                let ia = g.input("a", DType::F32, [rows, d]).unwrap();
                let ib = g.input("b", DType::F32, bshape.clone()).unwrap();
                op(g, ia, ib)
            })
        };
        let (got, want) = both(&gpu, build, Weights::default(), &inputs);
        let err = relative_error(&got, &want);
        assert!(err <= 1e-4, "{name}: relative error {err}");
    }
    type Un = fn(&mut GraphBuilder, ValueId) -> ValueId;
    let unary: [(&str, Un); 4] = [
        ("silu", |g, a| g.silu(a).unwrap()),
        ("gelu", |g, a| g.gelu(a).unwrap()),
        ("softmax", |g, a| g.softmax(a).unwrap()),
        ("reshape", |g, a| {
            let r = g.reshape(a, [37, 7]).unwrap();
            g.silu(r).unwrap()
        }),
    ];
    for (name, op) in unary {
        let inputs = [("a", Tensor::from_f32([rows, d], &a).unwrap())];
        let build = || {
            one(|g| {
                let ia = g.input("a", DType::F32, [rows, d]).unwrap();
                op(g, ia)
            })
        };
        let (got, want) = both(&gpu, build, Weights::default(), &inputs);
        let err = relative_error(&got, &want);
        assert!(err <= 1e-4, "{name}: relative error {err}");
    }
    let mut weights = Weights::default();
    put_f32(&mut weights, "norm", &[d], &rng.vec(d, 2.0));
    let inputs = [("a", Tensor::from_f32([rows, d], &a).unwrap())];
    let build = || {
        one(|g| {
            let ia = g.input("a", DType::F32, [rows, d]).unwrap();
            let w = g.weight("norm", DType::F32, [d]).unwrap();
            g.rms_norm(ia, w, 1e-5).unwrap()
        })
    };
    let (got, want) = both(&gpu, build, weights, &inputs);
    let err = relative_error(&got, &want);
    assert!(err <= 1e-4, "rms_norm: relative error {err}");
    for (mode, n_rot) in [
        (RopeMode::Normal, 12),
        (RopeMode::Neox, 10),
        (RopeMode::Neox, 14),
    ] {
        let (n, heads, dh) = (5, 3, 14);
        let xs = rng.vec(n * heads * dh, 2.0);
        let positions = [0, 1, 17, 300, 2047];
        let inputs = [
            ("x", Tensor::from_f32([n, heads, dh], &xs).unwrap()),
            ("pos", Tensor::from_i32([n], &positions).unwrap()),
        ];
        let build = || {
            one(|g| {
                let ix = g.input("x", DType::F32, [n, heads, dh]).unwrap();
                let ip = g.input("pos", DType::I32, [n]).unwrap();
                g.rope(ix, ip, mode, n_rot, 10_000.0, 1.0).unwrap()
            })
        };
        let (got, want) = both(&gpu, build, Weights::default(), &inputs);
        let err = relative_error(&got, &want);
        assert!(
            err <= 1e-4,
            "rope {mode:?} n_rot {n_rot}: relative error {err}"
        );
    }
}

#[test]
fn dense_matmul_and_embedding_match_the_cpu() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(2);
    // m ≥ 128 takes the tiled kernel: ragged tiles, k not a multiple of the tile's.
    for (m, k, n) in [
        (1, 37, 29),
        (5, 33, 70),
        (19, 64, 9),
        (130, 70, 45),
        (128, 96, 64),
    ] {
        let x = rng.vec(m * k, 2.0);
        let w = rng.vec(n * k, 2.0);
        for dtype in [DType::F32, DType::F16] {
            let mut weights = Weights::default();
            match dtype {
                DType::F32 => put_f32(&mut weights, "w", &[n, k], &w),
                _ => weights.put(
                    "w",
                    DType::F16,
                    &[n, k],
                    w.iter()
                        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                        .collect(),
                ),
            }
            let inputs = [("x", Tensor::from_f32([m, k], &x).unwrap())];
            let build = || matmul_graph(dtype, m, k, n);
            let (got, want) = both(&gpu, build, weights, &inputs);
            let err = relative_error(&got, &want);
            let bound = if dtype == DType::F16 { 3e-3 } else { 1e-4 };
            assert!(
                err <= bound,
                "matmul {dtype} {m}x{k}x{n}: relative error {err}"
            );
        }
    }
    let (vocab, d) = (23, 19);
    let table = rng.vec(vocab * d, 2.0);
    let ids = [3, 0, 22, 3, 11];
    let mut weights = Weights::default();
    put_f32(&mut weights, "table", &[vocab, d], &table);
    let inputs = [("ids", Tensor::from_i32([5], &ids).unwrap())];
    let build = || {
        one(|g| {
            let t = g.weight("table", DType::F32, [vocab, d]).unwrap();
            let i = g.input("ids", DType::I32, [5]).unwrap();
            g.embedding(t, i).unwrap()
        })
    };
    let (got, want) = both(&gpu, build, weights, &inputs);
    assert_eq!(got, want, "embedding copies rows exactly");
}

#[test]
fn block_format_matmul_and_embedding_match_the_cpu_and_exact_dequantization() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(3);
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
        // m ≥ 128 takes the tiled kernel (an odd number of blocks, ragged tiles).
        for (m, k, n) in [
            (1, 64, 33),
            (9, 96, 17),
            (5, 576, 100),
            (1, 1536, 40),
            (129, 96, 70),
            (128, 576, 100),
        ] {
            let x = rng.vec(m * k, 2.0);
            let (bytes, w) = quantized(&mut rng, dtype, n, k);
            let mut weights = Weights::default();
            weights.put("w", dtype, &[n, k], bytes.clone());
            let inputs = [("x", Tensor::from_f32([m, k], &x).unwrap())];
            let build = || matmul_graph(dtype, m, k, n);
            let (got, want) = both(&gpu, build, weights, &inputs);
            let err = relative_error(&got, &want);
            assert!(
                err <= 1e-4,
                "matmul {dtype} {m}x{k}x{n} vs CPU: relative error {err}"
            );
            let exact = f64_product(&x, &w, m, k, n, Some(32));
            let err = relative_error(&got, &exact);
            assert!(
                err <= 1e-4,
                "matmul {dtype} {m}x{k}x{n} vs f64: relative error {err}"
            );

            let ids: Vec<i32> = vec![0, (n - 1) as i32, 5];
            let mut weights = Weights::default();
            weights.put("table", dtype, &[n, k], bytes);
            let inputs = [("ids", Tensor::from_i32([3], &ids).unwrap())];
            let build = || {
                one(|g| {
                    let t = g.weight("table", dtype, [n, k]).unwrap();
                    let i = g.input("ids", DType::I32, [3]).unwrap();
                    g.embedding(t, i).unwrap()
                })
            };
            let (got, from_cpu) = both(&gpu, build, weights, &inputs);
            let want: Vec<f32> = ids
                .iter()
                .flat_map(|&r| w[r as usize * k..(r as usize + 1) * k].to_vec())
                .collect();
            assert_eq!(got, want, "embedding {dtype} dequantizes exactly");
            assert_eq!(got, from_cpu, "embedding {dtype} equals the CPU's");
        }
    }
}

/// A product of many rows (workgroups of 32 rows) gives each row the bits that row
/// gets in products of a few rows (workgroups of 8): a sequence's logits do not depend
/// on the batch it runs in.
#[test]
fn a_product_of_many_rows_gives_each_row_the_bits_of_a_few() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(5);
    let (m, k, n) = (150, 512, 45);
    for dtype in [DType::F16, DType::Q4_1, DType::Q4K, DType::Q6K] {
        let x = rng.vec(m * k, 2.0);
        let bytes = match dtype {
            DType::F16 => rng
                .vec(n * k, 2.0)
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                .collect(),
            _ => quantized(&mut rng, dtype, n, k).0,
        };
        let run = |rows: std::ops::Range<usize>| -> Vec<u32> {
            let mut weights = Weights::default();
            weights.put("w", dtype, &[n, k], bytes.clone());
            let store = WeightStore::new(Arc::new(weights));
            let set = BackendSet::new(vec![cpu(), gpu.clone()]).unwrap();
            let graph = matmul_graph(dtype, rows.len(), k, n);
            let exec = executor(graph, &set, &store, BackendId::GPU);
            let x = Tensor::from_f32([rows.len(), k], &x[rows.start * k..rows.end * k]).unwrap();
            let out = exec.run(&[("x", x)], &mut StepState::stateless()).unwrap();
            out[0]
                .to_f32_vec()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        let many = run(0..m);
        let few: Vec<u32> = (0..m)
            .step_by(13)
            .flat_map(|r| run(r..(r + 13).min(m)))
            .collect();
        let differ = many.iter().zip(&few).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{dtype}: {differ} of {} outputs differ", m * n);
    }
}

const HEADS: usize = 6;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 12;

fn attention_graph(n: usize, variant: AttentionVariant) -> Graph {
    one(|g| {
        let q = g.input("q", DType::F32, [n, HEADS * HEAD_DIM]).unwrap();
        let k = g.input("k", DType::F32, [n, KV_HEADS * HEAD_DIM]).unwrap();
        let v = g.input("v", DType::F32, [n, KV_HEADS * HEAD_DIM]).unwrap();
        let p = AttentionParams {
            layer: 1,
            n_heads: HEADS as u32,
            n_kv_heads: KV_HEADS as u32,
            head_dim: HEAD_DIM as u32,
            scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        };
        g.attention_variant(q, k, v, p, variant).unwrap()
    })
}

fn kv(dtype: KvDType) -> KvCache {
    KvCache::new(KvLayout {
        n_layers: 2,
        capacity: 40,
        n_kv_heads: KV_HEADS,
        head_dim: HEAD_DIM,
        dtype,
    })
    .unwrap()
}

/// Runs attention steps of `steps` (`(tokens, on the GPU)`) over one cache on a
/// CPU-only plan and over another cache alternating between plans, comparing every
/// step's output within `bound`.
fn attention_sequence(
    gpu: &Arc<dyn Backend>,
    seed: u64,
    dtype: KvDType,
    steps: &[(usize, bool)],
    bound: f32,
    variant: AttentionVariant,
) {
    let store = WeightStore::new(Arc::new(Weights::default()));
    let cpu_set = set(vec![cpu()]);
    let gpu_set = set(vec![cpu(), gpu.clone()]);
    let mut rng = Lcg(seed);
    let (mut cpu_kv, mut moving_kv) = (kv(dtype), kv(dtype));
    let mut kv_len = 0;
    for &(n, on_gpu) in steps {
        let mut random = |name, width: usize| {
            let t = Tensor::from_f32([n, width * HEAD_DIM], &rng.vec(n * width * HEAD_DIM, 3.0));
            (name, t.unwrap())
        };
        let inputs = [
            random("q", HEADS),
            random("k", KV_HEADS),
            random("v", KV_HEADS),
        ];
        let run = |backends, expect, cache| {
            let state = &mut StepState::single(cache, kv_len);
            let exec = executor(attention_graph(n, variant), backends, &store, expect);
            exec.run(&inputs, state).unwrap()[0].to_f32_vec().unwrap()
        };
        let want = run(&cpu_set, BackendId::CPU, &mut cpu_kv);
        let got = match on_gpu {
            true => run(&gpu_set, BackendId::GPU, &mut moving_kv),
            false => run(&cpu_set, BackendId::CPU, &mut moving_kv),
        };
        let err = relative_error(&got, &want);
        assert!(
            err <= bound,
            "attention n={n} at {kv_len} (gpu: {on_gpu}): relative error {err}"
        );
        kv_len += n;
    }
}

/// Prefill 9 on the GPU, decode 3 on the GPU, then 2 steps whose attention runs on the
/// CPU (rows come back from the GPU), then one on the GPU again (rows go up).
const MIGRATING: [(usize, bool); 7] = [
    (9, true),
    (1, true),
    (1, true),
    (1, true),
    (3, false),
    (1, false),
    (2, true),
];

#[test]
fn attention_over_a_gpu_cache_matches_the_cpu_across_prefill_decode_and_migration() {
    let Some(gpu) = open() else { return };
    let variant = AttentionVariant::default();
    attention_sequence(&gpu, 4, KvDType::F32, &MIGRATING, 1e-4, variant);
}

/// The same steps over an f16 cache: the GPU's pool holds f16 values two to a word and
/// rows moving either way keep their f16 values, so both backends attend over the same
/// keys and values (decision 199).
#[test]
fn attention_over_an_f16_gpu_cache_matches_the_cpu_across_prefill_decode_and_migration() {
    let Some(gpu) = open() else { return };
    let variant = AttentionVariant::default();
    attention_sequence(&gpu, 6, KvDType::F16, &MIGRATING, 1e-4, variant);
}

/// Gemma 2 / Mistral attention: a 4-position sliding window and soft-capped scores,
/// prefill and decode on the GPU against the CPU kernel, migrating in between.
#[test]
fn windowed_soft_capped_attention_matches_the_cpu() {
    let Some(gpu) = open() else { return };
    let steps = [(9, true), (1, true), (2, false), (1, true), (3, true)];
    let variant = AttentionVariant {
        window: Some(4),
        softcap: Some(1.5),
    };
    attention_sequence(&gpu, 7, KvDType::F32, &steps, 1e-4, variant);
}

#[test]
fn f16_host_cache_moves_to_the_gpu_within_f16_tolerance() {
    let Some(gpu) = open() else { return };
    attention_sequence(
        &gpu,
        5,
        KvDType::F16,
        &[(5, false), (1, true), (1, true)],
        3e-3,
        AttentionVariant::default(),
    );
}

/// Batched steps: three sequences at different positions (one decoding, one taking a
/// prompt chunk, one starting) and a padding row share each attention step, on the CPU
/// plan and on the GPU's paged pool, after each sequence's own prefill there. Then one
/// sequence leaves and another joins; a padding row's output must be zero on both.
fn batched_attention(gpu: &Arc<dyn Backend>, seed: u64, dtype: KvDType, variant: AttentionVariant) {
    let store = WeightStore::new(Arc::new(Weights::default()));
    let cpu_set = set(vec![cpu()]);
    let gpu_set = set(vec![cpu(), gpu.clone()]);
    let mut rng = Lcg(seed);
    let mut random = |n: usize, width: usize| {
        Tensor::from_f32([n, width * HEAD_DIM], &rng.vec(n * width * HEAD_DIM, 3.0)).unwrap()
    };
    // (CPU cache, GPU cache, length) per sequence.
    let mut seqs: Vec<(KvCache, KvCache, usize)> =
        (0..4).map(|_| (kv(dtype), kv(dtype), 0)).collect();
    let prefills = [7usize, 12, 0, 3];
    for (s, &n) in seqs.iter_mut().zip(&prefills) {
        if n == 0 {
            continue;
        }
        let inputs = [
            ("q", random(n, HEADS)),
            ("k", random(n, KV_HEADS)),
            ("v", random(n, KV_HEADS)),
        ];
        for (backends, expect, cache) in [
            (&cpu_set, BackendId::CPU, &mut s.0),
            (&gpu_set, BackendId::GPU, &mut s.1),
        ] {
            let exec = executor(attention_graph(n, variant), backends, &store, expect);
            exec.run(&inputs, &mut StepState::single(cache, 0)).unwrap();
        }
        s.2 = n;
    }
    // Each step: (sequence, rows) in row order; rows past the last segment are padding.
    let steps: [(&[(usize, usize)], usize); 3] = [
        (&[(0, 1), (1, 3), (2, 2)], 8),
        (&[(2, 1), (0, 1), (1, 1)], 4),
        (&[(3, 1), (2, 2), (0, 1)], 5),
    ];
    for (members, n) in steps {
        let inputs = [
            ("q", random(n, HEADS)),
            ("k", random(n, KV_HEADS)),
            ("v", random(n, KV_HEADS)),
        ];
        let mut outputs = Vec::new();
        for on_gpu in [false, true] {
            let (backends, expect) = match on_gpu {
                false => (&cpu_set, BackendId::CPU),
                true => (&gpu_set, BackendId::GPU),
            };
            let exec = executor(attention_graph(n, variant), backends, &store, expect);
            let mut chosen: Vec<Option<&mut (KvCache, KvCache, usize)>> =
                seqs.iter_mut().map(Some).collect();
            let mut row = 0;
            let segments = members
                .iter()
                .map(|&(i, rows)| {
                    let s = chosen[i].take().unwrap();
                    let segment = switchyard::backend::Segment {
                        rows: row..row + rows,
                        kv_len: s.2,
                        kv: if on_gpu { &mut s.1 } else { &mut s.0 },
                    };
                    row += rows;
                    segment
                })
                .collect();
            let mut state = StepState::batch(segments).unwrap();
            outputs.push(
                exec.run(&inputs, &mut state).unwrap()[0]
                    .to_f32_vec()
                    .unwrap(),
            );
        }
        let (want, got) = (&outputs[0], &outputs[1]);
        let err = relative_error(got, want);
        assert!(
            err <= 1e-4,
            "batched attention {members:?} in {n} rows: relative error {err}"
        );
        let used: usize = members.iter().map(|m| m.1).sum();
        let width = HEADS * HEAD_DIM;
        assert!(
            got[used * width..].iter().all(|&v| v == 0.0),
            "a padding row attended"
        );
        for &(i, rows) in members {
            seqs[i].2 += rows;
        }
    }
    // The GPU rows come back to the host whole: a CPU step over a GPU-written cache.
    for s in &mut seqs {
        let inputs = [
            ("q", random(1, HEADS)),
            ("k", random(1, KV_HEADS)),
            ("v", random(1, KV_HEADS)),
        ];
        let exec = executor(
            attention_graph(1, variant),
            &cpu_set,
            &store,
            BackendId::CPU,
        );
        let want = exec
            .run(&inputs, &mut StepState::single(&mut s.0, s.2))
            .unwrap()[0]
            .to_f32_vec()
            .unwrap();
        let got = exec
            .run(&inputs, &mut StepState::single(&mut s.1, s.2))
            .unwrap()[0]
            .to_f32_vec()
            .unwrap();
        assert!(
            relative_error(&got, &want) <= 1e-4,
            "rows downloaded from the GPU pool differ"
        );
    }
}

#[test]
fn batched_attention_over_the_gpu_pool_matches_the_cpu() {
    let Some(gpu) = open() else { return };
    batched_attention(&gpu, 11, KvDType::F32, AttentionVariant::default());
    let variant = AttentionVariant {
        window: Some(4),
        softcap: Some(1.5),
    };
    batched_attention(&gpu, 12, KvDType::F16, variant);
}

/// More sequences than the GPU pool's first blocks hold (40 × 2 blocks of 32 positions,
/// against 64): the pool grows between their prefills, copying the rows it holds and
/// re-recording the dispatches bound to it, and one batched step over all of them still
/// matches the CPU.
#[test]
fn the_gpu_pool_grows_under_many_sequences_without_losing_rows() {
    let Some(gpu) = open() else { return };
    let store = WeightStore::new(Arc::new(Weights::default()));
    let (cpu_set, gpu_set) = (set(vec![cpu()]), set(vec![cpu(), gpu.clone()]));
    let variant = AttentionVariant::default();
    let mut rng = Lcg(17);
    let mut inputs = |n: usize| {
        ["q", "k", "v"].map(|name| {
            let width = if name == "q" { HEADS } else { KV_HEADS } * HEAD_DIM;
            (
                name,
                Tensor::from_f32([n, width], &rng.vec(n * width, 3.0)).unwrap(),
            )
        })
    };
    let (sequences, prompt) = (40, 33);
    let cpu_prefill = executor(
        attention_graph(prompt, variant),
        &cpu_set,
        &store,
        BackendId::CPU,
    );
    let gpu_prefill = executor(
        attention_graph(prompt, variant),
        &gpu_set,
        &store,
        BackendId::GPU,
    );
    let mut caches: Vec<(KvCache, KvCache)> = Vec::new();
    for _ in 0..sequences {
        let (mut on_cpu, mut on_gpu) = (kv(KvDType::F32), kv(KvDType::F32));
        let step = inputs(prompt);
        cpu_prefill
            .run(&step, &mut StepState::single(&mut on_cpu, 0))
            .unwrap();
        gpu_prefill
            .run(&step, &mut StepState::single(&mut on_gpu, 0))
            .unwrap();
        caches.push((on_cpu, on_gpu));
    }
    let step = inputs(sequences);
    let mut outputs = Vec::new();
    for on_gpu in [false, true] {
        let (backends, expect) = if on_gpu {
            (&gpu_set, BackendId::GPU)
        } else {
            (&cpu_set, BackendId::CPU)
        };
        let exec = executor(
            attention_graph(sequences, variant),
            backends,
            &store,
            expect,
        );
        let segments = caches
            .iter_mut()
            .enumerate()
            .map(|(i, (c, g))| switchyard::backend::Segment {
                rows: i..i + 1,
                kv_len: prompt,
                kv: if on_gpu { g } else { c },
            })
            .collect();
        let mut state = StepState::batch(segments).unwrap();
        outputs.push(
            exec.run(&step, &mut state).unwrap()[0]
                .to_f32_vec()
                .unwrap(),
        );
    }
    let err = relative_error(&outputs[1], &outputs[0]);
    assert!(
        err <= 1e-4,
        "{sequences} sequences after the pool grew: relative error {err}"
    );
}

/// An f16 cache written by the GPU holds exactly the CPU's f16 values: ties to even both
/// ways, f16 subnormals and their ties, overflow to infinity, signed zero, f32
/// subnormals. (WGSL leaves pack2x16float's rounding to the device, so the kernel rounds
/// in integer arithmetic.)
#[test]
fn gpu_f16_cache_rows_round_as_the_cpu_rounds() {
    let Some(gpu) = open() else { return };
    let store = WeightStore::new(Arc::new(Weights::default()));
    let (cpu_set, gpu_set) = (set(vec![cpu()]), set(vec![cpu(), gpu.clone()]));
    let n = 4;
    let tie = 2f32.powi(-11);
    let special = [
        1.0 + tie,
        1.0 + 3.0 * tie,
        -(2.0 + 2.0 * tie),
        2f32.powi(-25),
        3.0 * 2f32.powi(-25),
        1.5 * 2f32.powi(-24),
        2.5 * 2f32.powi(-24),
        -6.1e-5,
        65519.0,
        65520.0,
        -0.0,
        1e-40,
        1e-30,
    ];
    let mut rng = Lcg(9);
    let mut k = rng.vec(n * KV_HEADS * HEAD_DIM, 4.0);
    k[..special.len()].copy_from_slice(&special);
    let mut v = rng.vec(n * KV_HEADS * HEAD_DIM, 4.0);
    let tail = v.len() - special.len();
    v[tail..].copy_from_slice(&special);
    let inputs = [
        (
            "q",
            Tensor::from_f32([n, HEADS * HEAD_DIM], &rng.vec(n * HEADS * HEAD_DIM, 1.0)).unwrap(),
        ),
        ("k", Tensor::from_f32([n, KV_HEADS * HEAD_DIM], &k).unwrap()),
        ("v", Tensor::from_f32([n, KV_HEADS * HEAD_DIM], &v).unwrap()),
    ];
    let (mut on_cpu, mut on_gpu) = (kv(KvDType::F16), kv(KvDType::F16));
    let variant = AttentionVariant::default();
    executor(
        attention_graph(n, variant),
        &cpu_set,
        &store,
        BackendId::CPU,
    )
    .run(&inputs, &mut StepState::single(&mut on_cpu, 0))
    .unwrap();
    executor(
        attention_graph(n, variant),
        &gpu_set,
        &store,
        BackendId::GPU,
    )
    .run(&inputs, &mut StepState::single(&mut on_gpu, 0))
    .unwrap();
    let bits = |rows: &switchyard::backend::KvRows| -> Vec<u32> {
        rows.read_f32(n).iter().map(|x| x.to_bits()).collect()
    };
    let (want_k, want_v) = on_cpu.layer_mut(1, n).unwrap();
    let (want_k, want_v) = (bits(want_k), bits(want_v));
    let (got_k, got_v) = on_gpu.layer_mut(1, n).unwrap();
    assert_eq!(bits(got_k), want_k, "keys");
    assert_eq!(bits(got_v), want_v, "values");
}

/// The prefix cache forks a sequence at a block boundary short of its length. When the
/// sequence's newest rows are on the GPU, both the sequence (next on the GPU, then on
/// the CPU) and the fork (on the GPU) must go on attending over the right rows.
#[test]
fn forking_a_gpu_cache_short_of_its_length_keeps_both_right() {
    let Some(gpu) = open() else { return };
    let store = WeightStore::new(Arc::new(Weights::default()));
    let (cpu_set, gpu_set) = (set(vec![cpu()]), set(vec![cpu(), gpu.clone()]));
    let variant = AttentionVariant::default();
    let mut rng = Lcg(13);
    let mut step = |reference: &mut KvCache, cache: &mut KvCache, kv_len, n, on_gpu| {
        let mut random = |name, width: usize| {
            let t = Tensor::from_f32([n, width * HEAD_DIM], &rng.vec(n * width * HEAD_DIM, 3.0));
            (name, t.unwrap())
        };
        let inputs = [
            random("q", HEADS),
            random("k", KV_HEADS),
            random("v", KV_HEADS),
        ];
        let cpu_exec = executor(
            attention_graph(n, variant),
            &cpu_set,
            &store,
            BackendId::CPU,
        );
        let want = cpu_exec
            .run(&inputs, &mut StepState::single(reference, kv_len))
            .unwrap();
        let exec = match on_gpu {
            true => executor(
                attention_graph(n, variant),
                &gpu_set,
                &store,
                BackendId::GPU,
            ),
            false => cpu_exec,
        };
        let got = exec
            .run(&inputs, &mut StepState::single(cache, kv_len))
            .unwrap();
        let err = relative_error(
            &got[0].to_f32_vec().unwrap(),
            &want[0].to_f32_vec().unwrap(),
        );
        assert!(
            err <= 1e-4,
            "step at {kv_len} (gpu: {on_gpu}): relative error {err}"
        );
    };
    let (mut reference, mut cache) = (kv(KvDType::F32), kv(KvDType::F32));
    step(&mut reference, &mut cache, 0, 35, true);
    let (mut reference_fork, mut fork) = (reference.fork(32).unwrap(), cache.fork(32).unwrap());
    step(&mut reference, &mut cache, 35, 1, true);
    step(&mut reference, &mut cache, 36, 1, false);
    step(&mut reference_fork, &mut fork, 32, 2, true);
}

#[test]
fn a_row_split_linear_across_cpu_and_gpu_matches_the_whole_linear() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(6);
    let backends = set(vec![cpu(), gpu.clone()]);
    for dtype in [DType::Q4_1, DType::Q8_0, DType::F32] {
        let (m, k, n) = (40, 64, 33);
        let x = rng.vec(m * k, 2.0);
        let mut weights = Weights::default();
        match dtype {
            DType::F32 => put_f32(&mut weights, "w", &[n, k], &rng.vec(n * k, 1.0)),
            _ => weights.put("w", dtype, &[n, k], quantized(&mut rng, dtype, n, k).0),
        }
        let store = WeightStore::new(Arc::new(weights));
        let graph = matmul_graph(dtype, m, k, n);
        let inputs = [("x", Tensor::from_f32([m, k], &x).unwrap())];
        let whole = executor(graph.clone(), &set(vec![cpu()]), &store, BackendId::CPU)
            .run(&inputs, &mut StepState::stateless())
            .unwrap()[0]
            .to_f32_vec()
            .unwrap();
        let caps = backends.capabilities();
        let rule = SplitRule {
            pair: (BackendId::CPU, BackendId::GPU),
            capabilities: (caps[0].1, caps[1].1),
            min_rows: 16,
        };
        let split = split_graph(&graph, &rule, |_| Some(300)).unwrap();
        assert_eq!(split.splits.len(), 1, "the linear splits");
        let policy = Policy {
            min_run: 0,
            ..Policy::default()
        };
        let plan = partition_pinned(&split.graph, &caps, &policy, &split.pins).unwrap();
        let on = |b: BackendId| {
            plan.graph
                .nodes()
                .iter()
                .zip(&plan.placement)
                .filter(|(node, at)| node.op.kind() == OpKind::MatMul && **at == Placement::On(b))
                .count()
        };
        assert_eq!(
            (on(BackendId::CPU), on(BackendId::GPU)),
            (1, 1),
            "one half on each"
        );
        let got = Executor::compile(plan, &backends, &store)
            .unwrap()
            .run(&inputs, &mut StepState::stateless())
            .unwrap()[0]
            .to_f32_vec()
            .unwrap();
        let err = relative_error(&got, &whole);
        assert!(
            err <= 3e-3,
            "split {dtype} linear vs whole: relative error {err}"
        );
    }
}

/// The GPU's argmax picks what the CPU's greedy rule picks: ties to the lowest index,
/// NaN never, +inf level with the largest finite value, -1 for a row of -inf and NaN;
/// over widths below, at and far above its workgroup's 256 threads.
#[test]
fn argmax_matches_the_cpu_greedy_rule() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(11);
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    for width in [1, 5, 256, 257, 4097, 49152] {
        let rows = 6;
        let mut x = rng.vec(rows * width, 8.0);
        let row = |r: usize| r * width..(r + 1) * width;
        // Row 1: a tie at the maximum, the later one first in thread order.
        let top = x[row(1)].iter().fold(f32::MIN, |m, &v| m.max(v)) + 1.0;
        let (a, b) = (width / 3, width - 1);
        x[row(1).start + b] = top;
        x[row(1).start + a] = top;
        // Row 2: NaN everywhere but one -inf and one finite value.
        x[row(2)].fill(nan);
        x[row(2).start + width / 2] = -3.0;
        // Row 3: nothing to pick.
        x[row(3)].fill(f32::NEG_INFINITY);
        x[row(3).start] = -nan;
        // Row 4: +inf against f32::MAX, which it ties.
        x[row(4).start + width - 1] = inf;
        x[row(4).start + width / 2] = f32::MAX;
        // Row 5: only zeros of both signs.
        x[row(5)].fill(-0.0);
        x[row(5).start + width - 1] = 0.0;
        let inputs = [("x", Tensor::from_f32([rows, width], &x).unwrap())];
        let build = || {
            one(|g| {
                let ix = g.input("x", DType::F32, [rows, width]).unwrap();
                g.argmax(ix).unwrap()
            })
        };
        let (got, want) = both(&gpu, build, Weights::default(), &inputs);
        assert_eq!(got, want, "width {width}");
        if width > 1 {
            assert_eq!(want[1], a as f32, "width {width}: the tie goes low");
            assert_eq!(want[3], -1.0, "width {width}: no pick");
        }
    }
}

/// Where the uniform point `bits / 2^32` of `row`'s weights at temperature `t` (0 below
/// `min_p`, and for logits below `lowest`) lies, in f64: each token's span `[start,
/// start + weight)` of the total, and the point.
fn spans_f64(row: &[f32], t: f32, min_p: f32, lowest: f32, bits: u32) -> (Vec<(f64, f64)>, f64) {
    let clean = |v: f32| {
        if v.is_nan() {
            f64::NEG_INFINITY
        } else {
            f64::from(v.min(f32::MAX))
        }
    };
    let best = row
        .iter()
        .map(|&v| clean(v))
        .fold(f64::NEG_INFINITY, f64::max);
    let mut start = 0.0;
    let spans = row
        .iter()
        .map(|&v| {
            let w = ((clean(v) - best) / f64::from(t)).exp();
            let w = if w < f64::from(min_p) || clean(v) < f64::from(lowest) {
                0.0
            } else {
                w
            };
            let span = (start, w);
            start += w;
            span
        })
        .collect();
    (spans, f64::from(bits) / 4_294_967_296.0 * start)
}

/// The GPU's draw (the graph's `Draw`, min-p, top-k, top-p and logit edits or not) picks
/// a token of the edited logits at or above the floor the CPU's top-k and top-p set,
/// whose span of the cumulative
/// weights holds the uniform point, within f32 rounding of the total (checked in f64),
/// and almost always the very token the CPU's draw picks (they part only where the
/// point falls within rounding of a boundary between two tokens); rows at temperature
/// 0 take the greedy pick exactly, and a row of -inf and NaN picks nothing.
#[test]
fn draw_picks_the_token_at_the_uniform_point_as_the_cpu_does() {
    let Some(gpu) = open() else { return };
    let mut rng = Lcg(23);
    let (mut same, mut drawn) = (0, 0);
    for width in [5, 257, 4097, 49152] {
        let rows = 24;
        let mut x = rng.vec(rows * width, 16.0);
        let row = |r: usize| r * width..(r + 1) * width;
        // Row 0: nothing to pick; row 1: NaN and -inf around a few finite values.
        x[row(0)].fill(f32::NEG_INFINITY);
        x[row(0).start] = f32::NAN;
        for (i, v) in x[row(1)].iter_mut().enumerate() {
            *v = match i % 3 {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                _ => *v,
            };
        }
        // (temperature, min-p, top-k, top-p) by row.
        let kinds = [
            (0.7, 0.0, 0, 1.0),
            (1.0, 0.0, 40, 1.0),
            (1.0, 0.05, 0, 0.9),
            (0.0, 0.0, 5, 0.5),
            (1.6, 0.0, 0, 1.0),
            (0.25, 0.3, 0, 1.0),
            (1.2, 0.0, 100, 0.95),
            (0.9, 0.0, 3, 1.0),
            (2.0, 0.0, 0, 0.3),
        ];
        // Every fourth row's logits (a greedy one among them) are edited first, as a
        // bias and penalties do: one token raised, the best scaled, one lowered, the
        // last banned, and an id past the row left alone.
        let best = |r: usize| greedy(&x[row(r)]).unwrap_or(0) as u32;
        let edits_of = |r: usize| match r % 4 {
            3 => vec![
                Edit::new(2 % width as u32, EditOp::Add, 4.0),
                Edit::new(best(r), EditOp::Scale, 1.3),
                Edit::new(1, EditOp::Sub, 0.7),
                Edit::new(width as u32 - 1, EditOp::Add, f32::NEG_INFINITY),
                Edit::new(width as u32 + 5, EditOp::Add, 1.0),
            ],
            _ => Vec::new(),
        };
        let mut settings = Vec::with_capacity(DRAW_PARAMS * rows);
        for r in 0..rows {
            let (t, min_p, top_k, top_p): (f32, f32, usize, f32) = kinds[r % kinds.len()];
            let bits = ((rng.next() + 0.5) * 4_294_967_295.0) as u32;
            let [k, p] = Cut::new(top_k, top_p).words();
            settings.extend([t.to_bits(), min_p.to_bits(), bits, k, p].map(|w| w as i32));
            let edits = Edits::of(&edits_of(r)).unwrap();
            settings.extend(edits.words().map(|w| w as i32));
        }
        let inputs = [
            ("x", Tensor::from_f32([rows, width], &x).unwrap()),
            (
                "settings",
                Tensor::from_i32([rows, DRAW_PARAMS], &settings).unwrap(),
            ),
        ];
        let build = || {
            one(|g| {
                let ix = g.input("x", DType::F32, [rows, width]).unwrap();
                let is = g
                    .input("settings", DType::I32, [rows, DRAW_PARAMS])
                    .unwrap();
                g.draw(ix, is).unwrap()
            })
        };
        let (got, want) = both(&gpu, build, Weights::default(), &inputs);
        assert_eq!(got[0], -1.0, "width {width}: a row with nothing to pick");
        for r in 0..rows {
            let words = &settings[DRAW_PARAMS * r..DRAW_PARAMS * (r + 1)];
            let t = f32::from_bits(words[0] as u32);
            let min_p = f32::from_bits(words[1] as u32);
            let bits = words[2] as u32;
            let cut = Cut::from_words(words[3] as u32, words[4] as u32);
            if t == 0.0 || r == 0 {
                assert_eq!(got[r], want[r], "width {width}, row {r}: greedy");
                continue;
            }
            let mut edited = x[row(r)].to_vec();
            edit::apply(&edits_of(r), &mut edited);
            let max = sanitized_max(&edited);
            let lowest = match cut.is_none() {
                true => f32::NEG_INFINITY,
                false => floor(&edited, max, t, cut, &mut Scratch::default()),
            };
            let (spans, point) = spans_f64(&edited, t, min_p, lowest, bits);
            let total = spans.last().map_or(0.0, |&(s, w)| s + w);
            let pick = got[r] as usize;
            let (start, weight) = spans[pick];
            let slack = 1e-5 * total;
            assert!(
                weight > 0.0 && point >= start - slack && point <= start + weight + slack,
                "width {width}, row {r} at T {t}: the GPU drew {pick}, spanning \
                 [{start}, {}) of {total}, for the point {point}",
                start + weight
            );
            drawn += 1;
            same += usize::from(got[r] == want[r]);
        }
    }
    eprintln!("the GPU drew the CPU's token in {same} of {drawn} draws");
    assert!(
        same * 100 >= drawn * 95,
        "the GPU drew the CPU's token in {same} of {drawn} draws"
    );
}
