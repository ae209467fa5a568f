//! Runs a traced model step by step: chunked, bucketed prefill and static-shape decode
//! through the graph cache, over one sequence's KV cache.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::{BackendSet, KvCache, KvDType, KvLayout, StepState, Tensor};
use crate::cache::{
    get_or_compile, CacheBudget, CacheStats, CompileContext, GraphCache, Phase, StepKey,
    WeightStore,
};
use crate::exec::Executor;
use crate::plan::{Placement, Policy};

use super::llama::{inputs, trace_step, LlamaConfig, WeightInfo};
use super::ModelError;

/// Tokens per prefill chunk; the last chunk is padded up to a power of two.
pub const PREFILL_CHUNK: usize = 64;

/// A model's tensors: both their declared shapes (for tracing) and their bytes.
pub trait ModelWeights: WeightInfo + crate::cache::WeightSource {}

impl<T: WeightInfo + crate::cache::WeightSource> ModelWeights for T {}

/// Compiles and runs steps of one model on one set of backends, for one sequence at a
/// time. Executors and resident weights are shared by every sequence it runs.
pub struct Runner {
    config: LlamaConfig,
    weights: Arc<dyn ModelWeights>,
    model_fingerprint: u64,
    backends: BackendSet,
    /// Fingerprint of `backends`, computed once: every step key carries it.
    backends_fingerprint: u64,
    policy: Policy,
    store: WeightStore,
    cache: GraphCache<Executor>,
    context: usize,
    kv_dtype: KvDType,
    prefill: PhaseStats,
    decode: PhaseStats,
    placement: [Placed; 2],
}

/// Compute nodes per backend name in a phase's most recently compiled plan.
pub type Placed = BTreeMap<String, usize>;

/// Graph-cache outcomes of one phase's step lookups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PhaseStats {
    /// Lookups that compiled a new executor.
    pub compiles: u64,
    /// Lookups answered from the cache (by step key or by structure).
    pub hits: u64,
    /// Lookups that missed the cache.
    pub misses: u64,
}

/// One sequence's state: its KV cache and how many positions it holds.
pub struct Sequence {
    kv: KvCache,
    len: usize,
    context: usize,
}

impl Sequence {
    /// Positions already evaluated.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been evaluated yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most positions this sequence can hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Bytes its KV cache holds (allocated for the whole context).
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }
}

impl Runner {
    /// A runner for a model of `config` whose tensors come from `weights`, with room for
    /// `context` positions per sequence.
    pub fn new(
        config: LlamaConfig,
        weights: Arc<dyn ModelWeights>,
        model_fingerprint: u64,
        backends: BackendSet,
        context: usize,
    ) -> Runner {
        let store = WeightStore::new(weights.clone());
        Runner {
            config,
            weights,
            model_fingerprint,
            backends_fingerprint: backends.fingerprint(),
            backends,
            policy: Policy::default(),
            store,
            cache: GraphCache::new(CacheBudget {
                max_entries: 32,
                max_bytes: 4 << 30,
            }),
            context,
            kv_dtype: KvDType::default(),
            prefill: PhaseStats::default(),
            decode: PhaseStats::default(),
            placement: Default::default(),
        }
    }

    /// The same runner planning with `policy` (tests force placements with it).
    pub fn with_policy(self, policy: Policy) -> Runner {
        Runner { policy, ..self }
    }

    /// How many compute nodes each backend runs in the latest prefill and decode plans
    /// (empty until that phase has compiled).
    pub fn placement(&self) -> (&Placed, &Placed) {
        (&self.placement[0], &self.placement[1])
    }

    /// Cache outcomes of prefill and decode lookups, in that order.
    pub fn phase_stats(&self) -> (PhaseStats, PhaseStats) {
        (self.prefill, self.decode)
    }

    /// The same runner storing keys and values as `dtype` in new sequences.
    pub fn with_kv_dtype(self, dtype: KvDType) -> Runner {
        Runner {
            kv_dtype: dtype,
            ..self
        }
    }

