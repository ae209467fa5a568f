//! Data that crosses the backend boundary: activation tensors produced and consumed by
//! partitions, host-side weights (possibly memory-mapped), and weights made resident in
//! a backend's memory space.

use std::any::Any;
use std::sync::{Arc, PoisonError};

use half::{bf16, f16};

use super::{BackendError, MemorySpace};
use crate::graph::{DType, Shape};

/// 64 bytes on a 64-byte boundary, the unit [`AlignedBytes`] allocates in.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
struct Line([u8; 64]);

/// Owned bytes on a 64-byte boundary, so they can be viewed as `f32`, `i32`, `f16` or
/// `bf16`, and so that no 512-bit access splits a cache line and threads writing
/// disjoint 64-byte-multiple ranges of one buffer share no line.
///
/// Allocations of [`SPARE_MIN_LINES`] lines or more are handed back to a few spares
/// when dropped and reused by the next allocation of the same size (see [`Spares`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

/// Lines (1 MiB) from which a dropped allocation is kept as a spare.
const SPARE_MIN_LINES: usize = (1 << 20) / 64;

/// How many spares are kept; the oldest goes when another arrives.
const SPARES: usize = 4;

/// Recently dropped large allocations, kept for reuse. *Why:* a batched GPU step reads
/// its logits back into a fresh host buffer every step (16 MiB for 32 sequences of a
/// 128k vocabulary); glibc serves such sizes with a new `mmap` each time, and faulting
/// its pages in cost as much as the GPU's whole step (decision 101).
struct Spares(std::sync::Mutex<Vec<Vec<Line>>>);

static SPARE_LINES: Spares = Spares(std::sync::Mutex::new(Vec::new()));

impl Spares {
    /// An empty vector with room for exactly `lines` lines: a spare of that capacity
    /// when one is kept, else a new allocation.
    fn take(&self, lines: usize) -> Vec<Line> {
        if lines >= SPARE_MIN_LINES {
            let mut spares = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(i) = spares.iter().position(|v| v.capacity() == lines) {
                let mut spare = spares.swap_remove(i);
                spare.clear();
                return spare;
            }
        }
        Vec::with_capacity(lines)
    }

    /// Keeps `lines` as a spare when it is large enough to be worth reusing.
    fn give(&self, lines: Vec<Line>) {
        if lines.capacity() >= SPARE_MIN_LINES {
            let mut spares = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if spares.len() == SPARES {
                spares.remove(0);
            }
            spares.push(lines);
        }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        SPARE_LINES.give(std::mem::take(&mut self.lines));
    }
}

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBytes {
        let mut lines = SPARE_LINES.take(len.div_ceil(64));
        lines.resize(len.div_ceil(64), Line([0; 64]));
        AlignedBytes { lines, len }
    }

    /// A copy of `bytes`, written once (no zero fill first: a readback of a batch's
    /// logits is megabytes a step).
    pub fn copy_from(bytes: &[u8]) -> AlignedBytes {
        let chunks = bytes.chunks_exact(64);
        let rest = chunks.remainder();
        let mut lines = SPARE_LINES.take(bytes.len().div_ceil(64));
        lines.extend(chunks.map(|chunk| {
            let mut line = Line([0; 64]);
            line.0.copy_from_slice(chunk);
            line
        }));
        if !rest.is_empty() {
            let mut line = Line([0; 64]);
            line.0[..rest.len()].copy_from_slice(rest);
            lines.push(line);
        }
        AlignedBytes {
            lines,
            len: bytes.len(),
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes viewed as elements of `T` (length must be a multiple of its size).
    pub fn view<T: bytemuck::Pod>(&self) -> &[T] {
        bytemuck::cast_slice(self.as_bytes())
    }

    /// The bytes viewed mutably as elements of `T`.
    pub fn view_mut<T: bytemuck::Pod>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.as_bytes_mut())
    }
}

/// A buffer in a device's memory space. Only the backend that made it knows the
/// concrete type inside; the executor just carries it between partitions.
#[derive(Clone)]
pub struct DeviceBuffer {
    /// Bytes of the value (the allocation may be larger).
    pub bytes: usize,
    /// The backend-specific buffer.
    pub handle: Arc<dyn Any + Send + Sync>,
}

impl PartialEq for DeviceBuffer {
    fn eq(&self, other: &DeviceBuffer) -> bool {
        self.bytes == other.bytes && Arc::ptr_eq(&self.handle, &other.handle)
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({} bytes)", self.bytes)
    }
}

