//! Constrained decoding on the `llguidance` engine: which tokens may come next so that
//! the output keeps a shape — a JSON text matching a JSON Schema (compact: no
//! whitespace between tokens), any JSON object (`json_object`), a regular expression, one
//! of a list of choices, or a Lark grammar. A [`Grammar`] is compiled once per request
//! without a tokenizer; a [`TokenEnv`] (the vocabulary's byte-level token trie) is built
//! once per model; a [`Shape`] joins the two; a [`Constraint`] per sequence gives the
//! next step's token mask and consumes the sampled token.

mod check;

use std::sync::{Arc, OnceLock};

use llguidance::api::{GrammarInit, ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde_json::{json, Value};

pub use check::{Check, Checker};

use crate::model::tokenizer::{TokenBytes, Tokenizer};
use crate::model::ModelError;

/// A grammar the engine could not compile: the caller's to fix (a keyword or feature
/// that constrains but is not implemented, a malformed regex or grammar).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GrammarError {
    message: String,
}

impl GrammarError {
    /// An error saying `message`.
    fn new(message: impl Into<String>) -> GrammarError {
        GrammarError {
            message: message.into(),
        }
    }
}

/// The JSON compile options every schema gets: compact separators and no whitespace
/// between tokens, so that a reply cannot pad itself with blank lines (decision 156).
fn compact_options() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"})
}

/// What a generation's output is held to, compiled without a tokenizer (so a request's
/// grammar is checked when it is read, before it reaches a model).
#[derive(Clone)]
pub struct Grammar {
    init: Arc<GrammarInit>,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar").finish_non_exhaustive()
    }
}

impl Grammar {
    /// Compiles `grammar` with the engine's default limits.
    fn compile(grammar: TopLevelGrammar) -> Result<Grammar, GrammarError> {
        let init = GrammarInit::Serialized(grammar)
            .to_internal(None, ParserLimits::default())
            .map_err(|e| GrammarError::new(e.to_string()))?;
        Ok(Grammar {
            init: Arc::new(GrammarInit::Internal(init.0, init.1)),
        })
    }

    /// A JSON text matching JSON Schema `schema`, written compactly. Keywords JSON
    /// Schema does not define are annotations and ignored; a defined keyword the engine
    /// does not implement (`uniqueItems`, `contains`, ...) or a `format` it does not know
    /// is refused by name.
    pub fn json_schema(schema: &Value) -> Result<Grammar, GrammarError> {
        let mut schema = match schema {
            Value::Object(map) if map.contains_key("x-guidance") => {
                return Err(GrammarError::new(
                    "the key 'x-guidance' (the engine's compile options) is not accepted: \
                     output is always compact JSON",
                ))
            }
            Value::Object(map) => map.clone(),
            Value::Bool(true) => serde_json::Map::new(),
            Value::Bool(false) => {
                return Err(GrammarError::new("the schema `false` admits no value"))
            }
            _ => return Err(GrammarError::new("a JSON Schema is an object or a boolean")),
        };
        schema.insert("x-guidance".into(), compact_options());
        Grammar::compile(TopLevelGrammar::from_json_schema(Value::Object(schema)))
    }

    /// Any JSON object (OpenAI's `json_object` mode), written compactly.
    pub fn any_object() -> Grammar {
        Grammar::json_schema(&json!({"type": "object"})).expect("{\"type\": \"object\"} compiles")
    }

    /// A text matching regular expression `regex` whole (Rust `regex` syntax, anchored
    /// at both ends).
    pub fn regex(regex: &str) -> Result<Grammar, GrammarError> {
        Grammar::compile(TopLevelGrammar::from_regex(regex))
    }

    /// Exactly one of `choices` (at least one; none empty).
    pub fn choice<S: AsRef<str>>(choices: &[S]) -> Result<Grammar, GrammarError> {
        if choices.is_empty() {
            return Err(GrammarError::new("a choice needs at least one option"));
        }
        if choices.iter().any(|c| c.as_ref().is_empty()) {
            return Err(GrammarError::new("a choice's options may not be empty"));
        }
        let options: Vec<String> = choices
            .iter()
            .map(|c| Value::String(c.as_ref().into()).to_string())
            .collect();
        Grammar::compile(TopLevelGrammar::from_lark(format!(
            "start: {}",
            options.join(" | ")
        )))
    }

    /// A text of Lark grammar `lark` (llguidance's Lark dialect: rules, `/regex/`
    /// terminals, `%json` for a JSON Schema inside).
    pub fn lark(lark: &str) -> Result<Grammar, GrammarError> {
        if lark.trim().is_empty() {
            return Err(GrammarError::new("the grammar is empty"));
        }
        Grammar::compile(TopLevelGrammar::from_lark(lark.to_owned()))
    }
}

/// A model's vocabulary as the engine reads it: every token's bytes in a trie, built
/// once per model (a fraction of a second for 49 152 tokens). The model's end tokens
/// are allowed where the grammar may end.
pub struct TokenEnv {
    factory: ParserFactory,
}

impl std::fmt::Debug for TokenEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEnv")
            .field("vocab", &self.factory.tok_env().tok_trie().vocab_size())
            .finish()
    }
}

/// A factory over `env`, quiet (errors come back as values, not on stderr).
fn factory(env: TokEnv) -> Result<TokenEnv, ModelError> {
    let mut factory = ParserFactory::new_simple(&env)
        .map_err(|e| ModelError::internal(format!("building the token trie: {e}")))?;
    factory.quiet();
    // An error names the problem, without the parser's state and grammar.
    factory.limits_mut().verbose_errors = false;
    Ok(TokenEnv { factory })
}

