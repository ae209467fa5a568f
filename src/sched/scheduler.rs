//! Continuous batching: sequences join and leave at step boundaries; every step
//! evaluates one token of each decoding sequence plus prompt chunks of newly admitted
//! ones, within a token budget, so running streams keep a bounded time per token.

use super::prefix::{PrefixCache, PrefixStats};
use crate::decode::sampler::{Sampler, SamplerConfig};
use crate::model::tokenizer::Tokenizer;
use rayon::prelude::*;

use crate::decode::{Decoding, GenerateOptions, Generation, TokenLogprobs};
use crate::model::ModelError;
use crate::step::{
    step_bucket, Returned, Returns, Runner, Sequence, Work, MAX_STEP_TOKENS, PREFILL_CHUNK,
};

/// How much the scheduler runs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    parallel: usize,
    prefill_tokens: usize,
    kv_positions: Option<usize>,
}

/// Prompt tokens a step takes while other sequences decode, unless told otherwise: 8,
/// so that 16 decoding streams with a prompt riding along step 24 rows rather than 32
/// (decisions 96 and 116), while new requests still get their first token well within a
/// second.
pub const DEFAULT_PREFILL_TOKENS: usize = 8;

impl Limits {
    /// At most `parallel` sequences at once. While more than half of them decode, a step
    /// takes `prefill_tokens` prompt tokens besides their decodes, or as many more as
    /// fill the rows the step is padded to anyway ([`step_bucket`]), so their time per
    /// token stays bounded; with half or fewer decoding, prompts fill a whole step
    /// ([`MAX_STEP_TOKENS`]).
    pub fn new(parallel: usize, prefill_tokens: usize) -> Result<Limits, String> {
        if parallel == 0 {
            return Err("the number of parallel sequences must be at least 1".into());
        }
        if parallel > MAX_STEP_TOKENS - PREFILL_CHUNK {
            return Err(format!(
                "at most {} sequences can run in parallel, got {parallel}",
                MAX_STEP_TOKENS - PREFILL_CHUNK
            ));
        }
        // `prefill_tokens` comes from the command line: a huge one must not wrap the sum.
        if prefill_tokens == 0
            || parallel
                .checked_add(prefill_tokens)
                .is_none_or(|sum| sum > MAX_STEP_TOKENS)
        {
            return Err(format!(
                "prompt tokens per step must be between 1 and {} with {parallel} in parallel, got {prefill_tokens}",
                MAX_STEP_TOKENS - parallel
            ));
        }
        Ok(Limits {
            parallel,
            prefill_tokens,
            kv_positions: None,
        })
    }

    /// The same limits admitting a sequence only while every running one's prompt plus
    /// `max_tokens` fits in `positions` KV positions in all (`--kv-memory`), so the
    /// cache can never run out mid-generation; a request that would not fit waits.
    pub fn with_kv_positions(self, positions: usize) -> Limits {
        Limits {
            kv_positions: Some(positions),
            ..self
        }
    }

    /// `parallel` sequences with the default prompt tokens per step.
    pub fn parallel(parallel: usize) -> Result<Limits, String> {
        Limits::new(
            parallel,
            DEFAULT_PREFILL_TOKENS.min(MAX_STEP_TOKENS - parallel),
        )
    }

    /// Most sequences at once.
    pub fn max_parallel(&self) -> usize {
        self.parallel
    }

    /// Prompt tokens a step with `decodes` decoding sequences takes. While more than
    /// half of `parallel` decode: `prefill_tokens`, plus whatever else fits in the rows
    /// that step is padded to (16 decodes and 8 prompt tokens: 8; 13 decodes: 11), so
    /// their time per token stays bounded. With half or fewer decoding, most of the batch
    /// is waiting in its prompts: they fill the whole step, so the batch fills at once
    /// rather than one sequence every step or two (decision 122). Never past
    /// [`MAX_STEP_TOKENS`]: `new` keeps `parallel + prefill_tokens` within it, a multiple
    /// of every bucket's grain.
    fn prompt_budget(&self, decodes: usize) -> usize {
        if 2 * decodes <= self.parallel {
            MAX_STEP_TOKENS - decodes
        } else {
            step_bucket(decodes + self.prefill_tokens) - decodes
        }
    }
}

/// Whether a request can join now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// It can be admitted.
    Now,
    /// Not until running sequences end (no sequence slot, or not enough KV positions).
    Later,
    /// Never: it needs more KV positions than the whole budget.
    Never {
        /// Positions it needs (prompt plus `max_tokens`).
        needed: usize,
        /// The budget.
        budget: usize,
    },
}

/// One generation to schedule.
pub struct Request {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Token limit, stop strings and ids.
    pub options: GenerateOptions,
    /// How to pick tokens.
    pub sampler: SamplerConfig,
}

