//! Continuous batching: requests wait in arrival order, join and leave at step
//! boundaries; every step evaluates one token of each decoding sequence plus prompt
//! chunks of newly admitted ones (a scored prompt's among them), within a token budget,
//! so running streams keep a bounded time per token.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::prefix::{PrefixCache, PrefixStats, Scores};
use crate::decode::sampler::{Sampler, SamplerConfig};
use crate::model::tokenizer::Tokenizer;
use rayon::prelude::*;

use crate::decode::{token_logprobs, Decoding, GenerateOptions, Generation, TokenLogprobs};
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
enum Fit {
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
    /// Score the prompt too (a completion's `echo` with `logprobs`), with this many most
    /// likely tokens per place: its chunks return every row's logits, and the scores
    /// come as [`Event::Prompt`] before any text.
    pub score: Option<usize>,
}

/// What the scheduler tells its caller about a request.
pub enum Event<'a> {
    /// Its prompt's tokens after the first, each with its log-probability given those
    /// before it, once its prompt is evaluated (only when [`Request::score`] asked);
    /// the callback's answer is not read.
    Prompt {
        /// One entry per prompt token after the first.
        logprobs: &'a [TokenLogprobs],
    },
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
    /// device's limit, our bug) and is this request's own: a failed batched step is
    /// run again one sequence at a time before any sequence fails. A request that
    /// cannot run (empty prompt, too long, bad sampler settings) ends here when its
    /// turn to join comes. A generation's time to first token counts from its
    /// submission (its wait for room included).
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

/// A submitted request waiting for room, with its owner's handle.
struct Waiting<C> {
    client: C,
    request: Request,
    submitted: Instant,
}

/// A running sequence, with its owner's handle.
struct Slot<'t, C> {
    client: C,
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
    /// Its prompt's scores so far (one per evaluated position, but for the last one),
    /// when it is scored.
    scores: Option<Scores>,
    /// Submission to admission.
    waited: Duration,
}

impl<C> Slot<'_, C> {
    /// What its share of the next step evaluates, given `budget` prompt tokens left
    /// (taken from it), and what the step returns for it.
    fn share(&mut self, budget: &mut usize) -> (Vec<u32>, Returns) {
        let head = self.decoding.head(&mut self.sampler);
        if let Some(token) = self.next {
            return (vec![token], head);
        }
        // A scored token weighs two against the budget and the chunk: its row and its
        // logits row (the head and the scoring cost about half a row more, so a scored
        // chunk's step costs no more than another prompt's: decision 188). At least one
        // token while the step has room, so a scored prompt never starves.
        let weight = if self.scores.is_some() { 2 } else { 1 };
        let rows = (*budget / weight).max(usize::from(*budget > 0));
        let take = (self.prompt.len() - self.prefilled)
            .min(PREFILL_CHUNK / weight)
            .min(rows);
        *budget = budget.saturating_sub(take * weight);
        let end = self.prefilled + take;
        // A scored prompt's chunks return every row; another's last chunk returns its
        // logits, or only its token when greedy decoding needs nothing else (decision
        // 147), and the chunks before it nothing.
        let returns = match (self.scores.is_some(), end == self.prompt.len()) {
            (true, _) => Returns::Every,
            (false, true) => head,
            (false, false) => Returns::Nothing,
        };
        (self.prompt[self.prefilled..end].to_vec(), returns)
    }
}

/// Owns every request from its submission to its last token: those waiting for room,
/// in arrival order, and the running sequences it steps together through a [`Runner`].
/// `C` is the request's owner's handle (a connection, an id), given back with each of
/// its events.
pub struct Scheduler<'t, C> {
    tokenizer: &'t Tokenizer,
    limits: Limits,
    waiting: VecDeque<Waiting<C>>,
    slots: Vec<Slot<'t, C>>,
    prefixes: PrefixCache,
}

/// Prompts a scheduler remembers for prefix reuse unless told otherwise (each holds
/// its prompt's KV blocks, shared with whatever forked it: 64 prompts of a few hundred
/// tokens of the default model hold tens of MiB).
pub const DEFAULT_PREFIXES: usize = 64;

