//! Checking a text against a [`Grammar`] without a model (`switchyard constrain`, and
//! the engine's tests): the text is fed one byte at a time, each byte a token.

use llguidance::Matcher;

use super::{Grammar, GrammarError, Shape, TokenEnv};

/// Whether a grammar takes a text, and where it stops taking it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Bytes taken: the whole text, or the offset of the first byte refused.
    taken: usize,
    /// Whether the text's length was reached.
    whole: bool,
    /// Whether the grammar may end where the taken bytes end.
    complete: bool,
    /// What may come at `taken`, in words (empty when the grammar takes nothing more).
    expected: String,
}

impl Check {
    /// Whether the grammar takes the whole text as a complete output.
    pub fn accepted(&self) -> bool {
        self.whole && self.complete
    }

    /// Whether every byte was taken: the text is the grammar's output or a prefix of one.
    pub fn prefix(&self) -> bool {
        self.whole
    }

    /// The byte offset of the first byte refused (the text's length when every byte was
    /// taken).
    pub fn offset(&self) -> usize {
        self.taken
    }

    /// What the grammar takes at [`Check::offset`]: the bytes it may read next, and
    /// whether it may end there.
    pub fn expected(&self) -> &str {
        &self.expected
    }
}

/// Writes byte `b` for a person: printable ASCII quoted, the rest in hex.
fn show(b: u8) -> String {
    match b {
        b'\'' => "\"'\"".into(),
        b' '..=b'~' => format!("'{}'", char::from(b)),
        b'\n' => "'\\n'".into(),
        b'\t' => "'\\t'".into(),
        b'\r' => "'\\r'".into(),
        _ => format!("0x{b:02X}"),
    }
}

/// The bytes `allowed` takes, in words: runs of three or more as ranges.
fn describe(allowed: &[u8]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < allowed.len() {
        let mut j = i;
        while j + 1 < allowed.len() && allowed[j + 1] == allowed[j] + 1 {
            j += 1;
        }
        match j - i {
            0 => parts.push(show(allowed[i])),
            1 => parts.extend([show(allowed[i]), show(allowed[j])]),
            _ => parts.push(format!("{}-{}", show(allowed[i]), show(allowed[j]))),
        }
        i = j + 1;
    }
    parts.join(", ")
}

/// What `matcher` takes next, in words.
fn expectation(matcher: &mut Matcher) -> String {
    let Ok(mask) = matcher.compute_mask() else {
        return String::new();
    };
    let allowed: Vec<u8> = (0..=255u8)
        .filter(|&b| mask.is_allowed(u32::from(b)))
        .collect();
    let may_end = matcher.is_accepting().unwrap_or(false);
    match (allowed.is_empty(), may_end) {
        (true, true) => "the end of the text".into(),
        (true, false) => String::new(),
        (false, false) => format!("one of {}", describe(&allowed)),
        (false, true) => format!("one of {}, or the end of the text", describe(&allowed)),
    }
}

/// A grammar over the one-byte-per-token vocabulary, ready to check texts.
#[derive(Clone, Debug)]
pub struct Checker {
    shape: Shape,
}

impl Grammar {
    /// A checker of texts against this grammar; an error when the grammar is too large
    /// for the engine's limits.
    pub fn checker(&self) -> Result<Checker, GrammarError> {
        Ok(Checker {
            shape: Shape::new(TokenEnv::bytes(), self)?,
        })
    }
}

impl Checker {
    /// Feeds `text` to the grammar byte by byte: how far it is taken, and whether it is
    /// a complete output. An error when the engine gives up (a grammar past its limits
    /// on this text).
    pub fn check(&self, text: &[u8]) -> Result<Check, GrammarError> {
        let mut matcher = Matcher::new(Ok((*self.shape.parser).clone()));
        let tokens: Vec<u32> = text.iter().map(|&b| u32::from(b)).collect();
        let taken = matcher
            .try_consume_tokens(&tokens)
            .map_err(|e| GrammarError::new(e.to_string()))?;
        let whole = taken == text.len();
        let complete = whole && matcher.is_accepting().unwrap_or(false);
        let expected = match complete && matcher.is_stopped() {
            true => String::new(),
            false => expectation(&mut matcher),
        };
        Ok(Check {
            taken,
            whole,
            complete,
            expected,
        })
    }
}
