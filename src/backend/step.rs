//! Per-step runtime state: what changes between calls of the same compiled executor.
//! Keeping it out of shapes is what lets every decode step reuse one executor.

use super::BackendError;

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
}

/// One sequence's keys and values, `[capacity, n_kv_heads · head_dim]` per layer, in
/// host memory. Owned by the sequence, not by any executor.
#[derive(Clone, Debug)]
pub struct KvCache {
    layout: KvLayout,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
}

impl KvCache {
    /// An empty cache with room for `layout.capacity` positions.
    pub fn new(layout: KvLayout) -> KvCache {
        let per_layer = layout.capacity * layout.n_kv_heads * layout.head_dim;
        KvCache {
            layout,
            keys: vec![vec![0.0; per_layer]; layout.n_layers],
            values: vec![vec![0.0; per_layer]; layout.n_layers],
        }
    }

    /// The cache's dimensions.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Keys and values of `layer`, mutably, or an error naming the layer.
    pub fn layer_mut(&mut self, layer: usize) -> Result<(&mut [f32], &mut [f32]), BackendError> {
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
        2 * self.layout.n_layers
            * self.layout.capacity
            * self.layout.n_kv_heads
            * self.layout.head_dim
            * std::mem::size_of::<f32>()
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
