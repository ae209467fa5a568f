//! The generation loop: prefill the prompt, then sample (or force) one token at a
//! time, streaming text as it becomes valid UTF-8, until an end token, a stop string
//! or the token limit.

use std::time::Instant;

use serde::Serialize;

use super::constraint::{Constraint, Shape};
use super::sampler::{History, Sampler, SamplerError};
use crate::model::tokenizer::Tokenizer;
use crate::model::ModelError;
use crate::step::{Returned, Returns, Runner, Sequence};

/// What to generate and when to stop.
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Texts that end the generation; they are not part of the output.
    pub stop_strings: Vec<String>,
    /// Token ids that end the generation (EOS, end of turn).
    pub stop_ids: Vec<u32>,
    /// Teacher forcing: step `i` emits `force_tokens[i]` (even an end token) instead of
    /// sampling; steps past the list sample as usual.
    pub force_tokens: Vec<u32>,
    /// Record the `k` best logits of every step's distribution (0 = none).
    pub top_logits: usize,
    /// Record every generated token's log-probability and the `k` most likely tokens
    /// of the distribution it was drawn from (`Some(0)`: the token's alone).
    pub logprobs: Option<usize>,
    /// Hold the output to this shape (a JSON Schema, a regex, a grammar), ending when
    /// the grammar takes nothing more; not with `force_tokens`.
    pub constraint: Option<Shape>,
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end token or a stop string.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The caller stopped it (a closed stream, Ctrl-C).
    Cancelled,
}

/// One of the best logits of a step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TopLogit {
    /// Token id.
    pub id: u32,
    /// Its logit.
    pub logit: f32,
}

/// A generated token's log-probability: the log-softmax of the raw logits it was drawn
/// from (before repetition penalty, temperature or any filter), with the most likely
/// tokens of the same distribution.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenLogprobs {
    /// The generated token's id.
    pub id: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely tokens, best first (as many as asked).
    pub top: Vec<TopLogprob>,
}

/// One of the most likely tokens of a step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TopLogprob {
    /// Token id.
    pub id: u32,
    /// Its log-probability.
    pub logprob: f32,
}

/// Wall-clock figures of one generation.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Timings {
    /// Prompt start to the first generated token, milliseconds.
    pub ttft_ms: f64,
    /// Prompt tokens per second of prefill.
    pub prefill_tok_s: f64,
    /// Generated tokens per second of decode (steps after the first token).
    pub decode_tok_s: f64,
}

/// The result of [`generate`].
#[derive(Clone, Debug, Serialize)]
pub struct Generation {
    /// The prompt's token ids.
    pub prompt_tokens: Vec<u32>,
    /// Generated ids (an end token that stopped generation included).
    pub tokens: Vec<u32>,
    /// Generated text, without end tokens or the stop string.
    pub text: String,
    /// Per step, the best logits of the distribution it was drawn from (step 0 is the
    /// last prompt position), when asked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_logits: Vec<Vec<TopLogit>>,
    /// Per generated token, its log-probability and the best alternatives, when asked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<TokenLogprobs>,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Speeds.
    pub timings: Timings,
}

