//! Incremental decoding: turns generated ids into text pieces as they arrive.
//!
//! A token can end in the middle of a UTF-8 character (byte-level BPE, `<0xXX>` byte
//! fallback) and some decoders change a token's text depending on what precedes it, so a
//! piece is only emitted once the decoded text has grown and no longer ends in U+FFFD.

use super::{Tokenizer, TokenizerError};

/// Streams valid UTF-8 pieces out of a growing sequence of token ids.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    skip_special: bool,
    /// Ids from the start of the context window: `ids[..prefix_len]` is already emitted
    /// context, the rest is pending.
    ids: Vec<u32>,
    /// Length in ids of the context part of `ids`.
    prefix_len: usize,
    /// Decoded text of the context part (plus emitted pending ids once flushed).
    prefix: String,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder with empty history.
    pub(super) fn new(tokenizer: &'a Tokenizer, skip_special: bool) -> Self {
        Self {
            tokenizer,
            skip_special,
            ids: Vec::new(),
            prefix_len: 0,
            prefix: String::new(),
        }
    }

    /// Feeds one id; returns the new text it completes, or `None` while the pending
    /// bytes do not yet form whole characters.
    pub fn push(&mut self, id: u32) -> Result<Option<String>, TokenizerError> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return Ok(None);
        }
        Ok(Some(self.advance(text)))
    }

    /// Emits whatever is still pending (incomplete bytes as U+FFFD), e.g. at the end of
    /// generation. Returns `None` when nothing is pending.
    pub fn finish(&mut self) -> Result<Option<String>, TokenizerError> {
        let text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        if text.len() <= self.prefix.len() {
            return Ok(None);
        }
        Ok(Some(self.advance(text)))
    }

    /// Emits the part of `text` past the prefix and slides the context window so that
    /// only the ids of the last emitted piece are kept as context.
    fn advance(&mut self, text: String) -> String {
        let new_text = match text.get(self.prefix.len()..) {
            Some(rest) if text.starts_with(&self.prefix) => rest.to_string(),
            // The decoder rewrote earlier text; emit the differing tail best-effort.
            _ => {
                let common = common_prefix_len(&text, &self.prefix);
                text[common..].to_string()
            }
        };
        self.ids.drain(..self.prefix_len);
        self.prefix_len = self.ids.len();
        self.prefix = self
            .tokenizer
            .decode(&self.ids, self.skip_special)
            .unwrap_or_default();
        new_text
    }
}

/// Byte length of the longest common prefix of `a` and `b` on a character boundary.
fn common_prefix_len(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map_or_else(|| a.len().min(b.len()), |((i, _), _)| i)
}