impl<'t, C> Scheduler<'t, C> {
    /// An empty scheduler decoding text with `tokenizer`.
    pub fn new(tokenizer: &'t Tokenizer, limits: Limits) -> Scheduler<'t, C> {
        Scheduler {
            tokenizer,
            limits,
            waiting: VecDeque::new(),
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
    fn fits(&self, request: &Request) -> Fit {
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

    /// Requests waiting for room.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no request waits or runs.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.slots.is_empty()
    }

    /// Queues `request` for `client`: it joins at a step boundary, after those
    /// submitted before it, once there is room ([`Scheduler::admit`]).
    pub fn submit(&mut self, client: C, request: Request) {
        self.waiting.push_back(Waiting {
            client,
            request,
            submitted: Instant::now(),
        });
    }

    /// Admits waiting requests in arrival order while the first of them fits (a free
    /// slot, KV positions under a budget); one that cannot run ends at once through
    /// `on_event` without touching the others. Returns how many joined.
    pub fn admit(
        &mut self,
        runner: &Runner,
        on_event: &mut dyn FnMut(&C, Event<'_>) -> bool,
    ) -> usize {
        let mut joined = 0;
        while let Some(head) = self.waiting.front() {
            let refused = match self.fits(&head.request) {
                Fit::Later => break,
                Fit::Never { needed, budget } => Some(ModelError::Input(format!(
                    "the request needs {needed} KV positions (prompt plus max_tokens) but the KV memory holds {budget}; lower max_tokens or raise --kv-memory"
                ))),
                Fit::Now => None,
            };
            let Some(Waiting {
                client,
                request,
                submitted,
            }) = self.waiting.pop_front()
            else {
                break;
            };
            let started = match refused {
                Some(e) => Err(e),
                None => self.start(runner, request, submitted),
            };
            match started {
                Ok(slot) => {
                    self.slots.push(slot(client));
                    joined += 1;
                }
                Err(e) => {
                    on_event(&client, Event::Done(Err(e)));
                }
            }
        }
        joined
    }

    /// The running sequence for `request` (given its client), from the longest
    /// remembered prefix of its prompt; refuses a request that cannot run (empty
    /// prompt, too long for the context, bad sampler settings).
    fn start(
        &mut self,
        runner: &Runner,
        request: Request,
        submitted: Instant,
    ) -> Result<impl FnOnce(C) -> Slot<'t, C>, ModelError> {
        let reserved = positions(&request);
        let sampler = Sampler::new(request.sampler)?;
        let lookup = self.prefixes.lookup(&request.prompt, request.score);
        let (seq, prefilled, scored) = match lookup {
            Some(reused) => (reused.seq, reused.len, reused.scores),
            None => (runner.new_sequence()?, 0, Vec::new()),
        };
        let decoding = Decoding::new(
            self.tokenizer,
            &request.prompt,
            request.options,
            seq.context(),
        )?;
        let scores = request.score.map(|top| Scores {
            top,
            logprobs: scored,
        });
        let waited = submitted.elapsed();
        Ok(move |client| Slot {
            client,
            seq,
            prompt: request.prompt,
            reserved,
            prefilled,
            next: None,
            decoding,
            sampler,
            scores,
            waited,
        })
    }

    /// Ends every waiting and running request without an event (the caller reports
    /// them), e.g. when the server stops; returns their clients, waiting ones first.
    pub fn abort_all(&mut self) -> Vec<C> {
        let waiting = self.waiting.drain(..).map(|w| w.client);
        let running = self.slots.drain(..).map(|s| s.client);
        waiting.chain(running).collect()
    }

    /// Ends every running sequence without an event and forgets every cached prefix:
    /// after a step panicked, nothing it may have half-written is used again. Waiting
    /// requests stay. Returns the running sequences' clients.
    pub fn reset(&mut self) -> Vec<C> {
        self.prefixes.clear();
        self.slots.drain(..).map(|s| s.client).collect()
    }

    /// Ends the requests whose clients `gone` says have left: a waiting one silently,
    /// a running one as cancelled, reporting its end through `on_event`.
    pub fn cancel_where(
        &mut self,
        gone: impl Fn(&C) -> bool,
        on_event: &mut dyn FnMut(&C, Event<'_>) -> bool,
    ) {
        self.waiting.retain(|w| !gone(&w.client));
        let mut i = 0;
        while i < self.slots.len() {
            if !gone(&self.slots[i].client) {
                i += 1;
                continue;
            }
            let mut slot = self.slots.remove(i);
            let scores = slot.scores.as_ref();
            self.prefixes.insert(&slot.prompt, &mut slot.seq, scores);
            let mut quiet = |_: &str, _: &[TokenLogprobs]| false;
            let result = slot.decoding.finish(&mut quiet);
            on_event(&slot.client, Event::Done(timed(result, slot.waited)));
        }
    }

    /// Admits what waits and fits ([`Scheduler::admit`]), then runs one step over the
    /// running sequences: one token of each decoding one, then prompt chunks in arrival
    /// order while the token budget lasts (a scored prompt's chunks among them, with a
    /// logits row per token). Streams scores, text and ends through `on_event` (whose
    /// `false` to a piece of text cancels that request).
    pub fn step(
        &mut self,
        runner: &mut Runner,
        on_event: &mut dyn FnMut(&C, Event<'_>) -> bool,
    ) -> StepReport {
        self.admit(runner, on_event);
        let decodes = self.slots.iter().filter(|s| s.next.is_some()).count();
        let mut budget = self.limits.prompt_budget(decodes);
        // Per slot, the tokens it evaluates this step (empty: waits) and what it gets.
        let plan: Vec<(Vec<u32>, Returns)> = self
            .slots
            .iter_mut()
            .map(|s| s.share(&mut budget))
            .collect();
        let mut report = StepReport::default();
        let mut work: Vec<Work<'_>> = Vec::new();
        let mut stepped = Vec::new();
        // The constrained sequences that draw after this step, whose masks are computed
        // beside the forward pass (decision 157).
        let mut masks: Vec<&mut Decoding<'t>> = Vec::new();
        for (i, (slot, (tokens, returns))) in self.slots.iter_mut().zip(&plan).enumerate() {
            if tokens.is_empty() {
                continue;
            }
            report.sequences += 1;
            report.tokens += tokens.len();
            if slot.next.is_none() {
                report.prompt_tokens += tokens.len();
            }
            stepped.push(i);
            let draws = slot.next.is_some() || slot.prefilled + tokens.len() == slot.prompt.len();
            if draws && slot.decoding.constrained() {
                masks.push(&mut slot.decoding);
            }
            work.push(Work {
                seq: &mut slot.seq,
                tokens,
                returns: *returns,
            });
        }
        if work.is_empty() {
            return report;
        }
        let result = match masks.is_empty() {
            true => runner.forward_batch(&mut work),
            // The masks one after another on one scoped thread, not rayon's pool, whose
            // threads would contend with the forward pass's for the cores (decision 180).
            false => std::thread::scope(|scope| {
                let masking = scope.spawn(|| masks.iter_mut().for_each(|d| d.prepare()));
                let result = runner.forward_batch(&mut work);
                // A mask left unprepared (a panic there) is computed again when drawn.
                let _ = masking.join();
                result
            }),
        };
        drop(work);
        // Per stepped sequence, where its rows are (which output, which first row), or
        // why its step failed. A failed batch of several is run again one sequence at a
        // time, so only the sequences whose own step fails get an error (decision 173).
        let mut outputs = Vec::new();
        let mut outcomes: Vec<Result<(usize, usize), ModelError>> = Vec::new();
        match result {
            Ok(output) => {
                outputs.push(output);
                let mut row = 0;
                for &i in &stepped {
                    outcomes.push(Ok((0, row)));
                    let (tokens, returns) = &plan[i];
                    row += returns.rows(tokens.len());
                }
            }
            Err(e) if stepped.len() == 1 => outcomes.push(Err(e.into())),
            Err(e) => {
                log::warn!(
                    "a batched step of {} sequences failed ({e}); running each alone",
                    stepped.len()
                );
                for &i in &stepped {
                    let seq = &mut self.slots[i].seq;
                    let (tokens, returns) = &plan[i];
                    let mut alone = [Work {
                        seq,
                        tokens,
                        returns: *returns,
                    }];
                    match runner.forward_batch(&mut alone) {
                        Ok(output) => {
                            outcomes.push(Ok((outputs.len(), 0)));
                            outputs.push(output);
                        }
                        Err(e) => outcomes.push(Err(e.into())),
                    }
                }
            }
        }
        let rows: Vec<Vec<Returned<'_>>> = outputs.iter().map(|o| o.iter().collect()).collect();
        let mut ended = Vec::new();
        for (&i, outcome) in stepped.iter().zip(outcomes) {
            let at = outcome.and_then(|(output, row)| {
                let (tokens, returns) = &plan[i];
                let mine = rows[output].get(row..row + returns.rows(tokens.len()));
                let mine = mine.ok_or_else(|| {
                    ModelError::internal("a batched step returned too few logits")
                })?;
                self.slots[i].advance(tokens.len(), mine, &mut self.prefixes, on_event)
            });
            match at {
                Ok(true) => {}
                Ok(false) => ended.push((i, None)),
                Err(e) => ended.push((i, Some(e))),
            }
        }
        for (i, error) in ended.into_iter().rev() {
            let mut slot = self.slots.remove(i);
            let result = match error {
                Some(e) => Err(e),
                None => {
                    let scores = slot.scores.as_ref();
                    self.prefixes.insert(&slot.prompt, &mut slot.seq, scores);
                    let client = &slot.client;
                    let mut on_piece = |text: &str, logprobs: &[TokenLogprobs]| {
                        on_event(client, Event::Text { text, logprobs })
                    };
                    slot.decoding.finish(&mut on_piece)
                }
            };
            on_event(&slot.client, Event::Done(timed(result, slot.waited)));
        }
        report
    }
}

impl<C> Slot<'_, C> {
    /// Takes what a step returned for this sequence's `evaluated` tokens (`rows`: its
    /// logits rows, one per [`Returns::rows`]): a prompt chunk's scores, then, once its
    /// prompt is in, the scores' event, the prompt remembered for reuse, and a token
    /// drawn. Returns whether it goes on.
    fn advance(
        &mut self,
        evaluated: usize,
        rows: &[Returned<'_>],
        prefixes: &mut PrefixCache,
        on_event: &mut dyn FnMut(&C, Event<'_>) -> bool,
    ) -> Result<bool, ModelError> {
        if self.next.is_none() {
            let start = self.prefilled;
            self.prefilled += evaluated;
            if let Some(scores) = &mut self.scores {
                score(&self.prompt, start, self.prefilled, rows, scores)?;
            }
            if self.prefilled < self.prompt.len() {
                return Ok(true);
            }
            if let Some(scores) = &self.scores {
                on_event(
                    &self.client,
                    Event::Prompt {
                        logprobs: &scores.logprobs,
                    },
                );
            }
            prefixes.insert_running(&self.prompt, &mut self.seq, self.scores.as_ref());
        }
        let Some(&returned) = rows.last() else {
            return Err(ModelError::internal(
                "a step returned no logits to draw from",
            ));
        };
        let client = &self.client;
        let mut on_piece = |text: &str, logprobs: &[TokenLogprobs]| {
            on_event(client, Event::Text { text, logprobs })
        };
        let token = self
            .decoding
            .accept(returned, &mut self.sampler, &mut on_piece)?;
        self.next = token;
        Ok(token.is_some())
    }
}

/// Scores the prompt tokens after positions `start..end` of `prompt` from their logits
/// `rows` (the last position's row, when `end` is the whole prompt, is the first draw's),
/// appending to `scores`; the rows are scored in parallel.
fn score(
    prompt: &[u32],
    start: usize,
    end: usize,
    rows: &[Returned<'_>],
    scores: &mut Scores,
) -> Result<(), ModelError> {
    let scored = end.min(prompt.len() - 1).saturating_sub(start);
    let logits: Option<Vec<&[f32]>> = rows.iter().take(scored).map(|r| r.logits()).collect();
    let logits = match logits {
        Some(logits) if logits.len() == scored => logits,
        _ => {
            return Err(ModelError::internal(
                "a scored chunk returned too few logits",
            ))
        }
    };
    let next = &prompt[start + 1..start + 1 + scored];
    let top = scores.top;
    let fresh: Vec<TokenLogprobs> = logits
        .par_iter()
        .zip(next.par_iter())
        .map(|(logits, &token)| token_logprobs(logits, token, top))
        .collect();
    scores.logprobs.extend(fresh);
    Ok(())
}

/// A generation's result with its wait for room counted in its time to first token.
fn timed(
    result: Result<Generation, ModelError>,
    waited: Duration,
) -> Result<Generation, ModelError> {
    result.map(|mut generation| {
        generation.timings.ttft_ms += waited.as_secs_f64() * 1e3;
        generation
    })
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
