//! Runs a traced model step by step: chunked, bucketed prefill and static-shape decode
//! through the graph cache, over one sequence's KV cache.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::{BackendSet, KvCache, KvDType, KvLayout};
use crate::cache::{
    get_or_compile_plan, CacheBudget, CacheStats, CompileContext, GraphCache, Phase, Pick, StepArm,
    StepKey,
};
use crate::coexec::{CalibrationTable, Clock, SplitKey, SystemClock};
use crate::exec::Executor;
use crate::plan::{Placement, Policy};

use super::arms::{self, Arm};
use super::coexec::{BucketGate, Coexec, CoexecMode};
use super::failover::{self, Failover};
use super::returns::{Returns, StepOutput};
use super::rows::StepInputs;
use super::target::Target;
use super::{BatchLogits, StepError, StepModel};

/// Tokens per prefill chunk; the last chunk is padded up to a power of two.
pub const PREFILL_CHUNK: usize = 64;

/// Most tokens one batched step of several sequences evaluates.
pub const MAX_STEP_TOKENS: usize = 256;

/// One sequence's share of a batched step: the tokens to evaluate after what it holds.
pub struct Work<'s> {
    /// The sequence; its length grows by `tokens.len()`.
    pub seq: &'s mut Sequence,
    /// Its next tokens (one for a decode, a chunk of its prompt for a prefill).
    pub tokens: &'s [u32],
    /// What the step returns for it: a decode's and a prompt's last chunk's logits or
    /// greedy token; nothing for a chunk with more of its prompt to come.
    pub returns: Returns,
}

/// Compiles and runs steps of one model on one set of backends, for one sequence or a
/// batch of them. Executors and resident weights are shared by every sequence it runs.
pub struct Runner {
    /// The model, live backends, policy and weights every step is planned on.
    target: Target,
    cache: GraphCache<Executor>,
    context: usize,
    kv_dtype: KvDType,
    prefill: PhaseStats,
    decode: PhaseStats,
    /// Per phase (prefill, decode): the latest compiled plan's nodes per backend.
    placement: [Placed; 2],
    coexec: Coexec,
    failovers: Vec<Failover>,
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

/// One sequence's state: its KV cache and the tokens it holds (kept so that a cache
/// lost with a failed device can be recomputed on the backends that remain).
pub struct Sequence {
    kv: KvCache,
    tokens: Vec<u32>,
    context: usize,
}

impl Sequence {
    /// Positions already evaluated.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether nothing has been evaluated yet.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens evaluated so far, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Most positions this sequence can hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Bytes its KV cache holds now (blocks for the positions written so far).
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// A sequence holding this one's first `len` positions, sharing their KV blocks
    /// (a cached prompt prefix, or a chat's history); `len` at most [`Sequence::len`].
    pub fn fork(&mut self, len: usize) -> Result<Sequence, StepError> {
        if len > self.len() {
            return Err(StepError::Internal(format!(
                "cannot fork {len} positions of a sequence holding {}",
                self.len()
            )));
        }
        Ok(Sequence {
            kv: self.kv.fork(len)?,
            tokens: self.tokens[..len].to_vec(),
            context: self.context,
        })
    }

    /// Forgets every position from `len` on (the next tokens are evaluated after
    /// position `len - 1`); a no-op when `len` is not shorter.
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Bytes its KV cache holds when all `context` positions are written.
    pub fn kv_capacity_bytes(&self) -> usize {
        self.context
            .saturating_mul(self.kv.layout().position_bytes())
    }
}

impl Runner {
    /// A runner for `model` on `backends`, with room for `context` positions per
    /// sequence, at most the model's `context_length` (which bounds where the model's
    /// math is exact, e.g. `longrope`).
    pub fn new(model: Arc<dyn StepModel>, backends: BackendSet, context: usize) -> Runner {
        let context = context.min(model.context_length());
        let target = Target::new(model, backends);
        let clock = Arc::new(SystemClock::new());
        let coexec = Coexec::new(target.backends(), target.policy().fallback, clock);
        Runner {
            target,
            cache: GraphCache::new(CacheBudget {
                max_entries: 128,
                max_bytes: 4 << 30,
            }),
            context,
            kv_dtype: KvDType::default(),
            prefill: PhaseStats::default(),
            decode: PhaseStats::default(),
            placement: Default::default(),
            coexec,
            failovers: Vec::new(),
        }
    }

