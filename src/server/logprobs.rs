//! Log-probabilities in OpenAI's two shapes: chat's `{"content": [{token, logprob,
//! bytes, top_logprobs}]}` and the completions endpoint's legacy `{tokens,
//! token_logprobs, top_logprobs, text_offset}`.
//!
//! A token's text is what the tokenizer renders for it alone (special tokens by name, a
//! partial UTF-8 character as U+FFFD) and `bytes` are that text's UTF-8 bytes, as vLLM
//! reports them.

use serde_json::{json, Map, Value};

use crate::decode::TokenLogprobs;
use crate::model::tokenizer::Tokenizer;

/// What OpenAI reports for a token that cannot be drawn (a logit of -inf).
const IMPOSSIBLE: f64 = -9999.0;

/// A log-probability as a JSON number: the shortest decimal that reads back as the same
/// f32 (not the digits of its f64 widening), or -9999 when it is not finite.
fn number(logprob: f32) -> Value {
    if !logprob.is_finite() {
        return json!(IMPOSSIBLE);
    }
    json!(logprob
        .to_string()
        .parse::<f64>()
        .unwrap_or(f64::from(logprob)))
}

/// A token's text alone.
fn text(tokenizer: &Tokenizer, id: u32) -> String {
    // Generated ids are below the vocabulary size, so decoding one cannot fail.
    tokenizer.token_to_piece(id).unwrap_or_default()
}

/// `{token, logprob, bytes}` of one token.
fn entry(tokenizer: &Tokenizer, id: u32, logprob: f32) -> Map<String, Value> {
    let text = text(tokenizer, id);
    let mut entry = Map::new();
    entry.insert("bytes".into(), json!(text.as_bytes()));
    entry.insert("token".into(), Value::String(text));
    entry.insert("logprob".into(), number(logprob));
    entry
}

/// Chat's `logprobs` object for `tokens`.
pub(crate) fn chat(tokenizer: &Tokenizer, tokens: &[TokenLogprobs]) -> Value {
    let content: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let mut one = entry(tokenizer, t.id, t.logprob);
            let top: Vec<Value> = t
                .top
                .iter()
                .map(|a| Value::Object(entry(tokenizer, a.id, a.logprob)))
                .collect();
            one.insert("top_logprobs".into(), Value::Array(top));
            Value::Object(one)
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// The completions endpoint's `logprobs` object for `tokens`, the first of which starts
/// at character `offset` of the text; `offset` moves past them. Each token's
/// `top_logprobs` holds the asked alternatives and the token itself, as OpenAI's does.
pub(crate) fn legacy(tokenizer: &Tokenizer, tokens: &[TokenLogprobs], offset: &mut usize) -> Value {
    let mut arrays = Legacy::default();
    for t in tokens {
        arrays.push(tokenizer, t, offset);
    }
    arrays.into_value()
}

/// [`legacy`] for an echoed prompt followed by generated tokens: the prompt's first
/// token has `null` for its log-probability and alternatives (nothing precedes it),
/// its others come from `scored`, then `generated`'s.
pub(crate) fn legacy_echo(
    tokenizer: &Tokenizer,
    prompt: &[u32],
    scored: &[TokenLogprobs],
    generated: &[TokenLogprobs],
) -> Value {
    let mut offset = 0;
    let mut arrays = echoed(tokenizer, prompt, scored, &mut offset);
    for t in generated {
        arrays.push(tokenizer, t, &mut offset);
    }
    arrays.into_value()
}

/// [`legacy_echo`]'s prompt part alone (a stream's first chunk); `offset` ends past it,
/// where the generated tokens' offsets start.
pub(crate) fn legacy_echo_prompt(
    tokenizer: &Tokenizer,
    prompt: &[u32],
    scored: &[TokenLogprobs],
    offset: &mut usize,
) -> Value {
    echoed(tokenizer, prompt, scored, offset).into_value()
}

/// The legacy arrays of an echoed prompt, from character `offset`.
fn echoed(
    tokenizer: &Tokenizer,
    prompt: &[u32],
    scored: &[TokenLogprobs],
    offset: &mut usize,
) -> Legacy {
    let mut arrays = Legacy::default();
    if let Some(&first) = prompt.first() {
        arrays.push_unscored(tokenizer, first, offset);
    }
    for t in scored {
        arrays.push(tokenizer, t, offset);
    }
    arrays
}

/// The four parallel arrays of a legacy `logprobs` object, built token by token.
#[derive(Default)]
struct Legacy {
    tokens: Vec<Value>,
    logprobs: Vec<Value>,
    tops: Vec<Value>,
    offsets: Vec<usize>,
}

impl Legacy {
    /// Appends `t`, which starts at character `offset`; `offset` moves past it.
    fn push(&mut self, tokenizer: &Tokenizer, t: &TokenLogprobs, offset: &mut usize) {
        let token = text(tokenizer, t.id);
        let mut top = Map::new();
        for a in &t.top {
            top.entry(text(tokenizer, a.id))
                .or_insert(number(a.logprob));
        }
        top.entry(token.clone()).or_insert(number(t.logprob));
        self.logprobs.push(number(t.logprob));
        self.tops.push(Value::Object(top));
        self.push_text(token, offset);
    }

    /// Appends token `id` with no log-probability (a prompt's first).
    fn push_unscored(&mut self, tokenizer: &Tokenizer, id: u32, offset: &mut usize) {
        self.logprobs.push(Value::Null);
        self.tops.push(Value::Null);
        self.push_text(text(tokenizer, id), offset);
    }

    fn push_text(&mut self, token: String, offset: &mut usize) {
        self.offsets.push(*offset);
        *offset += token.chars().count();
        self.tokens.push(Value::String(token));
    }

    fn into_value(self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.logprobs,
            "top_logprobs": self.tops,
            "text_offset": self.offsets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_f32_digits_and_impossible_is_minus_9999() {
        assert_eq!(number(-0.1), json!(-0.1));
        assert_eq!(number(-1.871_202_5), json!(-1.871_202_5));
        assert_eq!(number(f32::NEG_INFINITY), json!(-9999.0));
        assert_eq!(number(f32::NAN), json!(-9999.0));
    }
}
