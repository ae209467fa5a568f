//! The GPU's KV cache, paged: one pool per cache shape and type holds every layer's
//! keys and values in blocks of [`BLOCK`] positions (f32, or f16 two to a word, rounded
//! as the CPU's f16 cache rounds), and each sequence's [`GpuKv`] is a table of the
//! blocks it holds, taken as its positions are written and given back when it ends. So
//! GPU memory follows the tokens held, not `capacity × sequences`, and one attention
//! dispatch can serve every sequence of a batched step through their tables.

use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use half::f16;

use super::device::Gpu;
use super::GPU_SPACE;
use crate::backend::{BackendError, DeviceKv, KvDType, KvLayout, KvRows, MemorySpace, KV_BLOCK};

/// Positions per block: the host cache's block size, which the shaders spell `32u`.
pub(super) const BLOCK: usize = KV_BLOCK;
const _: () = assert!(BLOCK == 32, "the attention shaders index blocks of 32");

/// Blocks a new pool starts with; it doubles when it runs out.
const FIRST_BLOCKS: usize = 64;

/// Distinguishes pools, so a partition knows when its bind groups point elsewhere.
static NEXT_POOL: AtomicU64 = AtomicU64::new(1);

/// The pools of one device, one per (layers, kv heads × head dim, f16 or f32).
#[derive(Default)]
pub(super) struct KvPools {
    pools: Mutex<HashMap<(usize, usize, bool), Arc<KvPool>>>,
}

impl KvPools {
    /// The pool for caches of `layout`'s shape, created empty on first use.
    pub fn get(&self, gpu: &Arc<Gpu>, layout: KvLayout) -> Arc<KvPool> {
        let width = layout.n_kv_heads * layout.head_dim;
        let f16 = layout.dtype == KvDType::F16;
        self.pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((layout.n_layers, width, f16))
            .or_insert_with(|| {
                Arc::new(KvPool {
                    gpu: gpu.clone(),
                    id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
                    n_layers: layout.n_layers,
                    width,
                    f16,
                    state: Mutex::new(PoolState::default()),
                })
            })
            .clone()
    }
}

/// Keys and values of every layer in blocks shared out to sequences.
pub(super) struct KvPool {
    gpu: Arc<Gpu>,
    id: u64,
    n_layers: usize,
    width: usize,
    /// Values held as f16, two to a word (the row width is even), instead of f32.
    f16: bool,
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// Per layer: keys and values, `blocks × BLOCK × width` values each.
    layers: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    blocks: usize,
    free: Vec<u32>,
    /// Bumped whenever the buffers are replaced by larger ones.
    generation: u64,
}

impl KvPool {
    /// Bytes of one stored value.
    fn value_bytes(&self) -> usize {
        if self.f16 {
            2
        } else {
            4
        }
    }

    fn block_bytes(&self) -> usize {
        BLOCK * self.width * self.value_bytes()
    }

    /// `values` as the pool stores them (f32 values as they are, without a copy).
    fn stored<'a>(&self, values: &'a [f32]) -> Cow<'a, [u8]> {
        if self.f16 {
            Cow::Owned(
                values
                    .iter()
                    .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
                    .collect(),
            )
        } else {
            Cow::Borrowed(bytemuck::cast_slice(values))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `(pool, generation)`: equal keys mean the same buffers.
    pub fn key(&self) -> (u64, u64) {
        (self.id, self.lock().generation)
    }

    /// Every layer's keys and values buffers as they are now (what a partition binds).
    pub fn buffers(&self) -> Vec<(wgpu::Buffer, wgpu::Buffer)> {
        self.lock().layers.clone()
    }

    /// `layer`'s keys and values buffers as they are now.
    fn layer(&self, layer: usize) -> Result<(wgpu::Buffer, wgpu::Buffer), BackendError> {
        self.lock()
            .layers
            .get(layer)
            .cloned()
            .ok_or_else(|| BackendError::KvCache(format!("the GPU cache has no layer {layer}")))
    }

    /// Takes `n` free blocks, growing the pool (doubling, copying what it holds on the
    /// GPU) when too few are free; refuses past the adapter's buffer limit.
    fn take(&self, n: usize) -> Result<Vec<u32>, BackendError> {
        let mut state = self.lock();
        if state.free.len() < n {
            let needed = state.blocks - state.free.len() + n;
            let limit = self
                .gpu
                .limits
                .max_storage_buffer_binding_size
                .min(self.gpu.limits.max_buffer_size) as usize
                / self.block_bytes();
            let grown = needed.max(state.blocks * 2).max(FIRST_BLOCKS).min(limit);
            if grown < needed {
                return Err(BackendError::limit(
                    format!("blocks of {BLOCK} positions in the GPU KV pool (the adapter's buffer limit; use fewer parallel sequences or a smaller --ctx)"),
                    needed as u64,
                    limit as u64,
                ));
            }
            self.grow(&mut state, grown);
        }
        let at = state.free.len() - n;
        Ok(state.free.split_off(at))
    }

    fn grow(&self, state: &mut PoolState, blocks: usize) {
        let bytes = blocks * self.block_bytes();
        let layers: Vec<_> = (0..self.n_layers)
            .map(|l| {
                (
                    self.gpu.storage(&format!("kv pool keys {l}"), bytes),
                    self.gpu.storage(&format!("kv pool values {l}"), bytes),
                )
            })
            .collect();
        if state.blocks > 0 {
            let held = (state.blocks * self.block_bytes()) as u64;
            let mut encoder = self.gpu.device.create_command_encoder(&Default::default());
            for ((old_k, old_v), (k, v)) in state.layers.iter().zip(&layers) {
                encoder.copy_buffer_to_buffer(old_k, 0, k, 0, held);
                encoder.copy_buffer_to_buffer(old_v, 0, v, 0, held);
            }
            self.gpu.submit(encoder);
        }
        state.free.extend((state.blocks..blocks).map(|b| b as u32));
        state.layers = layers;
        state.blocks = blocks;
        state.generation += 1;
    }

    fn give_back(&self, blocks: &[u32]) {
        let mut state = self.lock();
        state.free.extend_from_slice(blocks);
    }
}

