//! Prompt-prefix reuse: each evaluated prompt is remembered as a sequence holding it; a
//! new prompt starts from a fork of the remembered one it shares the most leading
//! tokens with (its KV blocks shared, not copied, but for the block where the two part,
//! copied when the new sequence first writes into it) and evaluates only the rest, as
//! `llama-server` reuses a slot's prompt to the token. Least recently used entries go
//! first.
//!
//! While its sequence still generates, a prompt is remembered only as far as its whole
//! KV blocks go: the block the sequence writes its next tokens into stays its own, so
//! its first generated token copies nothing (sharing it cost every request a copy of
//! that block in every layer, decision 123). When the sequence ends, the whole prompt
//! is remembered, to the token.
//!
//! A scored prompt (a completion's `echo` with `logprobs`) is remembered with its
//! tokens' log-probabilities, so that a scored prompt sharing its prefix takes both the
//! KV blocks and the scores of the shared part; a prompt remembered without scores
//! serves only unscored ones (its positions' logits were never computed).

use crate::backend::KV_BLOCK;
use crate::decode::TokenLogprobs;
use crate::step::Sequence;

/// A prompt's scores: `logprobs[i]` is token `i + 1`'s log-probability given those
/// before it, with the `top` most likely tokens at its place.
#[derive(Clone, Debug, Default)]
pub(super) struct Scores {
    /// Most likely tokens kept per place.
    pub top: usize,
    /// One entry per scored token.
    pub logprobs: Vec<TokenLogprobs>,
}

impl Scores {
    /// The first `len` scores with `top` alternatives each, when these hold them.
    fn prefix(&self, len: usize, top: usize) -> Option<Scores> {
        if self.top < top || self.logprobs.len() < len {
            return None;
        }
        let logprobs = self.logprobs[..len].iter().map(|t| TokenLogprobs {
            top: t.top[..top.min(t.top.len())].to_vec(),
            ..t.clone()
        });
        Some(Scores {
            top,
            logprobs: logprobs.collect(),
        })
    }
}

/// A remembered prompt.
struct Entry {
    tokens: Vec<u32>,
    seq: Sequence,
    used: u64,
    /// Its scores (at most one fewer than its tokens), when it was scored.
    scores: Option<Scores>,
}

impl Entry {
    /// Whether this entry serves whatever one holding `tokens` with `scores` would:
    /// it starts with those tokens and holds at least those scores.
    fn covers(&self, tokens: &[u32], scores: Option<&Scores>) -> bool {
        let scored = |s: &Scores| {
            (self.scores.as_ref())
                .is_some_and(|mine| mine.top >= s.top && mine.logprobs.len() >= s.logprobs.len())
        };
        self.tokens.starts_with(tokens) && scores.is_none_or(scored)
    }
}

/// A remembered prefix a new sequence starts from.
pub(super) struct Reused {
    /// A sequence holding the prefix.
    pub seq: Sequence,
    /// Its length.
    pub len: usize,
    /// The scores of its tokens after the first and of the token after it (`len` of
    /// them) when the lookup was scored; empty otherwise.
    pub scores: Vec<TokenLogprobs>,
}

/// Counters of a [`PrefixCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Prompts looked up.
    pub lookups: u64,
    /// Lookups that found a prefix.
    pub hits: u64,
    /// Prompt tokens not evaluated thanks to hits.
    pub reused_tokens: u64,
    /// Prompts held now.
    pub entries: usize,
}

/// Remembered prompts, at most `capacity` of them.
pub struct PrefixCache {
    entries: Vec<Entry>,
    capacity: usize,
    clock: u64,
    stats: PrefixStats,
}

impl PrefixCache {
    /// An empty cache holding at most `capacity` prompts (0 turns reuse off).
    pub fn new(capacity: usize) -> PrefixCache {
        PrefixCache {
            entries: Vec::new(),
            capacity,
            clock: 0,
            stats: PrefixStats::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> PrefixStats {
        PrefixStats {
            entries: self.entries.len(),
            ..self.stats
        }
    }

    /// Forgets every prompt (their KV rows may be half-written after a failed step);
    /// the counters stay.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The longest prefix of `prompt` a remembered prompt shares, leaving at least one
    /// token to evaluate, as a new sequence holding it. A scored lookup (`score`: the
    /// alternatives it wants per place) takes only a prefix whose scores are remembered,
    /// up to and including the score of the token after it.
    pub(super) fn lookup(&mut self, prompt: &[u32], score: Option<usize>) -> Option<Reused> {
        self.stats.lookups += 1;
        let most = prompt.len().saturating_sub(1);
        let usable = |e: &Entry| {
            let common = shared(&e.tokens, prompt);
            match (score, &e.scores) {
                (None, _) => common.min(most),
                // The score of the token after the prefix is taken too: that token must
                // be shared as well.
                (Some(top), Some(s)) if s.top >= top => {
                    (common.saturating_sub(1)).min(most).min(s.logprobs.len())
                }
                (Some(_), _) => 0,
            }
        };
        let (at, len) = self
            .entries
            .iter()
            .enumerate()
            .map(|(at, e)| (at, usable(e)))
            .max_by_key(|&(at, len)| (len, self.entries[at].used))
            .filter(|&(_, len)| len > 0)?;
        let entry = &mut self.entries[at];
        let scores = match (score, &entry.scores) {
            (Some(top), Some(s)) => s.prefix(len, top)?.logprobs,
            _ => Vec::new(),
        };
        let seq = entry.seq.fork(len).ok()?;
        self.clock += 1;
        entry.used = self.clock;
        self.stats.hits += 1;
        self.stats.reused_tokens += len as u64;
        Some(Reused { seq, len, scores })
    }

    /// Remembers the whole KV blocks of `prompt` that `seq` holds (with their `scores`),
    /// `seq` going on to generate after it: see the module's documentation.
    pub(super) fn insert_running(
        &mut self,
        prompt: &[u32],
        seq: &mut Sequence,
        scores: Option<&Scores>,
    ) {
        let whole = prompt.len().min(seq.len()) / KV_BLOCK * KV_BLOCK;
        self.insert(&prompt[..whole], seq, scores);
    }

    /// Remembers `prompt` as far as `seq` (which has evaluated it) holds it, with its
    /// `scores` as far as they go inside it. A remembered prompt that already serves
    /// it is only marked used; those it serves (an earlier turn of the same chat, the
    /// same prompt unscored) are replaced.
    pub(super) fn insert(&mut self, prompt: &[u32], seq: &mut Sequence, scores: Option<&Scores>) {
        let held = prompt.len().min(seq.len());
        if self.capacity == 0 || held == 0 {
            return;
        }
        let tokens = &prompt[..held];
        let scores = scores.map(|s| Scores {
            top: s.top,
            logprobs: s.logprobs[..s.logprobs.len().min(held - 1)].to_vec(),
        });
        self.clock += 1;
        if let Some(e) = (self.entries.iter_mut()).find(|e| e.covers(tokens, scores.as_ref())) {
            e.used = self.clock;
            return;
        }
        let Ok(fork) = seq.fork(held) else { return };
        let entry = Entry {
            tokens: tokens.to_vec(),
            seq: fork,
            used: self.clock,
            scores,
        };
        self.entries
            .retain(|e| !entry.covers(&e.tokens, e.scores.as_ref()));
        self.entries.push(entry);
        while self.entries.len() > self.capacity {
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .map(|(at, _)| at);
            match oldest {
                Some(at) => self.entries.swap_remove(at),
                None => break,
            };
        }
    }
}

/// How many leading tokens `a` and `b` share.
fn shared(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
