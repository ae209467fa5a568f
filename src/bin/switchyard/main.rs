//! The `switchyard` command line: `doctor` reports backends, `plan --demo` shows how a
//! transformer block is placed and compiled.

mod demo;
mod doctor;
mod plan_cmd;

use clap::{Parser, Subcommand};

/// Switchyard runs transformer LLMs across every compute unit of this machine.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the backends found on this machine and what each can run.
    Doctor(doctor::DoctorArgs),
    /// Show how a graph is placed across backends: node → backend → why.
    Plan(plan_cmd::PlanArgs),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().filter_or("SWITCHYARD_LOG", "warn"))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Doctor(args) => doctor::run(&args),
        Command::Plan(args) => plan_cmd::run(&args),
    };
    if let Err(error) = result {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}
