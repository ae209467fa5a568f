//! What a backend can run, as data: ops, dtypes, rank and size limits, alignment,
//! priority, memory space and detected version. The partitioner asks
//! [`Capability::supports`] and keeps the [`Refusal`] to explain its plan.

use serde::Serialize;

use crate::graph::{DType, Graph, OpKind, ValueId};

/// Identifies a backend in plans and keys; lower ids win priority ties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BackendId(pub u8);

impl BackendId {
    /// The host CPU backend, the fallback for every plan.
    pub const CPU: BackendId = BackendId(0);
    /// The wgpu GPU backend.
    pub const GPU: BackendId = BackendId(1);
    /// The test-only simulated accelerator.
    pub const SIM: BackendId = BackendId(2);
}

impl std::fmt::Display for BackendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// A memory space: values in different spaces need a transfer to meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct MemorySpace(pub u8);

impl MemorySpace {
    /// Ordinary host memory.
    pub const HOST: MemorySpace = MemorySpace(0);
}

/// A set of op kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub struct OpSet(u32);

impl OpSet {
    /// Every op kind.
    pub fn all() -> OpSet {
        OpSet::of(&OpKind::ALL)
    }

    /// Exactly the given kinds.
    pub fn of(kinds: &[OpKind]) -> OpSet {
        OpSet(kinds.iter().fold(0, |bits, &k| bits | 1 << k as u32))
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: OpKind) -> bool {
        self.0 & (1 << kind as u32) != 0
    }

    /// The kinds in the set, in tag order.
    pub fn kinds(self) -> impl Iterator<Item = OpKind> {
        OpKind::ALL.into_iter().filter(move |&k| self.contains(k))
    }
}

/// A set of dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub struct DTypeSet(u32);

impl DTypeSet {
    /// Every dtype.
    pub fn all() -> DTypeSet {
        DTypeSet::of(&DType::ALL)
    }

    /// Exactly the given dtypes.
    pub fn of(dtypes: &[DType]) -> DTypeSet {
        DTypeSet(dtypes.iter().fold(0, |bits, &d| bits | 1 << d as u32))
    }

    /// Whether `dtype` is in the set.
    pub fn contains(self, dtype: DType) -> bool {
        self.0 & (1 << dtype as u32) != 0
    }

    /// The dtypes in the set, in tag order.
    pub fn dtypes(self) -> impl Iterator<Item = DType> {
        DType::ALL.into_iter().filter(move |&d| self.contains(d))
    }
}

/// Rough speeds a backend declares, used by the partitioner's cost model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CostHints {
    /// Sustained compute, GFLOP/s.
    pub gflops: f32,
    /// Memory bandwidth for streaming weights and activations, GB/s.
    pub bandwidth_gbs: f32,
    /// Fixed cost of launching one op, microseconds.
    pub launch_us: f32,
    /// Bandwidth of a transfer into or out of this backend's memory space, GB/s.
    pub transfer_gbs: f32,
    /// Fixed cost of one transfer, microseconds.
    pub transfer_us: f32,
}

/// Everything the partitioner needs to know about one backend.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Capability {
    /// Op kinds the backend has kernels for.
    pub ops: OpSet,
    /// Dtypes it reads and writes, block formats included.
    pub dtypes: DTypeSet,
    /// Further dtypes it reads only where its kernels expect them, never as
    /// activations: a matmul's weight, an embedding's table and ids, rope's positions
    /// (a GPU dequantizes Q4_0 weights and reads i32 ids without running any other op
    /// on Q4_0 or i32 values).
    pub operand_dtypes: DTypeSet,
    /// Largest rank of any operand.
    pub max_dims: u8,
    /// The innermost dimension of every operand must be a multiple of this (1 = any).
    pub alignment: u32,
    /// Largest element count of any operand (device buffer limits).
    pub max_elements: usize,
    /// Higher is preferred; the CPU, which runs everything, is lowest.
    pub priority: u8,
    /// Where the backend's values live.
    pub memory_space: MemorySpace,
    /// Detected at start-up (SIMD features, adapter and driver); part of cache keys.
    pub version: String,
    /// Speeds for the cost model.
    pub cost: CostHints,
}

