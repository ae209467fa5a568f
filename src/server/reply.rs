//! Response bodies in OpenAI's shapes: whole completions, and Server-Sent Event streams
//! of chunks that end with `data: [DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::engine::{Event, Outcome};
use super::error::ApiError;
use super::logprobs;
use super::tool_format::ToolFormat;
use super::tools;
use crate::decode::{FinishReason, TokenLogprobs};
use crate::model::tokenizer::Tokenizer;
use crate::model::Model;

/// What a completion's `echo` puts before each choice: the prompt's text and ids.
#[derive(Clone, Debug)]
pub(crate) struct Echo {
    /// The prompt as the client gave it (token ids decoded).
    pub text: String,
    /// Its token ids.
    pub ids: Vec<u32>,
}

/// One prompt's finished choices, with what its `echo` puts before each.
pub(crate) struct Part {
    /// Its choices, in index order.
    pub outcomes: Vec<Outcome>,
    /// The prompt and its scored tokens after the first, when echoed.
    pub echo: Option<(Echo, Vec<TokenLogprobs>)>,
}

/// Which endpoint a reply belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// What every body of one reply repeats, and what it holds.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    /// The endpoint.
    pub kind: Kind,
    /// `chatcmpl-…` or `cmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model's id.
    pub model: String,
    /// How many choices (`n`).
    pub choices: usize,
    /// Whether the choices carry log-probabilities.
    pub logprobs: bool,
    /// With tools that may be called: the format a choice's calls are read in.
    pub tools: Option<ToolFormat>,
}

fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

/// Token counts: the prompt once (every choice shares it), completions summed.
fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

impl Reply {
    fn object(&self, choices: Value) -> Value {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Text => "text_completion",
        };
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }

    /// The `logprobs` of a choice for `tokens` (null unless asked); a completion's
    /// first token starts at character `offset` of its text, which moves past them.
    fn logprobs(
        &self,
        tokenizer: &Tokenizer,
        tokens: &[TokenLogprobs],
        offset: &mut usize,
    ) -> Value {
        match (self.logprobs, self.kind) {
            (false, _) => Value::Null,
            (true, Kind::Chat) => logprobs::chat(tokenizer, tokens),
            (true, Kind::Text) => logprobs::legacy(tokenizer, tokens, offset),
        }
    }

    /// The body of a non-streamed reply: each part's choices in order, numbered on
    /// across parts (prompt `p`'s choice `j` is index `p·n + j`, as OpenAI numbers
    /// them); with `echo`, each completion's text and log-probabilities start with its
    /// prompt's. Usage counts every prompt once.
    pub fn full(&self, parts: &[Part], tokenizer: &Tokenizer) -> Value {
        let choices: Vec<Value> = parts
            .iter()
            .flat_map(|part| part.outcomes.iter().map(move |o| (o, part.echo.as_ref())))
            .enumerate()
            .map(|(index, (outcome, echo))| {
                let reason = finish_reason(outcome.finish_reason);
                let logprobs = match (echo, self.logprobs) {
                    (Some((echo, scored)), true) => {
                        logprobs::legacy_echo(tokenizer, &echo.ids, scored, &outcome.logprobs)
                    }
                    _ => self.logprobs(tokenizer, &outcome.logprobs, &mut 0),
                };
                let text = match echo {
                    Some((echo, _)) => format!("{}{}", echo.text, outcome.text),
                    None => outcome.text.clone(),
                };
                match self.kind {
                    Kind::Chat => {
                        let (message, reason) = self.message(index, outcome);
                        json!({
                            "index": index,
                            "message": message,
                            "logprobs": logprobs,
                            "finish_reason": reason,
                        })
                    }
                    Kind::Text => json!({
                        "index": index,
                        "text": text,
                        "logprobs": logprobs,
                        "finish_reason": reason,
                    }),
                }
            })
            .collect();
        let mut body = self.object(Value::Array(choices));
        let prompt_tokens = parts
            .iter()
            .filter_map(|p| p.outcomes.first())
            .map(|o| o.prompt_tokens)
            .sum();
        let completion_tokens = parts
            .iter()
            .flat_map(|p| &p.outcomes)
            .map(|o| o.completion_tokens)
            .sum();
        body["usage"] = usage(prompt_tokens, completion_tokens);
        if self.kind == Kind::Chat {
            body["object"] = "chat.completion".into();
        }
        body
    }

    /// Choice `index`'s chat `message` and finish reason: with tools, the calls its
    /// text holds become `tool_calls` and the reason `tool_calls` (when it stopped).
    fn message(&self, index: usize, outcome: &Outcome) -> (Value, &'static str) {
        let reason = finish_reason(outcome.finish_reason);
        let Some(format) = self.tools else {
            return (
                json!({"role": "assistant", "content": outcome.text}),
                reason,
            );
        };
        let base = format!("{}_{index}", self.id.trim_start_matches("chatcmpl-"));
        let (message, calls) = tools::message(format, &outcome.text, &base);
        match (calls, outcome.finish_reason) {
            (Some(calls), FinishReason::Stop) => (message, calls),
            _ => (message, reason),
        }
    }

    /// The streamed chunks of a choice held back because it may call tools: its
    /// content, then per call one chunk with its index, id, type, name and empty
    /// arguments and one with the arguments (OpenAI's order), then the finish.
    fn tool_chunks(&self, index: usize, outcome: &Outcome) -> Vec<SseEvent> {
        let (message, reason) = self.message(index, outcome);
        let mut chunks = Vec::new();
        if let Some(content) = message["content"].as_str().filter(|c| !c.is_empty()) {
            chunks.push(self.chunk(index, json!({ "content": content }), Value::Null, None));
        }
        for (n, call) in message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let opening = json!({"tool_calls": [{
                "index": n,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }]});
            chunks.push(self.chunk(index, opening, Value::Null, None));
            let arguments = json!({"tool_calls": [{
                "index": n,
                "function": {"arguments": call["function"]["arguments"]},
            }]});
            chunks.push(self.chunk(index, arguments, Value::Null, None));
        }
        chunks.push(self.chunk(index, json!({}), Value::Null, Some(reason)));
        chunks
    }

    /// One streamed chunk of choice `index`: a chat `delta` (or completion `text`), its
    /// tokens' `logprobs` and the finish reason.
    fn chunk(
        &self,
        index: usize,
        delta: Value,
        logprobs: Value,
        reason: Option<&'static str>,
    ) -> SseEvent {
        let choice = match self.kind {
            Kind::Chat => json!({
                "index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason,
            }),
            Kind::Text => json!({
                "index": index,
                "text": delta.get("content").cloned().unwrap_or_else(|| "".into()),
                "logprobs": logprobs,
                "finish_reason": reason,
            }),
        };
        data(&self.object(json!([choice])))
    }
}

