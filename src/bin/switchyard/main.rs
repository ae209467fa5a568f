//! The `switchyard` command line: `generate` and `chat` run a model, `tokenize` shows
//! its tokens, `plan` shows placement, `doctor` reports backends, `constrain` checks a
//! text against a grammar.

mod bench_arms;
mod bench_cmd;
mod bench_constrained;
mod bench_device;
mod bench_profile;
mod calibrate_cmd;
mod chat_cmd;
mod constrain_cmd;
mod demo;
mod doctor;
mod generate_cmd;
mod gpu_report;
mod grammar_args;
mod model_args;
mod perplexity_cmd;
mod plan_cmd;
mod sampling_args;
mod serve_cmd;
mod tokenize_cmd;

use clap::{Parser, Subcommand};
use switchyard::model::ModelError;

/// Switchyard runs transformer LLMs across every compute unit of this machine.
#[derive(Parser)]
#[command(version, about, long_about = None, after_help = ISA_HELP)]
struct Cli {
    /// Cap the CPU backend's kernels at this set: scalar, avx2 or avx512 (default:
    /// the widest this CPU runs; also SWITCHYARD_ISA). A set this CPU lacks is refused.
    #[arg(long, global = true, value_name = "SET")]
    isa: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// The environment variable `--help` documents beside the flags.
const ISA_HELP: &str = "Environment:\n  SWITCHYARD_ISA=scalar|avx2|avx512  cap the CPU backend's \
     kernels as --isa does (the flag wins), to run an AVX2-only or portable host's kernels \
     on a wider CPU; `switchyard doctor` and `bench --json` report the set in force";

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (default model: SmolLM2-135M-Instruct, fetched on
    /// first use). Example: switchyard generate "The capital of France is"
    Generate(generate_cmd::GenerateArgs),
    /// Talk with the model interactively, using its chat template.
    Chat(chat_cmd::ChatArgs),
    /// Show the token ids of a text.
    Tokenize(tokenize_cmd::TokenizeArgs),
    /// Show the backends found on this machine and what each can run.
    Doctor(doctor::DoctorArgs),
    /// Show how a graph is placed across backends: node → backend → why.
    Plan(plan_cmd::PlanArgs),
    /// Serve an OpenAI-compatible HTTP API (chat, completions, streaming, metrics).
    Serve(serve_cmd::ServeArgs),
    /// Measure prompt (ppN) and generation (tgN) speed like llama-bench.
    Bench(bench_cmd::BenchArgs),
    /// Score a text file as llama-perplexity does (e.g. --ctx 512 -f wiki.test.raw),
    /// to compare quantizations and runtimes.
    Perplexity(perplexity_cmd::PerplexityArgs),
    /// Check a text against a JSON Schema, regex, choice list or Lark grammar, without
    /// a model: accepted, or the byte offset where it is rejected and what was expected.
    Constrain(constrain_cmd::ConstrainArgs),
    /// Calibrate prefill co-execution: time the CPU+GPU row split of every linear shape
    /// over ratios 0–0.5 and save the fastest (done lazily on first use otherwise).
    Calibrate(calibrate_cmd::CalibrateArgs),
}

fn main() {
    quiet_headless_vulkan();
    // Warnings, plus one-line notes of long one-off work (calibration) under the
    // `switchyard::progress` target; SWITCHYARD_LOG overrides both.
    env_logger::Builder::from_env(
        env_logger::Env::default().filter_or("SWITCHYARD_LOG", "warn,switchyard::progress=info"),
    )
    .init();
    let cli = Cli::parse();
    if let Err(error) = switchyard::backend::cpu::isa::init(cli.isa.as_deref()) {
        eprintln!("error: {error}");
        std::process::exit(2);
    }
    let result = match cli.command {
        Command::Generate(args) => generate_cmd::run(&args),
        Command::Chat(args) => chat_cmd::run(&args),
        Command::Tokenize(args) => tokenize_cmd::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Serve(args) => serve_cmd::run(&args),
        Command::Bench(args) => bench_cmd::run(&args),
        Command::Perplexity(args) => perplexity_cmd::run(&args),
        Command::Calibrate(args) => calibrate_cmd::run(&args),
        Command::Constrain(args) => constrain_cmd::run(&args),
    };
    if let Err(error) = result {
        eprintln!("{}", error_line(&error));
        std::process::exit(1);
    }
}

/// Switches off Mesa's Vulkan device-selection layer on a machine without a desktop
/// session (no `XDG_RUNTIME_DIR`) unless the user configured the layer: it asks a
/// Wayland compositor for the default GPU and, finding none, prints "error:
/// XDG_RUNTIME_DIR is invalid or not set in the environment." twice at every GPU
/// probe, which reads like Switchyard failing. The layer only reorders adapters, and
/// the GPU probe (`backend::gpu`) ranks them itself. Runs first in `main`, before
/// any thread exists, so changing the environment races with no reader.
fn quiet_headless_vulkan() {
    let unset = |name: &str| std::env::var_os(name).is_none();
    if unset("XDG_RUNTIME_DIR") && unset("NODEVICE_SELECT") && unset("MESA_VK_DEVICE_SELECT") {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
}

/// The one line a failed command prints: the error with its causes, and, when it is a
/// failure of Switchyard itself ([`ModelError::is_internal`]), a note saying so, so that
/// the user does not hunt for a mistake in their input.
fn error_line(error: &anyhow::Error) -> String {
    let internal = error
        .chain()
        .filter_map(|e| e.downcast_ref::<ModelError>())
        .any(ModelError::is_internal);
    if internal {
        format!(
            "error: {error:#} (an internal error of switchyard — a bug or a failed device, \
             not a problem with your input or flags; please report it)"
        )
    } else {
        format!("error: {error:#}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_say_they_are_ours() {
        let ours = anyhow::Error::new(ModelError::internal("a sequence forked past its end"))
            .context("generating");
        let line = error_line(&ours);
        assert!(
            line.starts_with("error: generating: internal error: a sequence"),
            "{line}"
        );
        assert!(line.contains("not a problem with your input"), "{line}");
        let theirs = anyhow::Error::new(ModelError::ContextFull {
            needed: 9,
            context: 8,
        });
        let line = error_line(&theirs);
        assert!(line.starts_with("error: 9 positions are needed"), "{line}");
        assert!(!line.contains("internal"), "{line}");
    }
}
