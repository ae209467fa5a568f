//! End-to-end tests of compiling and running small partitions on the CPU backend.

use std::collections::HashMap;

use half::f16;

use super::CpuBackend;
use crate::backend::{
    Backend, BackendError, HostTensor, KvCache, KvDType, KvLayout, PartitionSpec, ResidentWeight,
    SharedBytes, StepState, Tensor, WeightProvider,
};
use crate::graph::{
    AttentionParams, BufferPlan, DType, Graph, GraphBuilder, RopeMode, Shape, ValueId,
};

/// Weights held in memory by name, uploaded on request.
struct Weights(HashMap<String, HostTensor>);

impl Weights {
    fn new(entries: &[(&str, DType, &[usize], Vec<u8>)]) -> Weights {
        Weights(
            entries
                .iter()
                .map(|(name, dtype, dims, bytes)| {
                    let shape = Shape::new(*dims);
                    let t = HostTensor::new(*dtype, shape, SharedBytes::from_vec(bytes.clone()));
                    (name.to_string(), t.unwrap())
                })
                .collect(),
        )
    }
}

impl WeightProvider for Weights {
    fn resident(&self, name: &str, backend: &dyn Backend) -> Result<ResidentWeight, BackendError> {
        let host = self
            .0
            .get(name)
            .ok_or_else(|| BackendError::MissingWeight(name.into()))?;
        backend.upload(host)
    }
}

/// Every computed (non-source) node of `graph`, all outputs kept.
fn compile(
    cpu: &CpuBackend,
    graph: &Graph,
    inputs: &[ValueId],
    weights: &Weights,
) -> Result<Box<dyn crate::backend::CompiledPartition>, BackendError> {
    let nodes: Vec<ValueId> = graph
        .ids()
        .filter(|&id| !graph.node(id).op.kind().is_source())
        .collect();
    let bytes = |id: ValueId| {
        let n = graph.node(id);
        n.dtype.bytes_for(n.shape.numel()).unwrap()
    };
    let plan = BufferPlan::new(graph, &nodes, graph.outputs(), bytes);
    let spec = PartitionSpec {
        graph,
        nodes: &nodes,
        inputs,
        outputs: graph.outputs(),
        buffers: &plan,
    };
    cpu.compile(&spec, weights)
}

/// One Q8_0 block: scale 1/8, quant `j - 16` for `j` in `0..32`.
fn ramp_q8_0_block() -> Vec<u8> {
    f16::from_f32(0.125)
        .to_le_bytes()
        .into_iter()
        .chain((0..32).map(|j| (j as i8 - 16) as u8))
        .collect()
}

#[test]
fn mlp_block_matches_hand_computation() {
    let (n, d, hidden) = (3, 4, 32);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [n, d]).unwrap();
    let norm_w = b.weight("norm", DType::F16, [d]).unwrap();
    let up = b.weight("up", DType::Q8_0, [hidden, d * 8]).unwrap();
    let wide = b.reshape(x, [n, 1, d]).unwrap();
    let normed = b.rms_norm(wide, norm_w, 1e-6).unwrap();
    let flat = b.reshape(normed, [n, d]).unwrap();
    let tiled = b
        .concat(&[flat, flat, flat, flat, flat, flat, flat, flat], 1)
        .unwrap();
    let y = b.matmul(tiled, up).unwrap();
    let act = b.silu(y).unwrap();
    let half = b.cast(act, DType::F16).unwrap();
    let g = b.finish(vec![half, y]).unwrap();

    let xs: Vec<f32> = (0..n * d).map(|i| i as f32 * 0.25 - 1.0).collect();
    let norm: Vec<u8> = [1.0f32, 0.5, 2.0, -1.0]
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect();
    let up_bytes: Vec<u8> = ramp_q8_0_block()
        .into_iter()
        .cycle()
        .take(hidden * 34)
        .collect();
    let weights = Weights::new(&[
        ("norm", DType::F16, &[d], norm),
        ("up", DType::Q8_0, &[hidden, d * 8], up_bytes),
    ]);
    let cpu = CpuBackend::new(Some(2)).unwrap();
    let mut part = compile(&cpu, &g, &[x], &weights).unwrap();
    assert!(part.bytes() > 0);
    let input = Tensor::from_f32([n, d], &xs).unwrap();
    let outs = part.run(&[&input], &mut StepState::stateless()).unwrap();
    assert_eq!(outs[0].dtype, DType::F16);
    let (got_act, got_y) = (outs[0].to_f32_vec().unwrap(), outs[1].to_f32_vec().unwrap());
    let nw = [1.0f32, 0.5, 2.0, -1.0];
    let wrow: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 0.125).collect();
    for t in 0..n {
        let row = &xs[t * d..(t + 1) * d];
        let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / d as f32 + 1e-6).sqrt();
        let normed: Vec<f32> = (0..d * 8).map(|i| row[i % d] * inv * nw[i % d]).collect();
        let want: f32 = normed.iter().zip(&wrow).map(|(a, b)| a * b).sum();
        for j in 0..hidden {
            let got = got_y[t * hidden + j];
            // Q8_0 matmuls quantize activations to 8 bits as llama.cpp does: each is
            // off by at most max|x| / 254, so the dot by at most Σ|w|·max|x| / 254.
            let amax = normed.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let tol = wrow.iter().map(|w| w.abs()).sum::<f32>() * amax / 254.0 + 1e-4;
            assert!((got - want).abs() < tol, "y[{t},{j}] = {got}, want {want}");
            let silu = want / (1.0 + (-want).exp());
            assert!((got_act[t * hidden + j] - silu).abs() < 1e-2);
        }
    }
}

