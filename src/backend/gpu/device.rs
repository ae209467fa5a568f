//! The wgpu device: adapter discovery, the device and queue, cached compute pipelines,
//! and the buffer moves every other part uses (upload, device-to-host readback through
//! a staging buffer). Device errors are captured and returned, never panicked on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use wgpu::util::DeviceExt;

use crate::backend::{AlignedBytes, BackendError, DeviceCounters, RECENT_RUNS};

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
    uncaptured: Arc<Mutex<Option<BackendError>>>,
    /// Set by wgpu's device-lost callback: every error after it is a lost device's.
    lost: Arc<AtomicBool>,
    /// The mappable buffer reads go through, kept and grown, never made per read.
    staging: Mutex<Option<wgpu::Buffer>>,
    /// What this device has done, for [`DeviceCounters`].
    pub tally: Tally,
}

/// The device's running counters; every buffer, bind group, submit, write, read and
/// wait goes through a [`Gpu`] method that counts it.
#[derive(Default)]
pub(super) struct Tally {
    runs: AtomicU64,
    passes: AtomicU64,
    submits: AtomicU64,
    buffers: AtomicU64,
    bind_groups: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
    waits: AtomicU64,
    record_nanos: AtomicU64,
    submit_nanos: AtomicU64,
    ahead_runs: AtomicU64,
    ahead_nanos: AtomicU64,
    per_run: Mutex<PerRun>,
}

/// The counters a run adds under one lock: dispatches by kind and its record time.
#[derive(Default)]
struct PerRun {
    dispatches: BTreeMap<&'static str, u64>,
    recent: VecDeque<u64>,
}