/// Where a tensor's elements are: host bytes, or a buffer only its device can read.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// Host memory (the CPU's and the `sim` backend's spaces).
    Host(AlignedBytes),
    /// A device buffer (the GPU's space); [`Backend::export`](super::Backend::export) reads it back.
    Device(DeviceBuffer),
}

impl TensorData {
    /// Byte length of the value.
    pub fn len(&self) -> usize {
        match self {
            TensorData::Host(bytes) => bytes.len(),
            TensorData::Device(buffer) => buffer.bytes,
        }
    }

    /// Whether the value has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A dense activation value in some memory space.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Element type (never a block format).
    pub dtype: DType,
    /// Dimensions, row-major.
    pub shape: Shape,
    /// Which memory space holds `data`.
    pub space: MemorySpace,
    /// The elements.
    pub data: TensorData,
}

impl Tensor {
    /// A host tensor of `f32` values.
    pub fn from_f32(shape: impl Into<Shape>, values: &[f32]) -> Result<Tensor, BackendError> {
        Tensor::from_pod(DType::F32, shape.into(), values)
    }

    /// A host tensor of `i32` values.
    pub fn from_i32(shape: impl Into<Shape>, values: &[i32]) -> Result<Tensor, BackendError> {
        Tensor::from_pod(DType::I32, shape.into(), values)
    }

    /// A zero-filled host tensor.
    pub fn zeros(dtype: DType, shape: impl Into<Shape>) -> Result<Tensor, BackendError> {
        let shape = shape.into();
        let len = plain_bytes(dtype, &shape)?;
        Ok(Tensor {
            dtype,
            shape,
            space: MemorySpace::HOST,
            data: TensorData::Host(AlignedBytes::zeroed(len)),
        })
    }

    fn from_pod<T: bytemuck::Pod>(
        dtype: DType,
        shape: Shape,
        values: &[T],
    ) -> Result<Tensor, BackendError> {
        if shape.checked_numel() != Some(values.len()) {
            return Err(BackendError::Input(format!(
                "{} values do not fill shape {shape}",
                values.len()
            )));
        }
        Ok(Tensor {
            dtype,
            shape,
            space: MemorySpace::HOST,
            data: TensorData::Host(AlignedBytes::copy_from(bytemuck::cast_slice(values))),
        })
    }

    /// The host bytes, or an error when the tensor lives on a device.
    pub fn host_bytes(&self) -> Result<&AlignedBytes, BackendError> {
        match &self.data {
            TensorData::Host(bytes) => Ok(bytes),
            TensorData::Device(_) => Err(BackendError::Input(format!(
                "a {} {} tensor is in device space {:?}; export it to the host first",
                self.dtype, self.shape, self.space
            ))),
        }
    }

    /// The values as `f32`, converting from f16/bf16/i32 (host tensors only).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, BackendError> {
        let data = self.host_bytes()?;
        Ok(match self.dtype {
            DType::F32 => data.view::<f32>().to_vec(),
            DType::F16 => data.view::<f16>().iter().map(|v| v.to_f32()).collect(),
            DType::BF16 => data.view::<bf16>().iter().map(|v| v.to_f32()).collect(),
            DType::I32 => data.view::<i32>().iter().map(|&v| v as f32).collect(),
            other => {
                return Err(BackendError::Input(format!(
                    "activations are never block formats ({other})"
                )))
            }
        })
    }

    /// This tensor converted to `dtype` (host-side; used by transfers and casts).
    pub fn converted(&self, dtype: DType) -> Result<Tensor, BackendError> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        let len = plain_bytes(dtype, &self.shape)?;
        let mut data = AlignedBytes::zeroed(len);
        let values = self.to_f32_vec()?;
        match dtype {
            DType::F32 => data.view_mut::<f32>().copy_from_slice(&values),
            DType::F16 => data
                .view_mut::<f16>()
                .iter_mut()
                .zip(&values)
                .for_each(|(o, &v)| *o = f16::from_f32(v)),
            DType::BF16 => data
                .view_mut::<bf16>()
                .iter_mut()
                .zip(&values)
                .for_each(|(o, &v)| *o = bf16::from_f32(v)),
            DType::I32 => data
                .view_mut::<i32>()
                .iter_mut()
                .zip(&values)
                .for_each(|(o, &v)| *o = v as i32),
            _ => unreachable!("plain_bytes rejects block formats"),
        }
        Ok(Tensor {
            dtype,
            shape: self.shape.clone(),
            space: self.space,
            data: TensorData::Host(data),
        })
    }
}

