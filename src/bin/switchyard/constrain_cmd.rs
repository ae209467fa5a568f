//! `switchyard constrain`: whether a grammar (a JSON Schema, a regex, choices, a Lark
//! grammar) takes a text, and if not, the byte where it stops and what it expected
//! there — without a model, for debugging a schema.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::grammar_args::GrammarArgs;

/// Flags of `switchyard constrain`.
#[derive(Args)]
pub struct ConstrainArgs {
    /// The text to check, or @FILE for a file's contents (taken byte for byte); a text
    /// starting with '-' (a negative number) is a text, not a flag.
    #[arg(allow_hyphen_values = true)]
    text: String,
    #[command(flatten)]
    shape: GrammarArgs,
    /// Print one JSON object (accepted, offset, expected) instead of a sentence.
    #[arg(long)]
    json: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report<'a> {
    accepted: bool,
    /// The first byte refused, or the text's length when it was all taken.
    offset: usize,
    /// What may come at `offset`.
    expected: &'a str,
}

/// Runs the command: exit status 0 when the text is accepted, 1 when not.
pub fn run(args: &ConstrainArgs) -> Result<()> {
    let Some(grammar) = args.shape.grammar()? else {
        bail!("no grammar: give --json-schema, --json-object, --regex, --choice or --grammar");
    };
    let text = match args.text.strip_prefix('@') {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {path}"))?,
        None => args.text.clone().into_bytes(),
    };
    let check = grammar.checker()?.check(&text)?;
    if args.json {
        let report = Report {
            accepted: check.accepted(),
            offset: check.offset(),
            expected: check.expected(),
        };
        println!("{}", serde_json::to_string(&report)?);
    } else if check.accepted() {
        println!("accepted ({} bytes)", text.len());
    } else if check.prefix() {
        println!(
            "rejected: the text ends at byte {} before the grammar does; expected {}",
            check.offset(),
            check.expected()
        );
    } else {
        let expected = match check.expected() {
            "" => "nothing more",
            e => e,
        };
        println!("rejected at byte {}: expected {expected}", check.offset());
    }
    if !check.accepted() {
        std::process::exit(1);
    }
    Ok(())
}