/// Generates after `prompt`, calling `on_text` with each new piece of text; `on_text`
/// returns `false` to stop (the generation then ends as `Cancelled`).
pub fn generate(
    runner: &mut Runner,
    tokenizer: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    options: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation, ModelError> {
    let mut seq = runner.new_sequence()?;
    generate_after(
        runner, &mut seq, tokenizer, sampler, prompt, options, on_text,
    )
}

/// The log-probability of each token of `prompt` after the first given those before
/// it, with the `k` most likely tokens at each place (a completion's `echo` with
/// `logprobs`), scored on a fresh sequence of `runner` in one pass over the prompt. Empty
/// for a one-token prompt. The unbatched path: the server scores a prompt in the
/// scheduler's steps (`crate::sched::Request::score`), to these same values.
pub fn prompt_logprobs(
    runner: &mut Runner,
    prompt: &[u32],
    k: usize,
) -> Result<Vec<TokenLogprobs>, ModelError> {
    let Some((_, scored)) = prompt.split_last() else {
        return Err(ModelError::Input("the prompt is empty".into()));
    };
    if scored.is_empty() {
        return Ok(Vec::new());
    }
    let mut seq = runner.new_sequence()?;
    let chunks = runner.forward_every_logit(&mut seq, scored)?;
    let rows = chunks.iter().flat_map(|c| c.iter());
    Ok(rows
        .zip(&prompt[1..])
        .map(|(logits, &token)| token_logprobs(logits, token, k))
        .collect())
}

/// [`generate`] on `seq`, which already holds the first `seq.len()` tokens of `prompt`
/// (a conversation's earlier turns): only the rest of the prompt is evaluated. The
/// sequence ends holding the prompt and every generated token but the last.
pub fn generate_after(
    runner: &mut Runner,
    seq: &mut Sequence,
    tokenizer: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    options: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation, ModelError> {
    if seq.len() >= prompt.len() && !prompt.is_empty() {
        // Callers pass the sequence they built from this conversation's earlier
        // prompts; one holding the whole prompt already is their bug.
        return Err(ModelError::internal(format!(
            "the sequence already holds {} positions; the prompt has {}",
            seq.len(),
            prompt.len()
        )));
    }
    let mut decoding = Decoding::new(tokenizer, prompt, options.clone(), seq.context())?;
    // A decoding with nothing read from the logits but the token takes only the token
    // from each step, picked where the logits were computed (decisions 147, 196).
    let head = decoding.head(sampler);
    let mut next = Next::forward(runner, seq, &prompt[seq.len()..], head)?;
    let mut on_piece = |text: &str, _: &[TokenLogprobs]| on_text(text);
    while let Some(token) = decoding.accept(next.returned(), sampler, &mut on_piece)? {
        let head = decoding.head(sampler);
        next = match decoding.constrained() {
            false => Next::forward(runner, seq, &[token], head)?,
            // The next mask depends only on the tokens taken: it is computed beside the
            // forward pass (decision 157).
            true => std::thread::scope(|scope| {
                let masking = scope.spawn(|| decoding.prepare());
                let next = Next::forward(runner, seq, &[token], head);
                // A mask left unprepared (a panic there) is computed again when drawn.
                let _ = masking.join();
                next
            })?,
        };
    }
    decoding.finish(&mut on_piece)
}

/// What one step of [`generate_after`] returned.
enum Next {
    Logits(Vec<f32>),
    Token(Option<u32>),
}

impl Next {
    /// Evaluates `tokens` after what `seq` holds; only the token picked there when
    /// `head` asks for one.
    fn forward(
        runner: &mut Runner,
        seq: &mut Sequence,
        tokens: &[u32],
        head: Returns,
    ) -> Result<Next, ModelError> {
        Ok(match head {
            Returns::Token | Returns::Draw(_) => {
                Next::Token(runner.forward_token(seq, tokens, head)?)
            }
            _ => Next::Logits(runner.forward(seq, tokens)?),
        })
    }

    fn returned(&self) -> Returned<'_> {
        match self {
            Next::Logits(logits) => Returned::Logits(logits),
            Next::Token(token) => Returned::Token(*token),
        }
    }
}

/// Receives a generation's text as it becomes final, with the log-probabilities of the
/// tokens generated since the previous call (empty unless asked for; the text may be
/// empty when only log-probabilities are left); returns `false` to stop.
pub type OnPiece<'a> = dyn FnMut(&str, &[TokenLogprobs]) -> bool + 'a;

/// One generation's decoding state, independent of how its steps are run (alone by
/// [`generate`], or inside a batch by a scheduler): it turns each step's logits into
/// the next token, streams text, and knows when to stop.
pub struct Decoding<'t> {
    options: GenerateOptions,
    prompt_len: usize,
    history: Vec<u32>,
    tokens: Vec<u32>,
    top_logits: Vec<Vec<TopLogit>>,
    logprobs: Vec<TokenLogprobs>,
    /// Entries of `logprobs` already handed out with text.
    delivered: usize,
    text: TextStream<'t>,
    /// What the output is held to, if anything.
    constraint: Option<Constraint>,
    /// The last step's logits with the refused tokens at -inf, kept to reuse its
    /// allocation (a row of the vocabulary each step).
    masked: Vec<f32>,
    /// The constraint's failure while preparing a mask off this thread, reported by
    /// the next [`Decoding::accept`].
    prepare_error: Option<ModelError>,
    finish_reason: Option<FinishReason>,
    started: Instant,
    prefill_time: Option<std::time::Duration>,
    ttft: Option<std::time::Duration>,
    decode_started: Option<Instant>,
    /// Whether the last [`Decoding::head`] asked the step for the token alone, picked
    /// where the logits are computed.
    asked_for_token: bool,
}

