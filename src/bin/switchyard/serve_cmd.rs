//! `switchyard serve`: loads the model once and serves an OpenAI-compatible HTTP API
//! until SIGINT or SIGTERM.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use switchyard::sched::DEFAULT_PREFILL_TOKENS;
use switchyard::server::{
    self, ApiKey, Limits, ServerConfig, DEFAULT_BODY_LIMIT, DEFAULT_PARALLEL,
};

use switchyard::model::chat_template::ChatTemplate;

use crate::model_args::ModelArgs;

/// Flags of `switchyard serve`.
#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (loopback by default; elsewhere, set an API key).
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    host: String,
    /// Port to listen on (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 8080, value_name = "PORT")]
    port: u16,
    /// Generations stepped together (continuous batching): each step evaluates one
    /// token of every running generation and prompt chunks of new ones, reading the
    /// weights once for all of them. More raises total throughput; each stream's tokens
    /// come a little slower.
    #[arg(
        long,
        default_value_t = DEFAULT_PARALLEL,
        value_name = "N",
        allow_negative_numbers = true
    )]
    parallel: usize,
    /// Prompt tokens a step takes besides the running generations' next tokens while
    /// more than half of --parallel are decoding, topped up to fill the rows the step is
    /// padded to anyway (16 decoding and 8 prompt tokens make 24 rows): lower keeps
    /// their time per token steadier, higher gets new requests their first token
    /// sooner. With half of --parallel or fewer decoding, steps take whole prompts (up to
    /// 256 tokens), so a batch of new requests starts decoding together.
    #[arg(
        long,
        default_value_t = DEFAULT_PREFILL_TOKENS,
        value_name = "N",
        allow_negative_numbers = true
    )]
    prefill_per_step: usize,
    /// KV-cache memory for all running generations together, in MiB: a request joins
    /// only when its prompt plus max_tokens fits beside the others' (it waits in the
    /// queue otherwise; one larger than the whole budget gets a 400). Default: no bound
    /// beyond --parallel × --ctx.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true)]
    kv_memory: Option<usize>,
    /// Most requests that wait while `--parallel` run; the next gets 429.
    #[arg(
        long,
        default_value_t = 64,
        value_name = "N",
        allow_negative_numbers = true
    )]
    max_queue: usize,
    /// Require this key from every /v1 request, as `Authorization: Bearer KEY` (the
    /// `openai` client's api_key); /health and /metrics stay open. Prefer the
    /// SWITCHYARD_API_KEY environment variable, which other users cannot read in the
    /// process list; the flag wins when both are set.
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// The model id clients send and /v1/models lists (default: the file's stem, or a
    /// Hugging Face model's directory name), e.g. the name a client is configured with.
    #[arg(long, visible_alias = "alias", value_name = "NAME")]
    served_model_name: Option<String>,
    /// A Jinja chat template to use instead of the model's own (its tool support
    /// decides how tool calls are written; the log says which form).
    #[arg(long, value_name = "FILE")]
    chat_template_file: Option<std::path::PathBuf>,
}

/// The environment variable `--api-key` falls back to.
const API_KEY_VAR: &str = "SWITCHYARD_API_KEY";

/// The key from `--api-key`, else from [`API_KEY_VAR`], checked; `None` for neither.
fn api_key(args: &ServeArgs) -> Result<Option<ApiKey>> {
    let (source, key) = match (&args.api_key, std::env::var(API_KEY_VAR)) {
        (Some(key), _) => ("--api-key", key.clone()),
        (None, Ok(key)) => (API_KEY_VAR, key),
        (None, Err(std::env::VarError::NotPresent)) => return Ok(None),
        (None, Err(std::env::VarError::NotUnicode(_))) => {
            bail!("{API_KEY_VAR}: an API key takes printable ASCII characters without spaces")
        }
    };
    ApiKey::new(&key)
        .map(Some)
        .map_err(|e| anyhow!("{source}: {e}"))
}