impl TokenEnv {
    /// The trie of `tokenizer`'s tokens, padded to `logits` ids (a model's output may
    /// have more rows than its tokenizer has tokens), ending on `stop_ids` (when empty,
    /// on an id past the logits that is never drawn).
    pub fn new(
        tokenizer: &Tokenizer,
        logits: usize,
        stop_ids: &[u32],
    ) -> Result<TokenEnv, ModelError> {
        let bytes = tokenizer
            .token_bytes()
            .map_err(|e| ModelError::Input(e.to_string()))?;
        let control = |name: &str| [&[TokTrie::SPECIAL_TOKEN_MARKER][..], name.as_bytes()].concat();
        let mut words: Vec<Vec<u8>> = bytes
            .into_iter()
            .enumerate()
            .map(|(id, token)| match token {
                TokenBytes::Text(text) if !text.is_empty() => text,
                TokenBytes::Text(_) => control(&format!("[{id}]")),
                TokenBytes::Control(piece) => control(&piece),
            })
            .collect();
        while words.len() < logits {
            words.push(control(&format!("[{}]", words.len())));
        }
        let stops: Vec<u32> = match stop_ids.iter().all(|&id| (id as usize) < words.len()) {
            true if !stop_ids.is_empty() => stop_ids.to_vec(),
            _ => {
                words.push(control("[end]"));
                vec![words.len() as u32 - 1]
            }
        };
        let info = TokRxInfo::new(words.len() as u32, stops[0]);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&stops);
        factory(Arc::new(ApproximateTokEnv::new(trie)))
    }

    /// One token per byte: for checking a text against a grammar without a model.
    fn bytes() -> &'static TokenEnv {
        static BYTES: OnceLock<TokenEnv> = OnceLock::new();
        BYTES.get_or_init(|| {
            factory(Arc::new(ApproximateTokEnv::single_byte()))
                .expect("the single-byte vocabulary builds")
        })
    }
}

/// A grammar over a vocabulary: what a sequence's [`Constraint`] starts from.
#[derive(Clone)]
pub struct Shape {
    parser: Arc<TokenParser>,
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shape").finish_non_exhaustive()
    }
}

impl Shape {
    /// `grammar` over `env`'s tokens; an error when the grammar is too large for the
    /// engine's limits over this vocabulary.
    pub fn new(env: &TokenEnv, grammar: &Grammar) -> Result<Shape, GrammarError> {
        let parser = env
            .factory
            .create_parser_from_init_default((*grammar.init).clone())
            .map_err(|e| GrammarError::new(e.to_string()))?;
        Ok(Shape {
            parser: Arc::new(parser),
        })
    }
}

/// One generation held to a [`Shape`]: its text so far is a prefix of a text the
/// grammar takes. Each step: [`Constraint::prepare`] (the costly part, run for a
/// batch's sequences in parallel), [`Constraint::mask_into`], then
/// [`Constraint::advance`].
pub struct Constraint {
    matcher: Matcher,
    /// The allowed tokens after the tokens consumed so far, once computed.
    mask: Option<SimpleVob>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("complete", &self.complete())
            .finish_non_exhaustive()
    }
}

/// The engine's failure while stepping a sequence: ours, not the caller's.
fn engine(e: impl std::fmt::Display) -> ModelError {
    ModelError::internal(format!("the constraint engine: {e}"))
}

impl Constraint {
    /// A generation that has produced nothing yet.
    pub fn new(shape: &Shape) -> Constraint {
        Constraint {
            matcher: Matcher::new(Ok((*shape.parser).clone())),
            mask: None,
        }
    }

    /// Computes the next token's mask, unless already computed.
    pub fn prepare(&mut self) -> Result<(), ModelError> {
        if self.mask.is_none() {
            self.mask = Some(self.matcher.compute_mask().map_err(engine)?);
        }
        Ok(())
    }

    /// Writes `logits` to `out` (cleared first) with every logit whose token may not
    /// come next at -inf, in one pass over the mask's 32-token words (a word of refused
    /// tokens is filled without a look at its logits, a word of allowed ones copied);
    /// an error when no token may.
    pub fn mask_into(&mut self, logits: &[f32], out: &mut Vec<f32>) -> Result<(), ModelError> {
        self.prepare()?;
        let words = self.mask.as_ref().expect("prepared above").as_slice();
        out.clear();
        out.reserve(logits.len());
        let mut any = false;
        for (i, chunk) in logits.chunks(32).enumerate() {
            // Ids past the mask (none: the trie covers the logits) are refused.
            match words.get(i).copied().unwrap_or(0) {
                0 => out.extend(std::iter::repeat_n(f32::NEG_INFINITY, chunk.len())),
                u32::MAX => {
                    any |= chunk.iter().any(|&logit| logit > f32::NEG_INFINITY);
                    out.extend_from_slice(chunk);
                }
                word => out.extend(chunk.iter().enumerate().map(|(bit, &logit)| {
                    match word >> bit & 1 {
                        1 => {
                            any |= logit > f32::NEG_INFINITY;
                            logit
                        }
                        _ => f32::NEG_INFINITY,
                    }
                })),
            }
        }
        match any {
            true => Ok(()),
            false => Err(ModelError::internal(
                "the constraint allows no token the model can draw",
            )),
        }
    }

    /// Takes `id` as the next token; an error if it may not come next.
    pub fn advance(&mut self, id: u32) -> Result<(), ModelError> {
        if let Some(mask) = &self.mask {
            if !mask.is_allowed(id) {
                return Err(ModelError::internal(format!(
                    "token {id} breaks the constrained output"
                )));
            }
        }
        self.mask = None;
        self.matcher.consume_token(id).map_err(engine)
    }

    /// Whether the output is complete: the grammar takes nothing more.
    pub fn complete(&self) -> bool {
        self.matcher.is_stopped()
    }
}

#[cfg(test)]
mod tests;
