//! A tiny safetensors writer, for tests and tools that build random-weight models.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::backend::HostTensor;
use crate::graph::DType;
use crate::model::ModelError;

/// Writes `tensors` (F32, F16 or BF16) as one safetensors file, data in the given order.
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &HostTensor)],
) -> Result<(), ModelError> {
    let path = path.as_ref();
    let mut header = BTreeMap::new();
    let mut offset = 0;
    for (name, t) in tensors {
        let dtype = match t.dtype {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            other => {
                return Err(ModelError::unsupported(
                    path,
                    format!("tensor {name:?}: safetensors here holds F32/F16/BF16, not {other}"),
                ))
            }
        };
        let end = offset + t.data.as_bytes().len();
        header.insert(
            *name,
            json!({"dtype": dtype, "shape": t.shape.dims(), "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut json =
        serde_json::to_vec(&header).map_err(|e| ModelError::format(path, e.to_string()))?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    for (_, t) in tensors {
        out.extend_from_slice(t.data.as_bytes());
    }
    std::fs::write(path, out).map_err(|e| ModelError::io(path, e))
}
