//! The CPU backend: runs every op on the host with f32 kernels, multithreaded by a
//! rayon pool the backend owns. It is the fallback every plan can rely on.

mod awake;
#[cfg(target_arch = "x86_64")]
mod bf16_pairs;
mod capability;
mod compile;
mod dispatch;
pub(crate) mod huge_pages;
pub mod isa;
mod kernels;
mod packed;
mod prefetch;
mod quant;
mod simd;
pub mod threads;
mod view;

#[cfg(test)]
mod partition_tests;

pub use kernels::argmax::{argmax, greedy, sanitize};
pub use kernels::{cut, draw, edit};

use std::sync::Arc;

use super::{
    Backend, BackendError, BackendId, Capability, CompiledPartition, HostTensor, MemorySpace,
    OpProfile, PartitionSpec, ResidentWeight, SharedBytes, Tensor, TensorData, WeightProvider,
};

/// The host CPU backend. Weights stay where the loader put them (zero-copy upload)
/// but for small ones (norms, biases), which are copied; the weights of matmuls are
/// also repacked into panels where this CPU has packed kernels.
pub struct CpuBackend {
    capability: Capability,
    pool: Arc<rayon::ThreadPool>,
    /// Whether a partition run holds the pool's keep-awake helper (`awake.rs`).
    awake: Arc<std::sync::atomic::AtomicBool>,
    packs: packed::PackCache,
    profile: Arc<OpProfile>,
}

impl CpuBackend {
    /// A backend running on `threads` worker threads (default: available parallelism);
    /// refuses a `SWITCHYARD_ISA` that names no kernel set or one this CPU lacks.
    pub fn new(threads: Option<usize>) -> Result<CpuBackend, BackendError> {
        isa::dispatch().map_err(BackendError::Isa)?;
        let threads = threads
            .filter(|&t| t > 0)
            .unwrap_or_else(threads::default_threads);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("switchyard-cpu-{i}"))
            .build()
            .map_err(|e| BackendError::OutOfMemory(format!("cannot start CPU thread pool: {e}")))?;
        Ok(CpuBackend {
            capability: capability::detect(threads),
            pool: Arc::new(pool),
            awake: Arc::default(),
            packs: packed::PackCache::default(),
            profile: Arc::default(),
        })
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The raw `[n, k]` weight `w` of `dtype` ready for [`CpuBackend::bench_matmul`]:
    /// packed once, as a compiled partition does, where this CPU packs `dtype`. For
    /// `benches/`; not a stable API.
    #[doc(hidden)]
    pub fn bench_weight<'a>(
        &self,
        (dtype, w, n, k): (crate::graph::DType, &'a [u8], usize, usize),
    ) -> Result<BenchWeight<'a>, BackendError> {
        let packed = packed::pack_uncached(dtype, w, n, k)?;
        let raw = kernels::matmul::Weight {
            dtype,
            bytes: w,
            n,
            k,
        };
        Ok(BenchWeight { raw, packed })
    }

    /// Runs `out [m, n] = x [m, k] · wᵀ` `reps` times inside this backend's pool, as
    /// partitions do, and returns the time taken: the matmul kernel alone, for
    /// `benches/`. Not a stable API.
    #[doc(hidden)]
    pub fn bench_matmul(
        &self,
        reps: u64,
        x: &[f32],
        m: usize,
        w: &BenchWeight<'_>,
        out: &mut [f32],
    ) -> Result<std::time::Duration, BackendError> {
        self.pool.install(|| {
            let start = std::time::Instant::now();
            for _ in 0..reps {
                w.matmul(x, m, out)?;
            }
            Ok(start.elapsed())
        })
    }

    /// As [`Self::bench_matmul`], each repetition on the next of `ws` (round robin) with
    /// the pool's other workers kept awake, as a partition run keeps them: given more
    /// weights than the caches hold, every product streams its weight from memory, as
    /// decode does. Not a stable API.
    #[doc(hidden)]
    pub fn bench_matmul_streaming(
        &self,
        reps: u64,
        x: &[f32],
        m: usize,
        ws: &[BenchWeight<'_>],
        out: &mut [f32],
    ) -> Result<std::time::Duration, BackendError> {
        self.pool.install(|| {
            awake::awake(&self.awake, || {
                let start = std::time::Instant::now();
                for w in ws.iter().cycle().take(reps as usize) {
                    w.matmul(x, m, out)?;
                }
                Ok(start.elapsed())
            })
        })
    }
}

