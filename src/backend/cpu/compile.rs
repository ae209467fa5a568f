//! A compiled CPU partition: operands resolved once (partition inputs, earlier slots,
//! resident weights), slot buffers allocated from the [`BufferPlan`], and a `run`
//! that executes the nodes in order. Consecutive products of one input by packed
//! weights of one kind (q, k and v; gate and up) run as one parallel region.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use super::dispatch::run_node;
use super::packed::{self, PackCache, PackedWeight};
use super::view::View;
use crate::backend::{
    AlignedBytes, Backend, BackendError, CompiledPartition, HostTensor, MemorySpace, OpLabel,
    OpProfile, PartitionSpec, Refusal, StepState, Tensor, TensorData, WeightProvider,
};
use crate::graph::{DType, Node, Op, Shape, ValueId};

/// Where an operand's bytes come from at run time.
enum Source {
    /// The `run` input at this index.
    Input(usize),
    /// A slot buffer written by an earlier node.
    Slot(usize),
    /// A weight aliased from host memory.
    Weight(Arc<HostTensor>),
}

/// A resolved operand: its source plus the dtype, shape and byte size it holds.
struct Operand {
    source: Source,
    dtype: DType,
    shape: Shape,
    bytes: usize,
    /// A matmul weight's packed form, when this CPU has packed kernels for its dtype.
    packed: Option<Arc<PackedWeight>>,
}

/// One node to execute and where its result goes.
struct Step {
    id: ValueId,
    node: Node,
    operands: Vec<Operand>,
    slot: usize,
    bytes: usize,
}

/// A partition compiled for the CPU backend.
pub(super) struct CpuPartition {
    inputs: Vec<Operand>,
    steps: Vec<Step>,
    /// `steps` in order as runs: one step, or sibling products ([`siblings`]).
    runs: Vec<std::ops::Range<usize>>,
    outputs: Vec<Operand>,
    slots: Vec<AlignedBytes>,
    pool: Arc<rayon::ThreadPool>,
    /// Where node times go while profiling is on.
    profile: Arc<OpProfile>,
    /// Each run's name in the profile.
    labels: Vec<OpLabel>,
    /// Rows a run evaluates, the profile's grouping.
    rows: usize,
    /// Whether a run keeps the pool's other workers awake ([`super::awake`]): only
    /// where there are several parallel regions (products, attention) to wait between;
    /// a partition of a few small ops (a GPU plan's CPU side) would pay a wake-up for
    /// nothing.
    keep_awake: bool,
    /// The pool's flag that a run holds its helper.
    awake: Arc<AtomicBool>,
}