impl<'t> Decoding<'t> {
    /// Starts decoding after `prompt`, for a sequence of `context` positions: refuses an
    /// empty prompt, and one that with `max_tokens` more would not fit.
    pub fn new(
        tokenizer: &'t Tokenizer,
        prompt: &[u32],
        options: GenerateOptions,
        context: usize,
    ) -> Result<Decoding<'t>, ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::Input("the prompt is empty".into()));
        }
        let needed = prompt.len().saturating_add(options.max_tokens);
        if needed > context {
            return Err(ModelError::ContextFull { needed, context });
        }
        if options.constraint.is_some() && !options.force_tokens.is_empty() {
            return Err(ModelError::Input(
                "forced tokens and a constrained output do not combine".into(),
            ));
        }
        Ok(Decoding {
            constraint: options.constraint.as_ref().map(Constraint::new),
            masked: Vec::new(),
            prepare_error: None,
            text: TextStream::new(tokenizer, options.stop_strings.clone()),
            options,
            prompt_len: prompt.len(),
            history: prompt.to_vec(),
            tokens: Vec::new(),
            top_logits: Vec::new(),
            logprobs: Vec::new(),
            delivered: 0,
            finish_reason: None,
            started: Instant::now(),
            prefill_time: None,
            ttft: None,
            decode_started: None,
            asked_for_token: false,
        })
    }

    /// Computes the constraint's mask for the next step, if there is a constraint (the
    /// costly part of a constrained step, which a scheduler runs for its sequences in
    /// parallel, beside the forward pass); a failure is reported by the next
    /// [`Decoding::accept`].
    pub fn prepare(&mut self) {
        if let Some(constraint) = &mut self.constraint {
            if let Err(e) = constraint.prepare() {
                self.prepare_error = Some(e);
            }
        }
    }

    /// Whether the output is held to a constraint.
    pub fn constrained(&self) -> bool {
        self.constraint.is_some()
    }

    /// What the next step should return for this decoding: only the token, picked where
    /// the logits are computed, when nothing else is read from them (no constraint,
    /// forced tokens, top logits or log-probabilities) and `sampler` picks greedily
    /// ([`Returns::Token`], decision 147) or by a draw or a greedy pick after its bias
    /// and penalties ([`Returns::Draw`] with its cut, edits and the random bits it will
    /// use, decisions 196, 201 and 202); else the logits.
    pub fn head(&mut self, sampler: &mut Sampler) -> Returns {
        let returns = if !self.token_only() {
            Returns::Logits
        } else if sampler.is_greedy() {
            Returns::Token
        } else {
            let history = History::new(&self.history, self.tokens.len());
            sampler
                .device_pick(history)
                .map_or(Returns::Logits, Returns::Draw)
        };
        self.asked_for_token = !matches!(returns, Returns::Logits);
        returns
    }

    /// Whether the next pick reads nothing of the logits but the token.
    fn token_only(&self) -> bool {
        let o = &self.options;
        self.constraint.is_none()
            && o.force_tokens.is_empty()
            && o.top_logits == 0
            && o.logprobs.is_none()
    }

    /// Takes what the step after the last token fed to the sequence (the prompt's last
    /// at first) returned: its logits, from which `sampler` picks a token, or, when
    /// [`Decoding::head`] asked for it, the token picked where the logits were
    /// computed (greedy or drawn). Streams the token's text
    /// (with its log-probability when asked), and returns it when it must be fed for
    /// another step, or `None` when the generation has ended.
    pub fn accept(
        &mut self,
        returned: Returned<'_>,
        sampler: &mut Sampler,
        on_piece: &mut OnPiece<'_>,
    ) -> Result<Option<u32>, ModelError> {
        self.prefill_time
            .get_or_insert_with(|| self.started.elapsed());
        let step = self.tokens.len();
        if self.finish_reason.is_some() || step >= self.options.max_tokens {
            self.finish_reason.get_or_insert(FinishReason::Length);
            return Ok(None);
        }
        let logits = match returned {
            Returned::Logits(logits) => logits,
            Returned::Token(token) => {
                if !self.asked_for_token {
                    return Err(ModelError::internal(
                        "a step returned a token to a decoding that needs its logits",
                    ));
                }
                if !sampler.is_greedy() {
                    sampler.took_device_pick();
                }
                return self.take(token.ok_or(SamplerError::NoPick)?, &[], None, on_piece);
            }
        };
        if self.options.top_logits > 0 {
            self.top_logits
                .push(best_logits(logits, self.options.top_logits));
        }
        let forced = self.options.force_tokens.get(step).copied();
        let token = match forced {
            // Forced ids come from the caller (`--force-tokens`): check them here, so
            // that the decoder's refusal below can only be our failure.
            Some(t) if t as usize >= logits.len() => {
                return Err(ModelError::Input(format!(
                    "forced token id {t} is outside the vocabulary of {}",
                    logits.len()
                )))
            }
            Some(t) => t,
            None => {
                let history = History::new(&self.history, self.tokens.len());
                if let Some(e) = self.prepare_error.take() {
                    return Err(e);
                }
                match &mut self.constraint {
                    None => sampler.sample(logits, history)?,
                    Some(constraint) => {
                        // The sampler draws from the masked distribution: any top-k,
                        // top-p or min-p cut is taken on what the grammar allows.
                        constraint.mask_into(logits, &mut self.masked)?;
                        let token = sampler.sample(&self.masked, history)?;
                        constraint.advance(token)?;
                        token
                    }
                }
            }
        };
        self.take(token, logits, forced, on_piece)
    }

    /// Takes `token` (picked from `logits`, or by the device when they are empty, as
    /// only a greedy decoding without log-probabilities takes it; given when `forced`):
    /// records and streams it, and says whether to go on.
    fn take(
        &mut self,
        token: u32,
        logits: &[f32],
        forced: Option<u32>,
        on_piece: &mut OnPiece<'_>,
    ) -> Result<Option<u32>, ModelError> {
        let step = self.tokens.len();
        self.ttft.get_or_insert_with(|| self.started.elapsed());
        if let Some(k) = self.options.logprobs {
            self.logprobs.push(token_logprobs(logits, token, k));
        }
        self.tokens.push(token);
        self.history.push(token);
        if forced.is_none() && self.options.stop_ids.contains(&token) {
            self.finish_reason = Some(FinishReason::Stop);
            return Ok(None);
        }
        let mut on_text = with_logprobs(&self.logprobs, &mut self.delivered, on_piece);
        match self.text.push(token, &mut on_text)? {
            Flow::Continue => {}
            Flow::Stop => self.finish_reason = Some(FinishReason::Stop),
            Flow::Cancel => self.finish_reason = Some(FinishReason::Cancelled),
        }
        if self.constraint.as_ref().is_some_and(Constraint::complete) {
            self.finish_reason.get_or_insert(FinishReason::Stop);
        }
        if self.finish_reason.is_some() {
            return Ok(None);
        }
        if step + 1 >= self.options.max_tokens {
            self.finish_reason = Some(FinishReason::Length);
            return Ok(None);
        }
        self.decode_started.get_or_insert_with(Instant::now);
        Ok(Some(token))
    }

    /// Ends the generation (as `Cancelled` if it had not ended), flushes held-back text
    /// and log-probabilities unless cancelled, and returns the result.
    pub fn finish(mut self, on_piece: &mut OnPiece<'_>) -> Result<Generation, ModelError> {
        let finish_reason = *self.finish_reason.get_or_insert(FinishReason::Cancelled);
        if finish_reason != FinishReason::Cancelled {
            self.text.finish(&mut with_logprobs(
                &self.logprobs,
                &mut self.delivered,
                on_piece,
            ))?;
            // An end token, or a stop string's tokens, has no text of its own.
            if self.delivered < self.logprobs.len() {
                on_piece("", &self.logprobs[self.delivered..]);
                self.delivered = self.logprobs.len();
            }
        }
        let prefill_time = self.prefill_time.unwrap_or_else(|| self.started.elapsed());
        let decode_steps = self.tokens.len().saturating_sub(1).max(1) as f64;
        let timings = Timings {
            ttft_ms: self.ttft.unwrap_or(prefill_time).as_secs_f64() * 1e3,
            prefill_tok_s: self.prompt_len as f64 / prefill_time.as_secs_f64().max(1e-9),
            decode_tok_s: self
                .decode_started
                .map_or(0.0, |t| decode_steps / t.elapsed().as_secs_f64().max(1e-9)),
        };
        Ok(Generation {
            prompt_tokens: self.history[..self.prompt_len].to_vec(),
            tokens: self.tokens,
            text: self.text.into_text(),
            top_logits: self.top_logits,
            logprobs: self.logprobs,
            finish_reason,
            timings,
        })
    }
}

