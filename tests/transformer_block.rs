//! A Llama-style transformer block (RMSNorm, GQA attention with RoPE over a KV cache,
//! SwiGLU FFN) with random weights, run on a CPU-only plan and on a CPU+sim plan, both
//! compared with a naive reference written here; then a decode-like loop that must
//! compile once and hit afterwards.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard::backend::{
    cpu::CpuBackend, sim::SimBackend, Backend, BackendError, BackendSet, HostTensor, KvCache,
    KvDType, KvLayout, SharedBytes, StepState, Tensor,
};
use switchyard::cache::{
    get_or_compile, CacheBudget, CompileContext, GraphCache, Phase, StepArm, StepKey, WeightSource,
    WeightStore,
};
use switchyard::exec::Executor;
use switchyard::graph::{AttentionParams, DType, Graph, GraphBuilder, Op, RopeMode};
use switchyard::plan::{partition, Placement, Policy};

const D: usize = 64;
const H: usize = 4;
const HKV: usize = 2;
const DH: usize = 16;
const F: usize = 96;
const EPS: f32 = 1e-5;
const BASE: f32 = 10_000.0;
const CAPACITY: usize = 16;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
    fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

/// The block's weights, shared by the graph (through a WeightSource) and the reference.
struct Weights(HashMap<String, (Vec<usize>, Vec<f32>)>);

impl Weights {
    fn random(seed: u64) -> Weights {
        let mut rng = Lcg(seed);
        let mut w = HashMap::new();
        let mut put = |name: &str, shape: Vec<usize>, scale: f32, offset: f32| {
            let n = shape.iter().product();
            w.insert(name.to_string(), (shape, rng.vec(n, scale, offset)));
        };
        put("attn_norm", vec![D], 0.2, 1.0);
        put("wq", vec![H * DH, D], 0.3, 0.0);
        put("wk", vec![HKV * DH, D], 0.3, 0.0);
        put("wv", vec![HKV * DH, D], 0.3, 0.0);
        put("wo", vec![D, H * DH], 0.3, 0.0);
        put("ffn_norm", vec![D], 0.2, 1.0);
        put("w_gate", vec![F, D], 0.3, 0.0);
        put("w_up", vec![F, D], 0.3, 0.0);
        put("w_down", vec![D, F], 0.3, 0.0);
        Weights(w)
    }
    fn get(&self, name: &str) -> &[f32] {
        &self.0[name].1
    }
}

impl WeightSource for Weights {
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError> {
        let (shape, values) = self
            .0
            .get(name)
            .ok_or_else(|| BackendError::MissingWeight(name.into()))?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        HostTensor::new(
            DType::F32,
            shape.clone().into(),
            SharedBytes::from_vec(bytes),
        )
    }
}

fn block_graph(n: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [n, D]).unwrap();
    let pos = b.input("positions", DType::I32, [n]).unwrap();
    let w = |b: &mut GraphBuilder, name: &str, shape: &[usize]| {
        b.weight(name, DType::F32, shape).unwrap()
    };
    let attn_norm = w(&mut b, "attn_norm", &[D]);
    let wq = w(&mut b, "wq", &[H * DH, D]);
    let wk = w(&mut b, "wk", &[HKV * DH, D]);
    let wv = w(&mut b, "wv", &[HKV * DH, D]);
    let wo = w(&mut b, "wo", &[D, H * DH]);
    let ffn_norm = w(&mut b, "ffn_norm", &[D]);
    let w_gate = w(&mut b, "w_gate", &[F, D]);
    let w_up = w(&mut b, "w_up", &[F, D]);
    let w_down = w(&mut b, "w_down", &[D, F]);
    let h = b.rms_norm(x, attn_norm, EPS).unwrap();
    let q = b.matmul(h, wq).unwrap();
    let k = b.matmul(h, wk).unwrap();
    let v = b.matmul(h, wv).unwrap();
    let q = b.reshape(q, [n, H, DH]).unwrap();
    let k = b.reshape(k, [n, HKV, DH]).unwrap();
    let q = b
        .rope(q, pos, RopeMode::Neox, DH as u32, BASE, 1.0)
        .unwrap();
    let k = b
        .rope(k, pos, RopeMode::Neox, DH as u32, BASE, 1.0)
        .unwrap();
    let q = b.reshape(q, [n, H * DH]).unwrap();
    let k = b.reshape(k, [n, HKV * DH]).unwrap();
    let params = AttentionParams {
        layer: 0,
        n_heads: H as u32,
        n_kv_heads: HKV as u32,
        head_dim: DH as u32,
        scale: 1.0 / (DH as f32).sqrt(),
    };
    let attn = b.attention(q, k, v, params).unwrap();
    let attn_out = b.matmul(attn, wo).unwrap();
    let x = b.add(x, attn_out).unwrap();
    let h = b.rms_norm(x, ffn_norm, EPS).unwrap();
    let gate = b.matmul(h, w_gate).unwrap();
    let up = b.matmul(h, w_up).unwrap();
    let act = b.swiglu(gate, up).unwrap();
    let down = b.matmul(act, w_down).unwrap();
    let out = b.add(x, down).unwrap();
    b.finish(vec![out]).unwrap()
}

