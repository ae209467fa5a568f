//! Read-only memory maps of model files: the only place this crate calls `mmap`.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use super::ModelError;
use crate::backend::{HostTensor, SharedBytes};
use crate::graph::{DType, Shape};

/// Maps `path` read-only. Tensors handed out later borrow the map through the `Arc`,
/// so it stays alive as long as any weight does.
pub(crate) fn map_file(path: &Path) -> Result<Arc<Mmap>, ModelError> {
    let file = File::open(path).map_err(|e| ModelError::io(path, e))?;
    // SAFETY: `Mmap::map` is unsafe because the map aliases the file: if another process
    // truncates or rewrites the file while it is mapped, reads through the map may fault
    // or see bytes change under us. Model files are treated as immutable inputs; the
    // user must not modify a model file while Switchyard has it open. We only ever read
    // through the map, and all offsets are bounds-checked against its length.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
    Ok(Arc::new(map))
}

/// Tensor `name` of `path`: `size` bytes at `start` of `map`, shared without a copy.
/// A range outside the map or bytes that do not hold `dtype` × `shape` is a format error
/// naming the file and the tensor.
pub(crate) fn mapped_tensor(
    path: &Path,
    map: &Arc<Mmap>,
    name: &str,
    (start, size): (usize, usize),
    dtype: DType,
    shape: &Shape,
) -> Result<HostTensor, ModelError> {
    let bad = |detail: String| ModelError::format(path, format!("tensor {name:?}: {detail}"));
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = map.clone();
    let data = SharedBytes::new(owner, start, size).ok_or_else(|| bad("out of bounds".into()))?;
    HostTensor::new(dtype, shape.clone(), data).map_err(|e| bad(e.to_string()))
}