/// A weight prepared by [`CpuBackend::bench_weight`]: its raw bytes and, where this CPU
/// packs its dtype, the packed copy (held, so samples do not repack it).
#[doc(hidden)]
pub struct BenchWeight<'a> {
    raw: kernels::matmul::Weight<'a>,
    packed: Option<std::sync::Arc<packed::PackedWeight>>,
}

impl BenchWeight<'_> {
    /// `out [m, n] = x [m, k] · wᵀ` by the packed kernel where there is a packed copy,
    /// else the plain one, as a partition would run it.
    fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) -> Result<(), BackendError> {
        match &self.packed {
            Some(p) => packed::matmul(x, m, p, out),
            None => kernels::matmul::matmul(x, m, self.raw, out),
        }
    }
}

/// Weights up to this size are copied out of the model file when uploaded.
const SMALL_WEIGHT_COPY: usize = 256 << 10;

impl Backend for CpuBackend {
    fn id(&self) -> BackendId {
        BackendId::CPU
    }

    fn name(&self) -> &str {
        "cpu"
    }

    fn capability(&self) -> &Capability {
        &self.capability
    }

    fn upload(&self, weight: &HostTensor) -> Result<ResidentWeight, BackendError> {
        let bytes = weight.data.as_bytes();
        // A matrix of a packed type is read once, by the packer, which gives its pages
        // back as it goes: a copy would only sit beside the packed form (19 MB of the
        // default model's q, k, v and o projections, 13 % of its weights and cache).
        let packed_later = weight.shape.dims().len() == 2 && packed::packs(weight.dtype);
        let (handle, copied) =
            if bytes.len() <= SMALL_WEIGHT_COPY && weight.data.is_file_map() && !packed_later {
                // Norms and biases are read every step: from the file map, each would keep
                // the 2 MiB huge page around it mapped, packed neighbours included
                // (measured: 75 MiB of a 135M BF16 file PMD-mapped after packing).
                let data = SharedBytes::from_vec(bytes.to_vec());
                weight.data.release_pages();
                let copy = HostTensor::new(weight.dtype, weight.shape.clone(), data)?;
                (copy, bytes.len())
            } else {
                (weight.clone(), 0)
            };
        Ok(ResidentWeight {
            space: MemorySpace::HOST,
            bytes: copied,
            handle: Arc::new(handle),
        })
    }

    fn compile(
        &self,
        spec: &PartitionSpec<'_>,
        weights: &dyn WeightProvider,
    ) -> Result<Box<dyn CompiledPartition>, BackendError> {
        let partition = compile::CpuPartition::new(
            self,
            spec,
            weights,
            &self.packs,
            self.pool.clone(),
            self.awake.clone(),
            self.profile.clone(),
        )?;
        Ok(Box::new(partition))
    }

    fn import(&self, host: Tensor) -> Result<Tensor, BackendError> {
        check_host(&host)?;
        Ok(host)
    }

    fn export(&self, tensor: &Tensor) -> Result<Tensor, BackendError> {
        check_host(tensor)?;
        Ok(tensor.clone())
    }

    fn op_profile(&self) -> Option<&OpProfile> {
        Some(&self.profile)
    }
}

/// An input error unless `tensor` lives in host memory.
fn check_host(tensor: &Tensor) -> Result<(), BackendError> {
    if tensor.space != MemorySpace::HOST || !matches!(tensor.data, TensorData::Host(_)) {
        return Err(BackendError::Input(format!(
            "tensor in memory space {:?} is not host memory",
            tensor.space
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SharedBytes;
    use crate::graph::{DType, Shape};

    #[test]
    fn identity_and_upload() {
        let cpu = CpuBackend::new(Some(2)).unwrap();
        assert_eq!(cpu.id(), BackendId::CPU);
        assert_eq!(cpu.name(), "cpu");
        assert_eq!(cpu.threads(), 2);
        let t = Tensor::from_f32([2], &[1.0, 2.0]).unwrap();
        assert_eq!(cpu.export(&cpu.import(t.clone()).unwrap()).unwrap(), t);
        let foreign = Tensor {
            space: MemorySpace(7),
            ..t
        };
        assert!(matches!(cpu.import(foreign), Err(BackendError::Input(_))));
        let w = HostTensor::new(
            DType::F32,
            Shape::new([1]),
            SharedBytes::from_vec(vec![0; 4]),
        );
        let resident = cpu.upload(&w.unwrap()).unwrap();
        assert_eq!(resident.bytes, 0);
        assert!(resident.handle.downcast_ref::<HostTensor>().is_some());
    }
}
