//! A compiled GPU partition: buffers for its inputs and for every slot of the buffer
//! plan, weights resolved to resident GPU buffers, and each node recorded as
//! dispatches. A run prepares attention's KV blocks and row tables, copies the inputs
//! in, replays the dispatches in one compute pass, copies the outputs to fresh
//! buffers and submits without waiting: the host goes on (with CPU partitions that do
//! not need these outputs) while the GPU works, and waits only when a result is read
//! back.

use std::collections::HashMap;
use std::sync::Arc;

use super::attention::{AttentionNode, AttentionSet};
use super::device::{padded, Gpu, STORAGE};
use super::kernels;
use super::kv::KvPools;
use super::record::{quants_bytes, record_node, record_softmax, Dispatch, Operand};
use super::weights::GpuWeight;
use super::{GpuBuffer, GPU_SPACE};
use crate::backend::{
    plain_bytes, Backend, BackendError, CompiledPartition, DeviceBuffer, PartitionSpec, StepState,
    Tensor, TensorData, WeightProvider,
};
use crate::graph::{Op, ValueId};

/// One node's work.
enum Work {
    /// Dispatches recorded at compile time.
    Fixed(Vec<Dispatch>),
    /// Attention node `i` of the partition's [`AttentionSet`].
    Attention(usize),
}

/// A partition compiled for the GPU.
pub(super) struct GpuPartition {
    gpu: Arc<Gpu>,
    inputs: Vec<Operand>,
    outputs: Vec<Operand>,
    work: Vec<Work>,
    attention: AttentionSet,
    pools: Arc<KvPools>,
    bytes: usize,
}

