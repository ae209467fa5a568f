//! `switchyard tokenize`: the token ids (and pieces) of a text under a model's tokenizer.

use anyhow::Result;
use clap::Args;

use crate::model_args::ModelArgs;

/// Flags of `switchyard tokenize`.
#[derive(Args)]
pub struct TokenizeArgs {
    /// The text to tokenize.
    text: String,
    #[command(flatten)]
    model: ModelArgs,
    /// Parse special-token strings such as <|im_start|> as their ids.
    #[arg(long)]
    special: bool,
    /// Print a JSON array of ids.
    #[arg(long)]
    json: bool,
}

/// Prints the ids.
pub fn run(args: &TokenizeArgs) -> Result<()> {
    let path = args.model.model_path()?;
    let model = switchyard::model::Model::open(&path)?;
    let ids = model.tokenizer.encode(&args.text, args.special)?;
    if args.json {
        println!("{}", serde_json::to_string(&ids)?);
        return Ok(());
    }
    for id in ids {
        println!("{id:>7} {:?}", model.tokenizer.token_to_piece(id)?);
    }
    Ok(())
}