#[test]
fn attention_partition_decodes_with_cache_and_validates_inputs() {
    let (heads, kv_heads, dh) = (2, 1, 4);
    let mut b = GraphBuilder::new();
    let q = b.input("q", DType::F32, [1, heads * dh]).unwrap();
    let k = b.input("k", DType::F32, [1, kv_heads * dh]).unwrap();
    let pos = b.input("pos", DType::I32, [1]).unwrap();
    let k3 = b.reshape(k, [1, kv_heads, dh]).unwrap();
    let k_rot = b
        .rope(k3, pos, RopeMode::Neox, dh as u32, 10000.0, 1.0)
        .unwrap();
    let k_flat = b.reshape(k_rot, [1, kv_heads * dh]).unwrap();
    let p = AttentionParams {
        layer: 0,
        n_heads: heads as u32,
        n_kv_heads: kv_heads as u32,
        head_dim: dh as u32,
        scale: 0.5,
    };
    let out = b.attention(q, k_flat, k, p).unwrap();
    let g = b.finish(vec![out]).unwrap();
    let cpu = CpuBackend::new(Some(1)).unwrap();
    let mut part = compile(&cpu, &g, &[q, k, pos], &Weights::new(&[])).unwrap();
    let mut cache = KvCache::new(KvLayout {
        n_layers: 1,
        capacity: 2,
        n_kv_heads: kv_heads,
        head_dim: dh,
        dtype: KvDType::F32,
    })
    .unwrap();
    let qt = Tensor::from_f32([1, heads * dh], &[0.1; 8]).unwrap();
    let v0 = Tensor::from_f32([1, dh], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let v1 = Tensor::from_f32([1, dh], &[-1.0, 0.0, 5.0, 2.0]).unwrap();
    let mut state = StepState::single(&mut cache, 0);
    let p0 = Tensor::from_i32([1], &[0]).unwrap();
    let first = part.run(&[&qt, &v0, &p0], &mut state).unwrap();
    // One cached position: the output is that position's value for every head.
    assert_eq!(
        first[0].to_f32_vec().unwrap(),
        [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]
    );
    state.segments_mut()[0].kv_len = 1;
    let p1 = Tensor::from_i32([1], &[1]).unwrap();
    let second = part.run(&[&qt, &v1, &p1], &mut state).unwrap()[0]
        .to_f32_vec()
        .unwrap();
    for (i, &got) in second.iter().enumerate() {
        let (a, c) = (
            v0.to_f32_vec().unwrap()[i % dh],
            v1.to_f32_vec().unwrap()[i % dh],
        );
        assert!(
            got > a.min(c) - 1e-6 && got < a.max(c) + 1e-6,
            "not a mix of the two values"
        );
    }
    let bad = part.run(&[&qt, &v1], &mut state);
    assert!(matches!(bad, Err(BackendError::Input(_))));
    let wrong_dtype = p1.converted(DType::F32).unwrap();
    let bad = part.run(&[&qt, &v1, &wrong_dtype], &mut state);
    assert!(matches!(bad, Err(BackendError::Input(_))));
}

#[test]
fn missing_or_mismatched_weights_are_errors() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [1, 32]).unwrap();
    let w = b.weight("w", DType::Q4_0, [2, 32]).unwrap();
    let y = b.matmul(x, w).unwrap();
    let g = b.finish(vec![y]).unwrap();
    let cpu = CpuBackend::new(Some(1)).unwrap();
    let none = compile(&cpu, &g, &[x], &Weights::new(&[]));
    assert!(matches!(none, Err(BackendError::MissingWeight(_))));
    let wrong = Weights::new(&[("w", DType::F32, &[2, 32], vec![0; 256])]);
    let mismatch = compile(&cpu, &g, &[x], &wrong);
    assert!(matches!(mismatch, Err(BackendError::WeightMismatch { .. })));
    let unreadable = compile(&cpu, &g, &[], &Weights::new(&[]));
    assert!(matches!(unreadable, Err(BackendError::Input(_))));
}