/// `--served-model-name`, checked: a non-empty name without control characters.
fn served_name(args: &ServeArgs) -> Result<Option<String>> {
    match &args.served_model_name {
        Some(name) if name.trim().is_empty() || name.chars().any(char::is_control) => bail!(
            "--served-model-name {name:?}: a model id needs a visible character and no control characters"
        ),
        other => Ok(other.clone()),
    }
}

/// Largest `--max-queue` (the queue's slots are allocated up front).
const MAX_QUEUE_LIMIT: usize = 4096;

/// The batching limits of `--parallel` and `--prefill-per-step`, after refusing
/// those and `--max-queue` when out of range, each by its flag.
fn check_limits(args: &ServeArgs) -> Result<Limits> {
    if args.max_queue == 0 || args.max_queue > MAX_QUEUE_LIMIT {
        bail!(
            "--max-queue {} is out of range: it takes 1 to {MAX_QUEUE_LIMIT}",
            args.max_queue
        );
    }
    Limits::new(args.parallel, 1).map_err(|e| anyhow!("--parallel {}: {e}", args.parallel))?;
    Limits::new(args.parallel, args.prefill_per_step)
        .map_err(|e| anyhow!("--prefill-per-step {}: {e}", args.prefill_per_step))
}

/// Runs the server until a shutdown signal.
pub fn run(args: &ServeArgs) -> Result<()> {
    let limits = check_limits(args)?;
    let api_key = api_key(args)?;
    let served_name = served_name(args)?;
    let (mut model, runner) = args.model.load()?;
    if let Some(path) = &args.chat_template_file {
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("--chat-template-file {}", path.display()))?;
        let piece = |id: Option<u32>| {
            id.and_then(|id| model.tokenizer.token_to_piece(id).ok())
                .unwrap_or_default()
        };
        let template = match &model.chat_template {
            Some(own) => own.with_source(&source),
            None => ChatTemplate::new(
                &source,
                &piece(model.tokenizer.bos()),
                &piece(model.tokenizer.eos()),
            ),
        };
        model.chat_template =
            Some(template.with_context(|| format!("--chat-template-file {}", path.display()))?);
    }
    let limits = match args.kv_memory {
        Some(mib) => {
            let per_position = runner.kv_bytes_per_position().max(1);
            let positions = mib.saturating_mul(1 << 20) / per_position;
            if positions == 0 {
                bail!("--kv-memory {mib} MiB holds no KV position ({per_position} bytes each)");
            }
            // Past --parallel full contexts a budget bounds nothing.
            let most = limits.max_parallel().saturating_mul(runner.context());
            if positions > most {
                let needed = most.saturating_mul(per_position).div_ceil(1 << 20);
                eprintln!(
                    "warning: --kv-memory {mib} MiB is more than --parallel {} full contexts \
                     need ({needed} MiB); using {needed}",
                    limits.max_parallel()
                );
            }
            limits.with_kv_positions(positions.min(most))
        }
        None => limits,
    };
    let id = served_name
        .clone()
        .unwrap_or_else(|| server::model_id(&model.path));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("listening on {}:{}", args.host, args.port))?;
        let address = listener.local_addr()?;
        if api_key.is_none() && !address.ip().is_loopback() {
            eprintln!(
                "warning: listening on {address} without an API key: anyone who reaches this \
                 port can use the model (set {API_KEY_VAR} or --api-key)"
            );
        }
        eprintln!("switchyard: tool calls: {}", server::tool_form(&model));
        eprintln!(
            "switchyard: serving {id} (context {}, {} in parallel) — listening on http://{address}",
            runner.context(),
            limits.max_parallel()
        );
        let config = ServerConfig {
            limits,
            max_queue: args.max_queue,
            body_limit: DEFAULT_BODY_LIMIT,
            api_key,
            served_name,
        };
        server::serve(listener, model, runner, config, server::shutdown_signal()).await?;
        eprintln!("switchyard: stopped");
        Ok(())
    })
}
