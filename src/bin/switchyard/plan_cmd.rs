//! `switchyard plan --demo`: places the demo transformer block on the backends found,
//! prints node → backend → why, the partitions and transfers, and can write Graphviz.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;

use switchyard::backend::{cpu::CpuBackend, Backend, BackendSet};
use switchyard::graph::DType;
use switchyard::plan::{self, Policy};

use crate::demo;

/// Flags of `switchyard plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// Plan the built-in demo transformer block (random weights).
    #[arg(long)]
    demo: bool,
    /// New tokens per step in the demo graph (1 = a decode step).
    #[arg(long, default_value_t = 1)]
    tokens: usize,
    /// Print the plan as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the plan as a Graphviz file.
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
}

/// Plans the demo block and prints the result.
pub fn run(args: &PlanArgs) -> Result<()> {
    if !args.demo {
        bail!("nothing to plan: pass --demo (planning a model file comes with model loading)");
    }
    if args.tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(None));
    let backends = BackendSet::new(vec![cpu]).map_err(anyhow::Error::msg)?;
    let graph = demo::block(args.tokens, DType::F32).context("building the demo block")?;
    let plan = plan::partition(&graph, &backends.capabilities(), &Policy::default())?;
    let names = |id| backends.name_of(id);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan::to_text(&plan, &names));
    }
    if let Some(path) = &args.dot {
        std::fs::write(path, plan::to_dot(&plan, &names))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
