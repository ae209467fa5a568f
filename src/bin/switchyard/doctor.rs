//! `switchyard doctor`: the backends found, their detected versions and capabilities.

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use switchyard::backend::cpu::isa::{self, Dispatch};
use switchyard::backend::{cpu::CpuBackend, Backend, Capability};

use crate::gpu_report::{probe, GpuProbe};

/// Flags of `switchyard doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    version: &'static str,
    commit: &'static str,
    cpu_kernels: Dispatch,
    backends: Vec<BackendReport<'a>>,
    gpu: GpuProbe,
}

#[derive(Serialize)]
struct BackendReport<'a> {
    id: u8,
    name: &'a str,
    capability: &'a Capability,
}

/// Prints the report.
pub fn run(args: &DoctorArgs) -> Result<()> {
    let cpu_kernels = isa::dispatch()?;
    let cpu = CpuBackend::new(None)?;
    let (gpu, gpu_backend) = probe();
    let mut backends: Vec<&dyn Backend> = vec![&cpu];
    if let Some(b) = &gpu_backend {
        backends.push(b.as_ref());
    }
    let report = Report {
        gpu,
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("SWITCHYARD_GIT_COMMIT"),
        cpu_kernels,
        backends: backends
            .iter()
            .map(|b| BackendReport {
                id: b.id().0,
                name: b.name(),
                capability: b.capability(),
            })
            .collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("switchyard {} ({})", report.version, report.commit);
    println!("cpu kernels: {}", report.cpu_kernels.describe());
    for b in &report.backends {
        let cap = b.capability;
        println!();
        println!("backend {} (id {}): {}", b.name, b.id, cap.version);
        println!(
            "  priority {}, memory space {}, max dims {}, alignment {}",
            cap.priority, cap.memory_space.0, cap.max_dims, cap.alignment
        );
        let ops: Vec<&str> = cap.ops.kinds().map(|k| k.name()).collect();
        println!("  ops:    {}", ops.join(" "));
        let dtypes: Vec<&str> = cap.dtypes.dtypes().map(|d| d.name()).collect();
        println!("  dtypes: {}", dtypes.join(" "));
        let operands: Vec<&str> = cap.operand_dtypes.dtypes().map(|d| d.name()).collect();
        if !operands.is_empty() {
            println!("  weights/ids also read as: {}", operands.join(" "));
        }
    }
    println!();
    report.gpu.print();
    Ok(())
}
