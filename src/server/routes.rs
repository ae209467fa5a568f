//! The HTTP endpoints: checks a request, tokenizes it, queues it on the engine and
//! answers with a whole completion or a stream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::json;

use super::api::{self, Params};
use super::engine::{EngineHandle, Event, Job, Outcome, SubmitError};
use super::error::ApiError;
use super::metrics::Metrics;
use super::reply::{self, CancelOnDrop, Kind, Reply};
use super::shapes;
use super::tool_format::ToolFormat;
use crate::decode::constraint::{Shape, TokenEnv};
use crate::decode::sampler::SamplerConfig;
use crate::decode::{GenerateOptions, TokenLogprobs};
use crate::model::Model;

/// Recent tokens `repetition_penalty` looks at (llama.cpp's `repeat_last_n` default).
const REPEAT_LAST_N: usize = 64;

/// Bytes of an oversized body read (and dropped) before answering 413, so that the
/// client reads the answer instead of a reset connection.
const DRAIN_LIMIT: usize = 64 << 20;
/// Most choices one request makes across its prompts (each prompt's `n`).
const MAX_REQUEST_CHOICES: usize = 64;
/// `max_tokens` of a completion request that does not say (OpenAI's default).
const DEFAULT_COMPLETION_TOKENS: usize = 16;
/// The endpoints, as `/metrics` labels them; anything else is `other`.
const ENDPOINTS: [&str; 6] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/health",
    "/metrics",
    "/v1/models/{id}",
];

/// What the handlers share.
pub(crate) struct App {
    /// The model (tokenizer, chat template, stop ids).
    pub model: Arc<Model>,
    /// Where jobs go.
    pub engine: EngineHandle,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The id clients name the model by.
    pub model_id: String,
    /// The key `/v1` requests must present, if any.
    pub api_key: Option<super::ApiKey>,
    /// The vocabulary's token trie, for constrained replies: made on the first such
    /// request.
    pub token_env: std::sync::Mutex<Option<Arc<TokenEnv>>>,
    /// How the model writes tool calls (from its chat template).
    pub tool_format: super::tool_format::ToolFormat,
    /// Positions one sequence holds.
    pub context: usize,
    /// Most requests waiting.
    pub max_queue: usize,
    /// Largest request body, bytes.
    pub body_limit: usize,
    /// Server start, Unix seconds (the model's `created`).
    pub started: u64,
    /// Numbers replies.
    pub next_id: AtomicU64,
}

/// The router with every endpoint, request counting and OpenAI-style 404/405s.
pub(crate) fn router(app: Arc<App>) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(one_model))
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            super::access::require_key,
        ));
    Router::new()
        .merge(api)
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/metrics", get(metrics))
        .fallback(|request: Request| async move { ApiError::no_route(request.uri().path()) })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                code: "method_not_allowed",
                ..ApiError::invalid("", None, "This endpoint does not take that method.")
            }
        })
        .layer(middleware::from_fn_with_state(app.clone(), count_requests))
        .with_state(app)
}

async fn count_requests(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let endpoint = ENDPOINTS
        .iter()
        .find(|e| **e == path || (e.ends_with("{id}") && path.starts_with("/v1/models/")))
        .copied()
        .unwrap_or("other");
    let response = next.run(request).await;
    app.metrics.request(endpoint, response.status().as_u16());
    response
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], app.metrics.render()).into_response()
}

fn model_card(app: &App) -> serde_json::Value {
    json!({"id": app.model_id, "object": "model", "created": app.started, "owned_by": "switchyard"})
}

async fn models(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({"object": "list", "data": [model_card(&app)]}))
}

async fn one_model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    if id == app.model_id {
        Json(model_card(&app)).into_response()
    } else {
        ApiError::unknown_model(&id, &app.model_id).into_response()
    }
}

