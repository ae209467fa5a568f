//! GGUF tensor infos: names, ggml types, dimensions and offsets, validated against the
//! file before any tensor is handed out.

use std::collections::HashSet;

use super::ggml_type::{dtype_from_ggml, ggml_type_name, supported_names};
use super::reader::Reader;
use crate::graph::{DType, Shape};
use crate::model::ModelError;

/// Most dimensions a GGUF tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;

/// Longest tensor name the GGUF spec allows, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Smallest encoding of one tensor info: name length, `n_dims`, one dim, type, offset.
const MIN_INFO_BYTES: usize = 8 + 4 + 8 + 4 + 8;

/// Where one tensor lives in a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Element or block type.
    pub dtype: DType,
    /// Dimensions, outermost first (GGUF stores them innermost first).
    pub shape: Shape,
    /// Byte offset from the start of the data section.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// Reads `count` infos (the count comes from the header). Each info is checked on its
/// own (dims, type, alignment, size against `file_len`); [`check_layout`] then checks
/// them together.
pub(super) fn read_infos(
    r: &mut Reader<'_>,
    count: u64,
    alignment: usize,
    file_len: usize,
) -> Result<Vec<TensorInfo>, ModelError> {
    let n = r.check_count(count, MIN_INFO_BYTES, "tensor count")?;
    let mut infos = Vec::with_capacity(n);
    let mut names = HashSet::with_capacity(n);
    for _ in 0..n {
        let info = read_info(r, alignment, file_len)?;
        if !names.insert(info.name.clone()) {
            return Err(r.err(format_args!("duplicate tensor name {:?}", info.name)));
        }
        infos.push(info);
    }
    Ok(infos)
}

fn read_info(
    r: &mut Reader<'_>,
    alignment: usize,
    file_len: usize,
) -> Result<TensorInfo, ModelError> {
    let name = r.string("tensor name")?;
    if name.len() > MAX_NAME_BYTES {
        return Err(r.err(format_args!(
            "tensor name {name:?} is {} bytes (the GGUF spec allows {MAX_NAME_BYTES})",
            name.len()
        )));
    }
    let n_dims = r.u32("tensor n_dims")? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(r.err(format_args!(
            "tensor {name:?} has {n_dims} dims (1..={MAX_DIMS} allowed)"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        let d = r.u64("tensor dim")?;
        match usize::try_from(d) {
            Ok(d) if d > 0 => dims.push(d),
            _ => return Err(r.err(format_args!("tensor {name:?} has dimension {d}"))),
        }
    }
    dims.reverse();
    let shape = Shape::new(dims);
    let type_id = r.u32("tensor type")?;
    let dtype = dtype_from_ggml(type_id).ok_or_else(|| {
        let what = match ggml_type_name(type_id) {
            Some(known) => format!("type {known}"),
            None => format!("unknown ggml type id {type_id}"),
        };
        r.unsupported(format_args!(
            "tensor {name:?} has {what}, which Switchyard does not read (supported: {})",
            supported_names()
        ))
    })?;
    if dtype.bytes_for(shape.last()).is_none() {
        return Err(r.err(format_args!(
            "tensor {name:?}: innermost dimension {} is not a multiple of the {dtype} block ({})",
            shape.last(),
            dtype.block_elems()
        )));
    }
    let size = shape
        .checked_numel()
        .and_then(|n| dtype.bytes_for(n))
        .filter(|&s| s <= file_len)
        .ok_or_else(|| {
            r.err(format_args!(
                "tensor {name:?} of shape {shape} is larger than the file"
            ))
        })?;
    let offset = r.usize("tensor offset")?;
    if offset % alignment != 0 {
        return Err(r.err(format_args!(
            "tensor {name:?} offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    Ok(TensorInfo {
        name,
        dtype,
        shape,
        offset,
        size,
    })
}

/// Checks that every tensor lies inside the file after `data_start` and that no two
/// tensors overlap.
pub(super) fn check_layout(
    r: &Reader<'_>,
    infos: &[TensorInfo],
    data_start: usize,
    file_len: usize,
) -> Result<(), ModelError> {
    let data_len = file_len.checked_sub(data_start);
    let mut spans = Vec::with_capacity(infos.len());
    for t in infos {
        let end = t.offset.checked_add(t.size);
        match (end, data_len) {
            (Some(end), Some(len)) if end <= len => spans.push((t.offset, end, &t.name)),
            _ => {
                return Err(r.err(format_args!(
                    "tensor {:?} ({} bytes at data offset {}) runs past the end of the file \
                     ({file_len} bytes, data section at {data_start})",
                    t.name, t.size, t.offset
                )))
            }
        }
    }
    spans.sort();
    for pair in spans.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if start < end {
            return Err(r.err(format_args!("tensors {a:?} and {b:?} overlap")));
        }
    }
    Ok(())
}
