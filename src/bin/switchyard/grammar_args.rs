//! The flags that hold output to a shape (`--json-object`, `--json-schema`, `--regex`,
//! `--choice`, `--grammar`), shared by `generate`, `constrain` and `bench`.

use anyhow::{Context, Result};
use clap::Args;

use switchyard::decode::constraint::Grammar;

/// One way of holding output to a shape, at most.
#[derive(Args, Default)]
#[group(multiple = false)]
pub struct GrammarArgs {
    /// Hold the output to one JSON object, written compactly, ending when it closes (the
    /// server's response_format {"type": "json_object"}); ask for JSON in the prompt too.
    #[arg(long)]
    pub json_object: bool,
    /// Hold the output to compact JSON matching this JSON Schema (inline JSON, or
    /// @FILE), as the server's response_format json_schema. Keywords JSON Schema does
    /// not define are ignored as annotations; one that constrains but is not
    /// implemented (uniqueItems, contains, not, ...) is refused by name. Properties are
    /// written in the schema's order.
    #[arg(long, value_name = "SCHEMA")]
    pub json_schema: Option<String>,
    /// Hold the output to a text matching this regular expression whole (Rust regex
    /// syntax).
    #[arg(long, value_name = "REGEX")]
    pub regex: Option<String>,
    /// Hold the output to exactly one of these texts.
    #[arg(long, value_name = "A,B,...", value_delimiter = ',')]
    pub choice: Vec<String>,
    /// Hold the output to a text of this Lark grammar (llguidance's dialect: rules,
    /// /regex/ terminals, %json for an embedded JSON Schema), read from FILE.
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<String>,
}

/// `spec` itself, or the contents of FILE for `@FILE`.
fn inline_or_file(spec: &str, flag: &str) -> Result<String> {
    match spec.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("{flag}: reading {path}"))
        }
        None => Ok(spec.to_owned()),
    }
}

impl GrammarArgs {
    /// The grammar the flags ask for, compiled; `None` when none was given.
    pub fn grammar(&self) -> Result<Option<Grammar>> {
        let grammar = if self.json_object {
            Grammar::any_object()
        } else if let Some(spec) = &self.json_schema {
            let text = inline_or_file(spec, "--json-schema")?;
            let value: serde_json::Value =
                serde_json::from_str(&text).context("--json-schema: not JSON")?;
            Grammar::json_schema(&value).context("--json-schema")?
        } else if let Some(regex) = &self.regex {
            Grammar::regex(regex).context("--regex")?
        } else if !self.choice.is_empty() {
            Grammar::choice(&self.choice).context("--choice")?
        } else if let Some(path) = &self.grammar {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--grammar: reading {path}"))?;
            Grammar::lark(&text).context("--grammar")?
        } else {
            return Ok(None);
        };
        Ok(Some(grammar))
    }
}
