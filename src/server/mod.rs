//! `switchyard serve`: an OpenAI-compatible HTTP server (axum + tokio) over one model.
//!
//! Handlers parse and check requests, render chat templates and tokenize; the engine
//! (`engine.rs`) owns the [`Runner`] on one OS thread and steps up to `parallel` queued
//! jobs together (continuous batching, [`crate::sched`]), at most `max_queue` waiting. Text streams back over a channel per job; a
//! dropped response cancels its job. Errors are OpenAI-shaped (`error.rs`), and
//! `/metrics` is written by hand in Prometheus' text format (`metrics.rs`).

mod access;
pub(crate) mod api;
mod engine;
mod error;
mod fields;
mod logprobs;
mod metrics;
mod reply;
mod routes;
mod shapes;
mod tool_format;
mod tools;

use std::future::Future;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::model::Model;
pub use crate::sched::Limits;
use crate::step::Runner;
pub use access::ApiKey;

/// Generations stepped together unless told otherwise.
pub const DEFAULT_PARALLEL: usize = 16;

/// The body limit `serve` uses unless told otherwise: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// How the server behaves.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// How many generations step together, and each step's token budget.
    pub limits: Limits,
    /// Most requests that wait while `limits` of them run; the next gets 429.
    pub max_queue: usize,
    /// Largest request body in bytes; a larger one gets 413.
    pub body_limit: usize,
    /// The key every `/v1` request must present (`None`: no authentication).
    pub api_key: Option<ApiKey>,
    /// The id clients name the model by (`None`: [`model_id`] of its path).
    pub served_name: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: Limits::parallel(DEFAULT_PARALLEL).expect("a valid default"),
            max_queue: 16,
            body_limit: DEFAULT_BODY_LIMIT,
            api_key: None,
            served_name: None,
        }
    }
}

/// The id clients name a model by: the file stem (`SmolLM2-135M-Instruct-Q4_1` for
/// `SmolLM2-135M-Instruct-Q4_1.gguf`), or the directory name of a Hugging Face model.
pub fn model_id(path: &Path) -> String {
    let name = if path.is_dir() {
        path.file_name()
    } else {
        path.file_stem()
    };
    name.map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
}

/// How `model` writes tool calls, as the server log says it: from its chat template's
/// source (decision 165).
pub fn tool_form(model: &Model) -> &'static str {
    tool_format(model).describe()
}

fn tool_format(model: &Model) -> tool_format::ToolFormat {
    model
        .chat_template
        .as_ref()
        .map_or(tool_format::ToolFormat::Generic, |t| {
            tool_format::ToolFormat::detect(t.source())
        })
}

/// Serves `model` on `listener` until `shutdown` completes, then stops accepting,
/// cancels the running and waiting generations (their clients get a 503 or a final
/// error event), waits for open responses to end and returns.
pub async fn serve(
    listener: TcpListener,
    model: Model,
    runner: Runner,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    let context = runner.context();
    let model = Arc::new(model);
    let (engine, thread) = engine::start(
        model.clone(),
        runner,
        config.limits,
        config.max_queue,
        metrics.clone(),
    )?;
    let app = Arc::new(routes::App {
        model_id: config.served_name.unwrap_or_else(|| model_id(&model.path)),
        api_key: config.api_key,
        token_env: std::sync::Mutex::new(None),
        tool_format: tool_format(&model),
        model,
        engine: engine.clone(),
        metrics,
        context,
        max_queue: config.max_queue,
        body_limit: config.body_limit,
        started: routes::unix_now(),
        next_id: AtomicU64::new(0),
    });
    let stopper = engine.clone();
    let result = axum::serve(listener, routes::router(app))
        .with_graceful_shutdown(async move {
            shutdown.await;
            stopper.shut_down();
        })
        .await;
    engine.shut_down();
    drop(engine);
    let joined = tokio::task::spawn_blocking(move || thread.join()).await;
    if !matches!(joined, Ok(Ok(()))) {
        log::error!("the engine thread ended with a panic");
    }
    result
}

/// Completes on the first SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            log::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(e) => {
                log::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
