//! Attention on the GPU over the sequence's GPU-resident KV cache: append the step's
//! keys and values, score every visible position, a causal softmax, and the weighted
//! sum of values. Its dispatches bind the cache's buffers, which belong to the
//! sequence, so they are recorded when a partition first meets a cache and again only
//! when the cache changes (another sequence, another capacity).

use std::sync::Arc;

use super::device::Gpu;
use super::kernels::{self, Source};
use super::kv::GpuKv;
use super::record::{dispatch, fold, word, Dispatch};
use crate::backend::{BackendError, KvDType};

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

impl AttentionNode {
    /// The four dispatches of this node against layer `self.layer` of `kv`, using
    /// `scores` (`[n, heads, capacity]` f32) as scratch.
    pub fn record(
        &self,
        gpu: &Gpu,
        kv: &GpuKv,
        scores: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Vec<Dispatch>, BackendError> {
        let layout = kv.layout;
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
        let (keys, values) = kv.layers.get(self.layer).ok_or_else(|| {
            BackendError::KvCache(format!("the cache has no layer {}", self.layer))
        })?;
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
        let write = dispatch(
            gpu,
            &source("kv_write", kernels::KV_WRITE),
            &[
                len,
                gx,
                word("kv width", width)?,
                u32::from(layout.dtype == KvDType::F16),
            ],
            &[step, &self.k, &self.v, keys, values],
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
            &[step, &self.q, keys, scores],
            [cap.div_ceil(64), heads, n],
        )?;
        let softmax = dispatch(
            gpu,
            &source("softmax", kernels::SOFTMAX),
            &[0, cap, 1, heads, heads * n],
            &[step, scores],
            [heads, n, 1],
        )?;
        let mix = dispatch(
            gpu,
            &source("attn_values", kernels::ATTN_VALUES),
            &[heads, kv_heads, dh, cap],
            &[step, scores, values, &self.out],
            [dh.div_ceil(64), heads, n],
        )?;
        Ok(vec![write, score, softmax, mix])
    }
}

/// The attention nodes of a partition and what their dispatches are bound to.
pub(super) struct AttentionSet {
    pub nodes: Vec<AttentionNode>,
    /// Per node, its dispatches for the cache `bound`.
    pub recorded: Vec<Vec<Dispatch>>,
    /// The id of the cache the dispatches read, if any.
    pub bound: Option<u64>,
    /// Score scratch shared by every node (they run one after another).
    pub scores: Option<wgpu::Buffer>,
}

impl AttentionSet {
    /// Records every node against `kv` unless already bound to it.
    pub fn bind(
        &mut self,
        gpu: &Arc<Gpu>,
        kv: &GpuKv,
        step: &wgpu::Buffer,
    ) -> Result<(), BackendError> {
        if self.bound == Some(kv.id) {
            return Ok(());
        }
        let widest = self.nodes.iter().map(|a| a.n * a.heads).max().unwrap_or(0);
        let bytes = widest * kv.layout.capacity * 4;
        if bytes as u64 > gpu.limits.max_storage_buffer_binding_size {
            return Err(BackendError::KvCache(format!(
                "attention scores for {} positions need {bytes} bytes, over the adapter's buffer limit; use a smaller --ctx",
                kv.layout.capacity
            )));
        }
        let scores = gpu.storage("attention scores", bytes);
        self.recorded = self
            .nodes
            .iter()
            .map(|a| a.record(gpu, kv, &scores, step))
            .collect::<Result<_, _>>()?;
        self.scores = Some(scores);
        self.bound = Some(kv.id);
        Ok(())
    }
}
