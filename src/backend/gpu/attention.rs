//! Attention on the GPU over the paged KV pool, for one sequence or a batch of them, in
//! two dispatches: write the step's keys and values into each sequence's blocks (with
//! the rotary embedding of queries and keys, when fusion put the rope nodes here), then
//! one kernel that scores, softmaxes and mixes the values of every visible position
//! with an online softmax. Which sequence a row belongs to is runtime state: each step
//! writes a row table (`(position + 1, table base)` per row, zero for padding) and the
//! sequences' block tables, so the dispatches, bound to the pool's buffers, are recorded
//! once per pool generation and serve any batch.

use std::sync::Arc;

use super::device::Gpu;
use super::kernels;
use super::kv::{GpuKv, KvPool, KvPools, BLOCK};
use super::record::{dispatch, fold, word, Dispatch};
use super::upload::Upload;
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
    /// Whether `out` holds quantized activations (blocks of 32) instead of f32 rows.
    pub quantized_out: bool,
    /// The rope of `q` and `k` run in the KV write: `q` and `k` are then the roped
    /// outputs it writes, computed from these inputs.
    pub rope: Option<RopeFusion>,
}

/// The query and key ropes fused into an attention node's KV write.
pub(super) struct RopeFusion {
    /// Queries before rotation, `[n, heads, head_dim]`.
    pub q_in: wgpu::Buffer,
    /// Keys before rotation, `[n, kv_heads, head_dim]`.
    pub k_in: wgpu::Buffer,
    /// Each row's position (i32).
    pub positions: wgpu::Buffer,
    /// Rotated dimensions per head.
    pub n_rot: u32,
    /// NeoX pairing (`i` with `i + n_rot / 2`) instead of adjacent pairs.
    pub neox: bool,
    /// Base of the rotation frequencies.
    pub freq_base: f32,
    /// Position scale.
    pub freq_scale: f32,
}

/// The per-step buffers every attention node of a partition reads.
struct StepBuffers {
    /// Per row: `vec2<u32>(position + 1, table base)`.
    rows: wgpu::Buffer,
    /// The segments' block tables, one after another.
    tables: wgpu::Buffer,
}

/// What the recorded dispatches are bound to: pool buffers, capacity, f16 rounding.
pub(super) type Binding = ((u64, u64), usize, bool);

impl AttentionNode {
    /// The two dispatches of this node against its layer's pool buffers: the KV write
    /// (with the ropes, when fused) and attention.
    fn record(
        &self,
        gpu: &Gpu,
        pool_layer: &(wgpu::Buffer, wgpu::Buffer),
        layout: KvLayout,
        step: &StepBuffers,
    ) -> Result<[Dispatch; 2], BackendError> {
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
        if self.head_dim > MAX_HEAD_DIM {
            return Err(BackendError::Input(format!(
                "attention: the GPU kernel takes heads of at most {MAX_HEAD_DIM} dimensions, not {}",
                self.head_dim
            )));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(BackendError::Input(format!(
                "attention: the GPU kernels take heads of an even number of dimensions, not {}",
                self.head_dim
            )));
        }
        let (keys, values) = pool_layer;
        let width = self.kv_heads * self.head_dim;
        let (heads, n) = (word("heads", self.heads)?, word("tokens", self.n)?);
        let (kv_heads, dh) = (
            word("kv heads", self.kv_heads)?,
            word("head dim", self.head_dim)?,
        );
        let f16 = layout.dtype == KvDType::F16;
        let pairs = word("kv element pairs", self.n * width / 2)?;
        let (rows, tables) = (&step.rows, &step.tables);
        let write = match &self.rope {
            None => {
                let (gx, gy) = fold(gpu, pairs.div_ceil(256));
                dispatch(
                    gpu,
                    &kernels::kv_write(f16),
                    &[pairs, gx, word("kv width", width)?],
                    &[rows, tables, &self.k, &self.v, keys, values],
                    [gx, gy, 1],
                )?
            }
            Some(rope) => {
                let q_len = word("query elements", self.n * self.heads * self.head_dim)?;
                let (gx, gy) = fold(gpu, (q_len + pairs).div_ceil(256));
                dispatch(
                    gpu,
                    &kernels::rope_kv(f16),
                    &[
                        q_len,
                        pairs,
                        gx,
                        dh,
                        word("query width", self.heads * self.head_dim)?,
                        word("kv width", width)?,
                        rope.n_rot,
                        u32::from(rope.neox),
                        rope.freq_base.to_bits(),
                        rope.freq_scale.to_bits(),
                    ],
                    &[
                        rows,
                        tables,
                        &rope.positions,
                        &rope.q_in,
                        &rope.k_in,
                        &self.v,
                        &self.q,
                        &self.k,
                        keys,
                        values,
                    ],
                    [gx, gy, 1],
                )?
            }
        };
        let attend = dispatch(
            gpu,
            &kernels::attend(self.quantized_out, f16),
            &[
                heads,
                kv_heads,
                dh,
                self.scale.to_bits(),
                self.window,
                self.softcap.to_bits(),
            ],
            &[rows, tables, &self.q, keys, values, &self.out],
            [heads, n, 1],
        )?;
        Ok([write, attend])
    }
}

