//! Placement: which backend runs each node, grouped into partitions with transfers on
//! every cross-backend edge. Deterministic and explainable: the same graph and
//! capabilities give byte-identical plans, and every node records why it went where.
//!
//! **Invariant:** the planner reads capabilities (data), never kernels.

mod cost;
mod explain;
mod partition;
mod smooth;
#[cfg(test)]
mod testutil;

pub use explain::{to_dot, to_text};
pub use partition::{partition, partition_pinned, Pins};

use serde::Serialize;

use crate::backend::{BackendId, Refusal};
use crate::graph::{CanonicalWriter, DType, Graph, OpKind, ValueId};

/// Where a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Placement {
    /// The whole node on one backend.
    On(BackendId),
    /// A weight: made resident in every memory space that reads it, never transferred.
    Resident,
}

/// Why a node was placed where it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Reason {
    /// A graph input: it arrives in host memory, on the fallback backend.
    Input,
    /// A weight, resident wherever it is read.
    Weight,
    /// The highest-priority backend that supports it; the others' refusals are kept.
    Preferred {
        /// Backends of higher or equal priority that refused, with their reasons.
        refused: Vec<(BackendId, Refusal)>,
    },
    /// Moved back to the fallback by smoothing: its run on `from` was too short to pay
    /// for the transfers around it.
    Smoothed {
        /// Where greedy placement had put it.
        from: BackendId,
        /// Nodes in the run.
        run_len: usize,
        /// Estimated saving of the run, microseconds.
        saves_us: f32,
        /// Estimated cost of its transfers, microseconds.
        transfers_us: f32,
    },
    /// A transfer inserted on a cross-backend edge.
    Transfer,
    /// Pinned by the caller: one half of a row-split linear (co-execution), which
    /// runs alone in its partition so the two halves overlap.
    Pinned,
}

/// A contiguous range of the planned graph's nodes run by one backend.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Partition {
    /// The backend running it.
    pub backend: BackendId,
    /// Compute nodes, in order (no sources, no transfers).
    pub nodes: Vec<ValueId>,
    /// Values read from outside: graph inputs, transfer results, and values computed
    /// by earlier partitions on the same memory space. Sorted by id.
    pub inputs: Vec<ValueId>,
    /// Values read by later partitions or returned by the graph. Sorted by id.
    pub outputs: Vec<ValueId>,
}

/// One transfer node: copies `source` from `from`'s memory space to `to`'s.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transfer {
    /// The transfer node in the planned graph.
    pub node: ValueId,
    /// The value copied.
    pub source: ValueId,
    /// Backend holding the source.
    pub from: BackendId,
    /// Backend receiving it.
    pub to: BackendId,
    /// Dtype on the source side.
    pub from_dtype: DType,
    /// Dtype on the receiving side (differs when `to` cannot hold `from_dtype`).
    pub to_dtype: DType,
}

/// Knobs of the partitioner.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Policy {
    /// The backend that takes inputs and anything smoothing sends back (the CPU).
    pub fallback: BackendId,
    /// Runs shorter than this on a non-fallback backend are candidates for smoothing.
    pub min_run: usize,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            fallback: BackendId::CPU,
            min_run: 3,
        }
    }
}

/// Errors of the partitioner.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    /// No backend can run a node. Lists every backend's reason.
    #[error("node {node} ({op}) cannot be placed: {}", describe_refusals(.refusals))]
    Unplaceable {
        /// The node.
        node: ValueId,
        /// Its op.
        op: OpKind,
        /// Each backend's refusal.
        refusals: Vec<(BackendId, Refusal)>,
    },
    /// The policy's fallback is not among the backends.
    #[error("fallback backend {0} is not among the backends offered")]
    NoFallback(BackendId),
    /// Two backends were offered under the same id.
    #[error("backend {0} is offered twice")]
    DuplicateBackend(BackendId),
}

fn describe_refusals(refusals: &[(BackendId, Refusal)]) -> String {
    let parts: Vec<String> = refusals.iter().map(|(b, r)| format!("{b}: {r}")).collect();
    parts.join("; ")
}

/// The partitioner's result: the graph with transfer nodes inserted (sources first,
/// then each partition's transfers followed by its nodes) and, per node of that graph,
/// its placement and reason.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The planned graph.
    pub graph: Graph,
    /// Placement of every node of `graph`, indexed by node.
    pub placement: Vec<Placement>,
    /// Reason for every node of `graph`, indexed by node.
    pub why: Vec<Reason>,
    /// Partitions in execution order.
    pub partitions: Vec<Partition>,
    /// Transfers in execution order.
    pub transfers: Vec<Transfer>,
    /// For every node of the original graph, its id in `graph`.
    pub original_to_planned: Vec<ValueId>,
}

impl Plan {
    /// Appends the planned graph, placements and partition boundaries to `writer`, so
    /// the cache key distinguishes plans of the same graph.
    pub fn write_canonical(&self, writer: &mut CanonicalWriter) {
        self.graph.write_canonical(writer);
        writer.str("placement/1");
        for p in &self.placement {
            match *p {
                Placement::On(b) => {
                    writer.u8(0);
                    writer.u8(b.0);
                }
                Placement::Resident => writer.u8(1),
            }
        }
        writer.u64(self.partitions.len() as u64);
        for part in &self.partitions {
            writer.u8(part.backend.0);
            writer.u64(part.nodes.len() as u64);
        }
    }
}
