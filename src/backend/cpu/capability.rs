//! Start-up detection of what the host CPU offers, turned into a [`Capability`].

use crate::backend::{Capability, CostHints, DTypeSet, MemorySpace, OpSet};
use crate::graph::MAX_RANK;

/// The CPU backend's capability: every op and dtype, host memory, lowest priority.
pub(super) fn detect(threads: usize) -> Capability {
    Capability {
        ops: OpSet::all(),
        dtypes: DTypeSet::all(),
        operand_dtypes: DTypeSet::default(),
        max_dims: MAX_RANK as u8,
        alignment: 1,
        max_elements: usize::MAX,
        priority: 1,
        memory_space: MemorySpace::HOST,
        version: version_string(threads),
        cost: CostHints {
            gflops: 50.0,
            bandwidth_gbs: 14.0,
            launch_us: 2.0,
            transfer_gbs: 10.0,
            transfer_us: 5.0,
        },
    }
}

/// "cpu <arch> <features...> [isa=<cap>] threads=<n>": part of cache keys, so a plan
/// compiled for one machine's SIMD set, or under one kernel cap, is not reused on
/// another.
fn version_string(threads: usize) -> String {
    let mut parts = vec!["cpu".to_string(), std::env::consts::ARCH.to_string()];
    parts.extend(simd_features().into_iter().map(str::to_string));
    if let Some(d) = super::isa::dispatch()
        .ok()
        .filter(|d| d.capped_by().is_some())
    {
        parts.push(format!("isa={}", d.active().name()));
    }
    parts.push(format!("threads={threads}"));
    parts.join(" ")
}

#[cfg(target_arch = "x86_64")]
fn simd_features() -> Vec<&'static str> {
    let mut found = Vec::new();
    if is_x86_feature_detected!("avx2") {
        found.push("avx2");
    }
    if is_x86_feature_detected!("fma") {
        found.push("fma");
    }
    if is_x86_feature_detected!("f16c") {
        found.push("f16c");
    }
    if is_x86_feature_detected!("avx512f") {
        found.push("avx512f");
    }
    found
}

#[cfg(target_arch = "aarch64")]
fn simd_features() -> Vec<&'static str> {
    let mut found = Vec::new();
    if std::arch::is_aarch64_feature_detected!("neon") {
        found.push("neon");
    }
    if std::arch::is_aarch64_feature_detected!("fp16") {
        found.push("fp16");
    }
    found
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn simd_features() -> Vec<&'static str> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, OpKind};

    #[test]
    fn capability_is_complete_and_versioned() {
        let cap = detect(3);
        assert!(cap.version.starts_with("cpu "));
        assert!(cap.version.ends_with("threads=3"));
        assert!(DType::ALL.iter().all(|&d| cap.dtypes.contains(d)));
        assert!(OpKind::ALL.iter().all(|&k| cap.ops.contains(k)));
        assert_eq!(cap.memory_space, MemorySpace::HOST);
    }
}
