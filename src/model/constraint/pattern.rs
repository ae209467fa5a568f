//! String `pattern`s and `format`s of JSON Schemas, compiled to DFAs that the JSON
//! validator steps with each character of a string's value.

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

use super::schema::{error, SchemaError};

/// Most bytes one pattern's automaton may take.
const PATTERN_BYTES: usize = 1 << 20;

/// Most bytes the automata of one schema's patterns may take together, so that a
/// schema of many large patterns is refused rather than held in memory.
pub(super) const SCHEMA_PATTERN_BYTES: usize = 4 << 20;

/// A string `pattern` (or `format`), compiled to a DFA over the string value's UTF-8
/// bytes that matches when the pattern matches anywhere in it, as JSON Schema's
/// patterns do (`^` and `$` anchor at the value's ends). The DFA is minimal, so every
/// state but the dead one can still reach a match: a string is refused the moment it
/// can no longer match.
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    source: String,
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Pattern {
    /// Compiles ECMA-262 pattern `source` (the dialect JSON Schema names; `\d` and `\w`
    /// are ASCII there, so they are here), or says why it cannot run.
    pub(super) fn compile(source: &str, path: &str) -> Result<Pattern, SchemaError> {
        let whole = format!("(?s:.)*?(?:{})(?s:.)*", ascii_classes(source));
        let config = dense::Config::new()
            .match_kind(MatchKind::All)
            .start_kind(StartKind::Anchored)
            .minimize(true)
            .dfa_size_limit(Some(PATTERN_BYTES))
            .determinize_size_limit(Some(PATTERN_BYTES));
        let unsupported = |e: &dyn std::fmt::Display| {
            error(
                path,
                format!("the pattern {source:?} is not supported: {e}"),
            )
        };
        let dfa = dense::Builder::new()
            .configure(config)
            .build(&whole)
            .map_err(|e| unsupported(&e))?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .map_err(|e| unsupported(&e))?;
        if dfa.is_dead_state(start) {
            return Err(error(path, format!("no string matches {source:?}")));
        }
        Ok(Pattern {
            source: source.to_string(),
            dfa,
            start,
        })
    }

    /// The pattern as the schema wrote it (a `format`'s: the pattern it stands for).
    pub(super) fn source(&self) -> &str {
        &self.source
    }

    /// Bytes its automaton takes.
    pub(super) fn memory(&self) -> usize {
        self.dfa.memory_usage()
    }

    /// The state before a string's first character.
    pub(crate) fn start(&self) -> StateID {
        self.start
    }

    /// The state after `c` from `state`, or `None` when no string going on so matches.
    pub(crate) fn step(&self, state: StateID, c: char) -> Option<StateID> {
        let mut state = state;
        for &byte in c.encode_utf8(&mut [0; 4]).as_bytes() {
            state = self.dfa.next_state(state, byte);
        }
        (!self.dfa.is_dead_state(state)).then_some(state)
    }

    /// Whether a string that ends in `state` matches.
    pub(crate) fn accepts(&self, state: StateID) -> bool {
        self.dfa.is_match_state(self.dfa.next_eoi_state(state))
    }
}

/// `source` with ECMA-262's ASCII `\d`, `\D`, `\w` and `\W` spelled as ASCII classes
/// (the regex engine's are Unicode's); every other escape is kept as written.
fn ascii_classes(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str("[0-9]"),
            Some('D') => out.push_str("[^0-9]"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('W') => out.push_str("[^0-9A-Za-z_]"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// The pattern a supported `format` stands for (RFC 3339 dates and times, RFC 4122
/// UUIDs, dotted IPv4, and addresses of the common `local@domain.tld` shape, a subset of
/// what RFC 5321 allows, so every reply is a valid one).
pub(super) fn format_pattern(format: &str) -> Option<String> {
    const DATE: &str = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
    const TIME: &str =
        "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    const OCTET: &str = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    Some(match format {
        "date" => format!("^{DATE}$"),
        "time" => format!("^{TIME}$"),
        "date-time" => format!("^{DATE}[Tt]{TIME}$"),
        "uuid" => "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
            .to_string(),
        "email" => "^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$".to_string(),
        "ipv4" => format!("^({OCTET}\\.){{3}}{OCTET}$"),
        _ => return None,
    })
}
