//! Namespaces hold plain values only, so that no template can build a cyclic value.
//!
//! A `namespace()` is the one mutable value of a Jinja template. Stored into itself
//! (`{% set ns.me = ns %}`, directly or inside a list, a tuple or another namespace) it
//! makes a reference cycle: reference counting never frees it, and printing or
//! serialising it recurses until the stack overflows, which aborts the process (both
//! found by fuzzing). minijinja has no hook on attribute assignment, so the template is
//! rewritten before it is compiled: every expression whose value is assigned to a
//! namespace attribute (`{% set a.b = EXPR %}`, the one statement that assigns to
//! attributes) becomes `GUARD((EXPR))`, and [`plain_only`] stores a copy made only of
//! strings, numbers, booleans, none, lists and maps of them. Initial values for
//! `namespace(...)` get the same copy from [`namespace`]. A namespace then
//! never contains a namespace, so no cycle can form. Real templates store strings,
//! numbers, flags and message lists in namespaces, which all pass.

use std::cell::Cell;

use minijinja::machinery::{tokenize, Token};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{merge_maps, Kwargs, Serde, Tuple, Value, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind};

use super::TemplateError;

/// minijinja's map of dict literals and `dict()` (with its `preserve_order` feature).
type ValueMap = indexmap::IndexMap<Value, Value>;

/// The name under which [`plain_only`] is registered: one a template would not use.
pub(super) const GUARD: &str = "__switchyard_plain_only";

/// Deepest nesting of lists and maps a namespace attribute may hold.
const MAX_DEPTH: usize = 64;
/// Most values (containers and their elements) one assignment may store.
const MAX_VALUES: usize = 1 << 20;

/// `source` with every value assigned to a namespace attribute passed through [`GUARD`].
///
/// Works on minijinja's own tokens (whose spans are exact byte ranges): in each
/// `{% set ... %}`, the target is what precedes the `=` outside brackets, the value
/// everything after it. (`set` is the only statement whose target may be an attribute.)
pub(super) fn guard_attribute_writes(
    source: &str,
    syntax: SyntaxConfig,
) -> Result<String, TemplateError> {
    let mut tokens = Vec::new();
    for token in tokenize(source, false, syntax) {
        let (token, span) = token.map_err(|e| TemplateError::Syntax(super::describe(&e)))?;
        tokens.push((token, span.start_offset as usize, span.end_offset as usize));
    }
    let mut values = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !matches!(tokens[i].0, Token::BlockStart) {
            i += 1;
            continue;
        }
        let end = (i + 1..tokens.len())
            .find(|&j| matches!(tokens[j].0, Token::BlockEnd))
            .unwrap_or(tokens.len());
        let stmt = &tokens[i + 1..end];
        if let Some(Token::Ident("set")) = stmt.first().map(|t| &t.0) {
            assignment(&stmt[1..], &mut values)?;
        }
        i = end + 1;
    }
    let mut out = String::with_capacity(source.len() + values.len() * (GUARD.len() + 4));
    let mut at = 0;
    for (start, end) in values {
        let expr = source
            .get(start..end)
            .filter(|_| start >= at)
            .ok_or_else(|| {
                TemplateError::Syntax(format!("bytes {start}..{end} are not a whole expression"))
            })?;
        out.push_str(&source[at..start]);
        out.push_str(&format!("{GUARD}(({expr}))"));
        at = end;
    }
    out.push_str(&source[at..]);
    Ok(out)
}

/// A token with its byte range in the source.
type Spanned<'a> = (Token<'a>, usize, usize);

/// How `token` changes the bracket depth.
fn depth_change(token: &Token<'_>) -> isize {
    match token {
        Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => 1,
        Token::ParenClose | Token::BracketClose | Token::BraceClose => -1,
        _ => 0,
    }
}

/// Indices of `tokens` outside any bracket that satisfy `pred`.
fn top_level<'t>(
    tokens: &'t [Spanned<'_>],
    pred: impl Fn(&Token<'_>) -> bool + 't,
) -> impl Iterator<Item = usize> + 't {
    let mut depth = 0;
    tokens.iter().enumerate().filter_map(move |(i, (t, _, _))| {
        let at_top = depth == 0 && pred(t);
        depth += depth_change(t);
        at_top.then_some(i)
    })
}

