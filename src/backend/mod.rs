//! Backends: the `Backend` trait, capabilities as data, and the tensors that cross the
//! boundary. `cpu` runs everything; `sim` (feature `sim`, tests only) is a narrower
//! second memory space for exercising multi-backend plans.
//!
//! **Invariant:** backends know graphs, not models, plans or the cache. A backend is
//! handed one partition at a time through [`PartitionSpec`].

mod capability;
mod counters;
pub mod cpu;
mod error;
pub mod fault;
#[cfg(feature = "gpu")]
pub mod gpu;
mod kv_rows;
mod profile;
mod set;
#[cfg(feature = "sim")]
pub mod sim;
mod step;
mod tensor;

pub use capability::{BackendId, Capability, CostHints, DTypeSet, MemorySpace, OpSet, Refusal};
pub use counters::{DeviceCounters, RECENT_RUNS};
pub use error::{BackendError, Fault};
pub use kv_rows::{KvBlocks, KvRows, KV_BLOCK};
pub use profile::{OpLabel, OpProfile, OpTime, RowsProfile};
pub use set::BackendSet;
pub use step::{DeviceKv, KvCache, KvDType, KvLayout, Segment, StepState};
pub use tensor::{
    plain_bytes, AlignedBytes, ByteOwner, DeviceBuffer, HostTensor, ResidentWeight, SharedBytes,
    Tensor, TensorData,
};

use crate::graph::{BufferPlan, Graph, Node, ValueId};

/// One partition as handed to [`Backend::compile`].
#[derive(Debug)]
pub struct PartitionSpec<'a> {
    /// The whole (planned) graph; only `nodes` are computed here.
    pub graph: &'a Graph,
    /// Nodes to compute, in topological order. Never `Input`, `Weight` or `Transfer`.
    pub nodes: &'a [ValueId],
    /// Values `run` receives, in this order (graph inputs and transferred values).
    pub inputs: &'a [ValueId],
    /// Values `run` returns, in this order.
    pub outputs: &'a [ValueId],
    /// Where intermediate values live, reusing memory by lifetime.
    pub buffers: &'a BufferPlan,
}

impl PartitionSpec<'_> {
    /// The node producing `id`, or an input error when the graph has no such value.
    pub fn node(&self, id: ValueId) -> Result<&Node, BackendError> {
        self.graph
            .nodes()
            .get(id.index())
            .ok_or_else(|| BackendError::Input(format!("value {id} is not in the graph")))
    }
}

/// Finds weights by name, made resident in the asking backend's memory space, loaded
/// at most once per space. Implemented by the cache's `WeightStore`.
pub trait WeightProvider {
    /// The weight `name` resident for `backend`.
    fn resident(&self, name: &str, backend: &dyn Backend) -> Result<ResidentWeight, BackendError>;
}

/// A compute unit: declares what it can run, makes weights resident, compiles partitions.
pub trait Backend: Send + Sync {
    /// Stable id used in plans and keys.
    fn id(&self) -> BackendId;
    /// Short name for the CLI (`cpu`, `gpu`, `sim`).
    fn name(&self) -> &str;
    /// What this backend runs, detected at start-up.
    fn capability(&self) -> &Capability;
    /// Copies (or aliases) a host weight into this backend's memory space.
    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError>;
    /// Prepares a partition for repeated runs (kernels, buffers, resolved weights).
    fn compile(
        &self,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError>;
    /// Moves a host tensor into this backend's memory space.
    fn import(&self, host: Tensor) -> Result<Tensor, BackendError>;
    /// Moves a tensor of this backend's memory space to the host.
    fn export(&self, tensor: &Tensor) -> Result<Tensor, BackendError>;
    /// The recorder its partitions time their nodes into, where this backend can
    /// (`switchyard bench --profile`).
    fn op_profile(&self) -> Option<&OpProfile> {
        None
    }
    /// What this device has done so far (passes, dispatches, submits, buffers, bytes
    /// moved, waits), where the backend counts it: a GPU does, the CPU does not.
    fn counters(&self) -> Option<DeviceCounters> {
        None
    }
    /// Whether the backend's partitions take host tensors as inputs and write them
    /// into buffers of their own: the executor then hands them host values instead of
    /// importing each into a fresh device buffer every step.
    fn takes_host_inputs(&self) -> bool {
        false
    }
}

/// A compiled partition, owned by one executor.
pub trait CompiledPartition: Send {
    /// Runs the partition; returns its outputs fully materialised, in spec order.
    fn run(
        &mut self,
        inputs: &[&Tensor],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, BackendError>;
    /// Bytes this partition holds itself (buffers, kernels), not counting shared weights.
    fn bytes(&self) -> usize;
}