/// The naive reference: the same block, written directly, with its own KV cache.
struct Reference<'a> {
    w: &'a Weights,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
}

impl Reference<'_> {
    fn linear(&self, x: &[f32], name: &str, n_out: usize) -> Vec<f32> {
        let w = self.w.get(name);
        let k = x.len();
        (0..n_out)
            .map(|o| (0..k).map(|i| x[i] * w[o * k + i]).sum())
            .collect()
    }

    fn rms_norm(&self, x: &[f32], name: &str) -> Vec<f32> {
        let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let scale = 1.0 / (ms + EPS).sqrt();
        x.iter()
            .zip(self.w.get(name))
            .map(|(v, g)| v * scale * g)
            .collect()
    }

    fn rope(x: &mut [f32], pos: usize) {
        for head in x.chunks_mut(DH) {
            for i in 0..DH / 2 {
                let theta = pos as f32 * BASE.powf(-2.0 * i as f32 / DH as f32);
                let (a, b) = (head[i], head[i + DH / 2]);
                head[i] = a * theta.cos() - b * theta.sin();
                head[i + DH / 2] = a * theta.sin() + b * theta.cos();
            }
        }
    }

    fn step(&mut self, x: &[f32], pos: usize) -> Vec<f32> {
        let h = self.rms_norm(x, "attn_norm");
        let mut q = self.linear(&h, "wq", H * DH);
        let mut k = self.linear(&h, "wk", HKV * DH);
        let v = self.linear(&h, "wv", HKV * DH);
        Self::rope(&mut q, pos);
        Self::rope(&mut k, pos);
        self.keys.push(k);
        self.values.push(v);
        let mut attn = vec![0.0; H * DH];
        for head in 0..H {
            let kv = head / (H / HKV);
            let qh = &q[head * DH..(head + 1) * DH];
            let scores: Vec<f32> = self
                .keys
                .iter()
                .map(|k| {
                    let kh = &k[kv * DH..(kv + 1) * DH];
                    qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() / (DH as f32).sqrt()
                })
                .collect();
            let max = scores.iter().cloned().fold(f32::MIN, f32::max);
            let exp: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = exp.iter().sum();
            for (p, v) in exp.iter().zip(&self.values) {
                for d in 0..DH {
                    attn[head * DH + d] += p / total * v[kv * DH + d];
                }
            }
        }
        let o = self.linear(&attn, "wo", D);
        let x: Vec<f32> = x.iter().zip(&o).map(|(a, b)| a + b).collect();
        let h = self.rms_norm(&x, "ffn_norm");
        let gate = self.linear(&h, "w_gate", F);
        let up = self.linear(&h, "w_up", F);
        let act: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let down = self.linear(&act, "w_down", D);
        x.iter().zip(&down).map(|(a, b)| a + b).collect()
    }
}

fn backends(with_sim: bool) -> BackendSet {
    let mut list: Vec<Arc<dyn Backend>> = vec![Arc::new(CpuBackend::new(Some(2)).unwrap())];
    if with_sim {
        list.push(Arc::new(SimBackend::new().unwrap()));
    }
    BackendSet::new(list).unwrap()
}

