//! The `sim` backend, for tests only (cargo feature `sim`): a simulated accelerator
//! with a narrow capability (matmul, add, mul, silu, swiglu, softmax; f32/f16;
//! alignment 16; priority above the CPU) and its own memory space. It computes with
//! the CPU kernels, but weights and values really are copied into its space, so a
//! plan that mixes it with the CPU exercises placement, transfers and the cache
//! exactly as a real second device would.

use std::sync::Arc;

use super::cpu::CpuBackend;
use super::{
    AlignedBytes, Backend, BackendError, BackendId, Capability, CompiledPartition, CostHints,
    DTypeSet, HostTensor, MemorySpace, OpSet, PartitionSpec, ResidentWeight, SharedBytes,
    StepState, Tensor, TensorData, WeightProvider,
};
use crate::graph::{DType, OpKind, MAX_RANK};

/// The simulated accelerator's memory space.
pub const SIM_SPACE: MemorySpace = MemorySpace(2);

/// A test double of an accelerator. Named `sim` everywhere so it is never mistaken
/// for a real backend.
pub struct SimBackend {
    id: BackendId,
    capability: Capability,
    cpu: CpuBackend,
}

impl SimBackend {
    /// The standard narrow capability, with id [`BackendId::SIM`].
    pub fn new() -> Result<SimBackend, BackendError> {
        SimBackend::with_capability(BackendId::SIM, SimBackend::default_capability())
    }

    /// A sim backend with any id and capability (tests of placement and the cache).
    pub fn with_capability(
        id: BackendId,
        capability: Capability,
    ) -> Result<SimBackend, BackendError> {
        Ok(SimBackend {
            id,
            capability,
            cpu: CpuBackend::new(Some(1))?,
        })
    }

    /// The capability [`SimBackend::new`] declares.
    pub fn default_capability() -> Capability {
        Capability {
            ops: OpSet::of(&[
                OpKind::MatMul,
                OpKind::Add,
                OpKind::Mul,
                OpKind::Silu,
                OpKind::SwiGlu,
                OpKind::Softmax,
            ]),
            dtypes: DTypeSet::of(&[DType::F32, DType::F16]),
            operand_dtypes: DTypeSet::default(),
            max_dims: MAX_RANK as u8,
            alignment: 16,
            max_elements: 1 << 28,
            priority: 10,
            memory_space: SIM_SPACE,
            version: "sim 1 (test double)".into(),
            cost: CostHints {
                gflops: 1000.0,
                bandwidth_gbs: 400.0,
                launch_us: 5.0,
                transfer_gbs: 10.0,
                transfer_us: 10.0,
            },
        }
    }

    fn check_space(&self, tensor: &Tensor) -> Result<(), BackendError> {
        if tensor.space != self.capability.memory_space {
            return Err(BackendError::Input(format!(
                "sim received a tensor in {:?}, not its own space",
                tensor.space
            )));
        }
        Ok(())
    }
}

/// Redirects the CPU kernels' weight lookups to weights resident in the sim's space.
struct SimWeights<'a> {
    inner: &'a dyn WeightProvider,
    sim: &'a SimBackend,
}

impl WeightProvider for SimWeights<'_> {
    fn resident(&self, name: &str, _cpu: &dyn Backend) -> Result<ResidentWeight, BackendError> {
        let mut weight = self.inner.resident(name, self.sim)?;
        weight.space = MemorySpace::HOST;
        Ok(weight)
    }
}

/// A CPU-compiled partition that only accepts and returns values in the sim's space.
struct SimPartition {
    inner: Box<dyn CompiledPartition>,
    space: MemorySpace,
}

impl CompiledPartition for SimPartition {
    fn run(
        &mut self,
        inputs: &[&Tensor],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, BackendError> {
        let mut host_inputs = Vec::with_capacity(inputs.len());
        for input in inputs {
            if input.space != self.space {
                return Err(BackendError::Input(format!(
                    "sim partition received a tensor in {:?}",
                    input.space
                )));
            }
            host_inputs.push(Tensor {
                space: MemorySpace::HOST,
                ..(*input).clone()
            });
        }
        let refs: Vec<&Tensor> = host_inputs.iter().collect();
        let outputs = self.inner.run(&refs, state)?;
        Ok(outputs
            .into_iter()
            .map(|t| Tensor {
                space: self.space,
                ..t
            })
            .collect())
    }

    fn bytes(&self) -> usize {
        self.inner.bytes()
    }
}

impl Backend for SimBackend {
    fn id(&self) -> BackendId {
        self.id
    }

    fn name(&self) -> &str {
        "sim"
    }

    fn capability(&self) -> &Capability {
        &self.capability
    }

    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError> {
        let copy = SharedBytes::from_vec(weight.data.as_bytes().to_vec());
        let bytes = weight.data.as_bytes().len();
        let tensor = HostTensor::new(weight.dtype, weight.shape.clone(), copy)?;
        Ok(ResidentWeight {
            space: self.capability.memory_space,
            bytes,
            handle: Arc::new(tensor),
        })
    }

    fn compile(
        &self,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError> {
        for &id in spec.nodes {
            let node = spec.graph.node(id);
            self.capability
                .supports(spec.graph, id)
                .map_err(|why| BackendError::Unsupported {
                    node: id,
                    op: node.op.kind(),
                    why,
                })?;
        }
        let redirected = SimWeights {
            inner: weights,
            sim: self,
        };
        let inner = self.cpu.compile(spec, &redirected)?;
        Ok(Box::new(SimPartition {
            inner,
            space: self.capability.memory_space,
        }))
    }

    fn import(&self, host: Tensor) -> Result<Tensor, BackendError> {
        if host.space != MemorySpace::HOST {
            return Err(BackendError::Input("sim imports host tensors only".into()));
        }
        Ok(Tensor {
            space: self.capability.memory_space,
            data: TensorData::Host(AlignedBytes::copy_from(host.host_bytes()?.as_bytes())),
            ..host
        })
    }

    fn export(&self, tensor: &Tensor) -> Result<Tensor, BackendError> {
        self.check_space(tensor)?;
        Ok(Tensor {
            space: MemorySpace::HOST,
            data: TensorData::Host(AlignedBytes::copy_from(tensor.host_bytes()?.as_bytes())),
            ..tensor.clone()
        })
    }
}
