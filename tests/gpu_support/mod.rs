//! Shared by the GPU tests: opening an adapter (software allowed) and deciding what a
//! machine without one means. With `SWITCHYARD_REQUIRE_GPU=1` (set by CI) a missing
//! adapter fails the test; otherwise the test says it is skipped and passes.

use std::io::Write;

use switchyard::backend::gpu::GpuBackend;

/// The GPU backend, or `None` (after saying so) when this machine has no adapter.
pub fn gpu() -> Option<GpuBackend> {
    match GpuBackend::open(true) {
        Ok(gpu) => Some(gpu),
        Err(e) if std::env::var("SWITCHYARD_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("SWITCHYARD_REQUIRE_GPU=1 but no GPU backend: {e}")
        }
        Err(e) => {
            // Written to the real stderr, past the test harness's capture, so that a
            // plain `cargo test` shows it.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no GPU adapter on this machine ({e}); GPU tests did not run"
            );
            None
        }
    }
}