/// What the scheduler tells its caller about a sequence.
pub enum Event<'a> {
    /// A new piece of its text, with the log-probabilities of the tokens generated since
    /// the previous piece when its options ask for them (the text may then be empty);
    /// the callback returns `false` to cancel it.
    Text {
        /// The text.
        text: &'a str,
        /// One entry per token, in order.
        logprobs: &'a [TokenLogprobs],
    },
    /// It ended; its last event. A failure keeps its kind (the request's mistake, a
    /// device's limit, our bug) and is this sequence's own: a failed batched step is
    /// run again one sequence at a time before any sequence fails.
    Done(Result<Generation, ModelError>),
}

/// What one step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Sequences in the step.
    pub sequences: usize,
    /// Tokens evaluated (decodes plus prompt chunks).
    pub tokens: usize,
    /// Of those, prompt tokens.
    pub prompt_tokens: usize,
}

/// A running sequence.
struct Slot<'t> {
    id: u64,
    seq: Sequence,
    prompt: Vec<u32>,
    /// KV positions reserved for it: its prompt plus `max_tokens`.
    reserved: usize,
    /// Prompt tokens already evaluated.
    prefilled: usize,
    /// The token to feed next, once decoding.
    next: Option<u32>,
    decoding: Decoding<'t>,
    sampler: Sampler,
}

/// Owns the running sequences and steps them together through a [`Runner`].
pub struct Scheduler<'t> {
    tokenizer: &'t Tokenizer,
    limits: Limits,
    slots: Vec<Slot<'t>>,
    prefixes: PrefixCache,
}

/// Prompts a scheduler remembers for prefix reuse unless told otherwise (each holds
/// its prompt's KV blocks, shared with whatever forked it: 64 prompts of a few hundred
/// tokens of the default model hold tens of MiB).
pub const DEFAULT_PREFIXES: usize = 64;