fn kv_cache() -> KvCache {
    KvCache::new(KvLayout {
        n_layers: 1,
        capacity: CAPACITY,
        n_kv_heads: HKV,
        head_dim: DH,
        dtype: KvDType::F32,
    })
    .unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Runs a prefill of 3 tokens then 3 single-token decode steps through the graph cache,
/// comparing every output row with the reference. Returns the cache's stats.
fn run_sequence(with_sim: bool) -> (switchyard::cache::CacheStats, usize) {
    let weights = Arc::new(Weights::random(7));
    let store = WeightStore::new(weights.clone());
    let set = backends(with_sim);
    let mut cache: GraphCache<Executor> = GraphCache::new(CacheBudget {
        max_entries: 8,
        max_bytes: 64 << 20,
    });
    let mut reference = Reference {
        w: &weights,
        keys: vec![],
        values: vec![],
    };
    let mut kv = kv_cache();
    let mut rng = Lcg(99);
    let mut kv_len = 0;
    let mut sim_nodes = 0;
    for (step, n) in [3usize, 1, 1, 1].into_iter().enumerate() {
        let x = rng.vec(n * D, 2.0, 0.0);
        let positions: Vec<i32> = (kv_len as i32..(kv_len + n) as i32).collect();
        let phase = if step == 0 {
            Phase::Prefill
        } else {
            Phase::Decode
        };
        let key = StepKey {
            model: 1,
            phase,
            bucket: n as u32,
            sequences: 1,
            pick: switchyard::cache::Pick::Logits,
            backends: set.fingerprint(),
            arm: StepArm::Baseline,
        };
        let context = CompileContext {
            backends: &set,
            policy: &Policy::default(),
            weights: &store,
        };
        let executor = get_or_compile(&mut cache, &key, &context, || Ok(block_graph(n))).unwrap();
        sim_nodes = executor
            .plan()
            .placement
            .iter()
            .filter(|p| **p == Placement::On(switchyard::backend::BackendId::SIM))
            .count();
        let inputs = [
            ("x", Tensor::from_f32([n, D], &x).unwrap()),
            ("positions", Tensor::from_i32([n], &positions).unwrap()),
        ];
        let mut state = StepState::single(&mut kv, kv_len);
        let out = executor.run(&inputs, &mut state).unwrap();
        let got = out[0].to_f32_vec().unwrap();
        for t in 0..n {
            let want = reference.step(&x[t * D..(t + 1) * D], kv_len + t);
            let diff = max_abs_diff(&got[t * D..(t + 1) * D], &want);
            assert!(diff <= 1e-5, "step {step} token {t}: max abs diff {diff}");
        }
        kv_len += n;
    }
    (cache.stats(), sim_nodes)
}

#[test]
fn cpu_only_plan_matches_reference_and_decode_compiles_once() {
    let (stats, sim_nodes) = run_sequence(false);
    assert_eq!(sim_nodes, 0);
    assert_eq!(stats.compiles, 2, "one prefill and one decode executor");
    assert_eq!(
        stats.step_hits, 2,
        "decode steps 2 and 3 hit without tracing"
    );
}

#[test]
fn cpu_and_sim_plan_matches_reference_with_real_transfers() {
    let (stats, sim_nodes) = run_sequence(true);
    assert!(sim_nodes > 0, "the sim backend must take some nodes");
    assert_eq!(stats.compiles, 2);
    assert_eq!(stats.step_hits, 2);
}

#[test]
fn sim_plan_places_only_what_sim_supports_and_transfers_at_boundaries() {
    let graph = block_graph(1);
    let set = backends(true);
    let plan = partition(&graph, &set.capabilities(), &Policy::default()).unwrap();
    assert!(!plan.transfers.is_empty());
    for (idx, node) in plan.graph.nodes().iter().enumerate() {
        if plan.placement[idx] == Placement::On(switchyard::backend::BackendId::SIM) {
            assert!(
                !matches!(
                    node.op,
                    Op::Attention { .. } | Op::RmsNorm { .. } | Op::Rope { .. }
                ),
                "sim cannot run {:?}",
                node.op
            );
        }
    }
}
