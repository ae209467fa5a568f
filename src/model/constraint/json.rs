//! An incremental JSON validator over characters: it accepts exactly the prefixes of
//! JSON texts (RFC 8259) whose top-level value is an object — OpenAI's `json_object`
//! mode — and says when that object is complete. Whitespace runs outside strings are
//! bounded so that a constrained model cannot pad forever.

/// Longest run of whitespace accepted outside strings: room for a newline and the
/// indentation of pretty-printed JSON sixteen levels deep, not for endless padding.
pub(crate) const MAX_WHITESPACE_RUN: u8 = 33;

/// Where a JSON text is, between values and tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Before the top-level object: whitespace or `{`.
    Root,
    /// Just after `{`: a key or `}`.
    KeyOrClose,
    /// After a `,` inside an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After `:` or a `,` inside an array: a value.
    Value,
    /// Just after `[`: a value or `]`.
    ValueOrClose,
    /// After a value inside a container: `,` or the container's closer.
    CommaOrClose,
    /// The top-level object is closed: only whitespace may follow.
    Done,
}

/// A token being read: a string, a number or a literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lex {
    /// Between tokens.
    None,
    /// Inside a string (an object key when `key`), in escape state `escape`.
    Str { key: bool, escape: Escape },
    /// Inside a number, having read up to `at`.
    Num(Num),
    /// Inside `true`, `false` or `null`, `at` bytes read.
    Literal { word: &'static [u8], at: u8 },
}

/// Escape state inside a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    /// Plain characters.
    No,
    /// After `\`.
    Backslash,
    /// After `\u`, this many hex digits still to come.
    Hex(u8),
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
    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }

    /// The state after `c`, or `None` when `c` cannot continue the number.
    fn next(self, c: char) -> Option<Num> {
        let digit = c.is_ascii_digit();
        match (self, c) {
            (Num::Minus, '0') => Some(Num::Zero),
            (Num::Minus, _) if digit => Some(Num::Int),
            (Num::Int, _) if digit => Some(Num::Int),
            (Num::Zero | Num::Int, '.') => Some(Num::Dot),
            (Num::Dot | Num::Frac, _) if digit => Some(Num::Frac),
            (Num::Zero | Num::Int | Num::Frac, 'e' | 'E') => Some(Num::E),
            (Num::E, '+' | '-') => Some(Num::ESign),
            (Num::E | Num::ESign | Num::Exp, _) if digit => Some(Num::Exp),
            _ => None,
        }
    }
}

/// A valid prefix of a JSON object text, fed one character at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JsonPrefix {
    /// Open containers, innermost last: `{` or `[`.
    open: Vec<u8>,
    expect: Expect,
    lex: Lex,
    /// Whitespace characters just read outside strings.
    whitespace: u8,
}

impl Default for JsonPrefix {
    fn default() -> Self {
        JsonPrefix {
            open: Vec::new(),
            expect: Expect::Root,
            lex: Lex::None,
            whitespace: 0,
        }
    }
}

impl JsonPrefix {
    /// Whether the top-level object has been closed.
    pub(crate) fn complete(&self) -> bool {
        self.expect == Expect::Done
    }

    /// Makes this a copy of `other`, reusing this one's memory.
    pub(crate) fn copy_from(&mut self, other: &JsonPrefix) {
        self.open.clone_from(&other.open);
        self.expect = other.expect;
        self.lex = other.lex;
        self.whitespace = other.whitespace;
    }

    /// Reads `c`; `false` (leaving the state unspecified) when the text so far plus `c`
    /// is no prefix of a JSON object text.
    pub(crate) fn push(&mut self, c: char) -> bool {
        match self.lex {
            Lex::Str { key, escape } => self.string(key, escape, c),
            Lex::Num(n) => match n.next(c) {
                Some(n) => {
                    self.lex = Lex::Num(n);
                    true
                }
                // The number ends before `c`, which is read after it.
                None if n.complete() => {
                    self.lex = Lex::None;
                    self.value_done();
                    self.between(c)
                }
                None => false,
            },
            Lex::Literal { word, at } => {
                if word.get(usize::from(at)) != Some(&(c as u32 as u8)) || !c.is_ascii() {
                    return false;
                }
                if usize::from(at) + 1 == word.len() {
                    self.lex = Lex::None;
                    self.value_done();
                } else {
                    self.lex = Lex::Literal { word, at: at + 1 };
                }
                true
            }
            Lex::None => self.between(c),
        }
    }

