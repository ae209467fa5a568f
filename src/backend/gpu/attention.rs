//! Attention on the GPU over the paged KV pool, for one sequence or a batch of them:
//! write the step's keys and values into each sequence's blocks, score every visible
//! position, a softmax over each query row's visible scores, and the weighted sum of
//! values. Which sequence a row belongs to is runtime state: each step writes a row
//! table (`(position + 1, table base)` per row, zero for padding) and the sequences'
//! block tables, so the dispatches, bound to the pool's buffers, are recorded once per
//! pool generation and serve any batch.

use std::sync::Arc;

use super::device::Gpu;
use super::kernels::{self, Source};
use super::kv::{GpuKv, KvPool, KvPools, BLOCK};
use super::record::{dispatch, fold, word, Dispatch};
use super::GPU_SPACE;
use crate::backend::{BackendError, KvDType, KvLayout, StepState};

/// One attention node: its attributes and the buffers of its operands.
pub(super) struct AttentionNode {
    pub layer: usize,
    pub n: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// Positions each query sees, itself included; 0 for all earlier ones.
    pub window: u32,
    /// Score soft-capping; 0 for none.
    pub softcap: f32,
    pub q: wgpu::Buffer,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub out: wgpu::Buffer,
}

/// The per-step buffers every attention node of a partition reads.
struct StepBuffers {
    /// Per row: `vec2<u32>(position + 1, table base)`.
    rows: wgpu::Buffer,
    /// The segments' block tables, one after another.
    tables: wgpu::Buffer,
    /// Score scratch, `[n, heads, capacity]` f32, shared (the nodes run in turn).
    scores: wgpu::Buffer,
}

/// What the recorded dispatches are bound to: pool buffers, capacity, f16 rounding.
type Binding = ((u64, u64), usize, bool);

impl AttentionNode {
    /// The four dispatches of this node against its layer's pool buffers.
    fn record(
        &self,
        gpu: &Gpu,
        pool_layer: &(wgpu::Buffer, wgpu::Buffer),
        layout: KvLayout,
        step: &StepBuffers,
    ) -> Result<[Dispatch; 4], BackendError> {
        if layout.n_kv_heads != self.kv_heads || layout.head_dim != self.head_dim {
            return Err(BackendError::KvCache(format!(
                "cache has {} kv heads of dim {}, layer {} needs {} of dim {}",
                layout.n_kv_heads, layout.head_dim, self.layer, self.kv_heads, self.head_dim
            )));
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return Err(BackendError::Input(format!(
                "attention: {} heads do not group over {} kv heads",
                self.heads, self.kv_heads
            )));
        }
        let (keys, values) = pool_layer;
        let source = |name: &str, wgsl: &str| Source {
            name: name.into(),
            wgsl: wgsl.into(),
        };
        let width = self.kv_heads * self.head_dim;
        let (heads, n) = (word("heads", self.heads)?, word("tokens", self.n)?);
        let (kv_heads, dh) = (
            word("kv heads", self.kv_heads)?,
            word("head dim", self.head_dim)?,
        );
        let cap = word("capacity", layout.capacity)?;
        let len = word("kv elements", self.n * width)?;
        let (gx, gy) = fold(gpu, len.div_ceil(256));
        let (rows, tables) = (&step.rows, &step.tables);
        let write = dispatch(
            gpu,
            &source("kv_write", kernels::KV_WRITE),
            &[
                len,
                gx,
                word("kv width", width)?,
                u32::from(layout.dtype == KvDType::F16),
            ],
            &[rows, tables, &self.k, &self.v, keys, values],
            [gx, gy, 1],
        )?;
        let score = dispatch(
            gpu,
            &source("attn_scores", kernels::ATTN_SCORES),
            &[
                heads,
                kv_heads,
                dh,
                cap,
                self.scale.to_bits(),
                self.window,
                self.softcap.to_bits(),
            ],
            &[rows, tables, &self.q, keys, &step.scores],
            [cap.div_ceil(64), heads, n],
        )?;
        let softmax = dispatch(
            gpu,
            &source("attn_softmax", kernels::ATTN_SOFTMAX),
            &[cap, heads],
            &[rows, &step.scores],
            [heads, n, 1],
        )?;
        let mix = dispatch(
            gpu,
            &source("attn_values", kernels::ATTN_VALUES),
            &[heads, kv_heads, dh, cap],
            &[rows, tables, &step.scores, values, &self.out],
            [dh.div_ceil(64), heads, n],
        )?;
        Ok([write, score, softmax, mix])
    }
}

/// The attention nodes of a partition and what their dispatches are bound to.
pub(super) struct AttentionSet {
    nodes: Vec<AttentionNode>,
    /// Per node, its dispatches for `bound`.
    recorded: Vec<[Dispatch; 4]>,
    bound: Option<Binding>,
    step: Option<StepBuffers>,
}

/// The dispatch of a node's four that scores positions; its grid follows the step.
const SCORES: usize = 1;

impl AttentionSet {
    /// The set of `nodes`, bound to nothing until the first step.
    pub fn new(nodes: Vec<AttentionNode>) -> AttentionSet {
        AttentionSet {
            nodes,
            recorded: Vec::new(),
            bound: None,
            step: None,
        }
    }