impl Tally {
    /// Counts one partition run: its one compute pass, its dispatches by kind, and the
    /// host time it took to record and to submit.
    pub fn run(&self, dispatches: &[(&'static str, u64)], record_nanos: u64, submit_nanos: u64) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.record_nanos.fetch_add(record_nanos, Ordering::Relaxed);
        self.submit_nanos.fetch_add(submit_nanos, Ordering::Relaxed);
        let mut per_run = self.per_run.lock().unwrap_or_else(PoisonError::into_inner);
        for &(kind, n) in dispatches {
            *per_run.dispatches.entry(kind).or_default() += n;
        }
        if per_run.recent.len() == RECENT_RUNS {
            per_run.recent.pop_front();
        }
        per_run.recent.push_back(record_nanos);
    }

    /// Counts a run's commands as recorded ahead (`used`: the run submitted them) and
    /// the host time a recording ahead took beside a submit.
    pub fn ahead(&self, used: bool, record_nanos: u64) {
        self.ahead_runs
            .fetch_add(u64::from(used), Ordering::Relaxed);
        self.ahead_nanos.fetch_add(record_nanos, Ordering::Relaxed);
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> DeviceCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let per_run = self.per_run.lock().unwrap_or_else(PoisonError::into_inner);
        DeviceCounters {
            runs: get(&self.runs),
            passes: get(&self.passes),
            dispatches: per_run
                .dispatches
                .iter()
                .map(|(k, &n)| (k.to_string(), n))
                .collect(),
            recent_record_nanos: per_run.recent.iter().copied().collect(),
            submits: get(&self.submits),
            buffers_created: get(&self.buffers),
            bind_groups_created: get(&self.bind_groups),
            bytes_written: get(&self.written),
            bytes_read: get(&self.read),
            waits: get(&self.waits),
            record_nanos: get(&self.record_nanos),
            submit_nanos: get(&self.submit_nanos),
            ahead_runs: get(&self.ahead_runs),
            ahead_nanos: get(&self.ahead_nanos),
        }
    }
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
        // Timestamps inside passes time each dispatch for `bench --profile` (timer.rs).
        let wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
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
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            log::error!("GPU lost ({reason:?}): {message}");
            flag.store(true, Ordering::SeqCst);
        });
        let uncaptured = Arc::new(Mutex::new(None));
        let (sink, flag) = (uncaptured.clone(), lost.clone());
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            log::error!("GPU error: {e}");
            *sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(typed(&flag, "GPU", &e));
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            features,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            uncaptured,
            lost,
            staging: Mutex::new(None),
            tally: Tally::default(),
        })
    }

    /// Names of the optional features Switchyard asked for that the device has.
    pub fn feature_names(&self) -> Vec<&'static str> {
        [
            (wgpu::Features::SHADER_F16, "shader-f16"),
            (wgpu::Features::SUBGROUP, "subgroup"),
            (wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES, "timestamps"),
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

    /// Runs `make` inside validation and out-of-memory error scopes; an error becomes
    /// a [`BackendError`] of its kind naming `what`.
    pub fn checked<T>(&self, what: &str, make: impl FnOnce() -> T) -> Result<T, BackendError> {
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let value = make();
        // Scopes pop innermost first; both must be popped.
        let out_of_memory = pollster::block_on(memory.pop());
        let invalid = pollster::block_on(validation.pop());
        match out_of_memory.or(invalid) {
            Some(e) => Err(typed(&self.lost, what, &e)),
            None => Ok(value),
        }
    }

    /// The last error wgpu reported outside any scope (failed submit), or that the
    /// device is lost.
    pub fn take_uncaptured(&self) -> Result<(), BackendError> {
        let error = self
            .uncaptured
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match error {
            Some(e) => Err(e),
            None if self.lost.load(Ordering::SeqCst) => {
                Err(BackendError::Lost("the GPU device is lost".into()))
            }
            None => Ok(()),
        }
    }

    /// A zeroed storage buffer of at least `bytes` (rounded up to 4, never empty).
    pub fn storage(&self, label: &str, bytes: usize) -> wgpu::Buffer {
        Tally::add(&self.tally.buffers, 1);
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
        Tally::add(&self.tally.buffers, 1);
        Tally::add(&self.tally.written, data.len() as u64);
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: &data,
                usage: STORAGE,
            })
    }

    /// A uniform buffer holding `words`.
    pub fn uniform(&self, label: &str, words: &[u32]) -> wgpu::Buffer {
        Tally::add(&self.tally.buffers, 1);
        Tally::add(&self.tally.written, 4 * words.len() as u64);
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(words),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// Copies `bytes` bytes at `offset` of `buffer` back to the host: a copy into the
    /// device's staging buffer (kept between reads, grown when too small), one submit,
    /// a wait for it, and a map whose view is copied once, straight into the host
    /// allocation the caller keeps.
    pub fn read(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        bytes: usize,
    ) -> Result<AlignedBytes, BackendError> {
        let size = padded(bytes);
        let mut staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        if staging.as_ref().is_none_or(|s| s.size() < size) {
            Tally::add(&self.tally.buffers, 1);
            *staging = Some(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: size.next_power_of_two(),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let staging = staging.as_ref().expect("made above");
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, staging, 0, size);
        self.submit(encoder);
        self.map_read(staging, bytes)
    }

    /// Maps the first `bytes` of a `MAP_READ` buffer whose copy has been submitted,
    /// waits for it, and copies them out.
    pub fn map_read(
        &self,
        staging: &wgpu::Buffer,
        bytes: usize,
    ) -> Result<AlignedBytes, BackendError> {
        let size = padded(bytes);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, ..size, move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv()
            .map_err(|_| BackendError::Lost("readback never completed".into()))?
            .map_err(|e| BackendError::Lost(format!("readback map failed: {e}")))?;
        let view = staging
            .get_mapped_range(..size)
            .map_err(|e| BackendError::Bug(format!("readback view: {e}")))?;
        let out = AlignedBytes::copy_from(&view[..bytes]);
        drop(view);
        staging.unmap();
        Tally::add(&self.tally.read, bytes as u64);
        Ok(out)
    }

    /// A buffer the host can map for reading, `bytes` long (padded), made once by the
    /// caller that keeps it.
    pub fn readback(&self, label: &str, bytes: usize) -> wgpu::Buffer {
        Tally::add(&self.tally.buffers, 1);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded(bytes),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// A buffer timestamp queries are resolved into, `bytes` long, made once by the
    /// caller that keeps it.
    pub fn query_resolve_buffer(&self, bytes: usize) -> wgpu::Buffer {
        Tally::add(&self.tally.buffers, 1);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: padded(bytes),
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// A buffer the host writes through a mapping and the device copies from, at least
    /// `bytes` long, made mapped (so the first write needs no wait), by the caller that
    /// keeps it.
    pub fn upload_buffer(&self, label: &str, bytes: usize) -> wgpu::Buffer {
        Tally::add(&self.tally.buffers, 1);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded(bytes),
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        })
    }

    /// Copies `bytes` to the start of `buffer`, which is mapped for writing, and unmaps
    /// it so a submit may read it.
    pub fn write_mapped(&self, buffer: &wgpu::Buffer, bytes: &[u8]) -> Result<(), BackendError> {
        let mut view = buffer
            .get_mapped_range_mut(..padded(bytes.len()))
            .map_err(|e| BackendError::Bug(format!("upload view: {e}")))?;
        view.slice(..bytes.len()).copy_from_slice(bytes);
        drop(view);
        buffer.unmap();
        Tally::add(&self.tally.written, bytes.len() as u64);
        Ok(())
    }

    /// Writes `bytes` at `offset` of `buffer` through the queue (ordered before the
    /// next submit).
    pub fn write(&self, buffer: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        Tally::add(&self.tally.written, bytes.len() as u64);
        self.queue.write_buffer(buffer, offset, bytes);
    }

    /// Submits one encoder's commands.
    pub fn submit(&self, encoder: wgpu::CommandEncoder) {
        self.submit_finished(encoder.finish());
    }

    /// Submits a finished command buffer.
    pub fn submit_finished(&self, commands: wgpu::CommandBuffer) {
        Tally::add(&self.tally.submits, 1);
        self.queue.submit([commands]);
    }

    /// A bind group of `layout` over `entries`.
    pub fn bind_group(
        &self,
        label: &str,
        layout: &wgpu::BindGroupLayout,
        entries: &[wgpu::BindGroupEntry<'_>],
    ) -> wgpu::BindGroup {
        Tally::add(&self.tally.bind_groups, 1);
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout,
            entries,
        })
    }

    /// Blocks until all submitted work is done.
    pub fn wait(&self) -> Result<(), BackendError> {
        Tally::add(&self.tally.waits, 1);
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| BackendError::Lost(format!("waiting for the GPU: {e}")))?;
        self.take_uncaptured()
    }
}

/// wgpu's error as a [`BackendError`] of its kind: any error once the device is
/// `lost` (wgpu then refuses every call as invalid) or an internal one (the driver
/// failed in a way WebGPU does not expect) as a lost device, out of memory as such, a
/// validation error as our bug (we built something the API refuses).
fn typed(lost: &AtomicBool, what: &str, error: &wgpu::Error) -> BackendError {
    if lost.load(Ordering::SeqCst) {
        return BackendError::Lost(format!("{what}: {error}"));
    }
    match error {
        wgpu::Error::OutOfMemory { .. } => BackendError::OutOfMemory(format!("{what}: {error}")),
        wgpu::Error::Validation { .. } => BackendError::Bug(format!("{what}: {error}")),
        wgpu::Error::Internal { .. } => BackendError::Lost(format!("{what}: {error}")),
    }
}

/// `bytes` rounded up to wgpu's copy alignment (4), at least 4.
pub(super) fn padded(bytes: usize) -> u64 {
    (bytes.max(4).next_multiple_of(4)) as u64
}
