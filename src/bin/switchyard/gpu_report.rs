//! What `doctor` says about the GPU: the adapter and whether `--backends auto` uses it.

use std::sync::Arc;

use serde::Serialize;

use switchyard::backend::Backend;

/// The GPU as `doctor` reports it.
#[derive(Serialize)]
pub struct GpuProbe {
    /// Whether this build has the wgpu backend.
    built: bool,
    /// The adapter found (software ones included), if any.
    #[cfg(feature = "gpu")]
    adapter: Option<switchyard::backend::gpu::AdapterReport>,
    /// Whether `--backends auto` would use it (hardware adapters only).
    used_by_auto: bool,
    /// Why there is no usable adapter, when there is none.
    problem: Option<String>,
}

impl GpuProbe {
    /// Prints the text form.
    pub fn print(&self) {
        if !self.built {
            println!("gpu: not in this build (built without the `gpu` feature)");
            return;
        }
        #[cfg(feature = "gpu")]
        if let Some(a) = &self.adapter {
            println!("gpu adapter: {} via {} ({})", a.name, a.api, a.device_type);
            println!("  driver:   {}", a.driver);
            println!("  features: {}", a.features.join(" "));
            println!(
                "  limits:   {} MiB per storage buffer, {} workgroups per dimension",
                a.max_storage_buffer_bytes >> 20,
                a.max_workgroups_per_dimension
            );
        }
        if let Some(p) = &self.problem {
            println!("gpu: {p}");
        }
        println!(
            "  --backends auto {} it",
            if self.used_by_auto {
                "uses"
            } else {
                "does not use"
            }
        );
    }
}

/// Looks for an adapter; returns the report and the backend when one opened.
#[cfg(feature = "gpu")]
pub fn probe() -> (GpuProbe, Option<Arc<dyn Backend>>) {
    use switchyard::backend::gpu::GpuBackend;
    match GpuBackend::open(true) {
        Ok(gpu) => {
            let software = gpu.is_software();
            let probe = GpuProbe {
                built: true,
                adapter: Some(gpu.report()),
                used_by_auto: !software,
                problem: software.then(|| {
                    "software adapter: slower than the CPU backend, used only with --backends cpu,gpu".to_string()
                }),
            };
            (probe, Some(Arc::new(gpu)))
        }
        Err(e) => (
            GpuProbe {
                built: true,
                adapter: None,
                used_by_auto: false,
                problem: Some(e.to_string()),
            },
            None,
        ),
    }
}

/// Without the `gpu` feature there is nothing to probe.
#[cfg(not(feature = "gpu"))]
pub fn probe() -> (GpuProbe, Option<Arc<dyn Backend>>) {
    (
        GpuProbe {
            built: false,
            used_by_auto: false,
            problem: None,
        },
        None,
    )
}
