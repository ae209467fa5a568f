//! An incremental JSON validator over characters, walking a [`Schema`]: it accepts
//! exactly the prefixes of JSON texts (RFC 8259) that match the schema — any object for
//! OpenAI's `json_object` mode ([`Schema::any_object`]) — and says when the top-level
//! value is complete. Whitespace runs outside strings are bounded so that a constrained
//! model cannot pad forever.

use regex_automata::util::primitives::StateID;

use super::schema::{Node, Schema, ANY, ANY_ARRAY, ANY_OBJECT};

/// Longest run of whitespace accepted outside strings: room for a newline and the
/// indentation of pretty-printed JSON sixteen levels deep, not for endless padding.
pub(crate) const MAX_WHITESPACE_RUN: u8 = 33;

/// Escape state inside a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    /// Plain characters.
    No,
    /// After `\`; `high` holds a high surrogate whose low half this escape must be.
    Backslash { high: Option<u16> },
    /// After `\u`: `left` hex digits still to come, the `value` of those read, and the
    /// high surrogate it must complete, if any.
    Hex {
        left: u8,
        value: u16,
        high: Option<u16>,
    },
    /// After a high surrogate's `\uD800`–`\uDBFF`: its low half must follow.
    Pair { high: u16 },
}

impl Escape {
    /// The state after `c` inside a string, or `None` when `c` is not allowed there;
    /// an unescaped `"` (the end) is the caller's to see first.
    fn next(self, c: char) -> Option<Escape> {
        self.step(c).map(|(next, _)| next)
    }

    /// As [`Self::next`], with the character of the string's value that `c` completes,
    /// if it completes one (a plain character, or an escape's last character). A `\u`
    /// escape of a surrogate must be a high one followed at once by a low one: RFC
    /// 8259's grammar admits a lone one, but it is no character, and strict parsers
    /// (serde_json, Go's, Rust's `String`) refuse it.
    fn step(self, c: char) -> Option<(Escape, Option<char>)> {
        let simple = |c: char| match c {
            '"' | '\\' | '/' => Some(c),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            _ => None,
        };
        match (self, c) {
            (Escape::No, '\\') => Some((Escape::Backslash { high: None }, None)),
            (Escape::No, c) if (c as u32) < 0x20 => None,
            (Escape::No, c) => Some((Escape::No, Some(c))),
            (Escape::Pair { high }, '\\') => Some((Escape::Backslash { high: Some(high) }, None)),
            (Escape::Backslash { high: None }, c) if simple(c).is_some() => {
                Some((Escape::No, simple(c)))
            }
            (Escape::Backslash { high }, 'u') => Some((
                Escape::Hex {
                    left: 4,
                    value: 0,
                    high,
                },
                None,
            )),
            (Escape::Hex { left, value, high }, c) => {
                let value = value << 4 | c.to_digit(16)? as u16;
                if left > 1 {
                    let left = left - 1;
                    return Some((Escape::Hex { left, value, high }, None));
                }
                match (high, value) {
                    (Some(high), 0xDC00..=0xDFFF) => {
                        let code = 0x10000
                            + ((u32::from(high) - 0xD800) << 10)
                            + (u32::from(value) - 0xDC00);
                        Some((Escape::No, char::from_u32(code)))
                    }
                    (Some(_), _) | (None, 0xDC00..=0xDFFF) => None,
                    (None, 0xD800..=0xDBFF) => Some((Escape::Pair { high: value }, None)),
                    (None, _) => Some((Escape::No, char::from_u32(u32::from(value)))),
                }
            }
            _ => None,
        }
    }
}

/// How far a number has been read (RFC 8259's `-? int frac? exp?`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Num {
    /// The state a number starts in with `c`, if it can.
    fn start(c: char) -> Option<Num> {
        match c {
            '-' => Some(Num::Minus),
            '0' => Some(Num::Zero),
            '1'..='9' => Some(Num::Int),
            _ => None,
        }
    }

    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }

    /// The state after `c`, or `None` when `c` cannot continue the number (an
    /// `integer` takes no fraction or exponent).
    fn next(self, c: char, integer: bool) -> Option<Num> {
        let digit = c.is_ascii_digit();
        match (self, c) {
            (Num::Minus, '0') => Some(Num::Zero),
            (Num::Minus, _) if digit => Some(Num::Int),
            (Num::Int, _) if digit => Some(Num::Int),
            _ if integer => None,
            (Num::Zero | Num::Int, '.') => Some(Num::Dot),
            (Num::Dot | Num::Frac, _) if digit => Some(Num::Frac),
            (Num::Zero | Num::Int | Num::Frac, 'e' | 'E') => Some(Num::E),
            (Num::E, '+' | '-') => Some(Num::ESign),
            (Num::E | Num::ESign | Num::Exp, _) if digit => Some(Num::Exp),
            _ => None,
        }
    }
}

