//! Every token's bytes — what it adds to a text mid-stream, a part of a UTF-8 character
//! included — read off the vocabulary's pieces and its decoder, for the constraint
//! engine's token trie.

use std::collections::{HashMap, HashSet};

use tokenizers::decoders::DecoderWrapper;

use super::{Tokenizer, TokenizerError};

/// One token as a byte-level constraint sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenBytes {
    /// A token of text: the bytes it adds mid-text (a leading space kept).
    Text(Vec<u8>),
    /// A control token (`<|im_end|>`, BOS): no text of its own; its piece.
    Control(String),
}

/// How a vocabulary's pieces spell bytes, read off its decoder.
#[derive(Debug, Default)]
struct Spelling {
    /// GPT-2 byte-level pieces: each byte is one printable character.
    byte_level: bool,
    /// SentencePiece byte fallback: a byte no piece covers is the piece `<0xHH>`.
    byte_fallback: bool,
    /// The character a SentencePiece piece writes for a space (`▁`).
    space: Option<char>,
}

impl Spelling {
    /// Reads `decoder` (and the decoders of a sequence).
    fn read(&mut self, decoder: &DecoderWrapper) -> Result<(), TokenizerError> {
        match decoder {
            DecoderWrapper::ByteLevel(_) => self.byte_level = true,
            DecoderWrapper::ByteFallback(_) => self.byte_fallback = true,
            DecoderWrapper::Metaspace(m) => self.space = Some(m.get_replacement()),
            DecoderWrapper::Replace(replace) => {
                // The pattern has no getter; its serialized form names it.
                let value = serde_json::to_value(replace).map_err(|e| {
                    TokenizerError::Backend(format!("reading a Replace decoder: {e}"))
                })?;
                let mut from = value["pattern"]["String"].as_str().unwrap_or("").chars();
                if let (Some(c), None, Some(" ")) =
                    (from.next(), from.next(), value["content"].as_str())
                {
                    self.space = Some(c);
                }
            }
            DecoderWrapper::Sequence(seq) => {
                for d in seq.get_decoders() {
                    self.read(d)?;
                }
            }
            // Fuse joins pieces and Strip drops a leading space at the start of a whole
            // text: neither changes what a token adds mid-text.
            DecoderWrapper::Fuse(_) | DecoderWrapper::Strip(_) => {}
            other => {
                return Err(TokenizerError::Backend(format!(
                    "the tokenizer's decoder ({}) does not say which bytes its tokens are, so \
                     constrained output cannot read them",
                    serde_json::to_value(other)
                        .ok()
                        .and_then(|v| v["type"].as_str().map(str::to_owned))
                        .unwrap_or_else(|| "unknown".into())
                )))
            }
        }
        Ok(())
    }

    /// The bytes of `piece`.
    fn bytes(&self, piece: &str, unicode_bytes: &HashMap<char, u8>) -> Vec<u8> {
        if self.byte_fallback {
            if let Some(byte) = piece
                .strip_prefix("<0x")
                .and_then(|p| p.strip_suffix('>'))
                .filter(|hex| hex.len() == 2)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            {
                return vec![byte];
            }
        }
        let mut bytes = Vec::with_capacity(piece.len());
        for c in piece.chars() {
            match (self.byte_level, unicode_bytes.get(&c)) {
                (true, Some(&b)) => bytes.push(b),
                _ if Some(c) == self.space => bytes.push(b' '),
                // An added token's plain text, or a SentencePiece piece's.
                _ => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        bytes
    }
}

/// GPT-2's byte-level alphabet read backwards: the character that stands for each byte.
/// Printable Latin-1 bytes stand for themselves; the other 68 take the characters from
/// U+0100 on, in byte order.
fn unicode_bytes() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 0x100u32;
    (0..=255u8)
        .map(|b| {
            let c = if printable(b) {
                char::from(b)
            } else {
                next += 1;
                char::from_u32(next - 1).expect("U+0100..U+0143 are characters")
            };
            (c, b)
        })
        .collect()
}

impl Tokenizer {
    /// Every id's [`TokenBytes`], in id order; an error for a vocabulary whose decoder
    /// does not say which bytes its pieces are (WordPiece, CTC, none).
    pub fn token_bytes(&self) -> Result<Vec<TokenBytes>, TokenizerError> {
        let tk = self.lock();
        let mut spelling = Spelling::default();
        match tk.get_decoder() {
            Some(decoder) => spelling.read(decoder)?,
            None => return Err(TokenizerError::Backend(
                "the tokenizer has no decoder, so constrained output cannot read its tokens' bytes"
                    .into(),
            )),
        }
        let control: HashSet<u32> = tk
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, token)| token.special)
            .map(|(id, _)| id)
            .collect();
        let unicode_bytes = unicode_bytes();
        Ok((0..self.vocab_size as u32)
            .map(|id| {
                match (control.contains(&id), tk.id_to_token(id)) {
                    (false, Some(piece)) => {
                        TokenBytes::Text(spelling.bytes(&piece, &unicode_bytes))
                    }
                    // An id with no piece (a gap in the vocabulary) has no text either.
                    (_, piece) => TokenBytes::Control(piece.unwrap_or_else(|| format!("[{id}]"))),
                }
            })
            .collect())
    }
}
