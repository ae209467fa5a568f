//! A small GGUF v3 writer, for tests and tools that build random-weight models.

use std::path::Path;

use super::ggml_type::ggml_from_dtype;
use super::value::{write_string, write_value, Value};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use crate::backend::HostTensor;
use crate::model::ModelError;

/// Writes a GGUF v3 file holding `metadata` and `tensors` (names with their data, in
/// our outermost-first shape order). Tensor data is aligned to `general.alignment`
/// when `metadata` sets it (it must then be a power of two), else to 32 bytes.
/// The whole file is built in memory, so this suits test-sized models.
pub fn write_gguf(
    path: impl AsRef<Path>,
    metadata: &[(&str, Value)],
    tensors: &[(&str, &HostTensor)],
) -> Result<(), ModelError> {
    let path = path.as_ref();
    let alignment = match metadata.iter().find(|(k, _)| *k == ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => v
            .as_integer()
            .and_then(|a| usize::try_from(a).ok())
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| ModelError::unsupported(path, format!("{ALIGNMENT_KEY} {v:?}")))?,
    };
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        write_string(&mut out, key);
        write_value(&mut out, value);
    }
    let mut offset = 0usize;
    for (name, t) in tensors {
        let type_id = ggml_from_dtype(t.dtype).ok_or_else(|| {
            ModelError::unsupported(
                path,
                format!("tensor {name:?}: GGUF cannot hold {}", t.dtype),
            )
        })?;
        write_string(&mut out, name);
        out.extend_from_slice(&(t.shape.rank() as u32).to_le_bytes());
        for &d in t.shape.dims().iter().rev() {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        out.extend_from_slice(&type_id.to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        offset = (offset + t.data.as_bytes().len()).next_multiple_of(alignment);
    }
    for (_, t) in tensors {
        out.resize(out.len().next_multiple_of(alignment), 0);
        out.extend_from_slice(t.data.as_bytes());
    }
    std::fs::write(path, out).map_err(|e| ModelError::io(path, e))
}