/// One sequence's keys and values on the GPU: the pool blocks holding its positions,
/// in order. Kept inside the sequence's [`KvCache`](crate::backend::KvCache), so every
/// executor of the sequence (prefill buckets, decode, batched steps) shares it; its
/// blocks go back to the pool when it is dropped.
pub(super) struct GpuKv {
    pool: Arc<KvPool>,
    layout: KvLayout,
    blocks: Mutex<Vec<u32>>,
}

impl GpuKv {
    /// A cache of `layout` holding no blocks yet.
    pub fn new(pool: Arc<KvPool>, layout: KvLayout) -> GpuKv {
        GpuKv {
            pool,
            layout,
            blocks: Mutex::new(Vec::new()),
        }
    }

    fn blocks(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pool the blocks come from.
    pub fn pool(&self) -> &Arc<KvPool> {
        &self.pool
    }

    /// Takes blocks until positions `0..positions` have one.
    pub fn reserve(&self, positions: usize) -> Result<(), BackendError> {
        let mut blocks = self.blocks();
        let needed = positions.div_ceil(BLOCK);
        if blocks.len() < needed {
            let more = self.pool.take(needed - blocks.len())?;
            blocks.extend(more);
        }
        Ok(())
    }

    /// The block of every [`BLOCK`] positions held, in order.
    pub fn table(&self) -> Vec<u32> {
        self.blocks().clone()
    }

    /// Writes host rows `0..len` of `layer` into this sequence's blocks (reserved).
    pub fn upload(
        &self,
        layer: usize,
        len: usize,
        keys: &KvRows,
        values: &KvRows,
    ) -> Result<(), BackendError> {
        let (k, v) = self.pool.layer(layer)?;
        let width = self.pool.width;
        let (keys, values) = (keys.read_f32(len), values.read_f32(len));
        let held = keys.len().min(values.len()) / width.max(1);
        let blocks = self.blocks();
        if held < len || blocks.len() * BLOCK < len {
            return Err(BackendError::KvCache(format!(
                "layer {layer}: {len} positions to upload, but the host holds {held} and the GPU blocks {}",
                blocks.len() * BLOCK
            )));
        }
        for (b, &block) in blocks.iter().enumerate() {
            let rows = b * BLOCK..len.min((b + 1) * BLOCK);
            if rows.is_empty() {
                break;
            }
            let at = (block as usize * self.pool.block_bytes()) as u64;
            let span = rows.start * width..rows.end * width;
            let gpu = &self.pool.gpu;
            gpu.write(&k, at, &self.pool.stored(&keys[span.clone()]));
            gpu.write(&v, at, &self.pool.stored(&values[span]));
        }
        Ok(())
    }

    /// Positions `0..len` of one of `layer`'s buffers, gathered from the blocks.
    fn gather(&self, buffer: &wgpu::Buffer, len: usize) -> Result<Vec<f32>, BackendError> {
        let gpu = &self.pool.gpu;
        let row_bytes = self.pool.width * self.pool.value_bytes();
        let joined = gpu.storage("kv gather", len * row_bytes);
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        for (b, &block) in self.blocks().iter().enumerate() {
            let rows = b * BLOCK..len.min((b + 1) * BLOCK);
            if rows.is_empty() {
                break;
            }
            encoder.copy_buffer_to_buffer(
                buffer,
                (block as usize * self.pool.block_bytes()) as u64,
                &joined,
                (rows.start * row_bytes) as u64,
                (rows.len() * row_bytes) as u64,
            );
        }
        gpu.submit(encoder);
        let bytes = gpu.read(&joined, 0, len * row_bytes)?;
        Ok(if self.pool.f16 {
            bytes
                .view::<u16>()
                .iter()
                .map(|&h| f16::from_bits(h).to_f32())
                .collect()
        } else {
            bytes.view::<f32>().to_vec()
        })
    }
}

impl Drop for GpuKv {
    fn drop(&mut self) {
        self.pool.give_back(&self.blocks());
    }
}

impl std::fmt::Debug for GpuKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuKv({} layers, {} blocks of {BLOCK} positions)",
            self.layout.n_layers,
            self.blocks().len()
        )
    }
}

impl DeviceKv for GpuKv {
    fn space(&self) -> MemorySpace {
        GPU_SPACE
    }

    fn download(
        &self,
        layer: usize,
        len: usize,
        keys: &mut KvRows,
        values: &mut KvRows,
    ) -> Result<(), BackendError> {
        if len == 0 {
            return Ok(());
        }
        let held = self.blocks().len() * BLOCK;
        if len > held {
            return Err(BackendError::KvCache(format!(
                "the GPU cache holds {held} positions, not {len}"
            )));
        }
        let (k, v) = self.pool.layer(layer)?;
        keys.write(0, &self.gather(&k, len)?)?;
        values.write(0, &self.gather(&v, len)?)
    }

    fn bytes(&self) -> usize {
        self.blocks().len() * self.pool.block_bytes() * 2 * self.layout.n_layers
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
