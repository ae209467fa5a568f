//! `switchyard bench --json-schema S` (or `--json-object`, `--regex`, `--choice`,
//! `--grammar`): decode steps of `--batch` sequences (16 unless told) through the
//! scheduler, unconstrained against every sequence held to the grammar, and the
//! constraint's per-token time at the model's vocabulary
//! ([`switchyard::bench::constrained`]).

use anyhow::{bail, Result};
use serde::Serialize;

use switchyard::bench::constrained::{compare, ConstrainedReport, Plan};
use switchyard::bench::env::EnvStamp;
use switchyard::bench::llm::{bench_prompt, TG_PROMPT_TOKENS};
use switchyard::bench::stats::MedianSummary;
use switchyard::decode::constraint::{Grammar, TokenEnv};

use crate::bench_cmd::backend_list;
use crate::model_args::ModelArgs;

/// Sequences stepped together unless `--batch` says otherwise.
pub const DEFAULT_SEQUENCES: usize = 16;

/// What the constrained comparison was asked for, besides the grammar.
pub struct ConstrainedRequest<'a> {
    /// Model, backends and context flags.
    pub model: &'a ModelArgs,
    /// `--batch`: at most one size.
    pub batch: &'a [usize],
    /// Timed steps per arm and round (`--gen-tokens`).
    pub steps: usize,
    /// Timed rounds (`--reps`).
    pub rounds: usize,
    /// Print JSON instead of a table.
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    env: EnvStamp,
    model: String,
    backends: String,
    vocab_size: usize,
    steps: usize,
    rounds: usize,
    #[serde(flatten)]
    result: ConstrainedReport,
}

/// Runs the comparison and prints it.
pub fn run(req: &ConstrainedRequest<'_>, grammar: &Grammar) -> Result<()> {
    let sequences = match req.batch {
        [] => DEFAULT_SEQUENCES,
        [n] if *n >= 1 => *n,
        _ => bail!("with a grammar, --batch takes one size (the sequences stepped together)"),
    };
    if req.steps == 0 {
        bail!("with a grammar, --gen-tokens is the timed steps per round and must be above 0");
    }
    let env = EnvStamp::capture();
    let mut model_args = req.model.clone();
    model_args.ctx = model_args.ctx.max(TG_PROMPT_TOKENS + req.steps);
    let (model, mut runner) = model_args.load()?;
    let vocab = model.config.vocab_size;
    let token_env = TokenEnv::new(&model.tokenizer, vocab, &model.stop_ids)?;
    let prompt = bench_prompt(&model.tokenizer, TG_PROMPT_TOKENS)?;
    let plan = Plan {
        sequences,
        steps: req.steps,
        rounds: req.rounds,
    };
    let result = compare(
        &mut runner,
        &model.tokenizer,
        &prompt,
        (&token_env, grammar),
        &model.stop_ids,
        vocab,
        plan,
    )?;
    let report = Report {
        env,
        model: model.path.display().to_string(),
        backends: backend_list(&runner),
        vocab_size: vocab,
        steps: req.steps,
        rounds: req.rounds,
        result,
    };
    if req.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(report: &Report) {
    let r = &report.result;
    println!(
        "{} sequences a step, {} timed steps per arm in each of {} rounds, on {} ({} tokens)",
        r.sequences, report.steps, report.rounds, report.backends, report.vocab_size
    );
    println!(
        "\n| {:<28} | {:>9} | {:>9} | {:>9} | {:>9} | {:>6} |",
        "", "median", "mean", "p99", "max", "n"
    );
    println!(
        "| {:-<28} | {:->9} | {:->9} | {:->9} | {:->9} | {:->6} |",
        ":", ":", ":", ":", ":", ":"
    );
    let rows: [(&str, &MedianSummary); 6] = [
        ("unconstrained step (ms)", &r.unconstrained_step_ms),
        ("constrained step (ms)", &r.constrained_step_ms),
        ("mask per token (µs)", &r.mask_us),
        ("applying it per token (µs)", &r.apply_us),
        ("taking the token (µs)", &r.advance_us),
        ("constraint per token (µs)", &r.constraint_us),
    ];
    for (name, s) in rows {
        println!(
            "| {:<28} | {:>9.2} | {:>9.2} | {:>9.2} | {:>9.2} | {:>6} |",
            name, s.median, s.mean, s.p99, s.max, s.n
        );
    }
    if let (Some(free), Some(held)) = (r.unconstrained_cpu_ms, r.constrained_cpu_ms) {
        println!(
            "\nprocess CPU a step, mean: {free:.2} ms unconstrained, {held:.2} ms constrained ({:.3})",
            held / free
        );
    }
    if let Some(ratio) = r.step_ratio {
        let ci = ratio.ci95.map_or_else(String::new, |[low, high]| {
            format!(" (95 % CI {low:.3}–{high:.3})")
        });
        println!(
            "\nconstrained / unconstrained step, medians: {:.3}{ci}; switchyard {} ({})",
            ratio.value, report.env.version, report.env.git_commit
        );
    }
}
