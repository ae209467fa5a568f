//! Constrained decoding: which tokens may come next so that the output keeps a shape —
//! a JSON text matching a schema ([`Schema`]: any object for OpenAI's `json_object`
//! mode, a compiled JSON Schema for `json_schema`), ending when the top-level value
//! does ([`json`]'s validator over each token's text).

mod json;
mod pattern;
mod schema;

use std::sync::Arc;

use json::JsonPrefix;
pub use schema::{Schema, SchemaError};

use super::tokenizer::Tokenizer;
use super::ModelError;

/// Every token's text as it reads in the middle of an output, computed once per
/// vocabulary: the text a token adds after an anchor token (so a leading space that a
/// decoder drops at the start of a text is kept). A token that ends inside a UTF-8
/// character decodes with U+FFFD in place of its bytes, which the validator takes as
/// text that only a string may hold; a token with no text (a special one) is never
/// allowed.
#[derive(Debug)]
pub struct TokenTexts {
    texts: Vec<Box<str>>,
}

impl TokenTexts {
    /// Decodes every id of `tokenizer` (a few hundredths of a second for 49 152 ids).
    pub fn new(tokenizer: &Tokenizer) -> Result<TokenTexts, ModelError> {
        let failed = |e| ModelError::internal(format!("decoding the vocabulary: {e}"));
        // Bare ids (no BOS the model puts before plain text): "a" itself.
        let anchor = *tokenizer
            .encode_chat("a")
            .map_err(failed)?
            .first()
            .ok_or_else(|| ModelError::internal("the tokenizer has no token for \"a\""))?;
        let head = tokenizer.decode(&[anchor], true).map_err(failed)?;
        let texts = (0..tokenizer.vocab_size() as u32)
            .map(|id| {
                let both = tokenizer.decode(&[anchor, id], true).map_err(failed)?;
                Ok(both.strip_prefix(&head).unwrap_or("").into())
            })
            .collect::<Result<Vec<Box<str>>, ModelError>>()?;
        Ok(TokenTexts { texts })
    }

    /// The text of `id` (empty for an id past the vocabulary).
    fn text(&self, id: u32) -> &str {
        self.texts.get(id as usize).map_or("", |t| t)
    }
}

/// The shape a generation's output is held to: a JSON text matching `schema`, read
/// through the vocabulary's token texts.
#[derive(Clone, Debug)]
pub struct JsonShape {
    texts: Arc<TokenTexts>,
    schema: Arc<Schema>,
}

impl JsonShape {
    /// Output matching `schema`, tokens read through `texts`.
    pub fn new(texts: Arc<TokenTexts>, schema: Arc<Schema>) -> JsonShape {
        JsonShape { texts, schema }
    }
}

/// One generation held to a [`JsonShape`]: its text so far is a prefix of a matching
/// JSON text, and it ends when the top-level value does.
#[derive(Debug)]
pub struct JsonConstraint {
    shape: JsonShape,
    state: JsonPrefix,
    /// The state after the token [`JsonConstraint::allows`] last accepted, if any.
    scratch: JsonPrefix,
    /// That token, while `scratch` holds its state.
    scratch_after: Option<u32>,
}

impl JsonConstraint {
    /// A generation that has produced nothing yet.
    pub fn new(shape: JsonShape) -> JsonConstraint {
        let state = JsonPrefix::new(&shape.schema);
        JsonConstraint {
            scratch: state.clone(),
            scratch_after: None,
            state,
            shape,
        }
    }

    /// Whether `id` may come next.
    pub fn allows(&mut self, id: u32) -> bool {
        let text = self.shape.texts.text(id);
        if text.is_empty() || self.state.complete() {
            return false;
        }
        self.scratch.copy_from(&self.state);
        let schema = &self.shape.schema;
        let allowed = text.chars().all(|c| self.scratch.push(schema, c));
        self.scratch_after = allowed.then_some(id);
        allowed
    }

    /// `logits` with every token that may not come next set to -inf.
    pub fn mask(&mut self, logits: &[f32]) -> Vec<f32> {
        (0..logits.len() as u32)
            .map(|id| match self.allows(id) {
                true => logits[id as usize],
                false => f32::NEG_INFINITY,
            })
            .collect()
    }

    /// Takes `id` as the next token (reading it again only when it was not the last
    /// one [`JsonConstraint::allows`] accepted); an error if it may not come next.
    pub fn advance(&mut self, id: u32) -> Result<(), ModelError> {
        if self.scratch_after != Some(id) && !self.allows(id) {
            return Err(ModelError::internal(format!(
                "token {id} ({:?}) breaks the JSON output",
                self.shape.texts.text(id)
            )));
        }
        std::mem::swap(&mut self.state, &mut self.scratch);
        self.scratch_after = None;
        Ok(())
    }

    /// Whether the top-level value is complete.
    pub fn complete(&self) -> bool {
        self.state.complete()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;

    /// The texts of the seed models' tokens: what each adds mid-text, specials none.
    #[test]
    fn token_texts_are_what_a_token_adds_mid_text() {
        let dir = tempfile::tempdir().unwrap();
        let seeds = crate::harness::write_seed_ggufs(dir.path()).unwrap();
        let spm = seeds
            .iter()
            .find(|p| p.ends_with("tiny_llama_spm.gguf"))
            .unwrap();
        let model = Model::open(spm).unwrap();
        // This vocabulary's plain text starts with BOS, which must not be the anchor.
        assert_eq!(model.tokenizer.specials().prefix, [1]);
        let texts = TokenTexts::new(&model.tokenizer).unwrap();
        // "▁H" keeps its space mid-text (a decoder drops it only at the start).
        assert_eq!(texts.text(4), " H");
        assert_eq!(texts.text(6), "e");
        assert_eq!((texts.text(1), texts.text(2)), ("", ""));
        assert_eq!(texts.text(u32::MAX), "");
    }
}
