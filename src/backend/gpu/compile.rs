//! A compiled GPU partition. Compiling groups the nodes into fused units (`fuse.rs`),
//! gives every value a unit leaves in memory a slot by lifetime (views share their
//! source's), makes every buffer a run needs (inputs, slots, the shared quantized
//! activations, a mappable copy of each output) and records each unit's dispatches.
//! A run writes the host inputs into their buffers, replays the dispatches in one
//! compute pass, copies the outputs to their mappable buffers and submits once,
//! without waiting: nothing is created per step, and the host goes on (with CPU
//! partitions that do not need these outputs) while the GPU works, waiting only when a
//! result is read back. While a run is submitted, the next run's commands are recorded
//! beside it when its plan repeats (a steady decode), so that run only writes its data.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::attention::{AttentionNode, AttentionSet, Binding, RopeFusion};
use super::device::{padded, Gpu};
use super::fuse::{self, Unit};
use super::kv::KvPools;
use super::products::{self, PartBuffers};
use super::record::{self, record_node, record_softmax, Dispatch, Operand};
use super::timer::Timer;
use super::upload::{Sent, Upload};
use super::weights::GpuWeight;
use super::{GpuBuffer, GPU_SPACE};
use crate::backend::{
    plain_bytes, Backend, BackendError, CompiledPartition, DeviceBuffer, OpProfile, PartitionSpec,
    StepState, Tensor, TensorData, WeightProvider,
};
use crate::graph::{Graph, Op, RopeMode, ValueId};

/// One unit's work.
enum Work {
    /// Dispatches recorded at compile time.
    Fixed(Vec<Dispatch>),
    /// Attention node `i` of the partition's [`AttentionSet`].
    Attention(usize),
}

/// A partition output: where it is computed and the mappable buffer each run copies it
/// to, so reading it back takes no second submit.
struct Output {
    operand: Operand,
    bytes: usize,
    staging: wgpu::Buffer,
}