/// A text callback that hands each piece to `on_piece` with the entries of `logprobs`
/// past `delivered`, and marks them delivered.
fn with_logprobs<'a, 'b: 'a>(
    logprobs: &'a [TokenLogprobs],
    delivered: &'a mut usize,
    on_piece: &'a mut OnPiece<'b>,
) -> impl FnMut(&str) -> bool + use<'a, 'b> {
    move |text: &str| {
        let fresh = &logprobs[*delivered..];
        *delivered = logprobs.len();
        on_piece(text, fresh)
    }
}

/// `token`'s log-probability under `logits` and the `k` most likely tokens', best first
/// (ties to the lower id, so the first `j` of `k` are the `j` most likely).
pub fn token_logprobs(logits: &[f32], token: u32, k: usize) -> TokenLogprobs {
    let norm = log_normalizer(logits);
    let logprob = |id: u32| logits.get(id as usize).map_or(f32::NAN, |l| l - norm);
    TokenLogprobs {
        id: token,
        logprob: logprob(token),
        top: best_logits(logits, k)
            .into_iter()
            .map(|t| TopLogprob {
                id: t.id,
                logprob: t.logit - norm,
            })
            .collect(),
    }
}

/// `log(sum(exp(logits)))`, summed in f64 after subtracting the largest (NaN skipped).
fn log_normalizer(logits: &[f32]) -> f32 {
    let finite = || logits.iter().copied().filter(|l| !l.is_nan());
    let max = finite().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = finite().map(|l| f64::from(l - max).exp()).sum();
    max + sum.ln() as f32
}