/// Bytes that record which ranges they were asked to give back (a file map stand-in).
struct Recording {
    bytes: Vec<u8>,
    released: std::sync::Mutex<Vec<std::ops::Range<usize>>>,
    file_map: bool,
    /// What [`crate::backend::ByteOwner::copy_unmapped`] was asked for (it leaves the
    /// copy to be made from memory).
    copied: std::sync::Mutex<Vec<std::ops::Range<usize>>>,
}

impl AsRef<[u8]> for Recording {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl crate::backend::ByteOwner for Recording {
    fn release(&self, range: std::ops::Range<usize>) {
        self.released.lock().unwrap().push(range);
    }

    fn is_file_map(&self) -> bool {
        self.file_map
    }

    fn copy_unmapped(&self, offset: usize, buf: &mut [u8]) -> bool {
        self.copied.lock().unwrap().push(offset..offset + buf.len());
        false
    }
}

/// A small weight read from a file map is copied when uploaded, and its pages given
/// back; a large one (or one that owns its bytes) is aliased, and so is a small matrix
/// of a type this CPU packs (the packer reads it once; a copy would sit beside the
/// packed form).
#[test]
fn small_mapped_weights_are_copied_on_upload() {
    let cpu = CpuBackend::new(Some(1)).unwrap();
    let q8_matrix = 16 * 34;
    for (len, file_map, dtype, shape, copied) in [
        (4096, true, DType::F32, vec![1024], true),
        (1 << 20, true, DType::F32, vec![1 << 18], false),
        (4096, false, DType::F32, vec![1024], false),
        (4096, true, DType::F32, vec![32, 32], true),
        (
            q8_matrix,
            true,
            DType::Q8_0,
            vec![16, 32],
            !super::packed::packs(DType::Q8_0),
        ),
    ] {
        let owner = std::sync::Arc::new(Recording {
            bytes: vec![7; len],
            released: Default::default(),
            file_map,
            copied: Default::default(),
        });
        let data = SharedBytes::new(owner.clone(), 0, len).unwrap();
        let w = HostTensor::new(dtype, Shape::new(shape), data).unwrap();
        let resident = cpu.upload(&w).unwrap();
        let host = resident.handle.downcast_ref::<HostTensor>().unwrap();
        assert_eq!(host.data.as_bytes(), w.data.as_bytes());
        assert_eq!(
            resident.bytes,
            if copied { len } else { 0 },
            "{len} {file_map}"
        );
        assert_eq!(!owner.released.lock().unwrap().is_empty(), copied);
    }
}

/// A looked-up embedding row of a file-mapped table is copied from the file, not read
/// through the map (decision 205), and a packed matmul weight gives its source bytes
/// back as it is packed (tied tables would otherwise be resident twice).
#[test]
fn embedding_rows_are_copied_and_packed_weights_release_their_source() {
    // Above the size a file-mapped weight is copied at upload (then it is no map).
    let (vocab, d) = (8192, 32);
    let mut b = GraphBuilder::new();
    let ids = b.input("ids", DType::I32, [2]).unwrap();
    let table = b.weight("table", DType::Q8_0, [vocab, d]).unwrap();
    let x = b.embedding(table, ids).unwrap();
    let logits = b.matmul(x, table).unwrap();
    let g = b.finish(vec![logits]).unwrap();
    let block: Vec<u8> = f16::from_f32(0.5)
        .to_le_bytes()
        .into_iter()
        .chain((0..32).map(|j| j as u8))
        .collect();
    let owner = std::sync::Arc::new(Recording {
        bytes: block.repeat(vocab),
        released: Default::default(),
        file_map: true,
        copied: Default::default(),
    });
    let whole = 34 * vocab;
    let data = SharedBytes::new(owner.clone(), 0, whole).unwrap();
    let host = HostTensor::new(DType::Q8_0, Shape::new([vocab, d]), data).unwrap();
    let weights = Weights(HashMap::from([("table".to_string(), host)]));
    let cpu = CpuBackend::new(Some(2)).unwrap();
    let mut part = compile(&cpu, &g, &[ids], &weights).unwrap();
    let packed = owner.released.lock().unwrap().clone();
    if !packed.is_empty() {
        assert!(
            packed.iter().any(|r| r.start == 0 && whole <= r.end),
            "packing gives back what it read: {packed:?}"
        );
    }
    owner.released.lock().unwrap().clear();
    let input = Tensor::from_i32([2], &[5, 8000]).unwrap();
    let out = part.run(&[&input], &mut StepState::stateless()).unwrap();
    assert!(out[0].to_f32_vec().unwrap().iter().all(|v| v.is_finite()));
    assert_eq!(
        *owner.copied.lock().unwrap(),
        [5 * 34..6 * 34, 8000 * 34..8001 * 34],
        "each looked-up row copied, nothing else"
    );
    let released = owner.released.lock().unwrap().clone();
    assert!(
        released.is_empty(),
        "a lookup releases nothing: {released:?}"
    );
}

/// `x [rows, k]` times two Q4_0 weights of `[n, k]` (siblings, one parallel call where
/// the CPU packs them) and a Q8_0 one (another kind: a product of its own), that last
/// through `silu` when `act`; with the weights' bytes (Q4_0 blocks: scale 1/4, nibbles
/// 0..16 then 15..=0, the second weight reversed; Q8_0 ramps).
fn siblings_and_another(rows: usize, k: usize, n: usize, act: bool) -> (Graph, ValueId, Weights) {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [rows, k]).unwrap();
    let w1 = b.weight("w1", DType::Q4_0, [n, k]).unwrap();
    let w2 = b.weight("w2", DType::Q4_0, [n, k]).unwrap();
    let w3 = b.weight("w3", DType::Q8_0, [n, k]).unwrap();
    let y1 = b.matmul(x, w1).unwrap();
    let y2 = b.matmul(x, w2).unwrap();
    let mut y3 = b.matmul(x, w3).unwrap();
    if act {
        y3 = b.silu(y3).unwrap();
    }
    let g = b.finish(vec![y1, y2, y3]).unwrap();
    let q4: Vec<u8> = f16::from_f32(0.25)
        .to_le_bytes()
        .into_iter()
        .chain((0..16).map(|j| (j as u8) | (((15 - j) as u8) << 4)))
        .collect();
    let weights = Weights::new(&[
        ("w1", DType::Q4_0, &[n, k], q4.repeat(n * k / 32)),
        (
            "w2",
            DType::Q4_0,
            &[n, k],
            q4.repeat(n * k / 32).into_iter().rev().collect(),
        ),
        (
            "w3",
            DType::Q8_0,
            &[n, k],
            ramp_q8_0_block().repeat(n * k / 32),
        ),
    ]);
    (g, x, weights)
}

