//! The partitioner's cost model: rough microsecond estimates from declared [`CostHints`].
//!
//! It only has to be good enough to tell whether a short run on a fast backend pays for
//! the transfers around it; it is never used to predict absolute latency.
//!
//! [`CostHints`]: crate::backend::CostHints

use crate::backend::Capability;
use crate::graph::{Graph, Node, Op, ValueId};

/// Context length assumed for attention: the real length is a run-time input.
pub(super) const ASSUMED_CTX: f64 = 512.0;

/// Estimated floating-point operations of node `id`.
///
/// MatMul: `2·M·N·K`; attention: `4·N·ctx·H·Dh` at [`ASSUMED_CTX`]; pure data movement
/// (sources, reshape, transpose, concat, slice, transfer): 0; everything else
/// (element-wise, norms, softmax, rope, cast, embedding): one per output element.
pub(super) fn flops(graph: &Graph, id: ValueId) -> f64 {
    let node = graph.node(id);
    let numel = node.shape.numel() as f64;
    match &node.op {
        Op::MatMul => {
            let k = node
                .inputs
                .first()
                .map_or(0, |&x| graph.node(x).shape.last());
            2.0 * numel * k as f64
        }
        Op::Attention {
            n_heads, head_dim, ..
        } => {
            let n = node.shape.rows() as f64;
            4.0 * n * ASSUMED_CTX * f64::from(*n_heads) * f64::from(*head_dim)
        }
        Op::Input { .. }
        | Op::Weight { .. }
        | Op::Reshape
        | Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Slice { .. }
        | Op::Transfer => 0.0,
        _ => numel,
    }
}

/// Bytes of the value a node produces (block formats at their packed size).
pub(super) fn value_bytes(node: &Node) -> f64 {
    let numel = node.shape.numel();
    match node.dtype.bytes_for(numel) {
        Some(bytes) => bytes as f64,
        None => numel as f64 * node.dtype.block_bytes() as f64,
    }
}

/// Units per microsecond of a rate declared per second in billions (GFLOP/s, GB/s).
/// Non-positive or NaN rates count as (almost) zero speed rather than dividing by zero.
fn per_us(giga_per_s: f32) -> f64 {
    f64::from(giga_per_s).max(1e-9) * 1e3
}

/// Estimated time of node `id` on a backend: launch + flops / compute rate + bytes read
/// and written / memory bandwidth.
pub(super) fn compute_us(graph: &Graph, id: ValueId, cap: &Capability) -> f64 {
    let node = graph.node(id);
    let bytes = value_bytes(node)
        + node
            .inputs
            .iter()
            .map(|&i| value_bytes(graph.node(i)))
            .sum::<f64>();
    f64::from(cap.cost.launch_us)
        + flops(graph, id) / per_us(cap.cost.gflops)
        + bytes / per_us(cap.cost.bandwidth_gbs)
}

/// Estimated time of one transfer of `bytes` from `from`'s memory space to `to`'s: the
/// larger fixed cost plus the bytes over the slower link. Between backends sharing a
/// memory space only the fixed cost remains (the copy can alias).
pub(super) fn transfer_us(bytes: f64, from: &Capability, to: &Capability) -> f64 {
    let fixed = f64::from(from.cost.transfer_us.max(to.cost.transfer_us));
    if from.memory_space == to.memory_space {
        return fixed;
    }
    let rate = per_us(from.cost.transfer_gbs.min(to.cost.transfer_gbs));
    fixed + bytes / rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{CostHints, DTypeSet, MemorySpace, OpSet};
    use crate::graph::{AttentionParams, DType, GraphBuilder};

    fn cap(space: u8, gflops: f32, transfer_gbs: f32) -> Capability {
        Capability {
            ops: OpSet::all(),
            dtypes: DTypeSet::all(),
            operand_dtypes: DTypeSet::default(),
            max_dims: 8,
            alignment: 1,
            max_elements: usize::MAX,
            priority: 0,
            memory_space: MemorySpace(space),
            version: "test".into(),
            cost: CostHints {
                gflops,
                bandwidth_gbs: 1.0,
                launch_us: 2.0,
                transfer_gbs,
                transfer_us: 5.0,
            },
        }
    }

    #[test]
    fn flops_follow_op_formulas() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [4, 32]).unwrap();
        let w = b.weight("w", DType::Q4_0, [16, 32]).unwrap();
        let y = b.matmul(x, w).unwrap();
        let s = b.silu(y).unwrap();
        let q = b.input("q", DType::F32, [4, 16]).unwrap();
        let p = AttentionParams {
            layer: 0,
            n_heads: 2,
            n_kv_heads: 2,
            head_dim: 8,
            scale: 1.0,
        };
        let a = b.attention(q, q, q, p).unwrap();
        let r = b.reshape(s, [64]).unwrap();
        let g = b.finish(vec![a, r]).unwrap();
        assert_eq!(flops(&g, y), 2.0 * 4.0 * 16.0 * 32.0);
        assert_eq!(flops(&g, s), 64.0);
        assert_eq!(flops(&g, a), 4.0 * 4.0 * ASSUMED_CTX * 2.0 * 8.0);
        assert_eq!(flops(&g, r), 0.0);
        assert_eq!(value_bytes(g.node(w)), 16.0 * 18.0);
    }

    #[test]
    fn compute_and_transfer_estimates() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [1, 1000]).unwrap();
        let s = b.silu(x).unwrap();
        let g = b.finish(vec![s]).unwrap();
        // 2 us launch + 1000 flops at 1 GFLOP/s (1 us) + 8000 bytes at 1 GB/s (8 us).
        let t = compute_us(&g, s, &cap(0, 1.0, 1.0));
        assert!((t - 11.0).abs() < 1e-9, "{t}");
        // Different spaces: 5 us + 4000 bytes at the slower 2 GB/s link (2 us).
        let t = transfer_us(4000.0, &cap(0, 1.0, 4.0), &cap(1, 1.0, 2.0));
        assert!((t - 7.0).abs() < 1e-9, "{t}");
        assert_eq!(
            transfer_us(4000.0, &cap(1, 1.0, 4.0), &cap(1, 1.0, 2.0)),
            5.0
        );
        // A zero rate is slow, not a division by zero.
        assert!(compute_us(&g, s, &cap(0, 0.0, 1.0)).is_finite());
    }
}