async fn chat_completions(State(app): State<Arc<App>>, body: Body) -> Response {
    complete(app, Kind::Chat, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn completions(State(app): State<Arc<App>>, body: Body) -> Response {
    complete(app, Kind::Text, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Reads at most `limit` bytes of `body`; a longer body is drained (up to
/// [`DRAIN_LIMIT`]) and refused with 413.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut chunks = body.into_data_stream();
    let (mut kept, mut seen) = (Vec::new(), 0usize);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::invalid(
                "invalid_body",
                None,
                format!("Reading the body failed: {e}."),
            )
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen <= limit {
            kept.extend_from_slice(&chunk);
        } else if seen > DRAIN_LIMIT {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::too_large(limit));
    }
    Ok(Bytes::from(kept))
}

/// What to tokenize: a chat's messages or a completion's prompt.
enum Input {
    /// The messages, and the tools the template gets.
    Messages(
        Vec<crate::model::chat_template::Message>,
        Option<serde_json::Value>,
    ),
    Prompt(api::Prompt),
}

async fn complete(app: Arc<App>, kind: Kind, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(body, app.body_limit).await?;
    // Off the async threads: a grammar (a JSON Schema, a regex) compiles here, which can
    // take a good part of a second for a large one.
    let (body, params) = tokio::task::spawn_blocking(move || {
        let body = api::parse_body(&bytes)?;
        let params = Params::parse(&body, kind)?;
        Ok::<_, ApiError>((body, params))
    })
    .await
    .map_err(|e| ApiError::internal(format!("reading the request failed: {e}")))??;
    if let Some(asked) = params.model.as_deref() {
        if asked != app.model_id {
            return Err(ApiError::unknown_model(asked, &app.model_id));
        }
    }
    // Tools that may be called hold the reply to their grammar, so no other shape.
    let calling = params.tools.as_ref().filter(|t| t.mode().is_some());
    if calling.is_some() {
        if let api::Format::Constrained { param, .. } = &params.format {
            return Err(ApiError::bad_value(
                param,
                format!("'{param}' cannot be combined with tools unless tool_choice is 'none'."),
            ));
        }
        if params.logprobs.is_some() {
            return Err(ApiError::invalid(
                "unsupported_parameter",
                Some("logprobs"),
                "Unsupported parameter: 'logprobs' is not supported together with tools unless tool_choice is 'none'.",
            ));
        }
    }
    let inputs: Vec<Input> = match kind {
        Kind::Chat => {
            let messages = api::messages(&body)?;
            let (messages, tools) = match &params.tools {
                Some(tools) => tools.prepare(app.tool_format, messages),
                // Earlier calls and results, written as the generic form writes them.
                None if app.tool_format == ToolFormat::Generic => {
                    (super::tools::generic_history(messages), None)
                }
                None => (messages, None),
            };
            vec![Input::Messages(messages, tools)]
        }
        Kind::Text => api::prompts(&body)?
            .into_iter()
            .map(Input::Prompt)
            .collect(),
    };
    if inputs.len() * params.n > MAX_REQUEST_CHOICES {
        return Err(ApiError::bad_value(
            "prompt",
            format!(
                "{} prompts of n = {} make {} choices; a request may make at most {MAX_REQUEST_CHOICES}.",
                inputs.len(),
                params.n,
                inputs.len() * params.n
            ),
        ));
    }
    let vocab = app.model.config.vocab_size;
    if let Some(&(id, _)) = params
        .logit_bias
        .iter()
        .find(|&&(id, _)| id as usize >= vocab)
    {
        return Err(ApiError::bad_value(
            "logit_bias",
            format!("logit_bias names token {id}, but this model's vocabulary has {vocab} tokens (0 to {}).", vocab.saturating_sub(1)),
        ));
    }
    let tool_grammar = match calling {
        Some(tools) => {
            let (tools, model, format) = (tools.clone(), app.model.clone(), app.tool_format);
            tokio::task::spawn_blocking(move || tools.grammar(format, &model.tokenizer))
                .await
                .map_err(|e| ApiError::internal(format!("compiling the tools failed: {e}")))??
        }
        None => None,
    };
    let format = match tool_grammar {
        Some(grammar) => api::Format::Constrained {
            param: "tools",
            grammar,
        },
        None => params.format.clone(),
    };
    let constraint = match &format {
        api::Format::Text => None,
        api::Format::Constrained { param, grammar } => {
            let (env, grammar, param) = (token_env(&app).await?, grammar.clone(), *param);
            let shape = tokio::task::spawn_blocking(move || Shape::new(&env, &grammar))
                .await
                .map_err(|e| ApiError::internal(format!("compiling the grammar failed: {e}")))?;
            Some(shape.map_err(|e| shapes::unsupported_grammar(param, &e))?)
        }
    };
    let samplers = samplers(&params);
    let mut prepared = Vec::with_capacity(inputs.len());
    for input in inputs {
        prepared.push(prepare(&app, kind, &params, input, &constraint, &samplers).await?);
    }
    // Every prompt's job is queued, or none runs: a refusal cancels those before it.
    let mut running = Vec::with_capacity(prepared.len());
    for (job, echo) in prepared {
        let (events, cancel) = (job.1, CancelOnDrop(job.0.cancel.clone()));
        match app.engine.submit(job.0) {
            Ok(()) => running.push((events, cancel, echo)),
            Err(SubmitError::Full) => return Err(ApiError::queue_full(app.max_queue)),
            Err(SubmitError::Stopped) => return Err(ApiError::shutting_down()),
        }
    }
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let reply = Reply {
        kind,
        id: match kind {
            Kind::Chat => format!("chatcmpl-{:x}-{n}", app.started),
            Kind::Text => format!("cmpl-{:x}-{n}", app.started),
        },
        created: unix_now(),
        model: app.model_id.clone(),
        choices: params.n,
        logprobs: params.logprobs.is_some(),
        tools: calling.map(|_| app.tool_format),
    };
    if params.stream {
        let sse = reply::stream(reply, app.model.clone(), running, params.include_usage);
        return Ok(sse.into_response());
    }
    let mut parts = Vec::with_capacity(running.len());
    for (events, _cancel, echo) in &mut running {
        let (outcomes, scored) = wait(events, params.n).await?;
        let echo = echo.take().map(|e| (e, scored.unwrap_or_default()));
        parts.push(reply::Part { outcomes, echo });
    }
    drop(running);
    let body = reply.full(&parts, &app.model.tokenizer);
    Ok(Json(body).into_response())
}

/// A job with its event receiver.
type Queued = (Job, tokio::sync::mpsc::UnboundedReceiver<Event>);

/// One sampler per choice: choice `i` draws with `seed + i`, so that sampled choices
/// differ (every prompt of a request alike, so each gets what it would alone).
fn samplers(params: &Params) -> Vec<SamplerConfig> {
    // top_p = 0 keeps only the most likely token: greedy.
    let (temperature, top_p) = if params.top_p == 0.0 {
        (0.0, 1.0)
    } else {
        (params.temperature, params.top_p)
    };
    let seed = params.seed.unwrap_or_else(rand::random);
    (0..params.n as u64)
        .map(|i| SamplerConfig {
            temperature,
            top_k: params.top_k,
            top_p,
            min_p: params.min_p,
            repetition_penalty: params.repetition_penalty,
            // llama.cpp's window for the penalty.
            repeat_last_n: REPEAT_LAST_N,
            frequency_penalty: params.frequency_penalty,
            presence_penalty: params.presence_penalty,
            logit_bias: params.logit_bias.clone(),
            seed: seed.wrapping_add(i),
        })
        .collect()
}

/// One prompt's job (tokenized, its length checked) and what its `echo` repeats.
async fn prepare(
    app: &Arc<App>,
    kind: Kind,
    params: &Params,
    input: Input,
    constraint: &Option<Shape>,
    samplers: &[SamplerConfig],
) -> Result<(Queued, Option<reply::Echo>), ApiError> {
    // What `echo` repeats: the prompt's own text, or its ids' decoding.
    let echo_text = match (&input, params.echo) {
        (Input::Prompt(api::Prompt::Text(text)), true) => Some(text.clone()),
        _ => None,
    };
    let model = app.model.clone();
    let prompt = tokio::task::spawn_blocking(move || tokenize(&model, input))
        .await
        .map_err(|e| {
            ApiError::server(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                format!("tokenizing failed: {e}"),
            )
        })??;
    let default_max = match kind {
        Kind::Chat => app.context.saturating_sub(prompt.len()),
        Kind::Text => DEFAULT_COMPLETION_TOKENS,
    };
    let max_tokens = check_lengths(app, kind, prompt.len(), params, default_max)?;
    let (sender, events) = tokio::sync::mpsc::unbounded_channel();
    let echo = match params.echo {
        true => Some(reply::Echo {
            text: match echo_text {
                Some(text) => text,
                None => app.model.tokenizer.decode(&prompt, false).map_err(|e| {
                    ApiError::bad_value("prompt", format!("The prompt does not decode: {e}"))
                })?,
            },
            ids: prompt.clone(),
        }),
        false => None,
    };
    let job = Job {
        prompt,
        options: GenerateOptions {
            max_tokens,
            stop_strings: params.stop.clone(),
            stop_ids: match params.ignore_eos {
                true => Vec::new(),
                false => app.model.stop_ids.clone(),
            },
            logprobs: params.logprobs,
            constraint: constraint.clone(),
            ..GenerateOptions::default()
        },
        samplers: samplers.to_vec(),
        events: sender,
        cancel: Arc::new(AtomicBool::new(false)),
        submitted: Instant::now(),
        prompt_logprobs: params.logprobs.filter(|_| params.echo),
    };
    Ok(((job, events), echo))
}

/// The model's token trie for constrained replies, built on first use (off the async
/// threads; a fraction of a second) and kept.
async fn token_env(app: &Arc<App>) -> Result<Arc<TokenEnv>, ApiError> {
    let app = app.clone();
    tokio::task::spawn_blocking(move || {
        let mut env = app
            .token_env
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*env {
            Some(env) => Ok(env.clone()),
            None => {
                let model = &app.model;
                let made = Arc::new(TokenEnv::new(
                    &model.tokenizer,
                    model.config.vocab_size,
                    &model.stop_ids,
                )?);
                *env = Some(made.clone());
                Ok(made)
            }
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("building the token trie failed: {e}")))?
}

/// Waits for the end of a job's `n` choices, ignoring their streamed text; the first
/// failed choice fails the job.
async fn wait(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>,
    n: usize,
) -> Result<(Vec<Outcome>, Option<Vec<TokenLogprobs>>), ApiError> {
    let mut outcomes: Vec<Option<Outcome>> = (0..n).map(|_| None).collect();
    let mut scored = None;
    while outcomes.iter().any(Option::is_none) {
        match events.recv().await {
            Some(Event::Prompt { logprobs }) => scored = Some(logprobs),
            Some(Event::Text { .. }) => {}
            Some(Event::Done { index, result }) => {
                outcomes[index] = Some(result.map_err(ApiError::from)?);
            }
            None => return Err(ApiError::shutting_down()),
        }
    }
    Ok((outcomes.into_iter().flatten().collect(), scored))
}

/// Renders and tokenizes the input (runs on a blocking thread). A plain prompt gets
/// the model's BOS/EOS; a rendered chat gets none, as its template writes its own.
fn tokenize(model: &Model, input: Input) -> Result<Vec<u32>, ApiError> {
    let param = match input {
        Input::Prompt(_) => "prompt",
        Input::Messages(..) => "messages",
    };
    let ids = match input {
        Input::Prompt(api::Prompt::Ids(ids)) => {
            let vocab = model.config.vocab_size;
            if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ApiError::bad_value(
                    "prompt",
                    format!("prompt token {id} is past this model's vocabulary of {vocab} tokens."),
                ));
            }
            return Ok(ids);
        }
        Input::Prompt(api::Prompt::Text(text)) => model.tokenizer.encode(&text, false),
        Input::Messages(messages, tools) => {
            let template = model.chat_template.as_ref().ok_or_else(|| {
                ApiError::invalid(
                    "no_chat_template",
                    Some("messages"),
                    "This model has no chat template; use /v1/completions.",
                )
            })?;
            let text = template
                .render_with_tools(&messages, tools.as_ref(), true)
                .map_err(|e| ApiError::bad_value("messages", e.to_string()))?;
            model.tokenizer.encode_chat(&text)
        }
    };
    ids.map_err(|e| ApiError::bad_value(param, format!("The prompt does not tokenize: {e}")))
}

/// The token limit to use, or a 400 when the prompt and limit do not fit the context
/// (naming `messages` for a chat and `prompt` for a completion).
fn check_lengths(
    app: &App,
    kind: Kind,
    prompt: usize,
    params: &Params,
    default_max: usize,
) -> Result<usize, ApiError> {
    let (max_tokens, field) = (params.max_tokens, params.max_tokens_field);
    let context = app.context;
    let input = match kind {
        Kind::Chat => "messages",
        Kind::Text => "prompt",
    };
    if prompt == 0 {
        return Err(ApiError::bad_value(input, "The prompt is empty."));
    }
    if let Some(n) = max_tokens.filter(|&n| n > context) {
        return Err(ApiError::bad_value(
            field,
            format!("{field} is {n}, but this model's context holds {context} tokens."),
        ));
    }
    let max_tokens = max_tokens.unwrap_or(default_max);
    // Both are bounded by the context by now; saturating anyway, so that no request
    // number can wrap the sum past the check.
    let requested = prompt.saturating_add(max_tokens);
    if prompt >= context || requested > context {
        return Err(ApiError::invalid(
            "context_length_exceeded",
            Some(input),
            format!(
                "This model's maximum context length is {context} tokens. However, you \
                 requested {requested} tokens ({prompt} in the prompt, {max_tokens} for the \
                 completion). Please reduce the prompt or max_tokens."
            ),
        ));
    }
    Ok(max_tokens)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
