//! GGUF v2/v3 model files, read zero-copy through a memory map.
//!
//! Layout: magic `GGUF`, version, tensor count, metadata count, metadata pairs, tensor
//! infos, padding to `general.alignment`, then the tensor data. Every count, length,
//! dimension and offset read from the file is checked against the file's size before
//! it is used, so a hostile file yields an error rather than a panic or a huge
//! allocation. Known metadata keys must have the type the spec gives them, and
//! [`check_dimensions`] checks the hyper-parameters against the tensor shapes.

mod consistency;
mod ggml_type;
mod key_types;
mod metadata;
mod reader;
mod tensor_info;
mod value;
mod vocab;
mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_consistency;
#[cfg(test)]
mod tests_hostile;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use consistency::check_dimensions;
pub use ggml_type::{dtype_from_ggml, ggml_from_dtype, ggml_type_name};
pub use metadata::Metadata;
pub use tensor_info::{TensorInfo, MAX_DIMS, MAX_NAME_BYTES};
pub use value::{Array, Value};
pub use vocab::{stop_ids, vocab_spec};
pub use writer::write_gguf;

use super::mapped::{map_file, mapped_tensor, MappedFile};
use super::ModelError;
use crate::backend::HostTensor;
use reader::Reader;

/// The file's first four bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Metadata key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Data alignment when the file does not set [`ALIGNMENT_KEY`].
pub const DEFAULT_ALIGNMENT: usize = 32;

/// A parsed GGUF file; tensors borrow its memory map.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    map: Arc<MappedFile>,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: usize,
    data_start: usize,
}

impl GgufFile {
    /// Maps and parses `path`, validating the whole layout up front.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, ModelError> {
        let path = path.as_ref();
        let len = std::fs::metadata(path)
            .map_err(|e| ModelError::io(path, e))?
            .len();
        if len < 24 {
            return Err(ModelError::format(
                path,
                format!("truncated: {len} bytes is too short for a GGUF header"),
            ));
        }
        let map = map_file(path)?;
        let mut r = Reader::new(&map, path);
        if r.array::<4>("magic")? != MAGIC {
            return Err(ModelError::format(path, "not a GGUF file (bad magic)"));
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            return Err(ModelError::unsupported(
                path,
                format!("GGUF version {version} (only 2 and 3 are supported)"),
            ));
        }
        // Checked against the bytes left once the metadata has been read.
        let tensor_count = r.u64("tensor count")?;
        let metadata = Metadata::read(&mut r, path)?;
        key_types::check(&metadata)?;
        let alignment = read_alignment(&metadata)?;
        let tensors = tensor_info::read_infos(&mut r, tensor_count, alignment, map.len())?;
        let data_start = r
            .pos()
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| r.err("data section start overflows"))?;
        tensor_info::check_layout(&r, &tensors, data_start, map.len())?;
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path: path.to_owned(),
            map,
            version,
            metadata,
            tensors,
            by_name,
            alignment,
            data_start,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata pairs.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// `general.architecture`, e.g. `llama`.
    pub fn architecture(&self) -> Result<&str, ModelError> {
        self.metadata.get_str("general.architecture")
    }

    /// Alignment of tensor data, in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// File offset of the data section; tensor offsets are relative to it.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of tensor `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// Tensor `name`, sharing the memory map (no copy).
    pub fn tensor(&self, name: &str) -> Result<HostTensor, ModelError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.path.clone(),
                name: name.to_owned(),
            })?;
        let range = (self.data_start + info.offset, info.size);
        // `open` checked that the range lies inside the file.
        mapped_tensor(&self.path, &self.map, name, range, info.dtype, &info.shape)
    }
}

/// `general.alignment`, or the default; it must be a power of two.
fn read_alignment(metadata: &Metadata) -> Result<usize, ModelError> {
    if metadata.get(ALIGNMENT_KEY).is_none() {
        return Ok(DEFAULT_ALIGNMENT);
    }
    let a = metadata.get_u32(ALIGNMENT_KEY)?;
    if !a.is_power_of_two() {
        return Err(ModelError::Metadata {
            path: metadata.path().to_owned(),
            key: ALIGNMENT_KEY.into(),
            detail: format!("{a} is not a power of two"),
        });
    }
    Ok(a as usize)
}
