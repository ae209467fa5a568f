//! The GPU's copy of a sequence's KV cache: one key and one value buffer per layer, in
//! f32 (an f16 cache's values are rounded to f16 when written, as on the CPU), kept inside the sequence's [`KvCache`](crate::backend::KvCache) so every
//! executor of the sequence (prefill buckets, decode) shares it.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::device::Gpu;
use super::GPU_SPACE;
use crate::backend::{BackendError, DeviceKv, KvLayout, KvRows, MemorySpace};

/// Distinguishes caches, so a partition knows when its bind groups point at another
/// sequence's buffers.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Keys and values of every layer in GPU memory.
pub(super) struct GpuKv {
    pub id: u64,
    pub layers: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    pub layout: KvLayout,
    gpu: Arc<Gpu>,
}

impl GpuKv {
    /// Allocates every layer for `layout.capacity` positions.
    pub fn new(gpu: Arc<Gpu>, layout: KvLayout) -> Result<GpuKv, BackendError> {
        let bytes = layout.capacity * layout.n_kv_heads * layout.head_dim * 4;
        if bytes as u64 > gpu.limits.max_storage_buffer_binding_size {
            return Err(BackendError::KvCache(format!(
                "one layer of keys ({bytes} bytes for {} positions) exceeds the adapter's buffer limit; use a smaller --ctx",
                layout.capacity
            )));
        }
        let layers = (0..layout.n_layers)
            .map(|l| {
                (
                    gpu.storage(&format!("keys {l}"), bytes),
                    gpu.storage(&format!("values {l}"), bytes),
                )
            })
            .collect();
        Ok(GpuKv {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            layers,
            layout,
            gpu,
        })
    }

    fn width(&self) -> usize {
        self.layout.n_kv_heads * self.layout.head_dim
    }

    /// Writes host rows `0..len` of `layer` to the device.
    pub fn upload(&self, layer: usize, len: usize, keys: &KvRows, values: &KvRows) {
        let (k, v) = &self.layers[layer];
        self.gpu
            .queue
            .write_buffer(k, 0, bytemuck::cast_slice(&keys.read_f32(len)));
        self.gpu
            .queue
            .write_buffer(v, 0, bytemuck::cast_slice(&values.read_f32(len)));
    }
}

impl std::fmt::Debug for GpuKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuKv({} layers, {} positions)",
            self.layers.len(),
            self.layout.capacity
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
        let (k, v) = self
            .layers
            .get(layer)
            .ok_or_else(|| BackendError::KvCache(format!("the GPU cache has no layer {layer}")))?;
        let bytes = len * self.width() * 4;
        if len == 0 {
            return Ok(());
        }
        let k_host = self.gpu.read(k, 0, bytes)?;
        let v_host = self.gpu.read(v, 0, bytes)?;
        keys.write(0, &bytemuck::pod_collect_to_vec::<u8, f32>(&k_host))?;
        values.write(0, &bytemuck::pod_collect_to_vec::<u8, f32>(&v_host))
    }

    fn bytes(&self) -> usize {
        self.layers.len() * 2 * self.layout.capacity * self.width() * 4
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
