//! The Llama-family tracer as the step layer sees it: a [`StepModel`] over a config and
//! its weights, and [`Model::runner`] to step a loaded model.

use std::sync::Arc;

use crate::backend::BackendSet;
use crate::cache::WeightSource;
use crate::coexec::table_path;
use crate::graph::{Graph, GraphError};
use crate::step::{KvShape, Runner, StepModel};

use super::llama::{trace_batch, LlamaConfig};
use super::{Model, ModelWeights};

/// A Llama-family model's steps: its config traced over its weights.
pub struct LlamaStep {
    config: LlamaConfig,
    weights: Arc<dyn ModelWeights>,
    fingerprint: u64,
}

impl LlamaStep {
    /// The steps of the model of `config` whose tensors come from `weights`, which
    /// `fingerprint` identifies (as [`Model::fingerprint`] does).
    pub fn new(
        config: LlamaConfig,
        weights: Arc<dyn ModelWeights>,
        fingerprint: u64,
    ) -> Arc<LlamaStep> {
        Arc::new(LlamaStep {
            config,
            weights,
            fingerprint,
        })
    }
}

impl StepModel for LlamaStep {
    fn trace(&self, n_tokens: usize, n_logits: usize) -> Result<Graph, GraphError> {
        trace_batch(&self.config, self.weights.as_ref(), n_tokens, n_logits)
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn context_length(&self) -> usize {
        self.config.context_length
    }

    fn kv_shape(&self) -> KvShape {
        KvShape {
            n_layers: self.config.n_layers,
            n_kv_heads: self.config.n_kv_heads,
            head_dim: self.config.head_dim,
        }
    }

    fn weights(&self) -> Arc<dyn WeightSource> {
        self.weights.clone()
    }

    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

impl Model {
    /// A runner stepping this model on `backends`, with room for `context` positions
    /// per sequence (at most the model's own context length), keeping co-execution
    /// calibrations in `$SWITCHYARD_HOME/calibration.json`.
    pub fn runner(&self, backends: BackendSet, context: usize) -> Runner {
        let calibrations = super::fetch::switchyard_home()
            .ok()
            .map(|home| table_path(&home));
        Runner::new(
            LlamaStep::new(self.config.clone(), self.weights.clone(), self.fingerprint),
            backends,
            context,
        )
        .with_calibration_file(calibrations)
    }
}