    /// Gets every segment's GPU cache ready for this step (blocks for its new
    /// positions; its host rows uploaded where the host held the newest), writes the row
    /// and block tables, and binds the dispatches to the pool. Returns the positions the
    /// most-seeing row sees, for [`AttentionSet::encode`].
    pub fn prepare(
        &mut self,
        gpu: &Arc<Gpu>,
        pools: &KvPools,
        state: &mut StepState<'_>,
    ) -> Result<u32, BackendError> {
        let Some(n) = self.nodes.iter().map(|a| a.n).max() else {
            return Ok(0);
        };
        let segments = state.segments_mut();
        let layout = match segments.first() {
            Some(s) => s.kv.layout(),
            None => return Err(BackendError::KvCache("attention needs a KV cache".into())),
        };
        let pool = pools.get(gpu, layout);
        let mut rows = vec![[0u32; 2]; n];
        let mut tables: Vec<u32> = Vec::new();
        let mut visible = 0;
        for segment in segments {
            let span = segment.rows_within(n)?;
            let (kv_len, cache) = (segment.kv_len, &mut *segment.kv);
            if cache.layout() != layout {
                return Err(BackendError::KvCache(
                    "the sequences of a step have caches of different shapes".into(),
                ));
            }
            let end = kv_len + span.len();
            if end > layout.capacity {
                return Err(BackendError::KvCache(format!(
                    "{kv_len} cached + {} new positions exceed capacity {}",
                    span.len(),
                    layout.capacity
                )));
            }
            let mut table = None;
            for node in &self.nodes {
                let make = |layout| Ok(Box::new(GpuKv::new(pool.clone(), layout)) as _);
                let (device, host) = cache.device_layer(GPU_SPACE, node.layer, make)?;
                let kv = device
                    .as_any()
                    .downcast_ref::<GpuKv>()
                    .filter(|kv| Arc::ptr_eq(kv.pool(), &pool))
                    .ok_or_else(|| {
                        BackendError::KvCache("the GPU space holds a foreign cache".into())
                    })?;
                // Every layer shares the sequence's blocks: take them once.
                if table.is_none() {
                    kv.reserve(end)?;
                    table = Some(kv.table());
                }
                if let Some((keys, values)) = host {
                    kv.upload(node.layer, kv_len, keys, values)?;
                }
            }
            let base = word("block table entries", tables.len())?;
            tables.extend(table.unwrap_or_default());
            for (i, row) in span.enumerate() {
                rows[row] = [word("position", kv_len + i + 1)?, base];
            }
            visible = visible.max(end);
        }
        self.bind(gpu, &pool, layout, n)?;
        let step = self.step.as_ref().expect("bound above");
        let table_bytes = tables.len() * 4;
        if table_bytes as u64 > step.tables.size() {
            return Err(BackendError::KvCache(format!(
                "the step's block tables need {table_bytes} bytes, more than the {} reserved",
                step.tables.size()
            )));
        }
        gpu.queue
            .write_buffer(&step.rows, 0, bytemuck::cast_slice(&rows));
        if !tables.is_empty() {
            gpu.queue
                .write_buffer(&step.tables, 0, bytemuck::cast_slice(&tables));
        }
        word("visible positions", visible)
    }

    /// Records every node against `pool` unless already bound to it.
    fn bind(
        &mut self,
        gpu: &Arc<Gpu>,
        pool: &KvPool,
        layout: KvLayout,
        n: usize,
    ) -> Result<(), BackendError> {
        let binding = (pool.key(), layout.capacity, layout.dtype == KvDType::F16);
        if self.bound == Some(binding) {
            return Ok(());
        }
        let pool = pool.buffers();
        let widest = self.nodes.iter().map(|a| a.n * a.heads).max().unwrap_or(0);
        let bytes = widest * layout.capacity * 4;
        if bytes as u64 > gpu.limits.max_storage_buffer_binding_size {
            return Err(BackendError::KvCache(format!(
                "attention scores for {} positions need {bytes} bytes, over the adapter's buffer limit; use a smaller --ctx",
                layout.capacity
            )));
        }
        // Every row may be its own sequence, each with a full table.
        let entries = n * layout.capacity.div_ceil(BLOCK);
        let step = StepBuffers {
            rows: gpu.storage("attention rows", n * 8),
            tables: gpu.storage("attention block tables", entries * 4),
            scores: gpu.storage("attention scores", bytes),
        };
        self.recorded = self
            .nodes
            .iter()
            .map(|a| {
                let layer = pool.get(a.layer).ok_or_else(|| {
                    BackendError::KvCache(format!("the cache has no layer {}", a.layer))
                })?;
                a.record(gpu, layer, layout, &step)
            })
            .collect::<Result<_, _>>()?;
        self.step = Some(step);
        self.bound = Some(binding);
        Ok(())
    }

    /// Adds node `i`'s dispatches for the prepared step to `pass`; the scores cover only
    /// the `visible` positions [`AttentionSet::prepare`] returned.
    pub fn encode(&self, i: usize, visible: u32, pass: &mut wgpu::ComputePass<'_>) {
        for (k, d) in self.recorded[i].iter().enumerate() {
            let [mut x, y, z] = d.groups;
            if k == SCORES {
                x = visible.div_ceil(64).max(1);
            }
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &d.bind_group, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
    }
}
