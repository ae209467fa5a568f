//! `switchyard perplexity`: how well a model predicts a text, as llama.cpp's
//! `llama-perplexity` measures it, to compare quantizations and runtimes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use switchyard::model::perplexity::perplexity;

use crate::model_args::ModelArgs;

/// Flags of `switchyard perplexity`.
#[derive(Args)]
pub struct PerplexityArgs {
    /// The text to score (UTF-8), e.g. wikitext-2's wiki.test.raw.
    #[arg(long, short = 'f', value_name = "FILE")]
    file: PathBuf,
    /// Score at most N windows of --ctx tokens (default: every whole window).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    chunks: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
}

/// Runs the command.
pub fn run(args: &PerplexityArgs) -> Result<()> {
    if args.chunks == Some(0) {
        bail!("--chunks must be at least 1");
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let (model, mut runner) = args.model.load()?;
    let tokens = model.tokenizer.encode(&text, false)?;
    let bos = model.tokenizer.specials().prefix.first().copied();
    let ctx = runner.context();
    eprintln!(
        "perplexity: {} tokens, windows of {ctx} (the second half of each scored)",
        tokens.len()
    );
    let mut err = std::io::stderr().lock();
    let mut on_window =
        |done: usize, total: usize, so_far: switchyard::model::perplexity::Perplexity| {
            let _ = write!(err, "[{done}/{total}]{:.4} ", so_far.ppl);
            if done == total {
                let _ = writeln!(err);
            }
        };
    let result = perplexity(&mut runner, &tokens, bos, ctx, args.chunks, &mut on_window)?;
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        println!(
            "Final estimate: PPL = {:.4} +/- {:.5} ({} windows of {ctx}, {} tokens scored)",
            result.ppl, result.error, result.windows, result.scored
        );
    }
    Ok(())
}