/// Byte size of a dense activation of `dtype` and `shape`.
pub fn plain_bytes(dtype: DType, shape: &Shape) -> Result<usize, BackendError> {
    if dtype.is_quantized() {
        return Err(BackendError::Input(format!(
            "activations cannot be {dtype}; block formats are for weights"
        )));
    }
    shape
        .checked_numel()
        .and_then(|n| dtype.bytes_for(n))
        .ok_or_else(|| BackendError::Input(format!("shape {shape} is too large")))
}

/// What owns the bytes behind [`SharedBytes`]: a vector, or a read-only file map that
/// can give pages back to the operating system.
pub trait ByteOwner: AsRef<[u8]> + Send + Sync {
    /// Drops the resident pages of `range` where that loses nothing (a read-only file
    /// map re-reads them on the next access); a no-op for memory that owns its bytes.
    fn release(&self, range: std::ops::Range<usize>) {
        let _ = range;
    }

    /// Whether the bytes are a file map, whose pages a read maps in (and
    /// [`Self::release`] gives back).
    fn is_file_map(&self) -> bool {
        false
    }

    /// Copies the bytes from `offset` into `buf` without mapping them into this process
    /// where the owner can (a file map reads its file, `pread`), returning whether it
    /// did; `false` leaves `buf` to be filled from [`AsRef::as_ref`].
    fn copy_unmapped(&self, offset: usize, buf: &mut [u8]) -> bool {
        let _ = (offset, buf);
        false
    }
}

impl ByteOwner for Vec<u8> {}

/// Bytes owned by something else (a memory map, a vector), shared by `Arc`.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn ByteOwner>,
    start: usize,
    len: usize,
}

impl SharedBytes {
    /// The range `start..start + len` of `owner`, or `None` when it is out of bounds.
    pub fn new(owner: Arc<dyn ByteOwner>, start: usize, len: usize) -> Option<SharedBytes> {
        let end = start.checked_add(len)?;
        ((*owner).as_ref().len() >= end).then_some(SharedBytes { owner, start, len })
    }

