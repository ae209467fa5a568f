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
mod tests {
    use serde_json::json;

    use super::*;

    /// Feeds `text` against `schema`; `Some(complete)` when every character is accepted.
    fn read_as(schema: &Schema, text: &str) -> Option<bool> {
        let mut json = JsonPrefix::new(schema);
        text.chars()
            .all(|c| json.push(schema, c))
            .then(|| json.complete())
    }

    /// [`read_as`] any object (`json_object` mode).
    fn read(text: &str) -> Option<bool> {
        read_as(&Schema::any_object(), text)
    }

    /// Whether serde_json (an independent parser) takes `text` as one JSON object.
    fn serde_object(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object())
    }

    const VALID: [&str; 8] = [
        r#"{}"#,
        r#"{"a": 1}"#,
        " {\"a\":[1,-2.5e+3,0,0.25,1E9,true,false,null,\"x\"]}\n",
        r#"{"nested": {"deep": [[], {}, [{"k": "v"}]]}, "n": -0}"#,
        r#"{"esc": "q\"b\\s\/\b\f\n\r\tu\u00e9\uD83D\uDE00", "é": "ünïcødé ✓"}"#,
        "{\n  \"pretty\": [\n    1,\n    2\n  ]\n}",
        r#"{"": ""}"#,
        r#"{"num": 12345678901234567890.5e-7}"#,
    ];

    #[test]
    fn valid_objects_and_all_their_prefixes_are_accepted() {
        for text in VALID {
            assert!(serde_object(text), "the reference rejects {text}");
            assert_eq!(read(text), Some(true), "{text}");
            let chars: Vec<(usize, char)> = text.char_indices().collect();
            for &(at, _) in &chars[..chars.len() - 1] {
                let prefix = &text[..at];
                assert!(read(prefix).is_some(), "prefix {prefix:?} of {text}");
            }
        }
    }

    #[test]
    fn what_is_not_an_object_prefix_is_refused() {
        for text in [
            "[1]",
            "\"s\"",
            "1",
            "x",
            "{a",
            "{\"a\" 1",
            "{\"a\":}",
            "{\"a\":1,}",
            "{,",
            "{\"a\":01",
            "{\"a\":1.}",
            "{\"a\":1.e5}",
            "{\"a\":-}",
            "{\"a\":+1",
            "{\"a\":tru }",
            "{\"a\":nul1",
            "{\"a\":[1,]",
            "{\"a\":[1}",
            "{\"a\":{]",
            "{\"a\":\"\u{1}\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12G4\"}",
            "{\"a\":\"\\uD800\"}",
            "{\"a\":\"\\uDC00\"}",
            "{\"a\":\"\\uD800x\"}",
            "{\"a\":\"\\uD800\\n\"}",
            "{\"a\":\"\\uD800\\uD800\"}",
            "{\"a\":\"\\uD83D\\u0041\"}",
            "{}}",
            "{} x",
            "{\"a\":1}{",
            "{\"a\": .5}",
            "{\"a\":NaN}",
            "{\"a\":'s'}",
        ] {
            assert_eq!(read(text).filter(|&done| done), None, "{text:?}");
            assert!(!serde_object(text), "the reference takes {text:?}");
        }
        // Open texts are prefixes, not complete objects.
        assert_eq!(read("{\"a\":1"), Some(false));
        assert_eq!(read("{\"a\":\"unterminated"), Some(false));
    }

    #[test]
    fn whitespace_runs_are_bounded() {
        let run = |n: usize| format!("{{{}\"a\": 1}}", " ".repeat(n));
        assert_eq!(read(&run(usize::from(MAX_WHITESPACE_RUN))), Some(true));
        assert_eq!(read(&run(usize::from(MAX_WHITESPACE_RUN) + 1)), None);
        // Inside strings spaces are text, not padding.
        let long = format!("{{\"a\": \"{}\"}}", " ".repeat(100));
        assert_eq!(read(&long), Some(true));
    }

    #[test]
    fn random_texts_agree_with_serde_json() {
        // Texts built from pieces of JSON: whatever the validator completes,
        // serde_json parses as an object, and every object serde_json parses from them
        // the validator completes.
        let alphabet = [
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            " ",
            "\"",
            "\"k\"",
            "\"\\n\"",
            "\"\\u00e9\"",
            "\"\\uD83D",
            "\\uDE00",
            "\\uD800\"",
            "\\",
            "\"é",
            "1",
            "0",
            "-",
            "+",
            ".",
            "e",
            "-0.5e3",
            "10",
            "01",
            "1.",
            "true",
            "nul",
            "l",
            "false",
            "tru",
            "e ",
            "\n",
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut completed = 0;
        for _ in 0..200_000 {
            let len = 1 + next() as usize % 8;
            let mut text = String::from("{");
            for _ in 0..len {
                text.push_str(alphabet[next() as usize % alphabet.len()]);
            }
            let ours = read(&text) == Some(true);
            assert_eq!(ours, serde_object(&text), "{text:?}");
            completed += usize::from(ours);
        }
        assert!(completed > 500, "only {completed} random objects");
    }

    /// A person: a name, an integer age, up to three tags from a list, and nothing else.
    fn person() -> Schema {
        Schema::compile(&json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"enum": ["cat", "dog", 7, null]},
                         "maxItems": 3, "minItems": 1},
                "address": {"type": "object", "properties": {"city": {"const": "Oslo"}},
                            "required": ["city"], "additionalProperties": false},
                "extra": true,
            },
            "required": ["name", "age"],
            "additionalProperties": false,
        }))
        .unwrap()
    }

    #[test]
    fn a_schema_takes_what_matches_it_and_every_prefix() {
        let schema = person();
        for text in [
            r#"{"name": "Ann", "age": 31}"#,
            r#"{"age": -4, "name": "B\u00e9a", "tags": ["dog", 7, null]}"#,
            "{\n  \"name\": \"C\",\n  \"age\": 0,\n  \"address\": {\"city\": \"Oslo\"}\n}",
            r#"{"name":"D","age":1,"tags":["cat"],"extra":{"any":[1,{"x":true}]}}"#,
        ] {
            assert!(serde_object(text), "the reference rejects {text}");
            assert_eq!(read_as(&schema, text), Some(true), "{text}");
            let chars: Vec<(usize, char)> = text.char_indices().collect();
            for &(at, _) in &chars[..chars.len() - 1] {
                assert!(
                    read_as(&schema, &text[..at]).is_some(),
                    "prefix {:?}",
                    &text[..at]
                );
            }
        }
    }

    #[test]
    fn a_schema_refuses_what_does_not_match_it() {
        let schema = person();
        for text in [
            r#"{"name": "Ann"}"#,
            r#"{"name": "Ann", "age": 3.5}"#,
            r#"{"name": "Ann", "age": 1e3}"#,
            r#"{"name": 5, "age": 3}"#,
            r#"{"nick": "A", "name": "Ann", "age": 3}"#,
            r#"{"name": "A", "name": "B", "age": 3}"#,
            r#"{"name": "A", "age": 3, "tags": []}"#,
            r#"{"name": "A", "age": 3, "tags": ["cow"]}"#,
            r#"{"name": "A", "age": 3, "tags": ["cat", "dog", 7, null]}"#,
            r#"{"name": "A", "age": 3, "tags": [70]}"#,
            r#"{"name": "A", "age": 3, "address": {"city": "Bergen"}}"#,
            r#"{"name": "A", "age": 3, "address": {}}"#,
            r#"{"name": "A", "age": 3,}"#,
        ] {
            assert_eq!(read_as(&schema, text).filter(|&done| done), None, "{text}");
        }
        // Once every declared property is given, a closed object takes no comma.
        let every = r#"{"name":"A","age":1,"tags":["cat"],"address":{"city":"Oslo"},"extra":1"#;
        assert_eq!(read_as(&schema, every), Some(false));
        assert_eq!(read_as(&schema, &format!("{every},")), None);
    }

    /// What Pydantic writes for a model with optional fields and nested models: `$defs`
    /// and `$ref`s, `anyOf` with null, a list of types.
    fn pydantic_person() -> Schema {
        Schema::compile(&json!({
            "$defs": {"Pet": {
                "properties": {
                    "name": {"title": "Name", "type": "string"},
                    "kind": {"enum": ["cat", "dog"], "title": "Kind", "type": "string"},
                },
                "required": ["name", "kind"], "title": "Pet", "type": "object",
                "additionalProperties": false,
            }},
            "properties": {
                "name": {"title": "Name", "type": "string"},
                "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
                "age": {"type": ["integer", "null"]},
                "pets": {"items": {"$ref": "#/$defs/Pet"}, "type": "array"},
                "best": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]},
            },
            "required": ["name", "nickname", "age", "pets", "best"],
            "title": "Person", "type": "object", "additionalProperties": false,
        }))
        .unwrap()
    }

    /// A recursive schema: a tree of integers.
    fn tree() -> Schema {
        Schema::compile(&json!({
            "$defs": {"Node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["value"], "additionalProperties": false,
            }},
            "$ref": "#/$defs/Node",
        }))
        .unwrap()
    }

    #[test]
    fn unions_references_and_recursion_take_what_matches() {
        let (person, tree) = (pydantic_person(), tree());
        let takes = [
            (
                &person,
                r#"{"name": "Ann", "nickname": null, "age": 3, "pets": [{"name": "Rex", "kind": "dog"}], "best": null}"#,
            ),
            (
                &person,
                r#"{"name":"B","nickname":"Bee","age":null,"pets":[],"best":{"name":"Tom","kind":"cat"}}"#,
            ),
            (
                &tree,
                r#"{"value": 1, "children": [{"value": 2, "children": []}, {"value": -3}]}"#,
            ),
        ];
        for (schema, text) in takes {
            assert!(serde_object(text), "the reference rejects {text}");
            assert_eq!(read_as(schema, text), Some(true), "{text}");
            let chars: Vec<(usize, char)> = text.char_indices().collect();
            for &(at, _) in &chars[..chars.len() - 1] {
                assert!(
                    read_as(schema, &text[..at]).is_some(),
                    "prefix {:?}",
                    &text[..at]
                );
            }
        }
        let refuses = [
            (
                &person,
                r#"{"name": "A", "nickname": 5, "age": 3, "pets": [], "best": null}"#,
            ),
            (
                &person,
                r#"{"name": "A", "nickname": null, "age": "3", "pets": [], "best": null}"#,
            ),
            (
                &person,
                r#"{"name": "A", "nickname": null, "age": 1.5, "pets": [], "best": null}"#,
            ),
            (
                &person,
                r#"{"name": "A", "nickname": null, "age": 3, "pets": [{"name": "R", "kind": "cow"}], "best": null}"#,
            ),
            (
                &person,
                r#"{"name": "A", "nickname": null, "age": 3, "pets": [], "best": []}"#,
            ),
            (
                &person,
                r#"{"name": "A", "nickname": null, "age": 3, "pets": [], "best": {"name": "T"}}"#,
            ),
            (&tree, r#"{"value": 1, "children": [{"children": []}]}"#),
            (
                &tree,
                r#"{"value": 1, "children": [{"value": 2, "leaf": true}]}"#,
            ),
        ];
        for (schema, text) in refuses {
            assert_eq!(read_as(schema, text).filter(|&done| done), None, "{text}");
        }
    }

    /// An object whose `n` is an integer of the given JSON Schema bounds.
    fn bounded(bounds: serde_json::Value) -> Schema {
        let mut n = json!({"type": "integer"});
        n.as_object_mut()
            .unwrap()
            .extend(bounds.as_object().unwrap().clone());
        Schema::compile(&json!({"type": "object", "properties": {"n": n}})).unwrap()
    }

    #[test]
    fn integer_bounds_take_exactly_the_integers_within_them_and_their_prefixes() {
        for (bounds, lo, hi) in [
            (json!({"minimum": -150, "maximum": 1200}), -150, 1200),
            (
                json!({"exclusiveMinimum": 9.5, "exclusiveMaximum": 40}),
                10,
                39,
            ),
            (json!({"minimum": -30.5, "maximum": -7}), -30, -7),
            (json!({"minimum": 0}), 0, 99_999),
        ] {
            let schema = bounded(bounds.clone());
            let members: Vec<String> = (lo..=hi).map(|n: i64| n.to_string()).collect();
            let mut prefixes = std::collections::HashSet::new();
            for m in &members {
                for end in 1..=m.len() {
                    prefixes.insert(m[..end].to_string());
                }
            }
            // `-0` is zero too.
            if lo <= 0 && 0 <= hi {
                prefixes.insert("-".into());
                prefixes.insert("-0".into());
            }
            // Every text of up to four signs and digits: a prefix exactly when some
            // member (or, past the search, some larger one) starts with it.
            let symbols: Vec<char> = "-0123456789".chars().collect();
            let mut texts = vec![String::new()];
            for _ in 0..4 {
                let longer: Vec<String> = texts
                    .iter()
                    .flat_map(|t| symbols.iter().map(move |c| format!("{t}{c}")))
                    .collect();
                for text in &longer {
                    let open = read_as(&schema, &format!("{{\"n\":{text}")).is_some();
                    let done = read_as(&schema, &format!("{{\"n\":{text}}}")) == Some(true);
                    // Past the search a bound of 99 999 stands for none: any digits
                    // that start without a zero grow past it.
                    let grows = hi == 99_999
                        && text.starts_with(|c: char| ('1'..='9').contains(&c))
                        && text.chars().all(|c| c.is_ascii_digit());
                    let want_open = prefixes.contains(text) || grows;
                    assert_eq!(open, want_open, "{bounds} prefix {text:?}");
                    let value = text.parse::<i64>().ok().filter(|_| want_open);
                    let want_done = value.is_some_and(|v| lo <= v && v <= hi);
                    assert_eq!(done, want_done, "{bounds} whole {text:?}");
                }
                texts = longer;
            }
        }
    }

    #[test]
    fn string_lengths_count_characters_and_escapes_once() {
        let schema = Schema::compile(&json!({"type": "object", "properties": {
            "s": {"type": "string", "minLength": 2, "maxLength": 4}}}))
        .unwrap();
        let whole = |inner: &str| read_as(&schema, &format!("{{\"s\":\"{inner}\"}}"));
        for inner in ["ab", "abcd", "é✓", r"\n\t", r"a\u00e9\uD83D\uDE00b"] {
            assert_eq!(whole(inner), Some(true), "{inner}");
        }
        for inner in ["", "a", r"\n", "abcde", r"abcd\n", r"\uD83D\uDE00"] {
            assert_eq!(whole(inner), None, "{inner}");
        }
        // The fifth character is refused as it comes, not at the quote.
        assert_eq!(read_as(&schema, "{\"s\":\"abcd"), Some(false));
        assert_eq!(read_as(&schema, "{\"s\":\"abcde"), None);
        assert_eq!(read_as(&schema, "{\"s\":\"abcd\\"), None);
    }

    /// An object whose `s` is a string of the given schema keywords.
    fn shaped_string(keywords: serde_json::Value) -> Schema {
        let mut string = json!({"type": "string"});
        string
            .as_object_mut()
            .unwrap()
            .extend(keywords.as_object().unwrap().clone());
        Schema::compile(&json!({"type": "object", "properties": {"s": string}})).unwrap()
    }

    #[test]
    fn patterns_take_exactly_their_strings_and_prefixes() {
        // Anchored: two or three of a and b, then maybe a c.
        let anchored = shaped_string(json!({"pattern": "^[ab]{2,3}c?$"}));
        let member = |t: &str| {
            let body = t.strip_suffix('c').unwrap_or(t);
            (2..=3).contains(&body.len()) && body.chars().all(|c| c == 'a' || c == 'b')
        };
        // Unanchored: contains "ab" somewhere.
        let unanchored = shaped_string(json!({"pattern": "ab"}));
        let mut texts = vec![String::new()];
        for _ in 0..5 {
            texts = texts
                .iter()
                .flat_map(|t| "abcx".chars().map(move |c| format!("{t}{c}")))
                .collect();
            for text in &texts {
                let open =
                    |schema: &Schema| read_as(schema, &format!("{{\"s\":\"{text}")).is_some();
                let whole = |schema: &Schema| {
                    read_as(schema, &format!("{{\"s\":\"{text}\"}}")) == Some(true)
                };
                // A prefix of a member: some member starts with it (members are at most 4 long).
                let mut growable = vec![text.clone()];
                for _ in 0..4 {
                    growable = growable
                        .iter()
                        .flat_map(|t| ["", "a", "b", "c"].map(|c| format!("{t}{c}")))
                        .collect();
                }
                assert_eq!(
                    open(&anchored),
                    growable.iter().any(|t| member(t)),
                    "{text}"
                );
                assert_eq!(whole(&anchored), member(text), "{text}");
                assert!(open(&unanchored), "{text}");
                assert_eq!(whole(&unanchored), text.contains("ab"), "{text}");
            }
        }
        // The value is matched, not its JSON spelling; `\d` is ASCII as in ECMA-262.
        let accented = shaped_string(json!({"pattern": "^é\n[0-9]$"}));
        assert_eq!(read_as(&accented, r#"{"s":"\u00e9\n7"}"#), Some(true));
        assert_eq!(read_as(&accented, r#"{"s":"é\n7"}"#), Some(true));
        assert_eq!(read_as(&accented, r#"{"s":"e"#), None);
        let digits = shaped_string(json!({"pattern": "^\\d+$"}));
        assert_eq!(read_as(&digits, r#"{"s":"123"}"#), Some(true));
        assert_eq!(read_as(&digits, "{\"s\":\"1\u{663}"), None);
    }

    #[test]
    fn formats_take_what_their_rfcs_write() {
        for (format, good, bad) in [
            (
                "date",
                &["2024-02-29", "1999-12-31"][..],
                &["2024-13-01", "2024-1-01", "2024-01-32", "24-01-01"][..],
            ),
            (
                "time",
                &["07:08:09Z", "23:59:60.5+02:00"],
                &["24:00:00Z", "07:08:09", "7:08:09Z"],
            ),
            (
                "date-time",
                &["2024-05-06T07:08:09Z", "2024-05-06t07:08:09.123-11:30"],
                &["2024-05-06 07:08:09Z", "2024-05-06T07:08Z"],
            ),
            (
                "uuid",
                &["123e4567-e89b-12d3-a456-426614174000"],
                &[
                    "123e4567e89b12d3a456426614174000",
                    "123e4567-e89b-12d3-a456-42661417400g",
                ],
            ),
            (
                "email",
                &["ann.lee+x@mail.example.org"],
                &["ann@localhost", "ann lee@example.org", "@example.org"],
            ),
            (
                "ipv4",
                &["192.168.0.1", "0.0.0.0", "255.255.255.255"],
                &["256.1.1.1", "1.2.3", "01.2.3.4"],
            ),
        ] {
            let schema = shaped_string(json!({"format": format}));
            for text in good {
                let json = format!("{{\"s\":\"{text}\"}}");
                assert_eq!(read_as(&schema, &json), Some(true), "{format} {text}");
            }
            for text in bad {
                let json = format!("{{\"s\":\"{text}\"}}");
                assert_eq!(
                    read_as(&schema, &json).filter(|&d| d),
                    None,
                    "{format} {text}"
                );
            }
        }
    }
}