fn data(value: &Value) -> SseEvent {
    SseEvent::default().data(value.to_string())
}

/// Sets a job's cancellation flag when dropped: with the response, when the client
/// goes away.
pub(crate) struct CancelOnDrop(pub Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One prompt's job inside a stream: where its choices are numbered from and what it
/// still owes.
struct Source {
    /// Index of its first choice in the reply (prompt `p`'s: `p·n`).
    first: usize,
    /// Its choices that have not ended.
    left: usize,
    /// Its prompt's tokens, once a choice has ended.
    prompt_tokens: usize,
    /// The prompt each of its choices starts with when echoed and scored: sent when its
    /// scores come (an echo without scores is sent at once).
    echo: Option<Echo>,
    /// Its choices' text and ends that came before its scores (a choice that took its
    /// prompt from the prefix cache may start first), sent after the echo.
    held: Vec<Event>,
    /// Cancels its job when the stream is dropped (the client went away).
    _cancel: CancelOnDrop,
}

/// One streamed prompt's job: its events, its cancellation and what its `echo` repeats.
pub(crate) type StreamedJob = (UnboundedReceiver<Event>, CancelOnDrop, Option<Echo>);

/// Engine events tagged with the source they came from; `None` once its job's sender is
/// gone.
type Tagged = std::pin::Pin<Box<dyn Stream<Item = (usize, Option<Event>)> + Send>>;

/// A stream's state between events.
struct Streaming {
    reply: Reply,
    /// The served model, whose tokenizer renders tokens in log-probabilities.
    model: Arc<Model>,
    events: futures_util::stream::SelectAll<Tagged>,
    include_usage: bool,
    pending: VecDeque<SseEvent>,
    /// Per choice of the reply, the text offset of its next token (completions'
    /// log-probabilities).
    offsets: Vec<usize>,
    /// Per prompt, its job.
    sources: Vec<Source>,
    /// Choices that have not ended, of every prompt.
    left: usize,
    /// Completion tokens of the ended choices.
    completion_tokens: usize,
    done: bool,
}

impl Streaming {
    /// Turns one engine event of prompt `source`'s job into SSE events; the end of the
    /// reply's last choice, or an error, adds `[DONE]`.
    fn push(&mut self, source: usize, event: Option<Event>) {
        let first = self.sources[source].first;
        let waiting = self.sources[source].echo.is_some();
        let end = match event {
            Some(event @ (Event::Text { .. } | Event::Done { result: Ok(_), .. })) if waiting => {
                self.sources[source].held.push(event);
                return;
            }
            Some(Event::Prompt { logprobs }) => {
                let Some(echo) = self.sources[source].echo.take() else {
                    return;
                };
                let tokenizer = &self.model.tokenizer;
                let mut end = 0;
                let scored =
                    logprobs::legacy_echo_prompt(tokenizer, &echo.ids, &logprobs, &mut end);
                for index in first..first + self.reply.choices {
                    self.offsets[index] = end;
                    let delta = json!({ "content": echo.text });
                    let chunk = self.reply.chunk(index, delta, scored.clone(), None);
                    self.pending.push_back(chunk);
                }
                for held in std::mem::take(&mut self.sources[source].held) {
                    self.push(source, Some(held));
                }
                return;
            }
            Some(Event::Text {
                index,
                text,
                logprobs,
            }) => {
                let index = first + index;
                if self.reply.tools.is_some() {
                    // Held until the choice ends: its text may be calls.
                    return;
                }
                let tokenizer = &self.model.tokenizer;
                let logprobs = self
                    .reply
                    .logprobs(tokenizer, &logprobs, &mut self.offsets[index]);
                let delta = json!({ "content": text });
                let chunk = self.reply.chunk(index, delta, logprobs, None);
                self.pending.push_back(chunk);
                return;
            }
            Some(Event::Done {
                index,
                result: Ok(outcome),
            }) => {
                match self.reply.tools {
                    Some(_) => {
                        let chunks = self.reply.tool_chunks(first + index, &outcome);
                        self.pending.extend(chunks);
                    }
                    None => {
                        let reason = Some(finish_reason(outcome.finish_reason));
                        let last = self
                            .reply
                            .chunk(first + index, json!({}), Value::Null, reason);
                        self.pending.push_back(last);
                    }
                }
                let ended = &mut self.sources[source];
                ended.prompt_tokens = outcome.prompt_tokens;
                ended.left -= 1;
                self.completion_tokens += outcome.completion_tokens;
                self.left -= 1;
                if self.left > 0 {
                    return;
                }
                if self.include_usage {
                    let prompt_tokens = self.sources.iter().map(|s| s.prompt_tokens).sum();
                    let mut body = self.reply.object(json!([]));
                    body["usage"] = usage(prompt_tokens, self.completion_tokens);
                    self.pending.push_back(data(&body));
                }
                None
            }
            Some(Event::Done {
                result: Err(error), ..
            }) => Some(ApiError::from(error)),
            // A job that ended every choice drops its sender: nothing more to say.
            None if self.sources[source].left == 0 => return,
            None => Some(ApiError::shutting_down()),
        };
        self.end(end);
    }

    /// Ends the stream, with `error`'s body first when it failed.
    fn end(&mut self, error: Option<ApiError>) {
        if let Some(error) = error {
            self.pending.push_back(data(&error.body()));
        }
        self.pending.push_back(SseEvent::default().data("[DONE]"));
        self.done = true;
    }
}

/// The SSE response of one or more streamed jobs of `model`'s, one per prompt (prompt
/// `p`'s choice `j` is index `p·n + j`, as in a whole reply), their chunks in the
/// order the engine makes them. Dropping it (the client disconnected) cancels them all;
/// one failed choice ends the stream with its error, cancelling the rest.
pub(crate) fn stream(
    reply: Reply,
    model: Arc<Model>,
    jobs: Vec<StreamedJob>,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut pending = VecDeque::new();
    if reply.kind == Kind::Chat {
        for index in 0..reply.choices * jobs.len() {
            let delta = json!({"role": "assistant", "content": ""});
            pending.push_back(reply.chunk(index, delta, Value::Null, None));
        }
    }
    let mut sources = Vec::with_capacity(jobs.len());
    let mut tagged: Vec<Tagged> = Vec::with_capacity(jobs.len());
    for (p, (events, cancel, echo)) in jobs.into_iter().enumerate() {
        let first = p * reply.choices;
        // Without scores the echo goes first; with them it waits for `Event::Prompt`.
        let echo = match echo {
            Some(echo) if !reply.logprobs => {
                for index in first..first + reply.choices {
                    let delta = json!({ "content": echo.text });
                    pending.push_back(reply.chunk(index, delta, Value::Null, None));
                }
                None
            }
            echo => echo,
        };
        sources.push(Source {
            first,
            left: reply.choices,
            prompt_tokens: 0,
            echo,
            held: Vec::new(),
            _cancel: cancel,
        });
        tagged.push(Box::pin(futures_util::stream::unfold(
            Some(events),
            move |events| async move {
                let mut events = events?;
                match events.recv().await {
                    Some(event) => Some(((p, Some(event)), Some(events))),
                    None => Some(((p, None), None)),
                }
            },
        )));
    }
    let state = Streaming {
        offsets: vec![0; reply.choices * sources.len()],
        left: reply.choices * sources.len(),
        sources,
        reply,
        model,
        events: futures_util::stream::select_all(tagged),
        include_usage,
        pending,
        completion_tokens: 0,
        done: false,
    };
    let events = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.pending.pop_front() {
                return Some((Ok(event), s));
            }
            if s.done {
                return None;
            }
            match s.events.next().await {
                Some((source, event)) => s.push(source, event),
                // Every job's sender is gone without the reply ending.
                None => s.end(Some(ApiError::shutting_down())),
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