    /// Wraps an owned vector.
    pub fn from_vec(bytes: Vec<u8>) -> SharedBytes {
        let len = bytes.len();
        SharedBytes {
            owner: Arc::new(bytes),
            start: 0,
            len,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }

    /// Gives the resident pages of these bytes back to the operating system when they
    /// can be re-read for free (a file map), e.g. once a repacked copy replaces them for
    /// the hot path. The bytes stay readable.
    pub fn release_pages(&self) {
        self.owner.release(self.start..self.start + self.len);
    }

    /// Whether these bytes are read from a file map ([`ByteOwner::is_file_map`]).
    pub fn is_file_map(&self) -> bool {
        self.owner.is_file_map()
    }

    /// Copies the bytes `range` of these into `buf`: from the file where they are a file
    /// map, so a lookup of a few rows of a large table maps none of its pages (they
    /// would stay resident, or cost a fault and a TLB shootdown on every lookup to give
    /// back: decision 205); from memory otherwise. Returns `false`, copying nothing,
    /// where the range is not within these or `buf` is not its length.
    pub fn copy_range(&self, range: std::ops::Range<usize>, buf: &mut [u8]) -> bool {
        let Some(bytes) = self.as_bytes().get(range.clone()) else {
            return false;
        };
        if buf.len() != bytes.len() {
            return false;
        }
        if !self.owner.copy_unmapped(self.start + range.start, buf) {
            buf.copy_from_slice(bytes);
        }
        true
    }

    /// [`Self::release_pages`] for the bytes `range` of these (clipped to them).
    pub fn release_range(&self, range: std::ops::Range<usize>) {
        let end = range.end.min(self.len);
        if range.start < end {
            self.owner
                .release(self.start + range.start..self.start + end);
        }
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

/// A weight as stored in the model file: any dtype, block formats included.
#[derive(Clone, Debug)]
pub struct HostTensor {
    /// Element or block type.
    pub dtype: DType,
    /// Logical dimensions (elements, not blocks).
    pub shape: Shape,
    /// The raw bytes, in GGUF block layout for block formats.
    pub data: SharedBytes,
}

impl HostTensor {
    /// Checks that `data` holds exactly `shape` in `dtype`.
    pub fn new(dtype: DType, shape: Shape, data: SharedBytes) -> Result<HostTensor, BackendError> {
        let want = shape
            .checked_numel()
            .filter(|_| dtype.bytes_for(shape.last()).is_some())
            .and_then(|n| dtype.bytes_for(n));
        if want != Some(data.as_bytes().len()) {
            return Err(BackendError::Input(format!(
                "{} bytes do not hold a {dtype} tensor of shape {shape}",
                data.as_bytes().len()
            )));
        }
        Ok(HostTensor { dtype, shape, data })
    }
}

/// A weight made resident in one backend's memory space. The backend that made it
/// knows the concrete type inside; everyone else only shares the `Arc`.
#[derive(Clone)]
pub struct ResidentWeight {
    /// Where it lives.
    pub space: MemorySpace,
    /// Bytes it occupies there (0 when it aliases the host copy).
    pub bytes: usize,
    /// The backend-specific handle.
    pub handle: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for ResidentWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResidentWeight({:?}, {} bytes)", self.space, self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_are_taken_by_exact_size_and_the_oldest_is_evicted() {
        let spares = Spares(std::sync::Mutex::new(Vec::new()));
        spares.give(Vec::with_capacity(SPARE_MIN_LINES - 1));
        assert!(lock_len(&spares) == 0, "small allocations are not kept");
        let sizes: Vec<usize> = (0..=SPARES).map(|i| SPARE_MIN_LINES + i).collect();
        let at: Vec<*const Line> = sizes
            .iter()
            .map(|&n| {
                let v = Vec::with_capacity(n);
                let p = v.as_ptr();
                spares.give(v);
                p
            })
            .collect();
        assert_eq!(lock_len(&spares), SPARES);
        let kept = |n: usize| spares.0.lock().unwrap().iter().any(|v| v.capacity() == n);
        assert!(!kept(sizes[0]), "the oldest was evicted");
        assert!(sizes[1..].iter().all(|&n| kept(n)));
        let newest = spares.take(sizes[SPARES]);
        assert_eq!((newest.as_ptr(), newest.len()), (at[SPARES], 0));
        assert_eq!(newest.capacity(), sizes[SPARES]);
    }

    fn lock_len(spares: &Spares) -> usize {
        spares.0.lock().unwrap().len()
    }

    #[test]
    fn a_dropped_large_allocation_is_reused_overwritten_or_zeroed() {
        // A size no other test allocates, so no other thread takes this spare; the
        // pattern is made first so the drop and the reuse follow each other at once.
        let len = (1 << 20) + 64 * 7 + 5;
        let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let fresh = AlignedBytes::copy_from(&pattern);
        let mut first = AlignedBytes::zeroed(len);
        first.as_bytes_mut().fill(0xab);
        let at = first.as_bytes().as_ptr();
        drop(first);
        let copy = AlignedBytes::copy_from(&pattern);
        assert_eq!(copy.as_bytes().as_ptr(), at, "the spare was not reused");
        assert_eq!(copy.as_bytes(), &pattern[..]);
        assert_eq!(
            copy, fresh,
            "the spare's old bytes past the length are zeroed"
        );
        drop(copy);
        let zeroed = AlignedBytes::zeroed(len);
        assert_eq!(zeroed.as_bytes().as_ptr(), at, "the spare was not reused");
        assert!(zeroed.as_bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn aligned_bytes_start_on_a_cache_line_and_keep_their_length() {
        for len in [0, 1, 63, 64, 65, 4 * 576, 196_608] {
            let mut bytes = AlignedBytes::zeroed(len);
            assert_eq!(bytes.len(), len);
            assert!(bytes.as_bytes().iter().all(|&b| b == 0));
            if len > 0 {
                assert_eq!(bytes.as_bytes().as_ptr() as usize % 64, 0, "{len} bytes");
                for (i, b) in bytes.as_bytes_mut().iter_mut().enumerate() {
                    *b = (i * 31 + 7) as u8;
                }
                let copy = AlignedBytes::copy_from(bytes.as_bytes());
                assert_eq!(copy.as_bytes(), bytes.as_bytes(), "{len} bytes");
                assert_eq!(copy, bytes, "{len} bytes: the padding is zero as well");
            }
        }
    }
}
