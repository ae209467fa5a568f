//! The wgpu device: adapter discovery, the device and queue, cached compute pipelines,
//! and the buffer moves every other part uses (upload, device-to-host readback through
//! a staging buffer). Device errors are captured and returned, never panicked on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use wgpu::util::DeviceExt;

use crate::backend::{AlignedBytes, BackendError};

/// Why no GPU backend could be opened.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// wgpu found no adapter at all (no Vulkan/Metal/DX12 driver).
    #[error("no GPU adapter found (on Linux install a Vulkan driver; for a software one, Mesa's lavapipe: mesa-vulkan-drivers)")]
    NoAdapter,
    /// The only adapter is a software rasteriser and software was not allowed.
    #[error(
        "only a software adapter ({0}) is available; ask for it explicitly with --backends cpu,gpu"
    )]
    SoftwareOnly(String),
    /// The adapter refused to open a device.
    #[error("adapter {adapter} refused a device: {detail}")]
    Device {
        /// The adapter's name.
        adapter: String,
        /// wgpu's message.
        detail: String,
    },
}

/// An opened adapter: the device, its queue, what it reported, and the pipelines
/// compiled so far (shared by every partition, keyed by kernel name).
pub(super) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub features: wgpu::Features,
    pub limits: wgpu::Limits,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    uncaptured: Arc<Mutex<Option<String>>>,
}

/// Usage of every activation buffer: bound as storage, copied in and out.
pub(super) const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    /// Opens the preferred adapter: the first hardware one, else (when
    /// `allow_software`) a software one such as lavapipe.
    pub fn open(allow_software: bool) -> Result<Gpu, GpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let software = |a: &wgpu::Adapter| a.get_info().device_type == wgpu::DeviceType::Cpu;
        let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        let mut candidates: Vec<wgpu::Adapter> = adapters
            .into_iter()
            .filter(|a| {
                a.get_downlevel_capabilities()
                    .flags
                    .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
            })
            .collect();
        candidates.sort_by_key(rank);
        let adapter = match candidates.into_iter().next() {
            None => return Err(GpuError::NoAdapter),
            Some(a) if software(&a) && !allow_software => {
                return Err(GpuError::SoftwareOnly(a.get_info().name))
            }
            Some(a) => a,
        };
        let info = adapter.get_info();
        let wanted = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        let features = adapter.features() & wanted;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("switchyard"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::Device {
            adapter: info.name.clone(),
            detail: e.to_string(),
        })?;
        let uncaptured = Arc::new(Mutex::new(None));
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            log::error!("GPU error: {e}");
            *sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            features,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            uncaptured,
        })
    }

    /// Names of the optional features Switchyard asked for that the device has.
    pub fn feature_names(&self) -> Vec<&'static str> {
        [
            (wgpu::Features::SHADER_F16, "shader-f16"),
            (wgpu::Features::SUBGROUP, "subgroup"),
        ]
        .into_iter()
        .filter(|(f, _)| self.features.contains(*f))
        .map(|(_, name)| name)
        .collect()
    }

    /// The pipeline for `name` built from `source`, compiled on first use.
    pub fn pipeline(
        &self,
        name: &str,
        source: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>, BackendError> {
        let mut cache = self
            .pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = cache.get(name) {
            return Ok(p.clone());
        }
        let pipeline = self.checked(name, || {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(name),
                    source: wgpu::ShaderSource::Wgsl(source.into()),
                });
            self.device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(name),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                })
        })?;
        let pipeline = Arc::new(pipeline);
        cache.insert(name.to_string(), pipeline.clone());
        Ok(pipeline)
    }

    /// Runs `make` inside a validation error scope; a validation error becomes a
    /// [`BackendError::Device`] naming `what`.
    pub fn checked<T>(&self, what: &str, make: impl FnOnce() -> T) -> Result<T, BackendError> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = make();
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(BackendError::Device(format!("{what}: {e}"))),
            None => Ok(value),
        }
    }

    /// The last error wgpu reported outside any scope (lost device, failed submit).
    pub fn take_uncaptured(&self) -> Result<(), BackendError> {
        match self
            .uncaptured
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(e) => Err(BackendError::Device(e)),
            None => Ok(()),
        }
    }

    /// A zeroed storage buffer of at least `bytes` (rounded up to 4, never empty).
    pub fn storage(&self, label: &str, bytes: usize) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded(bytes),
            usage: STORAGE,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer holding `bytes` (padded with zeros to a multiple of 4).
    pub fn storage_with(&self, label: &str, bytes: &[u8]) -> wgpu::Buffer {
        let mut data = bytes.to_vec();
        data.resize(padded(bytes.len()) as usize, 0);
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: &data,
                usage: STORAGE,
            })
    }

    /// A uniform buffer holding `words`.
    pub fn uniform(&self, label: &str, words: &[u32]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(words),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// Copies `bytes` bytes at `offset` of `buffer` back to the host: a copy into a
    /// mappable staging buffer, one submit, a wait for it, and a map whose view is
    /// copied once, straight into the host allocation the caller keeps.
    pub fn read(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        bytes: usize,
    ) -> Result<AlignedBytes, BackendError> {
        let size = padded(bytes);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv()
            .map_err(|_| BackendError::Device("readback never completed".into()))?
            .map_err(|e| BackendError::Device(format!("readback map failed: {e}")))?;
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| BackendError::Device(format!("readback view: {e}")))?;
        let out = AlignedBytes::copy_from(&view[..bytes]);
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Blocks until all submitted work is done.
    pub fn wait(&self) -> Result<(), BackendError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| BackendError::Device(format!("waiting for the GPU: {e}")))?;
        self.take_uncaptured()
    }
}

/// `bytes` rounded up to wgpu's copy alignment (4), at least 4.
pub(super) fn padded(bytes: usize) -> u64 {
    (bytes.max(4).next_multiple_of(4)) as u64
}
