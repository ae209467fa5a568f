//! `switchyard chat`: an interactive multi-turn conversation with the model's chat
//! template; the history is kept, Ctrl-D (end of input) exits.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};
use clap::Args;

use switchyard::model::chat_template::Message;
use switchyard::model::{generate, GenerateOptions, ModelError};

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
}

/// Runs the session until end of input.
pub fn run(args: &ChatArgs) -> Result<()> {
    let (model, mut runner) = args.model.load()?;
    let template = model
        .chat_template
        .as_ref()
        .context("this model has no chat template; use `switchyard generate`")?;
    let mut sampler = args.sampling.sampler()?;
    let mut history = Vec::new();
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
        match generate(
            &mut runner,
            &model.tokenizer,
            &mut sampler,
            &prompt,
            &options,
            &mut on_text,
        ) {
            Ok(reply) => {
                println!();
                history.push(Message::new("assistant", reply.text.trim()));
            }
            Err(ModelError::ContextFull { needed, context }) => {
                history.pop();
                eprintln!("the conversation needs {needed} positions but the context holds {context}; type /reset or restart with a larger --ctx");
            }
            Err(other) => return Err(other.into()),
        }
    }
    Ok(())
}
