//! `switchyard generate`: one prompt in, streamed text out, speeds on stderr (or one
//! JSON object with ids, text, timings and cache counters).

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use switchyard::model::chat_template::Message;
use switchyard::model::constraint::{JsonShape, Schema, TokenTexts};
use switchyard::model::tokenizer::Tokenizer;
use switchyard::model::{generate, GenerateOptions, Generation};
use switchyard::step::{BucketGate, Failover, PhaseStats, Placed};

use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;

/// Flags of `switchyard generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// The prompt (read from standard input when omitted).
    prompt: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// System message for --chat.
    #[arg(long, value_name = "TEXT", requires = "chat")]
    system: Option<String>,
    /// Parse special-token strings such as <|im_start|> in the prompt.
    #[arg(long)]
    special: bool,
    /// Print one JSON object (ids, text, timings, cache counters) instead of text.
    #[arg(long)]
    json: bool,
    /// With --json: the K best logits of every step's distribution.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    top_logits: usize,
    /// Teacher forcing for evaluation: step i emits the i-th id instead of sampling.
    #[arg(long, value_name = "ID,ID,...", value_delimiter = ',')]
    force_tokens: Vec<u32>,
    /// Hold the output to one JSON object, ending when it closes (the server's
    /// response_format {"type": "json_object"}); ask for JSON in the prompt too.
    #[arg(long, conflicts_with_all = ["force_tokens", "json_schema"])]
    json_object: bool,
    /// Hold the output to JSON matching this JSON Schema (inline JSON, or @FILE), as the
    /// server's response_format json_schema: type (a name or a list), properties,
    /// required, additionalProperties, items, minItems, maxItems, minLength, maxLength,
    /// pattern, format (date, time, date-time, uuid, email, ipv4), integer bounds, enum,
    /// const, anyOf/oneOf of differently starting branches, and local $refs into $defs
    /// (what Pydantic models produce); anything else is refused by its path.
    #[arg(long, value_name = "SCHEMA", conflicts_with = "force_tokens")]
    json_schema: Option<String>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    generation: &'a Generation,
    cache: CacheReport,
    placement: PlacementReport<'a>,
    coexec: Vec<BucketGate<'a>>,
    /// Backends dropped after a device failure, with the positions recomputed.
    failovers: &'a [Failover],
}

/// Compute nodes per backend in the latest prefill and decode plans.
#[derive(Serialize)]
struct PlacementReport<'a> {
    prefill: &'a Placed,
    decode: &'a Placed,
}

#[derive(Serialize)]
struct CacheReport {
    compiles: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    prefill: PhaseStats,
    decode: PhaseStats,
}

/// The JSON shape `--json-object` or `--json-schema` asks for, if either.
fn json_shape(args: &GenerateArgs, tokenizer: &Tokenizer) -> Result<Option<JsonShape>> {
    let schema = match (&args.json_schema, args.json_object) {
        (None, false) => return Ok(None),
        (None, true) => Schema::any_object(),
        (Some(spec), _) => {
            let text = match spec.strip_prefix('@') {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("--json-schema: reading {path}"))?,
                None => spec.clone(),
            };
            let value: serde_json::Value =
                serde_json::from_str(&text).context("--json-schema: not JSON")?;
            Schema::compile(&value).context("--json-schema")?
        }
    };
    let texts = Arc::new(TokenTexts::new(tokenizer)?);
    Ok(Some(JsonShape::new(texts, Arc::new(schema))))
}

/// Runs the command.
pub fn run(args: &GenerateArgs) -> Result<()> {
    let prompt = match &args.prompt {
        Some(p) => p.clone(),
        None => {
            if std::io::stdin().is_terminal() {
                bail!("no prompt: pass it as an argument or pipe it on standard input");
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the prompt")?;
            text
        }
    };
    args.sampling.check()?;
    if args.top_logits > 0 && !args.json {
        bail!("--top-logits is reported only with --json");
    }
    let (model, mut runner) = args.model.load()?;
    let vocab = model.config.vocab_size;
    if let Some(bad) = args.force_tokens.iter().find(|&&id| id as usize >= vocab) {
        bail!("--force-tokens: id {bad} is outside the vocabulary of {vocab} tokens");
    }
    // A rendered chat writes its own BOS; plain text gets the model's.
    let prompt_tokens = if args.chat {
        let template = model
            .chat_template
            .as_ref()
            .context("--chat: this model has no chat template")?;
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(Message::new("system", system.as_str()));
        }
        messages.push(Message::new("user", prompt.as_str()));
        model
            .tokenizer
            .encode_chat(&template.render(&messages, true)?)?
    } else {
        model.tokenizer.encode(&prompt, args.special)?
    };
    let mut sampler = args.sampling.sampler(vocab)?;
    let top_logits = if args.top_logits > vocab {
        eprintln!(
            "warning: --top-logits {} exceeds the vocabulary of {vocab} tokens; using {vocab}",
            args.top_logits
        );
        vocab
    } else {
        args.top_logits
    };
    let options = GenerateOptions {
        max_tokens: args.sampling.max_tokens,
        stop_strings: args.sampling.stop.clone(),
        stop_ids: model.stop_ids.clone(),
        force_tokens: args.force_tokens.clone(),
        top_logits,
        logprobs: None,
        json: json_shape(args, &model.tokenizer)?,
    };
    let mut stdout = std::io::stdout().lock();
    let json = args.json;
    let mut on_text = |piece: &str| {
        if json {
            return true;
        }
        stdout.write_all(piece.as_bytes()).is_ok() && stdout.flush().is_ok()
    };
    let generation = generate(
        &mut runner,
        &model.tokenizer,
        &mut sampler,
        &prompt_tokens,
        &options,
        &mut on_text,
    )?;
    if json {
        let stats = runner.cache_stats();
        let (prefill, decode) = runner.phase_stats();
        let (prefill_placed, decode_placed) = runner.placement();
        let report = JsonReport {
            placement: PlacementReport {
                prefill: prefill_placed,
                decode: decode_placed,
            },
            coexec: runner.gate_reports(),
            failovers: runner.failovers(),
            generation: &generation,
            cache: CacheReport {
                compiles: stats.compiles,
                hits: stats.hits,
                misses: stats.misses,
                evictions: stats.evictions,
                prefill,
                decode,
            },
        };
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!();
        let t = generation.timings;
        eprintln!(
            "\n{} prompt tokens, {} generated ({:?}); TTFT {:.1} ms, prefill {:.1} tok/s, decode {:.1} tok/s",
            generation.prompt_tokens.len(),
            generation.tokens.len(),
            generation.finish_reason,
            t.ttft_ms,
            t.prefill_tok_s,
            t.decode_tok_s
        );
    }
    Ok(())
}
