//! Shared by the GPU tests that check one op at a time against the CPU backend: weights
//! held in memory, an executor whose compute nodes must all land on one backend, the
//! relative error both hold to, a graph run on each backend, and the f64 product they
//! are checked against.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard::backend::{
    cpu::CpuBackend, Backend, BackendError, BackendId, BackendSet, HostTensor, SharedBytes,
    StepState, Tensor,
};
use switchyard::cache::{WeightSource, WeightStore};
use switchyard::exec::Executor;
use switchyard::graph::{DType, Graph, GraphBuilder, OpKind};
use switchyard::plan::{partition, Placement, Policy};

/// Weights by name, held in memory.
#[derive(Default)]
pub struct Weights(HashMap<String, HostTensor>);

impl Weights {
    /// Adds `name` of `dtype` and `shape` holding `bytes`.
    pub fn put(&mut self, name: &str, dtype: DType, shape: &[usize], bytes: Vec<u8>) {
        let t =
            HostTensor::new(dtype, shape.to_vec().into(), SharedBytes::from_vec(bytes)).unwrap();
        self.0.insert(name.into(), t);
    }
}

impl WeightSource for Weights {
    fn host_tensor(&self, name: &str) -> Result<HostTensor, BackendError> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| BackendError::MissingWeight(name.into()))
    }
}

/// A two-thread CPU backend.
pub fn cpu() -> Arc<dyn Backend> {
    Arc::new(CpuBackend::new(Some(2)).unwrap())
}

/// Compiles `graph` on `backends`, checking that every compute node runs on `expect`.
pub fn executor(
    graph: Graph,
    backends: &BackendSet,
    weights: &WeightStore,
    expect: BackendId,
) -> Executor {
    // No smoothing: these graphs are single nodes, which it would send back to the CPU.
    let policy = Policy {
        min_run: 0,
        ..Policy::default()
    };
    let plan = partition(&graph, &backends.capabilities(), &policy).unwrap();
    for (i, p) in plan.placement.iter().enumerate() {
        let node = &plan.graph.nodes()[i];
        if !node.op.kind().is_source() && node.op.kind() != OpKind::Transfer {
            assert_eq!(*p, Placement::On(expect), "{:?} placed on {p:?}", node.op);
        }
    }
    Executor::compile(plan, backends, weights).unwrap()
}

/// max |got - want| / max |want|, after checking every output is finite.
pub fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    assert!(got.iter().all(|v| v.is_finite()), "non-finite GPU output");
    let max_ref = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max_diff = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    max_diff / max_ref.max(1e-30)
}

/// Runs a one-output graph on the CPU and on the GPU: (GPU, CPU) outputs.
pub fn both(
    gpu: &Arc<dyn Backend>,
    build: impl Fn() -> Graph,
    weights: Weights,
    inputs: &[(&str, Tensor)],
) -> (Vec<f32>, Vec<f32>) {
    let store = WeightStore::new(Arc::new(weights));
    let cpu_set = BackendSet::new(vec![cpu()]).unwrap();
    let gpu_set = BackendSet::new(vec![cpu(), gpu.clone()]).unwrap();
    let on_cpu = executor(build(), &cpu_set, &store, BackendId::CPU);
    let on_gpu = executor(build(), &gpu_set, &store, BackendId::GPU);
    let mut state = StepState::stateless();
    let want = on_cpu.run(inputs, &mut state).unwrap()[0]
        .to_f32_vec()
        .unwrap();
    let got = on_gpu.run(inputs, &mut state).unwrap()[0]
        .to_f32_vec()
        .unwrap();
    (got, want)
}

/// `x [m, k] · wᵀ` with the weight `w` of `dtype` and shape `[n, k]`.
pub fn matmul_graph(dtype: DType, m: usize, k: usize, n: usize) -> Graph {
    let mut g = GraphBuilder::new();
    let ix = g.input("x", DType::F32, [m, k]).unwrap();
    let iw = g.weight("w", dtype, [n, k]).unwrap();
    let out = g.matmul(ix, iw).unwrap();
    g.finish(vec![out]).unwrap()
}

/// `x · wᵀ` in f64, with each `block` activations first quantized to 8 bits (ties to
/// even, scale max|x|/127, the CPU's and the GPU's scheme for block formats) when there
/// is one: an independent reference for both backends.
pub fn f64_product(
    x: &[f32],
    w: &[f32],
    m: usize,
    k: usize,
    n: usize,
    block: Option<usize>,
) -> Vec<f32> {
    let mut xs: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    if let Some(block) = block {
        for (block, out) in x.chunks(block).zip(xs.chunks_mut(block)) {
            let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
            let inv = if amax == 0.0 { 0.0 } else { 127.0 / amax };
            for (v, o) in block.iter().zip(out) {
                *o = (v * inv).round_ties_even() as f64 * (amax / 127.0) as f64;
            }
        }
    }
    (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k)
                .map(|e| xs[r * k + e] * w[c * k + e] as f64)
                .sum::<f64>() as f32
        })
        .collect()
}
