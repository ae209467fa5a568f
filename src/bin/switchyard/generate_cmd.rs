//! `switchyard generate`: one prompt in, streamed text out, speeds on stderr (or one
//! JSON object with ids, text, timings and cache counters).

use std::io::{IsTerminal, Read, Write};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use switchyard::decode::constraint::{Grammar, Shape, TokenEnv};
use switchyard::decode::{generate, GenerateOptions, Generation};
use switchyard::model::chat_template::Message;
use switchyard::model::Model;
use switchyard::step::{BucketGate, Failover, PhaseStats, Placed};

use crate::grammar_args::GrammarArgs;
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
    /// How the output is held to a shape, if it is.
    #[command(flatten)]
    shape: GrammarArgs,
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

/// `grammar` over `model`'s tokens, if there is one.
fn shape(grammar: Option<&Grammar>, model: &Model) -> Result<Option<Shape>> {
    let Some(grammar) = grammar else {
        return Ok(None);
    };
    let env = TokenEnv::new(&model.tokenizer, model.config.vocab_size, &model.stop_ids)?;
    Ok(Some(Shape::new(&env, grammar)?))
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
    // Compiled before the model loads, so that a grammar's mistake is reported at once.
    let grammar = args.shape.grammar()?;
    if grammar.is_some() && !args.force_tokens.is_empty() {
        bail!("--force-tokens and a constrained output do not combine");
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
        constraint: shape(grammar.as_ref(), &model)?,
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
