//! The `gpu` backend on wgpu (Vulkan, Metal, DX12; lavapipe in CI). Its capability is
//! read from the adapter at start-up; weights are uploaded once per process through
//! the weight store (block formats repacked to whole words); a compiled partition is a
//! recorded list of dispatches that each step replays; attention reads a paged KV pool
//! in GPU memory, one sequence or a batch of them per step.

mod attention;
mod capability;
mod compile;
mod device;
mod fuse;
mod kernels;
mod kv;
mod products;
mod record;
mod timer;
mod upload;
mod weights;

use std::sync::Arc;

pub use device::GpuError;

use super::{
    Backend, BackendError, BackendId, Capability, CompiledPartition, DeviceBuffer, DeviceCounters,
    HostTensor, MemorySpace, OpProfile, PartitionSpec, ResidentWeight, Tensor, TensorData,
    WeightProvider,
};
use compile::GpuPartition;
use device::Gpu;
use kv::KvPools;

/// The GPU's memory space.
pub const GPU_SPACE: MemorySpace = MemorySpace(1);

/// A GPU buffer carried in a [`DeviceBuffer`], with the mappable buffer a partition
/// run already copied it to, when it did (a partition's outputs).
pub(crate) struct GpuBuffer {
    pub buffer: wgpu::Buffer,
    pub staged: Option<wgpu::Buffer>,
}

/// A wgpu adapter as a backend.
pub struct GpuBackend {
    gpu: Arc<Gpu>,
    capability: Capability,
    pools: Arc<KvPools>,
    /// Dispatch times for `bench --profile`, where the adapter writes timestamps
    /// inside passes (`timer.rs`).
    profile: Option<Arc<OpProfile>>,
}

/// What `switchyard doctor` shows about the adapter.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterReport {
    /// Adapter name ("llvmpipe (LLVM 15.0.6, 256 bits)", "Apple M2", ...).
    pub name: String,
    /// Graphics API wgpu drives it through.
    pub api: String,
    /// Discrete, integrated, software (`Cpu`), ...
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Optional features Switchyard uses that the adapter has.
    pub features: Vec<String>,
    /// Largest storage buffer binding, bytes.
    pub max_storage_buffer_bytes: u64,
    /// Largest workgroup count per dispatch dimension.
    pub max_workgroups_per_dimension: u32,
}

impl GpuBackend {
    /// Opens the best adapter: hardware first; a software adapter (lavapipe) only when
    /// `allow_software`, since it is slower than the CPU backend.
    pub fn open(allow_software: bool) -> Result<GpuBackend, GpuError> {
        let gpu = Gpu::open(allow_software)?;
        let capability = capability::detect(&gpu);
        let inside =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let profile = gpu.features.contains(inside).then(Arc::default);
        Ok(GpuBackend {
            gpu: Arc::new(gpu),
            capability,
            pools: Arc::default(),
            profile,
        })
    }

    /// A GPU backend whose capability is narrowed to `ops` (tests of mixed plans).
    pub fn with_ops(mut self, ops: &[crate::graph::OpKind]) -> GpuBackend {
        let allowed = super::OpSet::of(ops);
        let kept: Vec<_> = self
            .capability
            .ops
            .kinds()
            .filter(|k| allowed.contains(*k))
            .collect();
        self.capability.ops = super::OpSet::of(&kept);
        self.capability.version.push_str(&format!(" ops {kept:?}"));
        self
    }

    /// The adapter, for `doctor`.
    pub fn report(&self) -> AdapterReport {
        let info = &self.gpu.info;
        AdapterReport {
            name: info.name.clone(),
            api: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            features: self
                .gpu
                .feature_names()
                .iter()
                .map(|n| n.to_string())
                .collect(),
            max_storage_buffer_bytes: self.gpu.limits.max_storage_buffer_binding_size,
            max_workgroups_per_dimension: self.gpu.limits.max_compute_workgroups_per_dimension,
        }
    }

    /// Whether the adapter is a software rasteriser (lavapipe, WARP).
    pub fn is_software(&self) -> bool {
        self.gpu.info.device_type == wgpu::DeviceType::Cpu
    }

    fn buffer_of<'t>(&self, tensor: &'t Tensor) -> Result<&'t GpuBuffer, BackendError> {
        match &tensor.data {
            TensorData::Device(d) if tensor.space == GPU_SPACE => d
                .handle
                .downcast_ref::<GpuBuffer>()
                .ok_or_else(|| BackendError::Input("not a GPU buffer".into())),
            _ => Err(BackendError::Input(format!(
                "tensor in space {:?} is not in GPU memory",
                tensor.space
            ))),
        }
    }
}

impl Backend for GpuBackend {
    fn id(&self) -> BackendId {
        BackendId::GPU
    }

    fn name(&self) -> &str {
        "gpu"
    }

    fn capability(&self) -> &Capability {
        &self.capability
    }

    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError> {
        let uploaded = weights::upload(&self.gpu, "weight", weight)?;
        Ok(ResidentWeight {
            space: GPU_SPACE,
            bytes: uploaded.bytes,
            handle: Arc::new(uploaded),
        })
    }

    fn compile(
        &self,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError> {
        Ok(Box::new(GpuPartition::new(
            self.gpu.clone(),
            self.pools.clone(),
            self.profile.clone(),
            self,
            spec,
            weights,
        )?))
    }

    fn import(&self, host: Tensor) -> Result<Tensor, BackendError> {
        let bytes = host.host_bytes()?;
        if host.space != MemorySpace::HOST {
            return Err(BackendError::Input(
                "the GPU imports host tensors only".into(),
            ));
        }
        let buffer = self.gpu.storage_with("import", bytes.as_bytes());
        Ok(Tensor {
            data: TensorData::Device(DeviceBuffer {
                bytes: bytes.len(),
                handle: Arc::new(GpuBuffer {
                    buffer,
                    staged: None,
                }),
            }),
            space: GPU_SPACE,
            ..host
        })
    }

    fn counters(&self) -> Option<DeviceCounters> {
        Some(self.gpu.tally.snapshot())
    }

    fn op_profile(&self) -> Option<&OpProfile> {
        self.profile.as_deref()
    }

    fn takes_host_inputs(&self) -> bool {
        true
    }

    fn export(&self, tensor: &Tensor) -> Result<Tensor, BackendError> {
        if tensor.space == MemorySpace::HOST {
            // A host input handed to a GPU partition as is (`takes_host_inputs`).
            return Ok(tensor.clone());
        }
        let buffer = self.buffer_of(tensor)?;
        let len = tensor.data.len();
        let bytes = match &buffer.staged {
            Some(staged) => self.gpu.map_read(staged, len)?,
            None => self.gpu.read(&buffer.buffer, 0, len)?,
        };
        Ok(Tensor {
            dtype: tensor.dtype,
            shape: tensor.shape.clone(),
            space: MemorySpace::HOST,
            data: TensorData::Host(bytes),
        })
    }
}