fn best_logits(logits: &[f32], k: usize) -> Vec<TopLogit> {
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(ids.len());
    let by_logit = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    if k < ids.len() {
        ids.select_nth_unstable_by(k, by_logit);
        ids.truncate(k);
    }
    ids.sort_by(by_logit);
    ids.into_iter()
        .map(|id| TopLogit {
            id,
            logit: logits[id as usize],
        })
        .collect()
}

enum Flow {
    Continue,
    Stop,
    Cancel,
}

/// Turns tokens into text, holding back any tail that could start a stop string.
struct TextStream<'a> {
    decoder: crate::model::tokenizer::StreamDecoder<'a>,
    stop_strings: Vec<String>,
    emitted: String,
    pending: String,
}

impl<'a> TextStream<'a> {
    fn new(tokenizer: &'a Tokenizer, stop_strings: Vec<String>) -> TextStream<'a> {
        TextStream {
            decoder: tokenizer.stream_decoder(true),
            stop_strings,
            emitted: String::new(),
            pending: String::new(),
        }
    }

    fn push(
        &mut self,
        token: u32,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Flow, ModelError> {
        let piece = self
            .decoder
            .push(token)
            // The sampler drew it from the model's own logits: a token that does not
            // decode is our failure, not the request's.
            .map_err(|e| ModelError::internal(format!("decoding token {token}: {e}")))?;
        if let Some(piece) = piece {
            self.pending.push_str(&piece);
        }
        self.release(on_text)
    }

    fn finish(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<(), ModelError> {
        if let Some(rest) = self
            .decoder
            .finish()
            .map_err(|e| ModelError::internal(format!("decoding: {e}")))?
        {
            self.pending.push_str(&rest);
        }
        if let Flow::Continue = self.release(on_text)? {
            let rest = std::mem::take(&mut self.pending);
            self.emit(&rest, on_text);
        }
        Ok(())
    }

    /// Emits what can no longer be part of a stop string; reports a stop string found.
    fn release(&mut self, on_text: &mut dyn FnMut(&str) -> bool) -> Result<Flow, ModelError> {
        let found = self
            .stop_strings
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = found {
            let before = self.pending[..at].to_string();
            self.pending.clear();
            return Ok(if self.emit(&before, on_text) {
                Flow::Stop
            } else {
                Flow::Cancel
            });
        }
        let keep_from = (0..=self.pending.len())
            .filter(|&i| self.pending.is_char_boundary(i))
            .find(|&i| {
                let tail = &self.pending[i..];
                tail.is_empty() || self.stop_strings.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.pending.len());
        let ready: String = self.pending.drain(..keep_from).collect();
        Ok(if self.emit(&ready, on_text) {
            Flow::Continue
        } else {
            Flow::Cancel
        })
    }

    fn emit(&mut self, text: &str, on_text: &mut dyn FnMut(&str) -> bool) -> bool {
        if text.is_empty() {
            return true;
        }
        self.emitted.push_str(text);
        on_text(text)
    }

    fn into_text(self) -> String {
        self.emitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_of_the_raw_logits() {
        let logits = [1.0f32, 3.0, -2.0, 3.0, f32::NEG_INFINITY];
        let finite = &logits[..4];
        let norm = finite.iter().map(|l| f64::from(*l).exp()).sum::<f64>().ln();
        let t = token_logprobs(&logits, 2, 3);
        assert!((f64::from(t.logprob) - (-2.0 - norm)).abs() < 1e-6, "{t:?}");
        let top: Vec<u32> = t.top.iter().map(|a| a.id).collect();
        assert_eq!(top, [1, 3, 0], "best first, ties by id");
        assert!((f64::from(t.top[0].logprob) - (3.0 - norm)).abs() < 1e-6);
        let mass: f64 = (0..4)
            .map(|id| f64::from(token_logprobs(&logits, id, 0).logprob).exp())
            .sum();
        assert!((mass - 1.0).abs() < 1e-6, "{mass}");
        let impossible = token_logprobs(&logits, 4, 0);
        assert_eq!(impossible.logprob, f32::NEG_INFINITY);
        assert!(impossible.top.is_empty());
    }
}