/// An integer being read against an inclusive range: its sign and digits so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IntRange {
    lo: i64,
    hi: i64,
    negative: bool,
    /// Whether a digit has been read.
    digits: bool,
    /// The digits' value, held at most just past what an i64 holds.
    value: i128,
}

/// Past this a value is out of every i64 range (and `value · 10^19` fits an i128).
const VALUE_CAP: i128 = 10_000_000_000_000_000_000;

impl IntRange {
    fn new(lo: i64, hi: i64) -> IntRange {
        IntRange {
            lo,
            hi,
            negative: false,
            digits: false,
            value: 0,
        }
    }

    /// Reads `c` (a sign or a digit the grammar took, leaving the number in `state`);
    /// whether some integer the number can still become lies in the range.
    fn read(&mut self, c: char, state: Num) -> bool {
        match c.to_digit(10) {
            Some(d) => {
                self.value = (self.value * 10 + i128::from(d)).min(VALUE_CAP);
                self.digits = true;
            }
            None => self.negative = true,
        }
        let (lo, hi) = (i128::from(self.lo), i128::from(self.hi));
        if !self.digits {
            // `-` alone: any negative integer, or `-0`.
            return lo <= -1 || (lo <= 0 && 0 <= hi);
        }
        if state == Num::Zero {
            // `0` and `-0` take no more digits.
            return self.holds();
        }
        // With k more digits it lies in value·10^k ..= value·10^k + 10^k − 1 (negated
        // for a negative one), which moves away from zero as k grows.
        let mut scale: i128 = 1;
        for _ in 0..=19 {
            let (near, far) = (self.value * scale, self.value * scale + scale - 1);
            let (a, b) = match self.negative {
                false => (near, far),
                true => (-far, -near),
            };
            if a <= hi && lo <= b {
                return true;
            }
            if (!self.negative && a > hi) || (self.negative && b < lo) {
                return false;
            }
            scale *= 10;
        }
        false
    }

    /// Whether the integer read so far lies in the range.
    fn holds(&self) -> bool {
        let value = if self.negative {
            -self.value
        } else {
            self.value
        };
        self.digits && i128::from(self.lo) <= value && value <= i128::from(self.hi)
    }
}

/// Where an object is, between its tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectAt {
    /// Just after `{`: a key or `}`.
    Open,
    /// After `,`: a key.
    Key,
    /// Inside a key.
    InKey(Escape),
    /// After a key: `:`.
    Colon,
    /// After a value: `,` or `}`.
    CommaOrClose,
}

/// Where an array is, between its tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArrayAt {
    /// Just after `[`: a value or `]`.
    Open,
    /// After `,`: a value.
    Next,
    /// After a value: `,` or `]`.
    CommaOrClose,
}

/// One open value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Frame {
    /// A value of node `.0`, not started.
    Value(usize),
    /// An object of node `id`: where it is, the declared properties already given (a
    /// bit each), the key being read, and the node of the value it names.
    Object {
        id: usize,
        at: ObjectAt,
        seen: u64,
        key: String,
        value: usize,
    },
    /// An array of node `id` with `count` values begun.
    Array {
        id: usize,
        at: ArrayAt,
        count: usize,
    },
    /// A string: its escape state, the characters read, how many it may have, and its
    /// pattern's index and state when it has one.
    Str {
        escape: Escape,
        len: usize,
        min: usize,
        max: usize,
        pattern: Option<(usize, StateID)>,
    },
    /// A number, and the range an integer must end in.
    Num {
        state: Num,
        integer: bool,
        range: Option<IntRange>,
    },
    /// `true`, `false` or `null`, `at` bytes read.
    Literal { word: &'static [u8], at: u8 },
    /// One of node `id`'s choices, `text` written so far.
    Choice { id: usize, text: String },
}

/// A valid prefix of a JSON text matching a schema, fed one character at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JsonPrefix {
    /// Open values, innermost last; empty once the top-level value is complete.
    stack: Vec<Frame>,
    /// Whitespace characters just read outside strings.
    whitespace: u8,
}

impl JsonPrefix {
    /// Nothing read yet of a value of `schema`.
    pub(crate) fn new(schema: &Schema) -> JsonPrefix {
        JsonPrefix {
            stack: vec![Frame::Value(schema.root())],
            whitespace: 0,
        }
    }

    /// Whether the top-level value is complete.
    pub(crate) fn complete(&self) -> bool {
        self.stack.is_empty()
    }