impl GpuPartition {
    /// Allocates the partition's buffers and records every node.
    pub fn new(
        gpu: Arc<Gpu>,
        pools: Arc<KvPools>,
        backend: &dyn Backend,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<GpuPartition, BackendError> {
        let graph = spec.graph;
        let node_of = |id: ValueId| spec.node(id);
        let operand = |buffer: wgpu::Buffer, id: ValueId| -> Result<Operand, BackendError> {
            let node = node_of(id)?;
            Ok(Operand {
                buffer,
                dtype: node.dtype,
                shape: node.shape.clone(),
            })
        };
        let mut known: HashMap<ValueId, Operand> = HashMap::new();
        let mut inputs = Vec::with_capacity(spec.inputs.len());
        let mut bytes = 0;
        for &id in spec.inputs {
            let node = node_of(id)?;
            let size = plain_bytes(node.dtype, &node.shape)?;
            bytes += size;
            let input = operand(gpu.storage("input", size), id)?;
            known.insert(id, input.clone());
            inputs.push(input);
        }
        let slots: Vec<wgpu::Buffer> = spec
            .buffers
            .slot_bytes()
            .iter()
            .map(|&b| gpu.storage("slot", b))
            .collect();
        bytes += spec.buffers.slot_bytes().iter().sum::<usize>();
        let mut quants_size = kernels::QUANTIZED_BLOCK_BYTES;
        for &id in spec.nodes {
            let node = node_of(id)?;
            if let (Op::MatMul, [x, w]) = (&node.op, node.inputs.as_slice()) {
                quants_size =
                    quants_size.max(quants_bytes(node_of(*w)?.dtype, &node_of(*x)?.shape));
            }
        }
        bytes += quants_size;
        let quants = gpu.storage("activation quants", quants_size);
        let mut work = Vec::with_capacity(spec.nodes.len());
        let mut attention = Vec::new();
        for &id in spec.nodes {
            let node = node_of(id)?;
            backend
                .capability()
                .supports(graph, id)
                .map_err(|why| BackendError::Unsupported {
                    node: id,
                    op: node.op.kind(),
                    why,
                })?;
            let out = spec
                .buffers
                .slot(id)
                .and_then(|s| slots.get(s))
                .ok_or_else(|| BackendError::Device(format!("buffer plan has no slot for {id}")))?
                .clone();
            let mut ops = Vec::with_capacity(node.inputs.len());
            for &input in &node.inputs {
                let op = match known.get(&input) {
                    Some(op) => op.clone(),
                    None => match &node_of(input)?.op {
                        Op::Weight { name } => {
                            let w = resolve(backend, weights, name)?;
                            let op = operand(w.buffer.clone(), input)?;
                            if (w.dtype, &w.shape) != (op.dtype, &op.shape) {
                                return Err(BackendError::WeightMismatch {
                                    name: name.clone(),
                                    detail: format!(
                                        "graph declares {} {}, store holds {} {}",
                                        op.dtype, op.shape, w.dtype, w.shape
                                    ),
                                });
                            }
                            known.insert(input, op.clone());
                            op
                        }
                        _ => {
                            return Err(BackendError::Input(format!(
                                "{id} reads {input}, which is not an input, weight or earlier node of this partition"
                            )))
                        }
                    },
                };
                ops.push(op);
            }
            work.push(match &node.op {
                Op::Attention {
                    layer,
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    scale,
                    window,
                    softcap,
                } => {
                    let [q, k, v] = [0, 1, 2].map(|i| ops.get(i).map(|o| o.buffer.clone()));
                    let (Some(q), Some(k), Some(v)) = (q, k, v) else {
                        return Err(BackendError::Input(format!(
                            "attention {id} lacks operands"
                        )));
                    };
                    attention.push(AttentionNode {
                        layer: *layer as usize,
                        n: node.shape.dims()[0],
                        heads: *n_heads as usize,
                        kv_heads: *n_kv_heads as usize,
                        head_dim: *head_dim as usize,
                        scale: *scale,
                        window: window.unwrap_or(0),
                        softcap: softcap.unwrap_or(0.0),
                        q,
                        k,
                        v,
                        out: out.clone(),
                    });
                    Work::Attention(attention.len() - 1)
                }
                Op::Softmax => Work::Fixed(record_softmax(&gpu, &ops[0], &out)?),
                _ => Work::Fixed(record_node(&gpu, id, node, &ops, &out, &quants)?),
            });
            known.insert(id, operand(out, id)?);
        }
        let outputs = spec
            .outputs
            .iter()
            .map(|id| {
                known.get(id).cloned().ok_or_else(|| {
                    BackendError::Input(format!(
                        "output {id} is neither computed nor received by this partition"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(GpuPartition {
            gpu,
            inputs,
            outputs,
            work,
            attention: AttentionSet::new(attention),
            pools,
            bytes,
        })
    }

    fn check_inputs<'t>(
        &self,
        inputs: &[&'t Tensor],
    ) -> Result<Vec<&'t wgpu::Buffer>, BackendError> {
        if inputs.len() != self.inputs.len() {
            return Err(BackendError::Input(format!(
                "partition takes {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        inputs
            .iter()
            .zip(&self.inputs)
            .enumerate()
            .map(|(i, (t, want))| match &t.data {
                TensorData::Device(d)
                    if t.space == GPU_SPACE && t.dtype == want.dtype && t.shape == want.shape =>
                {
                    d.handle
                        .downcast_ref::<GpuBuffer>()
                        .map(|b| &b.0)
                        .ok_or_else(|| {
                            BackendError::Input(format!("input {i} is not a GPU buffer"))
                        })
                }
                _ => Err(BackendError::Input(format!(
                    "input {i}: expected GPU {} {}, got {} {} in space {:?}",
                    want.dtype, want.shape, t.dtype, t.shape, t.space
                ))),
            })
            .collect()
    }
}

impl CompiledPartition for GpuPartition {
    fn run(
        &mut self,
        inputs: &[&Tensor],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, BackendError> {
        let sources = self.check_inputs(inputs)?;
        let visible = self.attention.prepare(&self.gpu, &self.pools, state)?;
        let gpu = &self.gpu;
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        for ((source, input), tensor) in sources.iter().zip(&self.inputs).zip(inputs) {
            encoder.copy_buffer_to_buffer(source, 0, &input.buffer, 0, padded(tensor.data.len()));
        }
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for work in &self.work {
                match work {
                    Work::Fixed(dispatches) => {
                        for d in dispatches {
                            pass.set_pipeline(&d.pipeline);
                            pass.set_bind_group(0, &d.bind_group, &[]);
                            let [x, y, z] = d.groups;
                            pass.dispatch_workgroups(x, y, z);
                        }
                    }
                    Work::Attention(i) => self.attention.encode(*i, visible, &mut pass),
                }
            }
        }
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for out in &self.outputs {
            let bytes = plain_bytes(out.dtype, &out.shape)?;
            let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("output"),
                size: padded(bytes),
                usage: STORAGE,
                mapped_at_creation: false,
            });
            encoder.copy_buffer_to_buffer(&out.buffer, 0, &buffer, 0, padded(bytes));
            outputs.push(Tensor {
                dtype: out.dtype,
                shape: out.shape.clone(),
                space: GPU_SPACE,
                data: TensorData::Device(DeviceBuffer {
                    bytes,
                    handle: Arc::new(GpuBuffer(buffer)),
                }),
            });
        }
        gpu.queue.submit([encoder.finish()]);
        gpu.take_uncaptured()?;
        Ok(outputs)
    }

    fn bytes(&self) -> usize {
        self.bytes
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