impl<'t> Scheduler<'t> {
    /// An empty scheduler decoding text with `tokenizer`.
    pub fn new(tokenizer: &'t Tokenizer, limits: Limits) -> Scheduler<'t> {
        Scheduler {
            tokenizer,
            limits,
            slots: Vec::new(),
            prefixes: PrefixCache::new(DEFAULT_PREFIXES),
        }
    }

    /// The prefix cache's counters.
    pub fn prefix_stats(&self) -> PrefixStats {
        self.prefixes.stats()
    }

    /// Whether another sequence can join (a sequence slot is free).
    pub fn has_room(&self) -> bool {
        self.slots.len() < self.limits.parallel
    }

    /// Whether `request` can join now: a free slot and, under a KV budget, room for
    /// its prompt plus `max_tokens` beside what the running sequences reserved.
    pub fn fits(&self, request: &Request) -> Fit {
        let needed = positions(request);
        match self.limits.kv_positions {
            Some(budget) if needed > budget => Fit::Never { needed, budget },
            Some(budget) if self.kv_reserved().saturating_add(needed) > budget => Fit::Later,
            _ if !self.has_room() => Fit::Later,
            _ => Fit::Now,
        }
    }

    /// KV positions the running sequences reserve (each its prompt plus `max_tokens`).
    pub fn kv_reserved(&self) -> usize {
        self.slots
            .iter()
            .fold(0, |sum, s| sum.saturating_add(s.reserved))
    }

    /// KV positions a new request can still reserve under a `--kv-memory` budget
    /// (`None` without one: then only free slots bound admission).
    pub fn kv_free(&self) -> Option<usize> {
        self.limits
            .kv_positions
            .map(|budget| budget.saturating_sub(self.kv_reserved()))
    }

    /// Bytes the running sequences' KV caches hold now (blocks shared with the prefix
    /// cache or each other counted once per sequence).
    pub fn kv_bytes(&self) -> usize {
        self.slots.iter().map(|s| s.seq.kv_bytes()).sum()
    }

    /// Sequences running.
    pub fn running(&self) -> usize {
        self.slots.len()
    }

    /// Adds a sequence that joins the next step; refuses a request that cannot run
    /// (empty prompt, too long for the context, bad sampler settings) without
    /// touching the others.
    pub fn admit(&mut self, runner: &Runner, id: u64, request: Request) -> Result<(), ModelError> {
        match self.fits(&request) {
            Fit::Now => {}
            // Callers wait while `fits` says `Later`; admitting anyway is their bug.
            Fit::Later => {
                return Err(ModelError::internal(format!(
                    "no room: {} sequences run, reserving {} KV positions",
                    self.slots.len(),
                    self.kv_reserved()
                )))
            }
            Fit::Never { needed, budget } => {
                return Err(ModelError::Input(format!(
                    "the request needs {needed} KV positions (prompt plus max_tokens) but the KV memory holds {budget}; lower max_tokens or raise --kv-memory"
                )))
            }
        }
        let reserved = positions(&request);
        let sampler = Sampler::new(request.sampler)?;
        let (seq, prefilled) = match self.prefixes.lookup(&request.prompt) {
            Some((seq, reused)) => (seq, reused),
            None => (runner.new_sequence()?, 0),
        };
        let decoding = Decoding::new(
            self.tokenizer,
            &request.prompt,
            request.options,
            seq.context(),
        )?;
        self.slots.push(Slot {
            id,
            seq,
            prompt: request.prompt,
            reserved,
            prefilled,
            next: None,
            decoding,
            sampler,
        });
        Ok(())
    }

    /// Ends every running sequence without an event (the caller reports them), e.g.
    /// after a step panicked; returns their ids.
    pub fn abort_all(&mut self) -> Vec<u64> {
        self.slots.drain(..).map(|s| s.id).collect()
    }

    /// Ends every running sequence like [`Scheduler::abort_all`] and forgets every
    /// cached prefix: after a step panicked, nothing it may have half-written is used
    /// again. Returns the running sequences' ids.
    pub fn reset(&mut self) -> Vec<u64> {
        self.prefixes.clear();
        self.abort_all()
    }

    /// Runs one step over the running sequences: one token of each decoding one, then
    /// prompt chunks in arrival order while the token budget lasts. Streams text and
    /// ends through `on_event` (whose `false` cancels that sequence).
    pub fn step(
        &mut self,
        runner: &mut Runner,
        on_event: &mut dyn FnMut(u64, Event<'_>) -> bool,
    ) -> StepReport {
        // Per slot, the tokens it evaluates this step (empty: waits).
        let plan_decodes = self
            .slots
            .iter()
            .map(|s| s.next.map_or_else(Vec::new, |t| vec![t]));
        let mut plan: Vec<Vec<u32>> = plan_decodes.collect();
        let decodes = plan.iter().filter(|p| !p.is_empty()).count();
        let mut budget = self.limits.prompt_budget(decodes);
        for (slot, tokens) in self.slots.iter().zip(plan.iter_mut()) {
            if slot.next.is_none() && budget > 0 {
                let take = (slot.prompt.len() - slot.prefilled)
                    .min(PREFILL_CHUNK)
                    .min(budget);
                *tokens = slot.prompt[slot.prefilled..slot.prefilled + take].to_vec();
                budget -= take;
            }
        }
        let mut report = StepReport::default();
        let mut work: Vec<Work<'_>> = Vec::new();
        let mut stepped = Vec::new();
        // The constrained sequences that draw after this step, whose masks are computed
        // beside the forward pass (decision 157).
        let mut masks: Vec<&mut Decoding<'t>> = Vec::new();
        for (i, (slot, tokens)) in self.slots.iter_mut().zip(&plan).enumerate() {
            if tokens.is_empty() {
                continue;
            }
            report.sequences += 1;
            report.tokens += tokens.len();
            if slot.next.is_none() {
                report.prompt_tokens += tokens.len();
            }
            // A decode, or its prompt's last chunk: the step returns its logits, or only
            // its token when greedy decoding needs nothing else (decision 147).
            let logits = slot.next.is_some() || slot.prefilled + tokens.len() == slot.prompt.len();
            let returns = match logits {
                false => Returns::Nothing,
                true if slot.decoding.greedy_only(&slot.sampler) => Returns::Token,
                true => Returns::Logits,
            };
            stepped.push((i, returns));
            if logits && slot.decoding.constrained() {
                masks.push(&mut slot.decoding);
            }
            work.push(Work {
                seq: &mut slot.seq,
                tokens,
                returns,
            });
        }
        if work.is_empty() {
            return report;
        }
        let result = match masks.is_empty() {
            true => runner.forward_batch(&mut work),
            false => std::thread::scope(|scope| {
                let masking = scope.spawn(|| masks.par_iter_mut().for_each(|d| d.prepare()));
                let result = runner.forward_batch(&mut work);
                // A mask left unprepared (a panic there) is computed again when drawn.
                let _ = masking.join();
                result
            }),
        };
        drop(work);
        // Per stepped sequence, where its return is (which output, which row), or why
        // its step failed. A failed batch of several is run again one sequence at a
        // time, so only the sequences whose own step fails get an error (decision 173).
        let mut outputs = Vec::new();
        let mut outcomes: Vec<Result<(usize, usize), ModelError>> = Vec::new();
        match result {
            Ok(output) => {
                outputs.push(output);
                let mut row = 0;
                for &(_, returns) in &stepped {
                    outcomes.push(Ok((0, row)));
                    row += usize::from(returns.head());
                }
            }
            Err(e) if stepped.len() == 1 => outcomes.push(Err(e.into())),
            Err(e) => {
                log::warn!(
                    "a batched step of {} sequences failed ({e}); running each alone",
                    stepped.len()
                );
                for &(i, returns) in &stepped {
                    let seq = &mut self.slots[i].seq;
                    let tokens = &plan[i];
                    match runner.forward_batch(&mut [Work {
                        seq,
                        tokens,
                        returns,
                    }]) {
                        Ok(alone) => {
                            outcomes.push(Ok((outputs.len(), 0)));
                            outputs.push(alone);
                        }
                        Err(e) => outcomes.push(Err(e.into())),
                    }
                }
            }
        }
        let rows: Vec<Vec<Returned<'_>>> = outputs.iter().map(|o| o.iter().collect()).collect();
        let mut ended = Vec::new();
        for (&(i, returns), outcome) in stepped.iter().zip(outcomes) {
            let (output, row) = match outcome {
                Ok(at) => at,
                Err(e) => {
                    ended.push((i, Some(e)));
                    continue;
                }
            };
            let slot = &mut self.slots[i];
            if slot.next.is_none() {
                slot.prefilled += plan[i].len();
                if !returns.head() {
                    continue;
                }
                self.prefixes.insert_running(&slot.prompt, &mut slot.seq);
            }
            let Some(&returned) = rows[output].get(row) else {
                let missing = ModelError::internal("a batched step returned too few logits");
                ended.push((i, Some(missing)));
                continue;
            };
            let id = slot.id;
            let mut on_piece = |text: &str, logprobs: &[TokenLogprobs]| {
                on_event(id, Event::Text { text, logprobs })
            };
            match slot
                .decoding
                .accept(returned, &mut slot.sampler, &mut on_piece)
            {
                Ok(Some(token)) => slot.next = Some(token),
                Ok(None) => ended.push((i, None)),
                Err(e) => ended.push((i, Some(e))),
            }
        }
        for (i, error) in ended.into_iter().rev() {
            let mut slot = self.slots.remove(i);
            let id = slot.id;
            let result = match error {
                Some(e) => Err(e),
                None => {
                    self.prefixes.insert(&slot.prompt, &mut slot.seq);
                    let mut on_piece = |text: &str, logprobs: &[TokenLogprobs]| {
                        on_event(id, Event::Text { text, logprobs })
                    };
                    slot.decoding.finish(&mut on_piece)
                }
            };
            on_event(id, Event::Done(result));
        }
        report
    }

    /// Ends sequence `id` now as cancelled (its client left), reporting its end.
    pub fn cancel(&mut self, id: u64, on_event: &mut dyn FnMut(u64, Event<'_>) -> bool) {
        if let Some(i) = self.slots.iter().position(|s| s.id == id) {
            let mut slot = self.slots.remove(i);
            self.prefixes.insert(&slot.prompt, &mut slot.seq);
            let mut quiet = |_: &str, _: &[TokenLogprobs]| false;
            let result = slot.decoding.finish(&mut quiet);
            on_event(id, Event::Done(result));
        }
    }
}

/// KV positions a request may fill: its prompt plus its token limit.
fn positions(request: &Request) -> usize {
    request
        .prompt
        .len()
        .saturating_add(request.options.max_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt budget from the command line near `usize::MAX` is refused, not wrapped
    /// around into a small sum that passes.
    #[test]
    fn huge_prefill_budgets_are_refused_without_wrapping() {
        for prefill in [usize::MAX, usize::MAX - 1, MAX_STEP_TOKENS] {
            assert!(Limits::new(1, prefill).is_err(), "{prefill}");
        }
        assert!(Limits::new(1, MAX_STEP_TOKENS - 1).is_ok());
    }

    /// A step beside more than half a batch of decodes takes the prompt tokens it was
    /// given, or more where the rows it pads to have room; beside half or fewer, a whole
    /// step of them; never more than a step holds.
    #[test]
    fn prompt_chunks_fill_the_rows_their_step_pads_to() {
        let limits = Limits::new(16, 8).unwrap();
        let got: Vec<usize> = [0, 1, 3, 8, 9, 13, 16]
            .iter()
            .map(|&d| limits.prompt_budget(d))
            .collect();
        assert_eq!(got, [256, 255, 253, 248, 15, 11, 8]);
        for (parallel, prefill) in [(16, 1), (64, 16), (MAX_STEP_TOKENS - PREFILL_CHUNK, 64)] {
            let limits = Limits::new(parallel, prefill).unwrap();
            for decodes in 1..=parallel {
                let budget = limits.prompt_budget(decodes);
                assert!(budget >= prefill, "{parallel} {prefill} {decodes}");
                assert!(
                    decodes + budget <= MAX_STEP_TOKENS,
                    "{parallel} {prefill} {decodes}"
                );
                assert_eq!(step_bucket(decodes + budget), decodes + budget);
                if 2 * decodes > parallel {
                    assert!(decodes + budget <= step_bucket(decodes + prefill));
                }
            }
        }
    }
}
