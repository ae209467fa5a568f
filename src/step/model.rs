//! What the step layer needs of a model: the graph of a step, and the sizes around it.

use std::sync::Arc;

use crate::cache::WeightSource;
use crate::graph::{Graph, GraphError};

/// Inputs of a traced step, bound by these names.
pub mod inputs {
    /// Token ids, `[n] i32`.
    pub const TOKENS: &str = "tokens";
    /// Absolute positions, `[n] i32`.
    pub const POSITIONS: &str = "positions";
    /// Indices of the rows whose logits are returned, `[n_logits] i32`.
    pub const LOGITS_ROW: &str = "logits_row";
    /// Each logits row's draw settings, `[n_logits, 3] i32` (temperature bits, min-p
    /// bits, random bits): added by the step layer after the head of a step that draws
    /// its tokens.
    pub const DRAW: &str = "draw";
}

/// The KV cache one position of a sequence needs: keys and values of `n_kv_heads`
/// heads of `head_dim` values in each of `n_layers` layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    /// Layers with attention.
    pub n_layers: usize,
    /// Key/value heads per layer.
    pub n_kv_heads: usize,
    /// Values per head.
    pub head_dim: usize,
}

/// A model the [`super::Runner`] can step. The graph's contract: inputs named as in
/// [`inputs`], attention reading and writing the [`crate::backend::StepState`]'s KV
/// caches, and one output, the logits `[n_logits, vocab_size]` of the rows the
/// `logits_row` input names; with `n_logits` 0, no such input and no output (the step
/// only fills the KV caches: a prompt chunk before the last).
pub trait StepModel: Send + Sync {
    /// The graph of one step of `n_tokens` token rows returning `n_logits` rows of
    /// logits (which rows belong to which sequence is runtime state, not shape), or
    /// none with `n_logits` 0.
    fn trace(&self, n_tokens: usize, n_logits: usize) -> Result<Graph, GraphError>;
    /// Logits per row.
    fn vocab_size(&self) -> usize;
    /// Most positions one sequence can hold while the model's math stays exact.
    fn context_length(&self) -> usize;
    /// The KV cache's shape per position.
    fn kv_shape(&self) -> KvShape;
    /// Where the weights the graphs name come from.
    fn weights(&self) -> Arc<dyn WeightSource>;
    /// Identifies the model's config and weight layout in step keys.
    fn fingerprint(&self) -> u64;
}
