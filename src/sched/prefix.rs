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

use crate::backend::KV_BLOCK;
use crate::step::Sequence;

/// A remembered prompt.
struct Entry {
    tokens: Vec<u32>,
    seq: Sequence,
    used: u64,
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
    /// token to evaluate, as a new sequence holding it, with its length.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<(Sequence, usize)> {
        self.stats.lookups += 1;
        let most = prompt.len().saturating_sub(1);
        let (at, len) = self
            .entries
            .iter()
            .enumerate()
            .map(|(at, e)| (at, shared(&e.tokens, prompt).min(most)))
            .max_by_key(|&(at, len)| (len, self.entries[at].used))
            .filter(|&(_, len)| len > 0)?;
        let entry = &mut self.entries[at];
        let seq = entry.seq.fork(len).ok()?;
        self.clock += 1;
        entry.used = self.clock;
        self.stats.hits += 1;
        self.stats.reused_tokens += len as u64;
        Some((seq, len))
    }

    /// Remembers the whole KV blocks of `prompt` that `seq` holds, `seq` going on to
    /// generate after it: see the module's documentation.
    pub fn insert_running(&mut self, prompt: &[u32], seq: &mut Sequence) {
        let whole = prompt.len().min(seq.len()) / KV_BLOCK * KV_BLOCK;
        self.insert(&prompt[..whole], seq);
    }

    /// Remembers `prompt` as far as `seq` (which has evaluated it) holds it. A
    /// remembered prompt that already starts with it is only marked used; one that it
    /// extends (an earlier turn of the same chat) is replaced.
    pub fn insert(&mut self, prompt: &[u32], seq: &mut Sequence) {
        let held = prompt.len().min(seq.len());
        if self.capacity == 0 || held == 0 {
            return;
        }
        let tokens = &prompt[..held];
        self.clock += 1;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.tokens.starts_with(tokens))
        {
            e.used = self.clock;
            return;
        }
        let Ok(fork) = seq.fork(held) else { return };
        self.entries.retain(|e| !tokens.starts_with(&e.tokens));
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            seq: fork,
            used: self.clock,
        });
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