    /// How new sequences store keys and values.
    pub fn kv_dtype(&self) -> KvDType {
        self.kv_dtype
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Most positions (prompt + generated tokens) one sequence holds.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Graph-cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// A new, empty sequence. Its KV cache has room for the context plus one padded
    /// prefill chunk, so a padded tail never overflows it.
    pub fn new_sequence(&self) -> Sequence {
        let layout = KvLayout {
            n_layers: self.config.n_layers,
            capacity: self.context + PREFILL_CHUNK,
            n_kv_heads: self.config.n_kv_heads,
            head_dim: self.config.head_dim,
            dtype: self.kv_dtype,
        };
        Sequence {
            kv: KvCache::new(layout),
            len: 0,
            context: self.context,
        }
    }

    /// Evaluates `tokens` after what `seq` holds and returns the logits of the last one.
    /// Several tokens are a prefill (chunked, tail bucketed); one token is a decode step.
    pub fn forward(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Input("no tokens to evaluate".into()));
        }
        if seq.len + tokens.len() > seq.context {
            return Err(ModelError::ContextFull {
                needed: seq.len + tokens.len(),
                context: seq.context,
            });
        }
        let vocab = self.config.vocab_size as u32;
        if let Some(&bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(ModelError::Input(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let mut logits = Vec::new();
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            logits = self.run_chunk(seq, chunk)?;
        }
        Ok(logits)
    }

    fn run_chunk(&mut self, seq: &mut Sequence, chunk: &[u32]) -> Result<Vec<f32>, ModelError> {
        let (phase, bucket) = if chunk.len() == 1 {
            (Phase::Decode, 1)
        } else {
            (
                Phase::Prefill,
                chunk.len().next_power_of_two().min(PREFILL_CHUNK),
            )
        };
        let step = StepKey {
            model: self.model_fingerprint,
            phase,
            bucket: bucket as u32,
            backends: self.backends_fingerprint,
        };
        let context = CompileContext {
            backends: &self.backends,
            policy: &self.policy,
            weights: &self.store,
        };
        let (config, weights) = (&self.config, &self.weights);
        let before = self.cache.stats();
        let executor = get_or_compile(&mut self.cache, &step, &context, || {
            trace_step(config, weights.as_ref(), bucket)
        })?;
        let after = self.cache.stats();
        let phase_stats = match phase {
            Phase::Prefill => &mut self.prefill,
            Phase::Decode => &mut self.decode,
        };
        phase_stats.compiles += after.compiles - before.compiles;
        phase_stats.hits += after.hits - before.hits;
        phase_stats.misses += after.misses - before.misses;
        if after.compiles > before.compiles {
            let plan = executor.plan();
            let mut placed = Placed::new();
            for (node, at) in plan.graph.nodes().iter().zip(&plan.placement) {
                let kind = node.op.kind();
                if let (Placement::On(b), false) = (
                    at,
                    kind.is_source() || kind == crate::graph::OpKind::Transfer,
                ) {
                    *placed.entry(self.backends.name_of(*b)).or_default() += 1;
                }
            }
            self.placement[matches!(phase, Phase::Decode) as usize] = placed;
        }
        let mut ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
        ids.resize(bucket, 0);
        let positions: Vec<i32> = (seq.len..seq.len + bucket).map(|p| p as i32).collect();
        let last_row = [(chunk.len() - 1) as i32];
        let step_inputs = [
            (inputs::TOKENS, Tensor::from_i32([bucket], &ids)?),
            (inputs::POSITIONS, Tensor::from_i32([bucket], &positions)?),
            (inputs::LOGITS_ROW, Tensor::from_i32([1], &last_row)?),
        ];
        let mut state = StepState {
            kv_len: seq.len,
            kv: Some(&mut seq.kv),
        };
        let outputs = executor.run(&step_inputs, &mut state)?;
        seq.len += chunk.len();
        Ok(outputs[0].to_f32_vec()?)
    }
}
