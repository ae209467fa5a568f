//! Per-step runtime state: what changes between calls of the same compiled executor.
//! Keeping it out of shapes is what lets every decode step reuse one executor.

use half::f16;

use super::BackendError;

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub enum KvDType {
    /// Half precision: half the memory and bandwidth (llama.cpp's default too).
    #[default]
    F16,
    /// Single precision.
    F32,
}

/// Shape of a KV cache: fixed capacity, so graphs never depend on the current length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Layers (one per attention node).
    pub n_layers: usize,
    /// Most positions a sequence can hold.
    pub capacity: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// How keys and values are stored.
    pub dtype: KvDType,
}

/// One layer's keys or values, `[capacity, n_kv_heads · head_dim]`.
#[derive(Clone, Debug)]
pub enum KvRows {
    /// Half-precision rows.
    F16(Vec<f16>),
    /// Single-precision rows.
    F32(Vec<f32>),
}

impl KvRows {
    /// Zeroed rows from the allocator's zeroed pages, so positions never written cost
    /// no resident memory.
    fn zeroed(dtype: KvDType, len: usize) -> KvRows {
        match dtype {
            KvDType::F16 => KvRows::F16(bytemuck::zeroed_vec(len)),
            KvDType::F32 => KvRows::F32(bytemuck::zeroed_vec(len)),
        }
    }

    /// Stores `values` at element offset `start`, converting to the storage type.
    pub fn write(&mut self, start: usize, values: &[f32]) -> Result<(), BackendError> {
        let end = start + values.len();
        let out_of_range =
            || BackendError::KvCache(format!("rows {start}..{end} exceed the cache"));
        match self {
            KvRows::F16(rows) => {
                use half::slice::HalfFloatSliceExt;
                rows.get_mut(start..end)
                    .ok_or_else(out_of_range)?
                    .convert_from_f32_slice(values);
            }
            KvRows::F32(rows) => rows
                .get_mut(start..end)
                .ok_or_else(out_of_range)?
                .copy_from_slice(values),
        }
        Ok(())
    }

    fn bytes(&self) -> usize {
        match self {
            KvRows::F16(rows) => rows.len() * 2,
            KvRows::F32(rows) => rows.len() * 4,
        }
    }
}

/// One sequence's keys and values in host memory. Owned by the sequence, not by any
/// executor.
#[derive(Clone, Debug)]
pub struct KvCache {
    layout: KvLayout,
    keys: Vec<KvRows>,
    values: Vec<KvRows>,
}

impl KvCache {
    /// An empty cache with room for `layout.capacity` positions.
    pub fn new(layout: KvLayout) -> KvCache {
        let per_layer = layout.capacity * layout.n_kv_heads * layout.head_dim;
        let layers = || {
            (0..layout.n_layers)
                .map(|_| KvRows::zeroed(layout.dtype, per_layer))
                .collect()
        };
        KvCache {
            layout,
            keys: layers(),
            values: layers(),
        }
    }

    /// The cache's dimensions.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Keys and values of `layer`, mutably, or an error naming the layer.
    pub fn layer_mut(&mut self, layer: usize) -> Result<(&mut KvRows, &mut KvRows), BackendError> {
        match (self.keys.get_mut(layer), self.values.get_mut(layer)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(BackendError::KvCache(format!(
                "layer {layer} does not exist (cache has {})",
                self.layout.n_layers
            ))),
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.keys
            .iter()
            .chain(&self.values)
            .map(KvRows::bytes)
            .sum()
    }
}

/// Runtime inputs of one step that are not tensors.
#[derive(Debug)]
pub struct StepState<'a> {
    /// Positions already in the KV cache; this step's tokens are written after them.
    pub kv_len: usize,
    /// The sequence's cache, when the graph has attention.
    pub kv: Option<&'a mut KvCache>,
}

impl StepState<'_> {
    /// State for a graph without attention.
    pub fn stateless() -> StepState<'static> {
        StepState {
            kv_len: 0,
            kv: None,
        }
    }
}
