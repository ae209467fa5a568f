//! Read-only memory maps of model files: the only place this crate calls `mmap`.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::{Mmap, UncheckedAdvice};

use super::ModelError;
use crate::backend::{ByteOwner, HostTensor, SharedBytes};

/// A read-only map of a model file, and the file (read directly where a few bytes of a
/// large tensor are wanted without mapping their pages: [`ByteOwner::copy_unmapped`]).
#[derive(Debug)]
pub(crate) struct MappedFile(Mmap, File);

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl ByteOwner for MappedFile {
    fn release(&self, range: std::ops::Range<usize>) {
        // SAFETY: `MADV_DONTNEED` on a private, read-only file map only drops this
        // process's copies of clean pages; the next read faults them back in from the
        // file, so every byte keeps its value (the hazard memmap2 guards against is
        // anonymous or written memory, whose contents it would zero).
        let advised = unsafe {
            self.0
                .unchecked_advise_range(UncheckedAdvice::DontNeed, range.start, range.len())
        };
        if let Err(e) = advised {
            log::debug!("releasing {} mapped bytes: {e}", range.len());
        }
    }

    fn is_file_map(&self) -> bool {
        true
    }

    fn copy_unmapped(&self, offset: usize, buf: &mut [u8]) -> bool {
        use std::os::unix::fs::FileExt;
        match self.1.read_exact_at(buf, offset as u64) {
            Ok(()) => true,
            Err(e) => {
                log::debug!("reading {} bytes of the model file: {e}", buf.len());
                false
            }
        }
    }
}
use crate::graph::{DType, Shape};

/// Maps `path` read-only. Tensors handed out later borrow the map through the `Arc`,
/// so it stays alive as long as any weight does.
pub(crate) fn map_file(path: &Path) -> Result<Arc<MappedFile>, ModelError> {
    let file = File::open(path).map_err(|e| ModelError::io(path, e))?;
    // SAFETY: `Mmap::map` is unsafe because the map aliases the file: if another process
    // truncates or rewrites the file while it is mapped, reads through the map may fault
    // or see bytes change under us. Model files are treated as immutable inputs; the
    // user must not modify a model file while Switchyard has it open. We only ever read
    // through the map, and all offsets are bounds-checked against its length.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
    Ok(Arc::new(MappedFile(map, file)))
}

/// Tensor `name` of `path`: `size` bytes at `start` of `map`, shared without a copy.
/// A range outside the map or bytes that do not hold `dtype` × `shape` is a format error
/// naming the file and the tensor.
pub(crate) fn mapped_tensor(
    path: &Path,
    map: &Arc<MappedFile>,
    name: &str,
    (start, size): (usize, usize),
    dtype: DType,
    shape: &Shape,
) -> Result<HostTensor, ModelError> {
    let bad = |detail: String| ModelError::format(path, format!("tensor {name:?}: {detail}"));
    let owner: Arc<dyn ByteOwner> = map.clone();
    let data = SharedBytes::new(owner, start, size).ok_or_else(|| bad("out of bounds".into()))?;
    HostTensor::new(dtype, shape.clone(), data).map_err(|e| bad(e.to_string()))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Write;

    use super::*;

    /// Minor page faults of the calling thread so far (`/proc/thread-self/stat`).
    fn faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
        let fields: Vec<&str> = stat.rsplit_once(") ").expect("comm").1.split(' ').collect();
        // Field 10 of the whole line (minflt) is the 8th after the command's ")".
        fields[7].parse().expect("minflt")
    }

    /// Byte `i` of the test file.
    fn byte(i: usize) -> u8 {
        (i.wrapping_mul(2654435761) >> 13) as u8
    }

    /// Bytes copied from a file map come from the file: the map's values, with none of
    /// its pages faulted in, where reading the same rows through the map faults many.
    #[test]
    fn copies_from_a_file_map_fault_in_none_of_its_pages() {
        let len = 16 << 20;
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        let bytes: Vec<u8> = (0..len).map(byte).collect();
        file.write_all(&bytes).expect("write");
        file.flush().expect("flush");
        let map = map_file(file.path()).expect("map");
        let shared = SharedBytes::new(map.clone(), 0, len).expect("whole file");
        let (rows, row) = (128, 612);
        let starts: Vec<usize> = (0..rows).map(|r| r * (len / rows) + 100).collect();
        let mut buf = vec![0u8; row];
        let before = faults();
        for &s in &starts {
            assert!(shared.copy_range(s..s + row, &mut buf));
            assert!(
                buf.iter().enumerate().all(|(i, &b)| b == byte(s + i)),
                "row at {s}"
            );
        }
        let copied = faults() - before;
        assert!(copied <= 2, "{copied} page faults copying {rows} rows");
        let before = faults();
        let sum: u64 = starts.iter().map(|&s| shared.as_bytes()[s] as u64).sum();
        let mapped = faults() - before;
        assert!(
            mapped >= 8,
            "{mapped} faults reading through the map (sum {sum})"
        );
        assert!(!shared.copy_range(len - 1..len + 1, &mut buf[..2]));
    }
}