    /// Reads `c` between tokens.
    fn between(&mut self, c: char) -> bool {
        if matches!(c, ' ' | '\t' | '\n' | '\r') {
            self.whitespace += 1;
            return self.whitespace <= MAX_WHITESPACE_RUN;
        }
        self.whitespace = 0;
        match (self.expect, c) {
            (Expect::Root, '{') => self.open(b'{'),
            (Expect::KeyOrClose | Expect::Key, '"') => {
                self.lex = Lex::Str {
                    key: true,
                    escape: Escape::No,
                };
                true
            }
            (Expect::KeyOrClose, '}') | (Expect::ValueOrClose, ']') => self.close(),
            (Expect::Colon, ':') => {
                self.expect = Expect::Value;
                true
            }
            (Expect::Value | Expect::ValueOrClose, _) => self.value(c),
            (Expect::CommaOrClose, ',') => {
                self.expect = match self.open.last() {
                    Some(b'{') => Expect::Key,
                    _ => Expect::Value,
                };
                true
            }
            (Expect::CommaOrClose, '}') if self.open.last() == Some(&b'{') => self.close(),
            (Expect::CommaOrClose, ']') if self.open.last() == Some(&b'[') => self.close(),
            _ => false,
        }
    }

    /// Reads `c`, the first character of a value.
    fn value(&mut self, c: char) -> bool {
        let literal = |word: &'static [u8]| Lex::Literal { word, at: 1 };
        self.lex = match c {
            '{' => return self.open(b'{'),
            '[' => return self.open(b'['),
            '"' => Lex::Str {
                key: false,
                escape: Escape::No,
            },
            '-' => Lex::Num(Num::Minus),
            '0' => Lex::Num(Num::Zero),
            '1'..='9' => Lex::Num(Num::Int),
            't' => literal(b"true"),
            'f' => literal(b"false"),
            'n' => literal(b"null"),
            _ => return false,
        };
        true
    }

    /// Opens a container.
    fn open(&mut self, bracket: u8) -> bool {
        self.open.push(bracket);
        self.expect = if bracket == b'{' {
            Expect::KeyOrClose
        } else {
            Expect::ValueOrClose
        };
        true
    }

    /// Closes the innermost container (the caller checked it matches).
    fn close(&mut self) -> bool {
        self.open.pop();
        self.value_done();
        true
    }

    /// A value has ended: the top-level object, or one inside a container.
    fn value_done(&mut self) {
        self.expect = if self.open.is_empty() {
            Expect::Done
        } else {
            Expect::CommaOrClose
        };
    }

    /// Reads `c` inside a string.
    fn string(&mut self, key: bool, escape: Escape, c: char) -> bool {
        let next = match (escape, c) {
            (Escape::No, '"') => {
                self.lex = Lex::None;
                if key {
                    self.expect = Expect::Colon;
                } else {
                    self.value_done();
                }
                return true;
            }
            (Escape::No, '\\') => Escape::Backslash,
            (Escape::No, c) if (c as u32) < 0x20 => return false,
            (Escape::No, _) => Escape::No,
            (Escape::Backslash, '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't') => Escape::No,
            (Escape::Backslash, 'u') => Escape::Hex(4),
            (Escape::Hex(left), c) if c.is_ascii_hexdigit() => match left {
                1 => Escape::No,
                _ => Escape::Hex(left - 1),
            },
            _ => return false,
        };
        self.lex = Lex::Str { key, escape: next };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text`; `Some(complete)` when every character is accepted.
    fn read(text: &str) -> Option<bool> {
        let mut json = JsonPrefix::default();
        text.chars().all(|c| json.push(c)).then(|| json.complete())
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
}