/// Whether an assignment target (its tokens) names an attribute.
fn names_attribute(target: &[Spanned<'_>]) -> bool {
    target.iter().any(|(t, _, _)| matches!(t, Token::Dot))
}

/// Byte range covered by `tokens` (non-empty).
fn covered(tokens: &[Spanned<'_>]) -> Option<(usize, usize)> {
    Some((tokens.first()?.1, tokens.last()?.2))
}

/// `{% set TARGET = VALUE %}`: records VALUE when TARGET names an attribute. A `set`
/// without `=` is a block set, whose value is the rendered block (a string).
fn assignment(stmt: &[Spanned<'_>], values: &mut Vec<(usize, usize)>) -> Result<(), TemplateError> {
    let Some(eq) = top_level(stmt, |t| matches!(t, Token::Assign)).next() else {
        return Ok(());
    };
    if names_attribute(&stmt[..eq]) {
        let range = covered(&stmt[eq + 1..])
            .ok_or_else(|| TemplateError::Syntax("an attribute assignment has no value".into()))?;
        values.push(range);
    }
    Ok(())
}

/// [`GUARD`]: a copy of `value` made only of plain data, or an error naming the rule.
///
/// Strings, numbers, booleans and none are kept; lists, tuples and the engine's data
/// maps (dict literals, `dict()`, the conversation, keyword arguments, merged dicts)
/// are copied element by element, and lazy sequences (`map`, `select`, a list
/// concatenation) are evaluated into lists, so that the stored value holds no hidden
/// reference. Anything else (a namespace, a loop, a macro, a function) is refused.
pub(super) fn plain_only(value: Value) -> Result<Value, Error> {
    charged(|budget| plain_copy(&value, 0, budget))
}

thread_local! {
    /// Values the render running on this thread may still copy ([`with_copy_budget`]).
    static COPY_BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `render` with `budget` values to copy into namespaces in all: copies are work
/// minijinja's fuel does not see (`{% set ns.x = big %}` in a loop costs a few fuel per
/// turn and a copy of `big` each), so they get a budget of their own, the render's fuel.
pub(super) fn with_copy_budget<T>(budget: u64, render: impl FnOnce() -> T) -> T {
    /// Puts the outer budget back however the render ends, a panic included.
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            COPY_BUDGET.set(self.0);
        }
    }
    let _restore = Restore(COPY_BUDGET.replace(Some(budget)));
    render()
}

/// Runs `copy` against the render's copy budget ([`MAX_VALUES`] per call outside one).
fn charged(copy: impl FnOnce(&mut usize) -> Result<Value, Error>) -> Result<Value, Error> {
    let Some(left) = COPY_BUDGET.get() else {
        let mut budget = MAX_VALUES;
        return copy(&mut budget);
    };
    let mut budget = usize::try_from(left).unwrap_or(usize::MAX).min(MAX_VALUES);
    let before = budget;
    let result = copy(&mut budget);
    COPY_BUDGET.set(Some(left.saturating_sub((before - budget) as u64)));
    result.map_err(|e| match budget {
        0 => refuse(format!(
            "namespace assignments may copy at most {left} more values in this render (its \
             fuel; see chat_template::MAX_FUEL)"
        )),
        _ => e,
    })
}

/// `namespace(...)`, minijinja's own, over a plain copy of its initial values.
pub(super) fn namespace(defaults: Option<ValueOrKwargs>) -> Result<Value, Error> {
    let defaults = match defaults {
        Some(d) => Some(ValueOrKwargs::from(charged(|budget| {
            plain_copy(&d, 0, budget)
        })?)),
        None => None,
    };
    minijinja::functions::namespace(defaults)
}

/// Type names of the engine's container objects, learned from instances (the types
/// themselves are private to minijinja).
struct Containers {
    /// `(a, b)`.
    tuple: &'static str,
    /// Maps that hold nothing but their entries.
    data_maps: Vec<&'static str>,
}

/// [`Containers`], learned once.
fn containers() -> &'static Containers {
    static NAMES: std::sync::OnceLock<Containers> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let name = |v: Value| v.as_object().map_or("", |o| o.type_name());
        let dict = || Value::from_object(ValueMap::from_iter([(Value::from("k"), Value::from(1))]));
        Containers {
            tuple: name(Value::from(Tuple::from(vec![Value::from(1)]))),
            data_maps: vec![
                name(dict()),
                name(Value::from(Serde(super::Message::new("user", "")))),
                name(Value::from(Kwargs::from_iter([("k", Value::from(1))]))),
                name(merge_maps([dict(), dict()])),
            ],
        }
    })
}

/// See [`plain_only`].
fn plain_copy(value: &Value, depth: usize, budget: &mut usize) -> Result<Value, Error> {
    *budget = budget.checked_sub(1).ok_or_else(|| {
        refuse(format!(
            "a namespace attribute may hold at most {MAX_VALUES} values"
        ))
    })?;
    if depth > MAX_DEPTH {
        return Err(refuse(format!(
            "a namespace attribute may hold lists and maps nested at most {MAX_DEPTH} deep"
        )));
    }
    let type_name = value.as_object().map_or("", |o| o.type_name());
    match value.kind() {
        ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bool
        | ValueKind::Number
        | ValueKind::String
        | ValueKind::Bytes => Ok(value.clone()),
        ValueKind::Seq | ValueKind::Iterable => {
            let items = value
                .try_iter()?
                .map(|item| plain_copy(&item, depth + 1, budget))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(if type_name == containers().tuple {
                Value::from(Tuple::from(items))
            } else {
                Value::from(items)
            })
        }
        ValueKind::Map if containers().data_maps.contains(&type_name) => {
            let mut map = ValueMap::new();
            for key in value.try_iter()? {
                let item = plain_copy(&value.get_item(&key)?, depth + 1, budget)?;
                map.insert(plain_copy(&key, depth + 1, budget)?, item);
            }
            Ok(Value::from_object(map))
        }
        _ => Err(refuse(format!(
            "a namespace attribute can hold strings, numbers, lists and dicts, not {} \
             (a namespace, loop or macro inside a namespace could make a cycle)",
            value.kind()
        ))),
    }
}

/// The error of a refused namespace value.
fn refuse(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}