impl CpuPartition {
    /// Resolves every operand of `spec` and allocates its slots.
    pub(super) fn new(
        backend: &dyn Backend,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
        packs: &PackCache,
        pool: Arc<rayon::ThreadPool>,
        awake: Arc<AtomicBool>,
        profile: Arc<OpProfile>,
    ) -> Result<CpuPartition, BackendError> {
        let node_of = |id: ValueId| spec.node(id);
        let mut inputs = Vec::with_capacity(spec.inputs.len());
        for (i, &id) in spec.inputs.iter().enumerate() {
            let node = node_of(id)?;
            inputs.push(operand(Source::Input(i), node, id)?);
        }
        let input_index: HashMap<ValueId, usize> = spec
            .inputs
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i))
            .collect();
        let mut computed: HashMap<ValueId, usize> = HashMap::new();
        let mut resident: HashMap<String, Arc<HostTensor>> = HashMap::new();
        let slot_bytes = spec.buffers.slot_bytes();
        let mut steps = Vec::with_capacity(spec.nodes.len());
        for &id in spec.nodes {
            let node = node_of(id)?;
            let kind = node.op.kind();
            if kind.is_source() {
                return Err(BackendError::Unsupported {
                    node: id,
                    op: kind,
                    why: Refusal::Op(kind),
                });
            }
            if !node.dtype.is_float() && node.dtype != DType::I32 {
                return Err(BackendError::Unsupported {
                    node: id,
                    op: kind,
                    why: Refusal::DType {
                        role: "output".into(),
                        dtype: node.dtype,
                    },
                });
            }
            let bytes = value_bytes(node, id)?;
            let slot = spec
                .buffers
                .slot(id)
                .filter(|&s| slot_bytes.get(s).is_some_and(|&b| b >= bytes))
                .ok_or_else(|| {
                    BackendError::Bug(format!("buffer plan has no slot of {bytes} bytes for {id}"))
                })?;
            let mut operands = Vec::with_capacity(node.inputs.len());
            for &input in &node.inputs {
                let source = if let Some(&i) = input_index.get(&input) {
                    Source::Input(i)
                } else if let Some(&s) = computed.get(&input) {
                    if s == slot {
                        return Err(BackendError::Bug(format!(
                            "buffer plan puts {id} in the slot of its operand {input}"
                        )));
                    }
                    Source::Slot(s)
                } else {
                    let input_node = node_of(input)?;
                    match &input_node.op {
                        Op::Weight { name } => {
                            Source::Weight(resolve(backend, weights, &mut resident, name, input_node)?)
                        }
                        _ => {
                            return Err(BackendError::Input(format!(
                                "{id} reads {input}, which is not an input, weight or earlier node of this partition"
                            )))
                        }
                    }
                };
                operands.push(operand(source, node_of(input)?, input)?);
            }
            if let (Op::MatMul, Some(w)) = (&node.op, operands.get_mut(1)) {
                if let (Source::Weight(host), [n, k]) = (&w.source, w.shape.dims()) {
                    // The packed copy serves every product; the file's pages, read once
                    // to pack, are given back as packing goes (else they count twice).
                    w.packed = packs.get(w.dtype, &host.data, *n, *k)?;
                }
            }
            computed.insert(id, slot);
            steps.push(Step {
                id,
                node: node.clone(),
                operands,
                slot,
                bytes,
            });
        }
        let mut outputs = Vec::with_capacity(spec.outputs.len());
        for &id in spec.outputs {
            let source = match (computed.get(&id), input_index.get(&id)) {
                (Some(&s), _) => Source::Slot(s),
                (None, Some(&i)) => Source::Input(i),
                (None, None) => {
                    return Err(BackendError::Input(format!(
                        "output {id} is neither computed nor received by this partition"
                    )))
                }
            };
            outputs.push(operand(source, node_of(id)?, id)?);
        }
        let runs = sibling_runs(&steps);
        let parallel = steps
            .iter()
            .filter(|s| matches!(s.node.op, Op::MatMul | Op::Attention { .. }))
            .count();
        Ok(CpuPartition {
            keep_awake: parallel >= 2,
            awake,
            labels: runs.iter().map(|r| run_label(&steps[r.clone()])).collect(),
            rows: partition_rows(&inputs, &steps),
            inputs,
            runs,
            steps,
            outputs,
            slots: slot_bytes
                .iter()
                .map(|&b| AlignedBytes::zeroed(b))
                .collect(),
            pool,
            profile,
        })
    }

    /// Checks that `inputs` match the partition's inputs in count, space, dtype and shape.
    fn check_inputs(&self, inputs: &[&Tensor]) -> Result<(), BackendError> {
        if inputs.len() != self.inputs.len() {
            return Err(BackendError::Input(format!(
                "partition takes {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        for (i, (t, want)) in inputs.iter().zip(&self.inputs).enumerate() {
            if t.space != MemorySpace::HOST
                || !matches!(t.data, TensorData::Host(_))
                || t.dtype != want.dtype
                || t.shape != want.shape
                || t.data.len() != want.bytes
            {
                return Err(BackendError::Input(format!(
                    "input {i}: expected host {} {}, got {} {} in space {:?} ({} bytes)",
                    want.dtype,
                    want.shape,
                    t.dtype,
                    t.shape,
                    t.space,
                    t.data.len()
                )));
            }
        }
        Ok(())
    }
}

impl CompiledPartition for CpuPartition {
    fn run(
        &mut self,
        inputs: &[&Tensor],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, BackendError> {
        self.check_inputs(inputs)?;
        let CpuPartition {
            steps,
            runs,
            outputs,
            slots,
            pool,
            profile,
            labels,
            keep_awake,
            awake,
            rows,
            ..
        } = self;
        let timed = profile.enabled();
        let start = timed.then(Instant::now);
        let mut times = Vec::with_capacity(if timed { runs.len() } else { 0 });
        let mut body = || {
            for run in runs.iter() {
                let began = timed.then(Instant::now);
                if run.len() > 1 {
                    run_siblings(&steps[run.clone()], inputs, slots, state)?;
                } else {
                    run_step(&steps[run.start], inputs, slots, state)?;
                }
                if let Some(began) = began {
                    times.push(began.elapsed());
                }
            }
            Ok::<(), BackendError>(())
        };
        pool.install(|| {
            if *keep_awake {
                super::awake::awake(awake, body)
            } else {
                body()
            }
        })?;
        let outputs = outputs
            .iter()
            .map(|o| Tensor {
                dtype: o.dtype,
                shape: o.shape.clone(),
                space: MemorySpace::HOST,
                data: TensorData::Host(AlignedBytes::copy_from(view(o, inputs, slots).bytes)),
            })
            .collect();
        if let Some(start) = start {
            profile.record(*rows, start.elapsed(), labels, &times);
        }
        Ok(outputs)
    }

    fn bytes(&self) -> usize {
        self.slots.iter().map(AlignedBytes::len).sum()
    }
}

/// Runs one step that is not part of a sibling run.
fn run_step(
    step: &Step,
    inputs: &[&Tensor],
    slots: &mut [AlignedBytes],
    state: &mut StepState<'_>,
) -> Result<(), BackendError> {
    let mut out = std::mem::take(&mut slots[step.slot]);
    let result = {
        let views: Vec<View<'_>> = step
            .operands
            .iter()
            .map(|o| view(o, inputs, slots))
            .collect();
        let target = &mut out.as_bytes_mut()[..step.bytes];
        run_node(step.id, &step.node, &views, target, state)
    };
    slots[step.slot] = out;
    result
}

/// What [`OpProfile`] calls a run of steps: the op, and for products the weight's type,
/// `[rows, columns]` (a sibling run's rows summed) and bytes.
fn run_label(run: &[Step]) -> OpLabel {
    let first = &run[0];
    let weight = match (&first.node.op, first.operands.get(1)) {
        (Op::MatMul, Some(w)) if matches!(w.source, Source::Weight(_)) => Some(w),
        _ => None,
    };
    let Some(w) = weight else {
        return OpLabel {
            op: first.node.op.kind().name().to_string(),
            weight_bytes: 0,
            macs: 0,
        };
    };
    let rows: usize = run
        .iter()
        .map(|s| s.operands[1].shape.dims().first().copied().unwrap_or(0))
        .sum();
    let k = w.shape.dims().last().copied().unwrap_or(0);
    let times = if run.len() > 1 {
        format!(" ×{}", run.len())
    } else {
        String::new()
    };
    // Each product: its activation rows (the input's elements over the columns) times
    // its weight's elements.
    let macs = run
        .iter()
        .map(|s| (s.operands[0].shape.numel() / k.max(1) * s.operands[1].shape.numel()) as u64)
        .sum();
    OpLabel {
        op: format!("matmul{times} {} [{rows}, {k}]", w.dtype.name()),
        weight_bytes: run.iter().map(|s| s.operands[1].bytes as u64).sum(),
        macs,
    }
}

/// Rows (tokens) a run of the partition evaluates: those of its first product's
/// activations, else of its first input (0 without either).
fn partition_rows(inputs: &[Operand], steps: &[Step]) -> usize {
    let leading = |shape: &Shape| {
        let last = shape.dims().last().copied().unwrap_or(1).max(1);
        shape.numel() / last
    };
    steps
        .iter()
        .find(|s| matches!(s.node.op, Op::MatMul))
        .and_then(|s| s.operands.first())
        .or(inputs.first())
        .map_or(0, |o| leading(&o.shape))
}

/// The steps as runs: each maximal stretch of consecutive [`siblings`], else one step.
fn sibling_runs(steps: &[Step]) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if siblings(&steps[run.clone()], step) => run.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// Whether `next` can join `run` in one [`packed::matmul_many`] call: every one an f32
/// product of the same f32 input by a packed weight of one kind and width, each
/// writing its own slot (none the input's).
fn siblings(run: &[Step], next: &Step) -> bool {
    fn product(s: &Step) -> Option<(&Operand, &PackedWeight)> {
        match (&s.node.op, s.operands.as_slice()) {
            (Op::MatMul, [x, w]) if s.node.dtype == DType::F32 && x.dtype == DType::F32 => {
                w.packed.as_deref().map(|p| (x, p))
            }
            _ => None,
        }
    }
    let (Some(first), Some((x, w))) = (run.first().and_then(product), product(next)) else {
        return false;
    };
    let same_input = match (&first.0.source, &x.source) {
        (Source::Input(a), Source::Input(b)) => a == b,
        (Source::Slot(a), Source::Slot(b)) => a == b,
        _ => false,
    };
    let input_slot = match x.source {
        Source::Slot(s) => Some(s),
        _ => None,
    };
    same_input
        && first.0.shape == x.shape
        && first.1.is_sibling_of(w)
        && run.iter().all(|s| s.slot != next.slot)
        && input_slot != Some(next.slot)
}

/// Runs sibling products ([`siblings`]) as one parallel region.
fn run_siblings(
    run: &[Step],
    inputs: &[&Tensor],
    slots: &mut [AlignedBytes],
    state: &StepState<'_>,
) -> Result<(), BackendError> {
    let mut outs: Vec<AlignedBytes> = run
        .iter()
        .map(|s| std::mem::take(&mut slots[s.slot]))
        .collect();
    let result = (|| {
        let x = view(&run[0].operands[0], inputs, slots).to_f32()?;
        let weights: Vec<&PackedWeight> = run
            .iter()
            .filter_map(|s| s.operands[1].packed.as_deref())
            .collect();
        let k = weights.first().map_or(1, |w| w.cols()).max(1);
        // Padding rows of a bucketed step are not multiplied (they come out zero).
        let live = state.live_rows(x.len() / k);
        let mut targets = Vec::with_capacity(run.len());
        for ((s, out), w) in run.iter().zip(&mut outs).zip(&weights) {
            let target: &mut [f32] =
                bytemuck::try_cast_slice_mut(&mut out.as_bytes_mut()[..s.bytes])
                    .map_err(|e| BackendError::Bug(format!("slot of {} as f32: {e}", s.id)))?;
            let (target, padding) = target.split_at_mut((live * w.rows()).min(target.len()));
            padding.fill(0.0);
            targets.push(target);
        }
        packed::matmul_many(&x[..live * k], live, &weights, &mut targets)
    })();
    for (s, out) in run.iter().zip(outs) {
        slots[s.slot] = out;
    }
    result
}

/// The bytes behind operand `o`.
fn view<'a>(o: &'a Operand, inputs: &[&'a Tensor], slots: &'a [AlignedBytes]) -> View<'a> {
    let bytes = match &o.source {
        Source::Input(i) => match &inputs[*i].data {
            TensorData::Host(bytes) => bytes.as_bytes(),
            TensorData::Device(_) => unreachable!("check_inputs admits host tensors only"),
        },
        Source::Slot(s) => &slots[*s].as_bytes()[..o.bytes],
        Source::Weight(w) => w.data.as_bytes(),
    };
    let mapped = match &o.source {
        Source::Weight(w) if w.data.is_file_map() => Some(&w.data),
        _ => None,
    };
    View {
        dtype: o.dtype,
        shape: &o.shape,
        bytes,
        packed: o.packed.as_deref(),
        mapped,
    }
}

/// Bytes of `node`'s value (block formats included, for weights).
fn value_bytes(node: &Node, id: ValueId) -> Result<usize, BackendError> {
    node.shape
        .checked_numel()
        .and_then(|n| node.dtype.bytes_for(n))
        .ok_or_else(|| {
            BackendError::Input(format!(
                "{id}: {} {} has no byte size",
                node.dtype, node.shape
            ))
        })
}

/// An operand of `node`'s dtype and shape read from `source`.
fn operand(source: Source, node: &Node, id: ValueId) -> Result<Operand, BackendError> {
    Ok(Operand {
        source,
        dtype: node.dtype,
        shape: node.shape.clone(),
        bytes: value_bytes(node, id)?,
        packed: None,
    })
}

/// Makes weight `name` resident once and checks it matches the graph's declaration.
fn resolve(
    backend: &dyn Backend,
    weights: &dyn WeightProvider,
    resident: &mut HashMap<String, Arc<HostTensor>>,
    name: &str,
    node: &Node,
) -> Result<Arc<HostTensor>, BackendError> {
    if let Some(w) = resident.get(name) {
        return Ok(w.clone());
    }
    let mismatch = |detail: String| BackendError::WeightMismatch {
        name: name.into(),
        detail,
    };
    let handle = weights.resident(name, backend)?;
    if handle.space != MemorySpace::HOST {
        return Err(mismatch(format!(
            "resident in space {:?}, not host",
            handle.space
        )));
    }
    let host = handle
        .handle
        .downcast::<HostTensor>()
        .map_err(|_| mismatch("resident handle is not a CPU host tensor".into()))?;
    if host.dtype != node.dtype || host.shape != node.shape {
        return Err(mismatch(format!(
            "graph declares {} {}, store holds {} {}",
            node.dtype, node.shape, host.dtype, host.shape
        )));
    }
    resident.insert(name.into(), host.clone());
    Ok(host)
}