/// The attention nodes of a partition and what their dispatches are bound to.
pub(super) struct AttentionSet {
    nodes: Vec<AttentionNode>,
    /// Per node, its dispatches for `bound`.
    recorded: Vec<[Dispatch; 2]>,
    bound: Option<Binding>,
    step: Option<StepBuffers>,
}

/// Most dimensions per head the attention kernel takes (four per thread of 64).
const MAX_HEAD_DIM: usize = 256;

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
    /// positions; its host rows uploaded where the host held the newest), queues the row
    /// and block tables on `upload`, and binds the dispatches to the pool.
    pub fn prepare(
        &mut self,
        gpu: &Arc<Gpu>,
        pools: &KvPools,
        state: &mut StepState<'_>,
        upload: &mut Upload,
    ) -> Result<(), BackendError> {
        let Some(n) = self.nodes.iter().map(|a| a.n).max() else {
            return Ok(());
        };
        let segments = state.segments_mut();
        let layout = match segments.first() {
            Some(s) => s.kv.layout(),
            None => return Err(BackendError::KvCache("attention needs a KV cache".into())),
        };
        let pool = pools.get(gpu, layout);
        let mut rows = vec![[0u32; 2]; n];
        let mut tables: Vec<u32> = Vec::new();
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
        // Padded to the next power of two (within the buffer) with unread entries, so
        // steps whose tables grew by a block mostly send the same copies and commands
        // recorded ahead for one still serve the next (decision 198).
        let room = usize::try_from(step.tables.size() / 4).unwrap_or(usize::MAX);
        tables.resize(tables.len().next_power_of_two().min(room), 0);
        upload.push(&step.rows, bytemuck::cast_slice(&rows));
        if !tables.is_empty() {
            upload.push(&step.tables, bytemuck::cast_slice(&tables));
        }
        Ok(())
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
        // Every row may be its own sequence, each with a full table.
        let entries = n * layout.capacity.div_ceil(BLOCK);
        let step = StepBuffers {
            rows: gpu.storage("attention rows", n * 8),
            tables: gpu.storage("attention block tables", entries * 4),
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

    /// What the dispatches are bound to now (the pool, its generation, the capacity
    /// and the cache's type): a change makes commands recorded before it stale.
    pub fn binding(&self) -> Option<Binding> {
        self.bound
    }

    /// Node `i`'s dispatches for the prepared step.
    pub fn dispatches(&self, i: usize) -> &[Dispatch] {
        &self.recorded[i]
    }

    /// The kind of every dispatch the nodes issue per step.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.nodes.iter().flat_map(|node| {
            let write = if node.rope.is_some() {
                "rope_kv"
            } else {
                "kv_write"
            };
            [write, "attention"]
        })
    }
}