    /// Makes this a copy of `other`, reusing this one's memory.
    pub(crate) fn copy_from(&mut self, other: &JsonPrefix) {
        self.stack.clone_from(&other.stack);
        self.whitespace = other.whitespace;
    }

    /// Reads `c`; `false` (leaving the state unspecified) when the text so far plus `c`
    /// is no prefix of a JSON text matching `schema`.
    pub(crate) fn push(&mut self, schema: &Schema, c: char) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return self.blank(c);
            };
            match top {
                Frame::Value(id) => {
                    let id = *id;
                    if is_blank(c) {
                        return self.blank(c);
                    }
                    self.whitespace = 0;
                    match start(schema, id, c) {
                        Some(frame) => *top = frame,
                        None => return false,
                    }
                    // A choice reads its first character as any other.
                    if !matches!(top, Frame::Choice { .. }) {
                        return true;
                    }
                }
                Frame::Str {
                    escape,
                    len,
                    min,
                    max,
                    pattern,
                } => {
                    if *escape == Escape::No && c == '"' {
                        let matched =
                            pattern.is_none_or(|(id, state)| schema.pattern(id).accepts(state));
                        if *len < *min || !matched {
                            return false;
                        }
                        self.value_done();
                        return true;
                    }
                    // Any character but the closing quote, or an escape, adds one.
                    if *escape == Escape::No && *len >= *max {
                        return false;
                    }
                    let Some((next, whole)) = escape.step(c) else {
                        return false;
                    };
                    if let (Some(ch), Some((id, state))) = (whole, pattern.as_mut()) {
                        match schema.pattern(*id).step(*state, ch) {
                            Some(after) => *state = after,
                            None => return false,
                        }
                    }
                    *len += usize::from(whole.is_some());
                    *escape = next;
                    return true;
                }
                Frame::Num {
                    state,
                    integer,
                    range,
                } => match state.next(c, *integer) {
                    Some(next) => {
                        if range.as_mut().is_some_and(|r| !r.read(c, next)) {
                            return false;
                        }
                        *state = next;
                        return true;
                    }
                    // The number ended before `c`, which its container reads next.
                    None if state.complete() => {
                        if range.is_some_and(|r| !r.holds()) {
                            return false;
                        }
                        self.value_done();
                    }
                    None => return false,
                },
                Frame::Literal { word, at } => {
                    if !c.is_ascii() || word.get(usize::from(*at)) != Some(&(c as u8)) {
                        return false;
                    }
                    *at += 1;
                    if usize::from(*at) == word.len() {
                        self.value_done();
                    }
                    return true;
                }
                Frame::Choice { id, text } => {
                    let Node::Choice(options) = schema.node(*id) else {
                        return false;
                    };
                    let before = text.len();
                    text.push(c);
                    if options.iter().any(|o| o.starts_with(text.as_str())) {
                        // Done as soon as no choice goes on past it.
                        if options
                            .iter()
                            .all(|o| o.len() == text.len() || !o.starts_with(text.as_str()))
                        {
                            self.value_done();
                        }
                        return true;
                    }
                    text.truncate(before);
                    if !options.iter().any(|o| o == text) {
                        return false;
                    }
                    self.value_done();
                }
                Frame::Object { .. } => return self.object(schema, c),
                Frame::Array { .. } => return self.array(schema, c),
            }
        }
    }

    /// Reads whitespace `c` between tokens (or any `c` after the top-level value).
    fn blank(&mut self, c: char) -> bool {
        if !is_blank(c) {
            return false;
        }
        self.whitespace += 1;
        self.whitespace <= MAX_WHITESPACE_RUN
    }

    /// Ends the innermost value: its container expects a `,` or its closer next.
    fn value_done(&mut self) {
        self.stack.pop();
        match self.stack.last_mut() {
            Some(Frame::Object { at, .. }) => *at = ObjectAt::CommaOrClose,
            Some(Frame::Array { at, .. }) => *at = ArrayAt::CommaOrClose,
            _ => {}
        }
    }

    /// Reads `c` inside an object.
    fn object(&mut self, schema: &Schema, c: char) -> bool {
        let Some(Frame::Object {
            id,
            at,
            seen,
            key,
            value,
        }) = self.stack.last_mut()
        else {
            return false;
        };
        let Node::Object {
            properties,
            required,
            additional,
        } = schema.node(*id)
        else {
            return false;
        };
        let every = 1u64
            .checked_shl(properties.len() as u32)
            .map_or(u64::MAX, |bit| bit - 1);
        let all_seen = *seen == every;
        if let ObjectAt::InKey(escape) = *at {
            if escape == Escape::No && c == '"' {
                *value = match properties.iter().position(|(name, _)| name == key) {
                    Some(i) if *seen & (1 << i) == 0 => {
                        *seen |= 1 << i;
                        properties[i].1
                    }
                    Some(_) => return false,
                    None if *additional => ANY,
                    None => return false,
                };
                *at = ObjectAt::Colon;
                return true;
            }
            let Some(next) = escape.next(c) else {
                return false;
            };
            key.push(c);
            *at = ObjectAt::InKey(next);
            // A closed object's keys can only spell a property not given yet.
            return *additional
                || properties
                    .iter()
                    .enumerate()
                    .any(|(i, (name, _))| *seen & (1 << i) == 0 && name.starts_with(key.as_str()));
        }
        if is_blank(c) {
            return self.blank(c);
        }
        self.whitespace = 0;
        match (*at, c) {
            (ObjectAt::Open | ObjectAt::Key, '"') => {
                key.clear();
                *at = ObjectAt::InKey(Escape::No);
                true
            }
            (ObjectAt::Open | ObjectAt::CommaOrClose, '}') => {
                let done = *seen & required == *required;
                if done {
                    self.value_done();
                }
                done
            }
            (ObjectAt::Colon, ':') => {
                let value = *value;
                self.stack.push(Frame::Value(value));
                true
            }
            (ObjectAt::CommaOrClose, ',') if *additional || !all_seen => {
                *at = ObjectAt::Key;
                true
            }
            _ => false,
        }
    }

    /// Reads `c` inside an array.
    fn array(&mut self, schema: &Schema, c: char) -> bool {
        let Some(Frame::Array { id, at, count }) = self.stack.last_mut() else {
            return false;
        };
        let Node::Array { items, min, max } = schema.node(*id) else {
            return false;
        };
        if is_blank(c) {
            return self.blank(c);
        }
        let room = max.is_none_or(|max| *count < max);
        match (*at, c) {
            (ArrayAt::Open | ArrayAt::CommaOrClose, ']') => {
                let done = *count >= *min;
                if done {
                    self.whitespace = 0;
                    self.value_done();
                }
                done
            }
            (ArrayAt::CommaOrClose, ',') if room => {
                self.whitespace = 0;
                *at = ArrayAt::Next;
                true
            }
            (ArrayAt::Open | ArrayAt::Next, _) if room => {
                *count += 1;
                let items = *items;
                self.stack.push(Frame::Value(items));
                self.push(schema, c)
            }
            _ => false,
        }
    }
}

