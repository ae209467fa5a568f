//! Whether bf16 weights are dotted in bf16 pairs (`vdpbf16ps` on activations rounded to
//! bf16) on this CPU, or widened to f32 for FMAs on exact activations.
//!
//! Both kernels run wherever AVX-512 BF16 does; which one is faster depends on the core
//! (decision 128): on AMD's Zen 5 the pair kernel was ~1.6× the widened FMAs at 64 rows
//! (decision 78), on this project's Intel AVX-512 host (with AMX) it is 11–17 % slower
//! for 1B prefill and decode. Chosen by vendor, once per process, so one machine always
//! computes the same bits.

/// Whether the bf16 pair kernels run: the CPU has AVX-512 F and BF16 and is not Intel's.
pub(crate) fn bf16_pairs_pay() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static PAYS: OnceLock<bool> = OnceLock::new();
        *PAYS.get_or_init(|| {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bf16")
                && !is_intel()
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether CPUID's vendor string is "GenuineIntel".
#[cfg(target_arch = "x86_64")]
fn is_intel() -> bool {
    let id = std::arch::x86_64::__cpuid(0);
    let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat();
    vendor == b"GenuineIntel"
}