    /// The same runner with prefill co-execution `mode` (decode never splits).
    pub fn with_coexec(mut self, mode: CoexecMode) -> Runner {
        self.coexec.set_mode(mode);
        self
    }

    /// The same runner keeping split calibrations in `file` (`None`, the default: in
    /// memory only; `crate::model`'s `Model::runner` gives
    /// `$SWITCHYARD_HOME/calibration.json`).
    pub fn with_calibration_file(mut self, file: Option<std::path::PathBuf>) -> Runner {
        self.coexec.set_table_file(file);
        self
    }

    /// The same runner splitting every splittable prefill linear at `rho_permille`
    /// thousandths of its rows on the CPU, without calibrating.
    pub fn with_split_ratio(mut self, rho_permille: u16) -> Runner {
        self.coexec.set_fixed_rho(rho_permille);
        self
    }

    /// The same runner timing co-execution arms with `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Runner {
        self.coexec.set_clock(clock);
        self
    }

    /// The backends this runner plans over.
    pub fn backends(&self) -> &BackendSet {
        self.target.backends()
    }

    /// The co-execution gates' state and logs, per prefill bucket.
    pub fn gate_reports(&self) -> Vec<BucketGate<'_>> {
        self.coexec.reports()
    }

    /// The same runner planning with `policy` (tests force placements with it).
    pub fn with_policy(self, policy: Policy) -> Runner {
        Runner {
            target: self.target.with_policy(policy),
            ..self
        }
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

    /// Bytes one position of one sequence takes in the KV cache (keys and values of
    /// every layer).
    pub fn kv_bytes_per_position(&self) -> usize {
        self.kv_layout().position_bytes()
    }

    /// The KV layout of this runner's sequences: the context plus one padded prefill
    /// chunk, so a padded tail never overflows it.
    fn kv_layout(&self) -> KvLayout {
        let shape = self.target.model().kv_shape();
        KvLayout {
            n_layers: shape.n_layers,
            capacity: self.context + PREFILL_CHUNK,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            dtype: self.kv_dtype,
        }
    }

    /// How new sequences store keys and values.
    pub fn kv_dtype(&self) -> KvDType {
        self.kv_dtype
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
    pub fn new_sequence(&self) -> Result<Sequence, StepError> {
        Ok(Sequence {
            kv: KvCache::new(self.kv_layout())?,
            tokens: Vec::new(),
            context: self.context,
        })
    }

    /// Evaluates `tokens` after what `seq` holds and returns the logits of the last one.
    /// Several tokens are a prefill (chunked, tail bucketed); one token is a decode step.
    pub fn forward(&mut self, seq: &mut Sequence, tokens: &[u32]) -> Result<Vec<f32>, StepError> {
        match self.forward_chunks(seq, tokens, Returns::Logits)? {
            StepOutput::Logits(logits) => logits.row(0).map(<[f32]>::to_vec),
            StepOutput::Tokens(_) => None,
        }
        .ok_or_else(|| StepError::internal("a step returned no logits"))
    }

    /// [`Runner::forward`] returning only greedy decoding's pick from the last token's
    /// logits, made where they were computed (on a GPU, 4 bytes read back instead of
    /// the vocabulary's scores); `None` when every logit was -inf or NaN.
    pub fn forward_greedy(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
    ) -> Result<Option<u32>, StepError> {
        self.forward_token(seq, tokens, Returns::Token)
    }

    /// [`Runner::forward`] returning only the token `head` ([`Returns::Token`] or
    /// [`Returns::Draw`]) picks from the last token's logits, made where they were
    /// computed; `None` when every logit was -inf or NaN.
    pub fn forward_token(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
        head: Returns,
    ) -> Result<Option<u32>, StepError> {
        if !matches!(head, Returns::Token | Returns::Draw(_)) {
            return Err(StepError::internal("a token step asked for no token"));
        }
        match self.forward_chunks(seq, tokens, head)? {
            StepOutput::Tokens(tokens) => tokens.first().copied(),
            StepOutput::Logits(_) => None,
        }
        .ok_or_else(|| StepError::internal("a token step returned no token"))
    }

    /// Evaluates `tokens` after what `seq` holds in chunks; the last chunk returns what
    /// `returns` asks for (the others only fill the KV cache).
    fn forward_chunks(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
        returns: Returns,
    ) -> Result<StepOutput, StepError> {
        if returns == Returns::Every {
            return Err(StepError::internal(
                "every token's logits come from forward_every_logit",
            ));
        }
        self.check_tokens(seq, tokens)?;
        let mut out = StepOutput::none();
        let chunks = tokens.len().div_ceil(PREFILL_CHUNK);
        for (i, chunk) in tokens.chunks(PREFILL_CHUNK).enumerate() {
            // Only the last chunk returns anything: the others only fill the KV cache,
            // on a graph without the output head (read once per prompt, not per chunk).
            let want = if i + 1 == chunks {
                returns
            } else {
                Returns::Nothing
            };
            out = self.step(&mut [Share {
                seq: &mut *seq,
                tokens: chunk,
                wants: want,
            }])?;
        }
        Ok(out)
    }

    /// Evaluates `tokens` after what `seq` holds and returns the logits of every one of
    /// them, one [`BatchLogits`] per prompt chunk of up to [`PREFILL_CHUNK`] tokens (row
    /// `i` of the whole scores the token after `tokens[i]`): what scoring a text needs
    /// (perplexity, a prompt's log-probabilities). Each chunk runs on the plan one
    /// sequence decodes on, with a logits row per token, outside the co-execution gates
    /// (a chunk's head then reads every row, which would skew their timings).
    pub fn forward_every_logit(
        &mut self,
        seq: &mut Sequence,
        tokens: &[u32],
    ) -> Result<Vec<BatchLogits>, StepError> {
        self.check_tokens(seq, tokens)?;
        let mut out = Vec::with_capacity(tokens.len().div_ceil(PREFILL_CHUNK));
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            let share = Share {
                seq: &mut *seq,
                tokens: chunk,
                wants: Returns::Every,
            };
            match self.step(&mut [share])? {
                StepOutput::Logits(logits) => out.push(logits),
                StepOutput::Tokens(_) => {
                    return Err(StepError::internal("a scoring step returned tokens"))
                }
            }
        }
        Ok(out)
    }

    /// Evaluates each sequence's tokens after what it holds, all in one step, and
    /// returns, for each one whose [`Work::returns`] asks for anything, in order, the
    /// logits of its last token, or, when every such one asks only for its greedy token,
    /// those tokens (the others only fill their KV caches). The weights are read once
    /// for the whole batch. A sequence gets bit-for-bit the logits it gets alone (the
    /// 32-weight block formats at any batch size; K-quant weights up to 16 rows, F16 and
    /// BF16 up to four, past which their kernels' summation order depends on the rows).
    ///
    /// A sequence whose share asks for [`Returns::Every`] gets a row per token, in its
    /// place among the others (a scored prompt's chunk rides beside other sequences'
    /// decodes), the same rows [`Runner::forward_every_logit`] gives.
    ///
    /// One sequence runs as [`Runner::forward`] does (chunked prefill, co-execution
    /// arms), or as [`Runner::forward_every_logit`] does when it asks for every row.
    /// Several run on the plan one sequence decodes on; their tokens together may be at
    /// most [`MAX_STEP_TOKENS`] (the caller chunks long prompts).
    pub fn forward_batch(&mut self, work: &mut [Work<'_>]) -> Result<StepOutput, StepError> {
        if let [one] = work {
            if one.returns != Returns::Every {
                return self.forward_chunks(one.seq, one.tokens, one.returns);
            }
        }
        for w in work.iter() {
            self.check_tokens(w.seq, w.tokens)?;
        }
        let mut shares: Vec<Share<'_>> = work
            .iter_mut()
            .map(|w| Share {
                seq: &mut *w.seq,
                tokens: w.tokens,
                wants: w.returns,
            })
            .collect();
        self.step(&mut shares)
    }

    /// The one path every step takes: builds the step's inputs once, then heals each
    /// sequence (recomputes one whose newest KV rows were on a lost device) and runs the
    /// step; when a backend failed and was dropped ([`Runner::fail_over`]), heals and runs
    /// it again on the survivors.
    fn step(&mut self, shares: &mut [Share<'_>]) -> Result<StepOutput, StepError> {
        let layout: Vec<_> = shares
            .iter()
            .map(|s| (s.seq.len(), s.tokens, s.wants))
            .collect();
        let inputs = StepInputs::new(&layout)?;
        loop {
            for share in shares.iter_mut() {
                self.heal(share.seq)?;
            }
            match self.run_step(&inputs, shares) {
                Err(e) if self.fail_over(&e, inputs.phase()) => continue,
                done => return done,
            }
        }
    }

    /// Runs the step `step` of `shares` (their tokens checked, their caches healed):
    /// takes its plan (the gate's arm or the batch arm) from the graph cache, runs it,
    /// and appends each share's tokens to its sequence.
    fn run_step(
        &mut self,
        step: &StepInputs,
        shares: &mut [Share<'_>],
    ) -> Result<StepOutput, StepError> {
        let (phase, bucket) = (step.phase(), step.bucket());
        // A chunk with and without logits share their bucket's gate: they differ only by
        // a one-row tail (the last layer's output projection and FFN, the head) that no
        // arm splits (fewer than `MIN_SPLIT_ROWS` rows), so every arm pays it alike.
        let (arm, gate_arm) = match step.gated() {
            true => self.coexec.choose_arm(phase, bucket as u32, &self.target)?,
            false => (self.batch_arm(), None),
        };
        let executor = self.executor(phase, bucket, step.logits(), step.pick(), arm)?;
        let mut state = step.state(shares.iter_mut().map(|s| &mut s.seq.kv))?;
        let started = self.coexec.now();
        let outputs = executor.run(step.tensors(), &mut state)?;
        drop(state);
        if let Some(index) = gate_arm {
            let took = self.coexec.now().saturating_sub(started);
            self.coexec.record(bucket as u32, index, took);
        }
        let output = step.output(outputs, self.target.model().vocab_size())?;
        for share in shares.iter_mut() {
            share.seq.tokens.extend_from_slice(share.tokens);
        }
        Ok(output)
    }

    /// Calibrates every prefill bucket that can split (`reps` timed runs per grid point),
    /// replacing earlier calibrations, and saves the table. Returns the table.
    pub fn calibrate(
        &mut self,
        reps: u32,
        progress: &mut dyn FnMut(&SplitKey, usize, usize),
    ) -> Result<Option<&CalibrationTable>, StepError> {
        self.coexec.calibrate(reps, &self.target, progress)
    }

    /// Backends dropped so far, oldest first.
    pub fn failovers(&self) -> &[Failover] {
        &self.failovers
    }

    /// Forgets everything a panic inside a step may have left half-updated: compiled
    /// executors (their partitions' buffers), the co-execution gates (a pending choice)
    /// and plans. Resident weights stay: they are never written after loading.
    pub fn reset(&mut self) {
        self.cache.clear();
        let fallback = self.target.policy().fallback;
        self.coexec.forget(self.target.backends(), fallback);
        self.placement = Default::default();
    }

    /// When `error` is a lost device or out of memory of a live backend that is not the
    /// fallback, drops that backend, its resident weights and everything compiled, and
    /// returns true: the caller runs the step again. Otherwise false.
    fn fail_over(&mut self, error: &StepError, phase: Phase) -> bool {
        let lost = failover::lost_backend(error, &self.target);
        let Some(backend) = lost.and_then(|id| self.target.drop_backend(id)) else {
            return false;
        };
        self.reset();
        let survivors = self.target.backends();
        let record = Failover::new(backend.name(), survivors, phase, error);
        self.failovers.push(record);
        true
    }

    /// Recomputes `seq` from its tokens when its newest KV rows were on a backend that
    /// is gone; a no-op otherwise.
    fn heal(&mut self, seq: &mut Sequence) -> Result<(), StepError> {
        let target = &self.target;
        if !seq.kv.drop_lost_device(|space| target.holds(space)) || seq.is_empty() {
            return Ok(());
        }
        let tokens = std::mem::take(&mut seq.tokens);
        log::warn!(
            "recomputing {} positions whose KV rows were on a lost device",
            tokens.len()
        );
        if let Some(last) = self.failovers.last_mut() {
            last.recomputed += tokens.len();
        }
        self.forward(seq, &tokens).map(drop)
    }

    /// The plan of a batched step: the arm one sequence decodes on (the decode gate's
    /// current arm, else the capability-greedy baseline), so a sequence gets the same
    /// tokens whether or not others share its steps. Every backend that runs attention
    /// runs it per segment (the GPU over its paged pool), so any arm takes a batch.
    fn batch_arm(&self) -> Arm {
        self.coexec.active(1).unwrap_or(Arm::Baseline)
    }

    /// Refuses `tokens` that are empty, overflow `seq`'s context or leave the vocabulary.
    fn check_tokens(&self, seq: &Sequence, tokens: &[u32]) -> Result<(), StepError> {
        if tokens.is_empty() {
            return Err(StepError::Input("no tokens to evaluate".into()));
        }
        let needed = seq.len().saturating_add(tokens.len());
        if needed > seq.context {
            return Err(StepError::ContextFull {
                needed,
                context: seq.context,
            });
        }
        let vocab = self.target.model().vocab_size() as u32;
        if let Some(&bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(StepError::Input(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        Ok(())
    }

    /// The executor of one step of `bucket` token rows and `sequences` logits rows
    /// (or the tokens `pick` takes from them) run as `arm`, compiled on a miss.
    fn executor(
        &mut self,
        phase: Phase,
        bucket: usize,
        sequences: usize,
        pick: Pick,
        arm: Arm,
    ) -> Result<Arc<Executor>, StepError> {
        let step = StepKey {
            model: self.target.model().fingerprint(),
            phase,
            bucket: bucket as u32,
            sequences: sequences as u32,
            pick,
            backends: self.target.fingerprint(),
            arm: match arm {
                Arm::Baseline => StepArm::Baseline,
                Arm::Split => StepArm::Split {
                    ratios: self.coexec.split_signature(),
                },
                Arm::Only(b) => StepArm::Only(b),
            },
        };
        let (target, coexec) = (&self.target, &self.coexec);
        let context = CompileContext {
            backends: target.backends(),
            policy: target.policy(),
            weights: target.store(),
        };
        let before = self.cache.stats();
        let executor = get_or_compile_plan(&mut self.cache, &step, &context, || {
            let graph = target.graph(bucket, sequences, pick)?;
            arms::plan_arm(&graph, arm, target, coexec)
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
            self.placement[matches!(phase, Phase::Decode) as usize] =
                placed(executor.plan(), self.target.backends());
        }
        Ok(executor)
    }
}

/// One sequence's share of a step: its new tokens and what it wants read back.
struct Share<'s> {
    seq: &'s mut Sequence,
    tokens: &'s [u32],
    wants: Returns,
}

/// Rows of a batched step of `tokens` tokens (and of its logits, one per sequence): a
/// power of two up to [`STEP_BUCKET_GRAIN`], then whole multiples of it, so that a
/// prompt chunk riding with a few decodes (64 + 15) pads to 80 rows rather than 128,
/// and 16 decodes with 8 prompt tokens to 24 rather than 32 (decision 116). The
/// scheduler sizes prompt chunks to fill the bucket its step lands in. No rows pad to
/// none (a step where no sequence wants logits has no logits rows).
pub fn step_bucket(tokens: usize) -> usize {
    if tokens == 0 {
        0
    } else if tokens <= STEP_BUCKET_GRAIN {
        tokens.next_power_of_two()
    } else {
        tokens.next_multiple_of(STEP_BUCKET_GRAIN)
    }
}

/// Granularity of batched step buckets past the small powers of two: 8, since past 16
/// rows a step's products are bound by arithmetic, so each padded row costs a real one
/// (decision 116).
const STEP_BUCKET_GRAIN: usize = 8;

/// Compute nodes per backend name in `plan`.
fn placed(plan: &crate::plan::Plan, backends: &BackendSet) -> Placed {
    let mut placed = Placed::new();
    for (node, at) in plan.graph.nodes().iter().zip(&plan.placement) {
        let kind = node.op.kind();
        if let (Placement::On(b), false) = (
            at,
            kind.is_source() || kind == crate::graph::OpKind::Transfer,
        ) {
            *placed.entry(backends.name_of(*b)).or_default() += 1;
        }
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::step_bucket;

    #[test]
    fn batched_steps_pad_to_powers_of_two_then_multiples_of_eight() {
        let got: Vec<usize> = [0, 1, 3, 5, 8, 9, 16, 17, 24, 25, 79, 80, 256]
            .iter()
            .map(|&n| step_bucket(n))
            .collect();
        assert_eq!(got, [0, 1, 4, 8, 8, 16, 16, 24, 24, 32, 80, 80, 256]);
    }
}
