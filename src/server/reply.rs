//! Response bodies in OpenAI's shapes: whole completions, and Server-Sent Event streams
//! of chunks that end with `data: [DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::engine::{Event, Outcome};
use super::error::ApiError;
use crate::model::FinishReason;

/// Which endpoint a reply belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// What every body of one reply repeats.
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
}

fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

fn usage(outcome: &Outcome) -> Value {
    json!({
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
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

    /// The body of a non-streamed reply.
    pub fn full(&self, outcome: &Outcome) -> Value {
        let reason = finish_reason(outcome.finish_reason);
        let choice = match self.kind {
            Kind::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": outcome.text},
                "logprobs": null,
                "finish_reason": reason,
            }),
            Kind::Text => json!({
                "index": 0,
                "text": outcome.text,
                "logprobs": null,
                "finish_reason": reason,
            }),
        };
        let mut body = self.object(json!([choice]));
        body["usage"] = usage(outcome);
        if self.kind == Kind::Chat {
            body["object"] = "chat.completion".into();
        }
        body
    }

    /// One streamed chunk: a chat `delta` (or completion `text`) and the finish reason.
    fn chunk(&self, delta: Value, reason: Option<FinishReason>) -> SseEvent {
        let reason = reason.map(finish_reason);
        let choice = match self.kind {
            Kind::Chat => json!({
                "index": 0, "delta": delta, "logprobs": null, "finish_reason": reason,
            }),
            Kind::Text => json!({
                "index": 0,
                "text": delta.get("content").cloned().unwrap_or_else(|| "".into()),
                "logprobs": null,
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

/// A stream's state between events.
struct Streaming {
    reply: Reply,
    events: UnboundedReceiver<Event>,
    include_usage: bool,
    pending: VecDeque<SseEvent>,
    done: bool,
    _cancel: CancelOnDrop,
}

impl Streaming {
    /// Turns one engine event into SSE events; the job's end adds `[DONE]`.
    fn push(&mut self, event: Option<Event>) {
        let end = match event {
            Some(Event::Text(piece)) => {
                let chunk = self.reply.chunk(json!({ "content": piece }), None);
                self.pending.push_back(chunk);
                return;
            }
            Some(Event::Done(Ok(outcome))) => {
                let last = self.reply.chunk(json!({}), Some(outcome.finish_reason));
                self.pending.push_back(last);
                if self.include_usage {
                    let mut body = self.reply.object(json!([]));
                    body["usage"] = usage(&outcome);
                    self.pending.push_back(data(&body));
                }
                None
            }
            Some(Event::Done(Err(error))) => Some(ApiError::from(error)),
            None => Some(ApiError::shutting_down()),
        };
        if let Some(error) = end {
            self.pending.push_back(data(&error.body()));
        }
        self.pending.push_back(SseEvent::default().data("[DONE]"));
        self.done = true;
    }
}

/// The SSE response of a streamed job. Dropping it (the client disconnected) cancels
/// the job.
pub(crate) fn stream(
    reply: Reply,
    events: UnboundedReceiver<Event>,
    include_usage: bool,
    cancel: CancelOnDrop,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut pending = VecDeque::new();
    if reply.kind == Kind::Chat {
        pending.push_back(reply.chunk(json!({"role": "assistant", "content": ""}), None));
    }
    let state = Streaming {
        reply,
        events,
        include_usage,
        pending,
        done: false,
        _cancel: cancel,
    };
    let events = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.pending.pop_front() {
                return Some((Ok(event), s));
            }
            if s.done {
                return None;
            }
            let next = s.events.recv().await;
            s.push(next);
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
