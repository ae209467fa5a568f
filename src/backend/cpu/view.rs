//! Borrowed operands (activations or weights) and the f32 conversions kernels use:
//! every kernel computes in f32, reading and writing f16/bf16/i32 through here.

use std::borrow::Cow;

use half::{bf16, f16};

use super::packed::PackedWeight;
use super::quant;
use crate::backend::{BackendError, SharedBytes};
use crate::graph::{DType, Shape};

/// One operand of a node: its dtype, shape and raw bytes (possibly unaligned weights).
#[derive(Clone, Copy, Debug)]
pub(super) struct View<'a> {
    /// Element or block type.
    pub dtype: DType,
    /// Logical dimensions.
    pub shape: &'a Shape,
    /// The data, in GGUF block layout for block formats.
    pub bytes: &'a [u8],
    /// A matmul weight's packed form, when the partition made one.
    pub packed: Option<&'a PackedWeight>,
    /// A weight's bytes where they are a file map, for ops that read a few rows of
    /// them from the file rather than through the map (the embedding lookup).
    pub mapped: Option<&'a SharedBytes>,
}

impl<'a> View<'a> {
    /// The values as f32: borrowed when already aligned f32, converted otherwise.
    pub fn to_f32(self) -> Result<Cow<'a, [f32]>, BackendError> {
        match self.dtype {
            DType::F32 => Ok(match bytemuck::try_cast_slice(self.bytes) {
                Ok(values) => Cow::Borrowed(values),
                Err(_) => Cow::Owned(
                    self.bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                ),
            }),
            DType::I32 => Ok(Cow::Owned(
                self.to_i32()?.iter().map(|&v| v as f32).collect(),
            )),
            _ => {
                let mut out = vec![0.0; self.shape.numel()];
                quant::dequantize(self.dtype, self.bytes, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// The values as i32 (token ids, positions); an error for any other dtype.
    pub fn to_i32(self) -> Result<Cow<'a, [i32]>, BackendError> {
        if self.dtype != DType::I32 {
            return Err(BackendError::Input(format!(
                "expected i32 operand, got {}",
                self.dtype
            )));
        }
        Ok(match bytemuck::try_cast_slice(self.bytes) {
            Ok(values) => Cow::Borrowed(values),
            Err(_) => Cow::Owned(
                self.bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
        })
    }
}

/// Writes f32 `values` into `out` as `dtype` (f32, f16, bf16, or i32 truncating).
pub(super) fn write_f32(values: &[f32], dtype: DType, out: &mut [u8]) -> Result<(), BackendError> {
    let size = dtype.block_bytes();
    if dtype.is_quantized() || out.len() != values.len() * size {
        return Err(BackendError::Input(format!(
            "cannot write {} values as {dtype} into {} bytes",
            values.len(),
            out.len()
        )));
    }
    let chunks = out.chunks_exact_mut(size).zip(values);
    match dtype {
        DType::F32 => chunks.for_each(|(o, v)| o.copy_from_slice(&v.to_le_bytes())),
        DType::F16 => chunks.for_each(|(o, &v)| o.copy_from_slice(&f16::from_f32(v).to_le_bytes())),
        DType::BF16 => {
            chunks.for_each(|(o, &v)| o.copy_from_slice(&bf16::from_f32(v).to_le_bytes()))
        }
        _ => chunks.for_each(|(o, &v)| o.copy_from_slice(&(v as i32).to_le_bytes())),
    }
    Ok(())
}

/// Runs `fill` on an f32 output buffer and stores it in `out` as `dtype`; writes in
/// place when `dtype` is f32, through a temporary otherwise.
pub(super) fn with_f32_out(
    dtype: DType,
    out: &mut [u8],
    fill: impl FnOnce(&mut [f32]) -> Result<(), BackendError>,
) -> Result<(), BackendError> {
    if dtype == DType::F32 {
        if let Ok(values) = bytemuck::try_cast_slice_mut(out) {
            return fill(values);
        }
    }
    let size = dtype.block_bytes();
    let mut values = vec![0.0; out.len() / size];
    fill(&mut values)?;
    write_f32(&values, dtype, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_activation_dtype() {
        let shape = Shape::new([3]);
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            let mut bytes = vec![0u8; 3 * dtype.block_bytes()];
            write_f32(&[1.0, -2.0, 3.0], dtype, &mut bytes).unwrap();
            let view = View {
                dtype,
                shape: &shape,
                bytes: &bytes,
                packed: None,
                mapped: None,
            };
            assert_eq!(view.to_f32().unwrap().as_ref(), &[1.0, -2.0, 3.0]);
        }
    }

    #[test]
    fn unaligned_f32_is_decoded() {
        let shape = Shape::new([1]);
        // Words are 4-aligned, so byte 1 of them is not.
        let mut words = [0u32; 2];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        bytes[1..5].copy_from_slice(&2.5f32.to_le_bytes());
        let view = View {
            dtype: DType::F32,
            shape: &shape,
            bytes: &bytes[1..5],
            packed: None,
            mapped: None,
        };
        assert_eq!(view.to_f32().unwrap().as_ref(), &[2.5]);
    }
}