/// Why a backend turned a node down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum Refusal {
    /// The backend has no kernel for this op.
    #[error("no kernel for {0}")]
    Op(OpKind),
    /// An operand or the output has a dtype the backend does not handle.
    #[error("dtype {dtype} unsupported ({role})")]
    DType {
        /// Which operand ("output", "input 1", ...).
        role: String,
        /// The dtype refused.
        dtype: DType,
    },
    /// An operand has more dimensions than the backend allows.
    #[error("rank {rank} exceeds max {max}")]
    Rank {
        /// The operand's rank.
        rank: usize,
        /// The backend's limit.
        max: u8,
    },
    /// An innermost dimension is not a multiple of the backend's alignment.
    #[error("inner dim {dim} not a multiple of {alignment}")]
    Alignment {
        /// The offending dimension.
        dim: usize,
        /// The required multiple.
        alignment: u32,
    },
    /// An operand exceeds the backend's size limit.
    #[error("{elements} elements exceed limit {max}")]
    TooLarge {
        /// The operand's element count.
        elements: usize,
        /// The backend's limit.
        max: usize,
    },
}

impl Capability {
    /// Whether this backend can compute node `id` of `graph`: its op, and the dtype,
    /// rank, alignment and size of its output and every input.
    pub fn supports(&self, graph: &Graph, id: ValueId) -> Result<(), Refusal> {
        let node = graph.node(id);
        let kind = node.op.kind();
        if !self.ops.contains(kind) {
            return Err(Refusal::Op(kind));
        }
        let operands = std::iter::once(("output".to_string(), node)).chain(
            node.inputs
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("input {i}"), graph.node(*v))),
        );
        for (position, (role, operand)) in operands.enumerate() {
            // Positions count the output as 0, so input i is position i + 1.
            let special = matches!(
                (kind, position),
                (OpKind::MatMul, 2)
                    | (OpKind::Embedding, 1 | 2)
                    | (OpKind::Rope | OpKind::RopeFreqs, 2)
                    | (OpKind::Argmax, 0)
                    | (OpKind::Draw, 0 | 2)
            );
            let accepted = self.dtypes.contains(operand.dtype)
                || (special && self.operand_dtypes.contains(operand.dtype));
            if !accepted {
                return Err(Refusal::DType {
                    role,
                    dtype: operand.dtype,
                });
            }
            let shape = &operand.shape;
            if shape.rank() > self.max_dims as usize {
                return Err(Refusal::Rank {
                    rank: shape.rank(),
                    max: self.max_dims,
                });
            }
            if self.alignment > 1 && shape.last() % self.alignment as usize != 0 {
                return Err(Refusal::Alignment {
                    dim: shape.last(),
                    alignment: self.alignment,
                });
            }
            if shape.numel() > self.max_elements {
                return Err(Refusal::TooLarge {
                    elements: shape.numel(),
                    max: self.max_elements,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;

    fn narrow() -> Capability {
        Capability {
            ops: OpSet::of(&[OpKind::MatMul, OpKind::Silu]),
            dtypes: DTypeSet::of(&[DType::F32]),
            operand_dtypes: DTypeSet::default(),
            max_dims: 4,
            alignment: 16,
            max_elements: 1 << 20,
            priority: 5,
            memory_space: MemorySpace(1),
            version: "test".into(),
            cost: CostHints {
                gflops: 1.0,
                bandwidth_gbs: 1.0,
                launch_us: 1.0,
                transfer_gbs: 1.0,
                transfer_us: 1.0,
            },
        }
    }

    #[test]
    fn refusals_name_the_reason() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2, 32]).unwrap();
        let w = b.weight("w", DType::Q4_0, [16, 32]).unwrap();
        let y = b.matmul(x, w).unwrap();
        let s = b.softmax(x).unwrap();
        let odd = b.input("odd", DType::F32, [2, 20]).unwrap();
        let z = b.silu(odd).unwrap();
        let g = b.finish(vec![y, s, z]).unwrap();
        let cap = narrow();
        assert_eq!(
            cap.supports(&g, y),
            Err(Refusal::DType {
                role: "input 1".into(),
                dtype: DType::Q4_0
            })
        );
        assert_eq!(cap.supports(&g, s), Err(Refusal::Op(OpKind::Softmax)));
        assert!(matches!(
            cap.supports(&g, z),
            Err(Refusal::Alignment { dim: 20, .. })
        ));
    }
}
