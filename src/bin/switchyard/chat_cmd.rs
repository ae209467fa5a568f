//! `switchyard chat`: an interactive multi-turn conversation with the model's chat
//! template; the history is kept, Ctrl-D (end of input) exits. The conversation's
//! sequence is kept too, so each turn evaluates only the tokens after what the previous
//! turns already put in the KV cache.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};
use clap::Args;

use switchyard::decode::{generate_after, GenerateOptions};
use switchyard::model::chat_template::Message;
use switchyard::model::ModelError;

use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;

/// Flags of `switchyard chat`.
#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// System message that opens the conversation.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// After each reply, print on stderr how many prompt tokens the turn reused from
    /// the conversation's KV cache and how many it evaluated.
    #[arg(long)]
    stats: bool,
}

/// Runs the session until end of input.
pub fn run(args: &ChatArgs) -> Result<()> {
    args.sampling.check()?;
    let (model, mut runner) = args.model.load()?;
    let template = model
        .chat_template
        .as_ref()
        .context("this model has no chat template; use `switchyard generate`")?;
    let mut sampler = args.sampling.sampler(model.config.vocab_size)?;
    let mut history = Vec::new();
    // The conversation's sequence and the tokens it holds.
    let mut seq = runner.new_sequence()?;
    let mut held: Vec<u32> = Vec::new();
    if let Some(system) = &args.system {
        history.push(Message::new("system", system.as_str()));
    }
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "chatting with {} — Ctrl-D to exit, /reset to forget the conversation",
            model.path.display()
        );
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("\n> ");
            std::io::stderr().flush().ok();
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading standard input")?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/reset" {
            history.retain(|m| m.role == "system");
            eprintln!("(conversation forgotten)");
            continue;
        }
        history.push(Message::new("user", line));
        let text = template.render(&history, true)?;
        let prompt = model.tokenizer.encode_chat(&text)?;
        let options = GenerateOptions {
            max_tokens: args.sampling.max_tokens,
            stop_strings: args.sampling.stop.clone(),
            stop_ids: model.stop_ids.clone(),
            ..GenerateOptions::default()
        };
        let mut stdout = std::io::stdout().lock();
        let mut on_text =
            |piece: &str| stdout.write_all(piece.as_bytes()).is_ok() && stdout.flush().is_ok();
        // Keep what the new prompt shares with the tokens held; at least one token of
        // the prompt is evaluated, for its logits.
        let common = held
            .iter()
            .zip(&prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len().saturating_sub(1));
        seq.truncate(common);
        held.truncate(common);
        let result = generate_after(
            &mut runner,
            &mut seq,
            &model.tokenizer,
            &mut sampler,
            &prompt,
            &options,
            &mut on_text,
        );
        match result {
            Ok(reply) => {
                println!();
                if args.stats {
                    eprintln!(
                        "(prompt {} tokens: {common} reused, {} evaluated; {} generated)",
                        prompt.len(),
                        prompt.len() - common,
                        reply.tokens.len()
                    );
                }
                held = prompt;
                held.extend_from_slice(&reply.tokens[..reply.tokens.len().saturating_sub(1)]);
                held.truncate(seq.len());
                history.push(Message::new("assistant", reply.text.trim()));
            }
            Err(ModelError::ContextFull { needed, context }) => {
                history.pop();
                held.clear();
                seq.truncate(0);
                eprintln!("the conversation needs {needed} positions but the context holds {context}; type /reset or restart with a larger --ctx");
            }
            Err(other) => return Err(other.into()),
        }
    }
    Ok(())
}