/// A step padded to a bucket multiplies only its segments' rows: sibling products (one
/// parallel call) and a single product give the live rows the bits of an unpadded run
/// and zeros past them; a row count other than the padded one is computed whole.
#[test]
fn padding_rows_of_a_bucketed_step_are_not_multiplied() {
    let (rows, live, k, n) = (8, 5, 64, 32);
    let (g, x, weights) = siblings_and_another(rows, k, n, false);
    let cpu = CpuBackend::new(Some(2)).unwrap();
    let mut part = compile(&cpu, &g, &[x], &weights).unwrap();
    let xs: Vec<f32> = (0..rows * k)
        .map(|i| ((i * 37) % 23) as f32 * 0.1 - 1.1)
        .collect();
    let input = Tensor::from_f32([rows, k], &xs).unwrap();
    let whole: Vec<Vec<f32>> = part
        .run(&[&input], &mut StepState::stateless())
        .unwrap()
        .iter()
        .map(|t| t.to_f32_vec().unwrap())
        .collect();
    assert!(whole
        .iter()
        .all(|y| y[live * n..].iter().any(|&v| v != 0.0)));
    let mut cache = KvCache::new(KvLayout {
        n_layers: 1,
        capacity: 16,
        n_kv_heads: 1,
        head_dim: 4,
        dtype: KvDType::F32,
    })
    .unwrap();
    for (padded_to, computed) in [(rows, live), (rows - 1, rows)] {
        let segment = crate::backend::Segment {
            rows: 0..live,
            kv_len: 0,
            kv: &mut cache,
        };
        let mut state = StepState::batch(vec![segment])
            .unwrap()
            .padded_to(padded_to);
        let outs = part.run(&[&input], &mut state).unwrap();
        for (i, (out, want)) in outs.iter().zip(&whole).enumerate() {
            let got = out.to_f32_vec().unwrap();
            assert_eq!(got[..computed * n], want[..computed * n], "output {i}");
            assert!(
                got[computed * n..].iter().all(|&v| v == 0.0),
                "output {i}: padding rows are zero"
            );
        }
    }
}