/// JSON's whitespace.
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// The frame a value of node `id` starts with `c`, if it can.
fn start(schema: &Schema, id: usize, c: char) -> Option<Frame> {
    let literal = |word: &'static [u8]| Frame::Literal { word, at: 1 };
    let number = |integer, bounds: Option<(i64, i64)>| {
        let state = Num::start(c)?;
        let mut range = bounds.map(|(lo, hi)| IntRange::new(lo, hi));
        if range.as_mut().is_some_and(|r| !r.read(c, state)) {
            return None;
        }
        Some(Frame::Num {
            state,
            integer,
            range,
        })
    };
    let string = |min, max, pattern: Option<usize>| Frame::Str {
        escape: Escape::No,
        len: 0,
        min,
        max,
        pattern: pattern.map(|id| (id, schema.pattern(id).start())),
    };
    match (schema.node(id), c) {
        (Node::Any, '{') => start(schema, ANY_OBJECT, c),
        (Node::Any, '[') => start(schema, ANY_ARRAY, c),
        (Node::Any, '"') => Some(string(0, usize::MAX, None)),
        (Node::String { min, max, pattern }, '"') => Some(string(*min, *max, *pattern)),
        (Node::Any, 't') | (Node::Boolean, 't') => Some(literal(b"true")),
        (Node::Any, 'f') | (Node::Boolean, 'f') => Some(literal(b"false")),
        (Node::Any, 'n') | (Node::Null, 'n') => Some(literal(b"null")),
        (Node::Any, _) => number(false, None),
        (Node::Number { integer, range }, _) => number(*integer, *range),
        (Node::Object { .. }, '{') => Some(Frame::Object {
            id,
            at: ObjectAt::Open,
            seen: 0,
            key: String::new(),
            value: ANY,
        }),
        (Node::Array { .. }, '[') => Some(Frame::Array {
            id,
            at: ArrayAt::Open,
            count: 0,
        }),
        (Node::Choice(_), _) => Some(Frame::Choice {
            id,
            text: String::new(),
        }),
        // At most one branch starts with `c` (the compiler checked).
        (Node::AnyOf(branches), _) => branches.iter().find_map(|&b| start(schema, b, c)),
        _ => None,
    }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
