//! Read-only memory maps of model files: the only place this crate calls `mmap`.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::{Mmap, UncheckedAdvice};

use super::ModelError;
use crate::backend::{ByteOwner, HostTensor, SharedBytes};

/// A read-only map of a model file.
#[derive(Debug)]
pub(crate) struct MappedFile(Mmap);

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
    Ok(Arc::new(MappedFile(map)))
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
