//! Whether bf16 weights, on a CPU with AVX-512 BF16, are dotted in bf16 pairs
//! (`vdpbf16ps` on activations rounded to bf16) or widened to f32 for FMAs on exact
//! activations.
//!
//! Both kernels run wherever AVX-512 BF16 does; which one is faster depends on the core
//! (decision 128): on AMD's Zen 5 the pair kernel was ~1.6× the widened FMAs at 64 rows
//! (decision 78), on this project's Intel AVX-512 host (with AMX) it is slower for
//! prefill and decode at 135M and 1B. Chosen by vendor, once per process, so one machine
//! always computes the same bits.

/// Whether the bf16 pair kernels, where the CPU has them, are the ones to run: on any
/// CPU but Intel's. Callers check the CPU features themselves.
pub(crate) fn bf16_pairs_pay() -> bool {
    static PAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAYS.get_or_init(|| !is_intel())
}

/// Whether CPUID's vendor string is "GenuineIntel".
fn is_intel() -> bool {
    let id = std::arch::x86_64::__cpuid(0);
    let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat();
    vendor == b"GenuineIntel"
}
