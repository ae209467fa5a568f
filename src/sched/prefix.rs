//! Prompt-prefix reuse: sequences whose prompts were evaluated are remembered at every
//! whole [`KV_BLOCK`] of their prompt, keyed by a hash of those tokens; a new prompt
//! that starts with a remembered prefix starts from a fork of it (its KV blocks shared,
//! not copied) and evaluates only the rest. Least recently used entries go first.

use std::collections::HashMap;

use crate::backend::KV_BLOCK;
use crate::cache::fingerprint;
use crate::step::Sequence;

/// A remembered prefix.
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
    /// Prefixes held now.
    pub entries: usize,
}

/// Remembered prompt prefixes, at most `capacity` of them.
pub struct PrefixCache {
    entries: HashMap<u64, Entry>,
    capacity: usize,
    clock: u64,
    stats: PrefixStats,
}

impl PrefixCache {
    /// An empty cache holding at most `capacity` prefixes (0 turns reuse off).
    pub fn new(capacity: usize) -> PrefixCache {
        PrefixCache {
            entries: HashMap::new(),
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

    /// Forgets every prefix (their KV rows may be half-written after a failed step);
    /// the counters stay.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The longest remembered prefix of `prompt` that leaves at least one token to
    /// evaluate, as a new sequence holding it, with its length.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<(Sequence, usize)> {
        self.stats.lookups += 1;
        let longest = prompt.len().saturating_sub(1) / KV_BLOCK * KV_BLOCK;
        for len in (KV_BLOCK..=longest).rev().step_by(KV_BLOCK) {
            let key = key(&prompt[..len]);
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.tokens != prompt[..len] {
                continue;
            }
            let Ok(seq) = entry.seq.fork(len) else {
                continue;
            };
            self.clock += 1;
            entry.used = self.clock;
            self.stats.hits += 1;
            self.stats.reused_tokens += len as u64;
            return Some((seq, len));
        }
        None
    }

    /// Remembers every whole block of `prompt` that `seq` (which has evaluated it) holds.
    pub fn insert(&mut self, prompt: &[u32], seq: &mut Sequence) {
        if self.capacity == 0 {
            return;
        }
        let held = prompt.len().min(seq.len()) / KV_BLOCK * KV_BLOCK;
        for len in (KV_BLOCK..=held).step_by(KV_BLOCK) {
            self.clock += 1;
            let key = key(&prompt[..len]);
            match self.entries.get_mut(&key) {
                Some(e) if e.tokens == prompt[..len] => e.used = self.clock,
                _ => {
                    let Ok(fork) = seq.fork(len) else { return };
                    self.entries.insert(
                        key,
                        Entry {
                            tokens: prompt[..len].to_vec(),
                            seq: fork,
                            used: self.clock,
                        },
                    );
                }
            }
        }
        while self.entries.len() > self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(&k, _)| k);
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
    }
}

/// The hash of a token prefix.
fn key(tokens: &[u32]) -> u64 {
    fingerprint(bytemuck::cast_slice(tokens))
}