#[test]
fn node_times_are_recorded_only_while_profiling() {
    let (rows, k, n) = (8, 64, 32);
    let (g, x, weights) = siblings_and_another(rows, k, n, true);
    let (q4_bytes, q8_bytes) = (n * k / 32 * 18, n * k / 32 * 34);
    let cpu = CpuBackend::new(Some(2)).unwrap();
    let profile = cpu.op_profile().expect("the CPU times its nodes");
    let mut part = compile(&cpu, &g, &[x], &weights).unwrap();
    let input = Tensor::from_f32([rows, k], &vec![0.5; rows * k]).unwrap();
    part.run(&[&input], &mut StepState::stateless()).unwrap();
    assert!(profile.take().is_empty(), "off by default");

    profile.set_enabled(true);
    for _ in 0..3 {
        part.run(&[&input], &mut StepState::stateless()).unwrap();
    }
    profile.set_enabled(false);
    part.run(&[&input], &mut StepState::stateless()).unwrap();
    let got = profile.take();
    assert_eq!(got.len(), 1, "one row count: {got:?}");
    let steps = &got[0];
    assert_eq!((steps.rows, steps.runs), (rows, 3));
    let ops: Vec<&str> = steps.ops.iter().map(|o| o.label.op.as_str()).collect();
    assert!(ops.contains(&"matmul q8_0 [32, 64]"), "{ops:?}");
    assert!(ops.contains(&"silu"), "{ops:?}");
    // The two Q4_0 products run as one sibling region where the CPU packs them, else
    // one by one; either way every product's weight is counted once a run.
    let weight_bytes: u64 = steps
        .ops
        .iter()
        .map(|o| o.label.weight_bytes * o.calls)
        .sum();
    assert_eq!(weight_bytes, 3 * (2 * q4_bytes + q8_bytes) as u64);
    // And each of the three products' rows × weight rows × columns multiply-adds.
    let macs: u64 = steps.ops.iter().map(|o| o.label.macs * o.calls).sum();
    assert_eq!(macs, 3 * 3 * (rows * n * k) as u64);
    assert!(steps
        .ops
        .iter()
        .all(|o| o.label.op.starts_with("matmul") || o.label.macs == 0));
    // The two Q4_0 products share a label: where they are not packed (no panel kernel,
    // as under SWITCHYARD_ISA=scalar) each run calls it twice.
    let unpacked = !super::packed::packs(DType::Q4_0);
    let per_run = |op: &str| {
        if unpacked && op.starts_with("matmul q4_0") {
            2
        } else {
            1
        }
    };
    assert!(
        steps
            .ops
            .iter()
            .all(|o| o.calls == 3 * per_run(&o.label.op) && o.nanos > 0),
        "{:?}",
        steps.ops
    );
    let inside: u64 = steps.ops.iter().map(|o| o.nanos).sum();
    assert!(inside <= steps.nanos, "nodes inside the run they belong to");
    assert_eq!(steps.outside_nanos(), steps.nanos - inside);
}
