//! One `.safetensors` file: a little-endian `u64` header length, a JSON header naming
//! each tensor's dtype, shape and byte range, then the data. Read through a memory map.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::backend::HostTensor;
use crate::graph::{DType, Shape, MAX_RANK};
use crate::model::mapped::{map_file, mapped_tensor, MappedFile};
use crate::model::ModelError;

/// Largest JSON header we accept, in bytes.
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

/// Header key holding free-form string metadata, which we ignore.
const METADATA_KEY: &str = "__metadata__";

/// Where one tensor lives in a safetensors file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMeta {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Shape,
    /// Byte offset from the start of the data (after the header).
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// A header entry as written in the JSON.
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// A parsed safetensors file; tensors borrow its memory map.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    map: Arc<MappedFile>,
    data_start: usize,
    tensors: BTreeMap<String, TensorMeta>,
}

impl SafetensorsFile {
    /// Maps and parses `path`, checking every tensor's range against the file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile, ModelError> {
        let path = path.as_ref();
        let bad = |detail: String| ModelError::format(path, detail);
        let file_len = std::fs::metadata(path)
            .map_err(|e| ModelError::io(path, e))?
            .len();
        if file_len < 8 {
            return Err(bad(format!("truncated: {file_len} bytes")));
        }
        let map = map_file(path)?;
        let mut len_bytes = [0; 8];
        len_bytes.copy_from_slice(&map[..8]);
        let header_len = u64::from_le_bytes(len_bytes);
        if header_len > MAX_HEADER_BYTES || header_len > file_len - 8 {
            return Err(bad(format!(
                "header length {header_len} exceeds the file ({file_len} bytes) or the \
                 {MAX_HEADER_BYTES}-byte limit"
            )));
        }
        // Both bounds were checked against the mapped length, so these fit in usize.
        let data_start = 8 + header_len as usize;
        let header: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&map[8..data_start])
                .map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
        let data_len = map.len() - data_start;
        let mut tensors = BTreeMap::new();
        for (name, value) in header {
            if name == METADATA_KEY {
                continue;
            }
            let entry: RawEntry =
                serde_json::from_value(value).map_err(|e| bad(format!("tensor {name:?}: {e}")))?;
            let meta = check_entry(path, &name, entry, data_len)?;
            tensors.insert(name, meta);
        }
        check_overlap(path, &tensors)?;
        Ok(SafetensorsFile {
            path: path.to_owned(),
            map,
            data_start,
            tensors,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor, sorted by name.
    pub fn tensors(&self) -> impl Iterator<Item = (&str, &TensorMeta)> {
        self.tensors.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Where tensor `name` lives, if present.
    pub fn tensor_meta(&self, name: &str) -> Option<&TensorMeta> {
        self.tensors.get(name)
    }

    /// Tensor `name`, sharing the memory map (no copy).
    pub fn tensor(&self, name: &str) -> Result<HostTensor, ModelError> {
        let meta = self
            .tensor_meta(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.path.clone(),
                name: name.to_owned(),
            })?;
        let range = (self.data_start + meta.offset, meta.size);
        // `open` checked that the range lies inside the file.
        mapped_tensor(&self.path, &self.map, name, range, meta.dtype, &meta.shape)
    }
}

/// Validates one header entry against the data section's length.
fn check_entry(
    path: &Path,
    name: &str,
    e: RawEntry,
    data_len: usize,
) -> Result<TensorMeta, ModelError> {
    let bad = |detail: String| ModelError::format(path, format!("tensor {name:?}: {detail}"));
    let dtype = match e.dtype.as_str() {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        other => {
            return Err(ModelError::unsupported(
                path,
                format!("tensor {name:?} has dtype {other} (F32, F16 and BF16 are supported)"),
            ))
        }
    };
    if e.shape.len() > MAX_RANK {
        return Err(bad(format!(
            "{} dimensions (at most {MAX_RANK})",
            e.shape.len()
        )));
    }
    let dims: Option<Vec<usize>> = e.shape.iter().map(|&d| usize::try_from(d).ok()).collect();
    let shape = Shape::new(dims.ok_or_else(|| bad(format!("shape {:?} is too large", e.shape)))?);
    let size = shape
        .checked_numel()
        .and_then(|n| dtype.bytes_for(n))
        .ok_or_else(|| bad(format!("shape {shape} is too large")))?;
    let [begin, end] = e.data_offsets;
    if begin > end || end > data_len as u64 {
        return Err(bad(format!(
            "data_offsets [{begin}, {end}] fall outside the {data_len}-byte data section"
        )));
    }
    if end - begin != size as u64 {
        return Err(bad(format!(
            "data_offsets [{begin}, {end}] hold {} bytes, but {dtype} {shape} needs {size}",
            end - begin
        )));
    }
    Ok(TensorMeta {
        dtype,
        shape,
        offset: begin as usize,
        size,
    })
}

/// Checks that no two non-empty tensors share bytes.
fn check_overlap(path: &Path, tensors: &BTreeMap<String, TensorMeta>) -> Result<(), ModelError> {
    let mut spans: Vec<_> = tensors
        .iter()
        .filter(|(_, m)| m.size > 0)
        .map(|(n, m)| (m.offset, m.offset + m.size, n))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if start < end {
            return Err(ModelError::format(
                path,
                format!("tensors {a:?} and {b:?} overlap"),
            ));
        }
    }
    Ok(())
}