/// A partition compiled for the GPU.
pub(super) struct GpuPartition {
    gpu: Arc<Gpu>,
    inputs: Vec<Operand>,
    outputs: Vec<Output>,
    work: Vec<Work>,
    /// Dispatches per run by kind, for the device's counters.
    kinds: Vec<(&'static str, u64)>,
    attention: AttentionSet,
    pools: Arc<KvPools>,
    /// The step's host data, sent in one write (`upload.rs`).
    upload: Upload,
    /// Times each dispatch while the backend's profile is on (`timer.rs`).
    timer: Option<Timer>,
    /// The last run's plan.
    last: Option<Plan>,
    /// Commands for a next run of the last plan, recorded while the last run was
    /// submitted (none after a run whose plan changed, or a timed one).
    ahead: Option<wgpu::CommandBuffer>,
    bytes: usize,
}

/// Values a unit reads from memory and values it leaves there.
fn unit_io(
    graph: &Graph,
    unit: &Unit,
    quant_only: &HashSet<ValueId>,
) -> (Vec<ValueId>, Vec<ValueId>) {
    let inputs = |id: ValueId| graph.node(id).inputs.clone();
    match unit {
        Unit::Node(id) => (inputs(*id), vec![*id]),
        Unit::View { .. } => (Vec::new(), Vec::new()),
        Unit::Products { x, parts } => {
            let mut reads: Vec<ValueId> = Vec::new();
            if !quant_only.contains(x) {
                reads.push(*x);
            }
            for part in parts {
                reads.push(graph.node(part.matmul).inputs[1]);
                reads.extend(part.residual.map(|(_, other)| other));
            }
            (reads, parts.iter().map(|p| p.output()).collect())
        }
        Unit::NormQuant { node, .. } | Unit::SwiGluQuant { node, .. } => {
            (inputs(*node), Vec::new())
        }
        Unit::Attention {
            node,
            rope,
            quantize,
        } => {
            let (mut reads, mut writes) = match rope {
                None => (inputs(*node), Vec::new()),
                Some([q, k]) => {
                    let mut reads = inputs(*q);
                    reads.extend(inputs(*k));
                    reads.extend(graph.node(*node).inputs.get(2).copied());
                    (reads, vec![*q, *k])
                }
            };
            reads.sort();
            reads.dedup();
            if !quantize {
                writes.push(*node);
            }
            (reads, writes)
        }
    }
}

/// Slots by lifetime: each value a unit writes takes the smallest free slot that holds
/// it (or a new one), and its slot is freed after the last unit that reads it (through
/// views), unless it is kept (a partition output). Returns each value's slot and the
/// slots' sizes.
fn plan_slots(
    io: &[(Vec<ValueId>, Vec<ValueId>)],
    root: &dyn Fn(ValueId) -> ValueId,
    keep: &HashSet<ValueId>,
    bytes_of: &dyn Fn(ValueId) -> usize,
) -> (HashMap<ValueId, usize>, Vec<usize>) {
    let mut last_read: HashMap<ValueId, usize> = HashMap::new();
    for (i, (reads, _)) in io.iter().enumerate() {
        for &r in reads {
            last_read.insert(root(r), i);
        }
    }
    let mut slot_of: HashMap<ValueId, usize> = HashMap::new();
    let mut sizes: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for (i, (reads, writes)) in io.iter().enumerate() {
        for &w in writes {
            let need = bytes_of(w);
            let pick = if keep.contains(&w) {
                None
            } else {
                let fitting = free
                    .iter()
                    .enumerate()
                    .filter(|(_, &s)| sizes[s] >= need)
                    .min_by_key(|(_, &s)| sizes[s]);
                let at = fitting
                    .or_else(|| free.iter().enumerate().max_by_key(|(_, &s)| sizes[s]))
                    .map(|(at, _)| at);
                at.map(|at| free.swap_remove(at))
            };
            let slot = pick.unwrap_or_else(|| {
                sizes.push(0);
                sizes.len() - 1
            });
            sizes[slot] = sizes[slot].max(need);
            slot_of.insert(w, slot);
        }
        let mut dead: Vec<ValueId> = reads.iter().map(|&r| root(r)).collect();
        dead.extend(
            writes
                .iter()
                .copied()
                .filter(|w| !last_read.contains_key(w)),
        );
        dead.sort();
        dead.dedup();
        for v in dead {
            let done = last_read.get(&v).is_none_or(|&at| at == i);
            if done && !keep.contains(&v) {
                if let Some(&slot) = slot_of.get(&v) {
                    free.push(slot);
                }
            }
        }
    }
    (slot_of, sizes)
}

impl GpuPartition {
    /// Fuses the partition's nodes, allocates its buffers and records every unit.
    pub fn new(
        gpu: Arc<Gpu>,
        pools: Arc<KvPools>,
        profile: Option<Arc<OpProfile>>,
        backend: &dyn Backend,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<GpuPartition, BackendError> {
        let graph = spec.graph;
        for &id in spec.nodes {
            let node = spec.node(id)?;
            backend
                .capability()
                .supports(graph, id)
                .map_err(|why| BackendError::Unsupported {
                    node: id,
                    op: node.op.kind(),
                    why,
                })?;
        }
        let storage = gpu.limits.max_storage_buffers_per_shader_stage as usize;
        let limits = fuse::Limits {
            max_parts: products::MAX_PARTS
                .min(storage.saturating_sub(1) / 3)
                .max(1),
            rope_kv: storage >= 10,
        };
        let units = fuse::plan(spec, limits);
        let quant_only: HashSet<ValueId> = units
            .iter()
            .filter_map(|u| match u {
                Unit::NormQuant { node, .. } | Unit::SwiGluQuant { node, .. } => Some(*node),
                Unit::Attention {
                    node,
                    quantize: true,
                    ..
                } => Some(*node),
                _ => None,
            })
            .collect();
        let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
        for unit in &units {
            if let Unit::View { id, of } = unit {
                let of = alias.get(of).copied().unwrap_or(*of);
                alias.insert(*id, of);
            }
        }
        let root = |v: ValueId| alias.get(&v).copied().unwrap_or(v);
        let io: Vec<_> = units
            .iter()
            .map(|u| unit_io(graph, u, &quant_only))
            .collect();
        let keep: HashSet<ValueId> = spec.outputs.iter().map(|&o| root(o)).collect();
        let bytes_of = |v: ValueId| {
            let node = graph.node(v);
            plain_bytes(node.dtype, &node.shape).unwrap_or(0)
        };
        let (slot_of, sizes) = plan_slots(&io, &root, &keep, &bytes_of);

        let mut bytes = sizes.iter().sum::<usize>();
        let slots: Vec<wgpu::Buffer> = sizes.iter().map(|&b| gpu.storage("slot", b)).collect();
        let mut buffers: HashMap<ValueId, wgpu::Buffer> = slot_of
            .iter()
            .map(|(&v, &s)| (v, slots[s].clone()))
            .collect();
        let mut inputs = Vec::with_capacity(spec.inputs.len());
        for &id in spec.inputs {
            let size = bytes_of(id);
            bytes += size;
            let buffer = gpu.storage("input", size);
            buffers.insert(id, buffer.clone());
            inputs.push(Operand {
                buffer,
                dtype: graph.node(id).dtype,
                shape: graph.node(id).shape.clone(),
            });
        }
        let quants_size = units
            .iter()
            .filter_map(|u| match u {
                Unit::Products { x, parts } if fuse::quantized_weight(graph, parts[0].matmul) => {
                    Some(record::quants_bytes(&graph.node(*x).shape))
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        bytes += quants_size;
        let quants = gpu.storage("activation quants", quants_size);

        let mut recorder = Recorder {
            gpu: &gpu,
            graph,
            backend,
            weights,
            buffers,
            root: &root,
            quants: &quants,
            holds: None,
        };
        let mut work = Vec::with_capacity(units.len());
        let mut attention = Vec::new();
        for unit in &units {
            match unit {
                Unit::View { .. } => {}
                Unit::Attention {
                    node,
                    rope,
                    quantize,
                } => {
                    attention.push(recorder.attention(*node, *rope, *quantize)?);
                    work.push(Work::Attention(attention.len() - 1));
                }
                _ => work.push(Work::Fixed(recorder.record(unit)?)),
            }
        }
        let mut kinds: Vec<(&'static str, u64)> = Vec::new();
        let fixed = work.iter().flat_map(|w| match w {
            Work::Fixed(d) => d.as_slice(),
            Work::Attention(_) => &[],
        });
        let attention = AttentionSet::new(attention);
        for kind in fixed.map(|d| d.kind).chain(attention.kinds()) {
            match kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, total)) => *total += 1,
                None => kinds.push((kind, 1)),
            }
        }
        // The rows a run evaluates: its token inputs' length (one for a decode step).
        let rows = inputs
            .iter()
            .filter_map(|i| i.shape.dims().first().copied())
            .max()
            .unwrap_or(1);
        let timer = Timer::new(profile, rows);
        let mut outputs = Vec::with_capacity(spec.outputs.len());
        for &id in spec.outputs {
            let operand = recorder.operand(id)?;
            let size = plain_bytes(operand.dtype, &operand.shape)?;
            bytes += size;
            outputs.push(Output {
                staging: gpu.readback("output", size),
                bytes: size,
                operand,
            });
        }
        Ok(GpuPartition {
            gpu,
            inputs,
            outputs,
            work,
            kinds,
            attention,
            pools,
            upload: Upload::default(),
            timer,
            last: None,
            ahead: None,
            bytes,
        })
    }

    /// Checks `inputs` against what the partition takes.
    fn check_inputs(&self, inputs: &[&Tensor]) -> Result<(), BackendError> {
        if inputs.len() != self.inputs.len() {
            return Err(BackendError::Input(format!(
                "partition takes {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        for (i, (t, want)) in inputs.iter().zip(&self.inputs).enumerate() {
            if t.dtype != want.dtype || t.shape != want.shape {
                return Err(BackendError::Input(format!(
                    "input {i}: expected {} {}, got {} {}",
                    want.dtype, want.shape, t.dtype, t.shape
                )));
            }
        }
        Ok(())
    }
}

/// A unit whose node is not of the op its kind fuses: a bug in `fuse.rs`.
fn misfused(id: ValueId) -> BackendError {
    BackendError::Input(format!("node {id} was fused into a unit of another op"))
}

/// What recording needs while it walks the units.
struct Recorder<'a> {
    gpu: &'a Gpu,
    graph: &'a Graph,
    backend: &'a dyn Backend,
    weights: &'a dyn WeightProvider,
    /// Every value in memory so far: inputs, slots, resolved weights.
    buffers: HashMap<ValueId, wgpu::Buffer>,
    root: &'a dyn Fn(ValueId) -> ValueId,
    quants: &'a wgpu::Buffer,
    /// The value whose 8-bit activations `quants` holds at this point of the run.
    holds: Option<ValueId>,
}

impl Recorder<'_> {
    /// Value `id` as an operand: its own shape, the buffer of what it views.
    fn operand(&mut self, id: ValueId) -> Result<Operand, BackendError> {
        let node = self.graph.node(id);
        let root = (self.root)(id);
        let buffer = match self.buffers.get(&root) {
            Some(b) => b.clone(),
            None => match &self.graph.node(root).op {
                Op::Weight { name } => {
                    let w = resolve(self.backend, self.weights, name)?;
                    let want = self.graph.node(root);
                    if (w.dtype, &w.shape) != (want.dtype, &want.shape) {
                        return Err(BackendError::WeightMismatch {
                            name: name.clone(),
                            detail: format!(
                                "graph declares {} {}, store holds {} {}",
                                want.dtype, want.shape, w.dtype, w.shape
                            ),
                        });
                    }
                    self.buffers.insert(root, w.buffer.clone());
                    w.buffer.clone()
                }
                _ => {
                    return Err(BackendError::Input(format!(
                        "{id} is not an input, weight or earlier node of this partition"
                    )))
                }
            },
        };
        Ok(Operand {
            buffer,
            dtype: node.dtype,
            shape: node.shape.clone(),
        })
    }

    fn operands(&mut self, id: ValueId) -> Result<Vec<Operand>, BackendError> {
        let inputs = self.graph.node(id).inputs.clone();
        inputs.into_iter().map(|i| self.operand(i)).collect()
    }

    /// The dispatches of every unit but views and attention.
    fn record(&mut self, unit: &Unit) -> Result<Vec<Dispatch>, BackendError> {
        let graph = self.graph;
        Ok(match unit {
            Unit::Node(id) => {
                let node = graph.node(*id);
                let ops = self.operands(*id)?;
                let out = self.operand(*id)?.buffer;
                match node.op {
                    Op::Softmax => record_softmax(self.gpu, &ops[0], &out)?,
                    _ => record_node(self.gpu, *id, node, &ops, &out)?,
                }
            }
            Unit::NormQuant { node, group } => {
                let ops = self.operands(*node)?;
                let Op::RmsNorm { eps } = graph.node(*node).op else {
                    return Err(misfused(*node));
                };
                self.holds = Some(*node);
                vec![record::record_norm_q8(
                    self.gpu,
                    &ops[0],
                    &ops[1].buffer,
                    eps,
                    self.quants,
                    *group,
                )?]
            }
            Unit::SwiGluQuant { node, group } => {
                let ops = self.operands(*node)?;
                self.holds = Some(*node);
                vec![record::record_swiglu_q8(
                    self.gpu,
                    &ops[0],
                    &ops[1].buffer,
                    self.quants,
                    *group,
                )?]
            }
            Unit::Products { x, parts } => {
                let mut weights = Vec::with_capacity(parts.len());
                let mut outs = Vec::with_capacity(parts.len());
                let mut residuals = Vec::with_capacity(parts.len());
                for part in parts {
                    weights.push(self.operand(graph.node(part.matmul).inputs[1])?);
                    outs.push(self.operand(part.output())?.buffer);
                    residuals.push(match part.residual {
                        Some((_, other)) => Some(self.operand(other)?.buffer),
                        None => None,
                    });
                }
                let dtype = weights[0].dtype;
                let k = weights[0].shape.last();
                let m = graph.node(*x).shape.numel() / k.max(1);
                let mut dispatches = Vec::with_capacity(2);
                let input = if dtype.is_quantized() {
                    if k % 32 != 0 {
                        return Err(BackendError::Input(format!(
                            "{} rows of {k} are not whole blocks",
                            dtype
                        )));
                    }
                    if self.holds != Some(*x) {
                        let xs = self.operand(*x)?;
                        dispatches.push(record::record_quantize(
                            self.gpu,
                            &xs.buffer,
                            m * k,
                            self.quants,
                            fuse::scale_group(dtype),
                        )?);
                        self.holds = Some(*x);
                    }
                    self.quants.clone()
                } else {
                    self.operand(*x)?.buffer
                };
                let buffers: Vec<PartBuffers<'_>> = weights
                    .iter()
                    .zip(&outs)
                    .zip(&residuals)
                    .map(|((w, out), residual)| PartBuffers {
                        weight: &w.buffer,
                        rows: w.shape.dims()[0],
                        out,
                        residual: residual.as_ref(),
                    })
                    .collect();
                dispatches.push(products::record(self.gpu, dtype, &input, m, k, &buffers)?);
                dispatches
            }
            Unit::View { .. } | Unit::Attention { .. } => Vec::new(),
        })
    }

    /// Attention `id`, with the `rope` nodes fused into its KV write, writing quantized
    /// activations when `quantize`.
    fn attention(
        &mut self,
        id: ValueId,
        rope: Option<[ValueId; 2]>,
        quantize: bool,
    ) -> Result<AttentionNode, BackendError> {
        let node = self.graph.node(id);
        let Op::Attention {
            layer,
            n_heads,
            n_kv_heads,
            head_dim,
            scale,
            window,
            softcap,
        } = node.op
        else {
            return Err(misfused(id));
        };
        let ops = self.operands(id)?;
        let [q, k, v] = [0, 1, 2].map(|i| ops.get(i).map(|o| o.buffer.clone()));
        let (Some(q), Some(k), Some(v)) = (q, k, v) else {
            return Err(BackendError::Input(format!(
                "attention {id} lacks operands"
            )));
        };
        let rope = match rope {
            None => None,
            Some([rq, rk]) => {
                let Op::Rope {
                    mode,
                    n_rot,
                    freq_base,
                    freq_scale,
                } = self.graph.node(rq).op
                else {
                    return Err(misfused(rq));
                };
                let q_ops = self.operands(rq)?;
                let k_in = self.operand(self.graph.node(rk).inputs[0])?.buffer;
                Some(RopeFusion {
                    q_in: q_ops[0].buffer.clone(),
                    k_in,
                    positions: q_ops[1].buffer.clone(),
                    n_rot,
                    neox: mode == RopeMode::Neox,
                    freq_base,
                    freq_scale,
                })
            }
        };
        Ok(AttentionNode {
            layer: layer as usize,
            n: node.shape.dims()[0],
            heads: n_heads as usize,
            kv_heads: n_kv_heads as usize,
            head_dim: head_dim as usize,
            scale,
            window: window.unwrap_or(0),
            softcap: softcap.unwrap_or(0.0),
            q,
            k,
            v,
            out: if quantize {
                self.holds = Some(id);
                self.quants.clone()
            } else {
                self.operand(id)?.buffer
            },
            quantized_out: quantize,
            rope,
        })
    }
}

impl CompiledPartition for GpuPartition {
    fn run(
        &mut self,
        inputs: &[&Tensor],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, BackendError> {
        let started = Instant::now();
        self.check_inputs(inputs)?;
        self.attention
            .prepare(&self.gpu, &self.pools, state, &mut self.upload)?;
        let mut copied = Vec::new();
        for (i, (tensor, input)) in inputs.iter().zip(&self.inputs).enumerate() {
            match &tensor.data {
                TensorData::Host(bytes) => self.upload.push(&input.buffer, bytes.as_bytes()),
                TensorData::Device(d) if tensor.space == GPU_SPACE => {
                    let source = d.handle.downcast_ref::<GpuBuffer>().ok_or_else(|| {
                        BackendError::Input(format!("input {i} is not a GPU buffer"))
                    })?;
                    copied.push((source.buffer.clone(), i, padded(tensor.data.len())));
                }
                TensorData::Device(_) => {
                    return Err(BackendError::Input(format!(
                        "input {i} is in space {:?}, not the host's or the GPU's",
                        tensor.space
                    )))
                }
            }
        }
        let plan = Plan {
            sent: self.upload.send(&self.gpu)?,
            copied,
            attention: self.attention.binding(),
        };
        let dispatches = self.kinds.iter().map(|(_, n)| *n as usize).sum();
        let timed = self
            .timer
            .as_mut()
            .is_some_and(|t| t.start(&self.gpu, dispatches));
        let repeats = self.last.as_ref() == Some(&plan);
        let ahead = self.ahead.take().filter(|_| repeats && !timed);
        let used_ahead = ahead.is_some();
        let parts = Parts {
            gpu: &self.gpu,
            inputs: &self.inputs,
            work: &self.work,
            attention: &self.attention,
            outputs: &self.outputs,
        };
        let commands = match ahead {
            Some(commands) => commands,
            None => parts.encode(&plan, self.timer.as_mut().filter(|_| timed)),
        };
        let recorded = started.elapsed();
        // While the queue takes this run (a software adapter runs its shaders inside
        // the submit), a worker records the next run's commands for the same plan, so
        // a steady decode's next step finds them ready (decision 198).
        let (submitted, ahead) = std::thread::scope(|s| {
            let worker = (repeats && !timed).then(|| {
                s.spawn(|| {
                    let began = Instant::now();
                    (parts.encode(&plan, None), began.elapsed())
                })
            });
            let began = Instant::now();
            self.gpu.submit_finished(commands);
            let submitted = began.elapsed();
            (submitted, worker.map(|w| w.join()))
        });
        let ahead_nanos = match ahead {
            None => 0,
            Some(Ok((commands, took))) => {
                self.ahead = Some(commands);
                nanos(took)
            }
            Some(Err(_)) => {
                return Err(BackendError::Bug(
                    "recording the next run's commands panicked".into(),
                ))
            }
        };
        self.last = Some(plan);
        self.upload.remap();
        let gpu = &self.gpu;
        gpu.take_uncaptured()?;
        if let Some(timer) = self.timer.as_ref().filter(|_| timed) {
            timer.record(gpu)?;
        }
        gpu.tally
            .run(&self.kinds, nanos(recorded), nanos(submitted));
        gpu.tally.ahead(used_ahead, ahead_nanos);
        Ok(self
            .outputs
            .iter()
            .map(|out| Tensor {
                dtype: out.operand.dtype,
                shape: out.operand.shape.clone(),
                space: GPU_SPACE,
                data: TensorData::Device(DeviceBuffer {
                    bytes: out.bytes,
                    handle: Arc::new(GpuBuffer {
                        buffer: out.operand.buffer.clone(),
                        staged: Some(out.staging.clone()),
                    }),
                }),
            })
            .collect())
    }

    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Nanoseconds of `d`, saturating.
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a run's commands depend on besides the partition's own dispatches: where the
/// host's bytes go, which device buffers are copied in, and what attention is bound
/// to. Runs with the same plan record the same commands whatever their data, so the
/// next run's can be recorded before its inputs exist.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    sent: Sent,
    /// Device inputs: the buffer each comes from, its input, and its padded bytes.
    copied: Vec<(wgpu::Buffer, usize, u64)>,
    attention: Option<Binding>,
}

/// The parts of a partition that recording a run reads, borrowed apart from the rest so
/// a worker can record while the partition submits.
struct Parts<'a> {
    gpu: &'a Gpu,
    inputs: &'a [Operand],
    work: &'a [Work],
    attention: &'a AttentionSet,
    outputs: &'a [Output],
}

impl Parts<'_> {
    /// A run's commands for `plan`: the inputs copied in, every dispatch in one compute
    /// pass (each timed after it when `timer` is given), and the outputs copied to
    /// their mappable buffers.
    fn encode(&self, plan: &Plan, mut timer: Option<&mut Timer>) -> wgpu::CommandBuffer {
        let mut encoder = self.gpu.device.create_command_encoder(&Default::default());
        for (source, i, bytes) in &plan.copied {
            encoder.copy_buffer_to_buffer(source, 0, &self.inputs[*i].buffer, 0, *bytes);
        }
        plan.sent.encode(&mut encoder);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            if let Some(timer) = timer.as_deref() {
                timer.begin(&mut pass);
            }
            for work in self.work {
                let dispatches = match work {
                    Work::Fixed(dispatches) => dispatches.as_slice(),
                    Work::Attention(i) => self.attention.dispatches(*i),
                };
                for d in dispatches {
                    d.encode(&mut pass);
                    if let Some(timer) = timer.as_deref_mut() {
                        timer.after(&mut pass, d.kind);
                    }
                }
            }
        }
        if let Some(timer) = timer {
            timer.resolve(&mut encoder);
        }
        for out in self.outputs {
            encoder.copy_buffer_to_buffer(
                &out.operand.buffer,
                0,
                &out.staging,
                0,
                padded(out.bytes),
            );
        }
        encoder.finish()
    }
}

/// Makes weight `name` resident on the GPU through the store.
fn resolve(
    backend: &dyn Backend,
    weights: &dyn WeightProvider,
    name: &str,
) -> Result<Arc<GpuWeight>, BackendError> {
    let resident = weights.resident(name, backend)?;
    if resident.space != GPU_SPACE {
        return Err(BackendError::WeightMismatch {
            name: name.into(),
            detail: format!("resident in space {:?}, not the GPU's", resident.space),
        });
    }
    resident
        .handle
        .downcast::<GpuWeight>()
        .map_err(|_| BackendError::WeightMismatch {
            name: name.into(),
            detail: "resident handle is not a GPU weight".into(),
        })
}
