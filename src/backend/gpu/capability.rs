//! The GPU's capability, built from what the adapter reports: the ops it has kernels
//! for, f32 activations with block-format, f16, bf16 and i32 operands read in place,
//! size limits from the adapter's buffer limits, and cost hints by device type.

use super::device::Gpu;
use super::GPU_SPACE;
use crate::backend::{Capability, CostHints, DTypeSet, OpSet};
use crate::graph::{DType, OpKind, MAX_RANK};

/// Ops with WGSL kernels.
pub(super) const OPS: [OpKind; 14] = [
    OpKind::Embedding,
    OpKind::MatMul,
    OpKind::Add,
    OpKind::Mul,
    OpKind::Silu,
    OpKind::Gelu,
    OpKind::SwiGlu,
    OpKind::RmsNorm,
    OpKind::Softmax,
    OpKind::Rope,
    OpKind::Attention,
    OpKind::Reshape,
    OpKind::Argmax,
    OpKind::Draw,
];

/// Operands read in place: i32 ids and positions, and every weight format with a
/// reader in `kernels::format` (a format without one must stay refused, so the planner
/// keeps its products on the CPU).
pub(super) const OPERAND_DTYPES: [DType; 11] = [
    DType::I32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
];

/// What the opened adapter can run.
pub(super) fn detect(gpu: &Gpu) -> Capability {
    let info = &gpu.info;
    let limit = gpu
        .limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size);
    let cost = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => hints(10_000.0, 500.0, 10.0, 16.0),
        wgpu::DeviceType::IntegratedGpu => hints(2_000.0, 100.0, 10.0, 50.0),
        wgpu::DeviceType::Cpu => hints(1.0, 5.0, 50.0, 5.0),
        _ => hints(1_000.0, 100.0, 10.0, 16.0),
    };
    let features = gpu.feature_names().join(",");
    Capability {
        ops: OpSet::of(&OPS),
        dtypes: DTypeSet::of(&[DType::F32]),
        operand_dtypes: DTypeSet::of(&OPERAND_DTYPES),
        max_dims: MAX_RANK as u8,
        alignment: 1,
        max_elements: usize::try_from(limit / 4).unwrap_or(usize::MAX),
        priority: 20,
        memory_space: GPU_SPACE,
        version: format!(
            "{} ({:?}, {:?}, driver {} {}) features [{features}]",
            info.name, info.backend, info.device_type, info.driver, info.driver_info
        ),
        cost,
    }
}

fn hints(gflops: f32, bandwidth_gbs: f32, launch_us: f32, transfer_gbs: f32) -> CostHints {
    CostHints {
        gflops,
        bandwidth_gbs,
        launch_us,
        transfer_gbs,
        transfer_us: 20.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{MemorySpace, Refusal};
    use crate::graph::{GraphBuilder, RopeMode};

    /// The GPU reads a weight format in place exactly when it has a reader for it.
    #[test]
    fn operand_formats_are_those_with_readers() {
        for dtype in DType::ALL {
            let operand = OPERAND_DTYPES.contains(&dtype) && dtype != DType::I32;
            let read = dtype != DType::F32 && super::super::kernels::format(dtype).is_some();
            assert_eq!(operand, read, "{dtype}");
        }
    }

    /// Band-scaled RoPE (Llama 3.1), affine and soft-cap have no WGSL kernel: the GPU's
    /// capability refuses them by kind, so the planner leaves them on the CPU, while
    /// plain RoPE stays here.
    #[test]
    fn ops_without_kernels_are_refused() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2, 3, 8]).unwrap();
        let pos = b.input("pos", DType::I32, [2]).unwrap();
        let plain = b.rope(x, pos, RopeMode::Neox, 8, 1e4, 1.0).unwrap();
        let table = b
            .rope_freqs(x, pos, RopeMode::Neox, vec![1.0, 0.5, 0.1, 0.01], 1.0)
            .unwrap();
        let flat = b.reshape(x, [2, 24]).unwrap();
        let affine = b.affine(flat, 2.0, 1.0).unwrap();
        let capped = b.softcap(flat, 30.0).unwrap();
        let g = b.finish(vec![plain, table, affine, capped]).unwrap();
        let cap = Capability {
            ops: OpSet::of(&OPS),
            dtypes: DTypeSet::of(&[DType::F32]),
            operand_dtypes: DTypeSet::of(&[DType::I32]),
            max_dims: MAX_RANK as u8,
            alignment: 1,
            max_elements: usize::MAX,
            priority: 20,
            memory_space: MemorySpace(1),
            version: "test".into(),
            cost: hints(1.0, 1.0, 1.0, 1.0),
        };
        assert_eq!(cap.supports(&g, plain), Ok(()));
        assert_eq!(cap.supports(&g, table), Err(Refusal::Op(OpKind::RopeFreqs)));
        // Gemma's element-wise extras also stay on the CPU.
        assert_eq!(cap.supports(&g, affine), Err(Refusal::Op(OpKind::Affine)));
        assert_eq!(cap.supports(&g, capped), Err(Refusal::Op(OpKind::SoftCap)));
    }
}
