//! Fixtures shared by the plan module's unit tests.

use crate::backend::{Capability, CostHints, DTypeSet, MemorySpace, OpSet};
use crate::graph::{DType, Graph, GraphBuilder, OpKind};

/// A capability over `ops` (all ops when `None`) with uniform speeds.
pub(super) fn cap(ops: Option<&[OpKind]>, priority: u8, space: u8) -> Capability {
    Capability {
        ops: ops.map_or_else(OpSet::all, OpSet::of),
        dtypes: DTypeSet::all(),
        operand_dtypes: DTypeSet::default(),
        max_dims: 8,
        alignment: 1,
        max_elements: usize::MAX,
        priority,
        memory_space: MemorySpace(space),
        version: "test".into(),
        cost: CostHints {
            gflops: 10.0,
            bandwidth_gbs: 10.0,
            launch_us: 5.0,
            transfer_gbs: 10.0,
            transfer_us: 10.0,
        },
    }
}

/// x → matmul(gpu) → {silu(gpu), softmax(cpu), gelu(cpu)}; add(silu, softmax) on gpu.
pub(super) fn mixed() -> (Graph, Capability, Capability) {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [2, 32]).unwrap();
    let w = b.weight("w", DType::F32, [16, 32]).unwrap();
    let m = b.matmul(x, w).unwrap();
    let s = b.silu(m).unwrap();
    let sm = b.softmax(m).unwrap();
    let g = b.gelu(m).unwrap();
    let a = b.add(s, sm).unwrap();
    let graph = b.finish(vec![a, g]).unwrap();
    let gpu = cap(Some(&[OpKind::MatMul, OpKind::Silu, OpKind::Add]), 5, 1);
    (graph, cap(None, 0, 0), gpu)
}
