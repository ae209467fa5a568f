//! Weights made resident on the GPU. Block formats are repacked once at upload into
//! whole 32-bit words per block (the scale widened to f32, then the quants), because
//! WGSL storage buffers are read in 4-byte words and GGUF's Q4_0 and Q8_0 blocks
//! (18 and 34 bytes) are not word-aligned.

use half::f16;

use super::device::Gpu;
use crate::backend::{BackendError, HostTensor};
use crate::graph::DType;

/// A weight in GPU memory, in the layout the WGSL kernels read.
pub(super) struct GpuWeight {
    pub buffer: wgpu::Buffer,
    pub dtype: DType,
    pub shape: crate::graph::Shape,
    pub bytes: usize,
}

/// Uploads `weight`, repacking block formats.
pub(super) fn upload(
    gpu: &Gpu,
    name: &str,
    weight: &HostTensor,
) -> Result<GpuWeight, BackendError> {
    let raw = weight.data.as_bytes();
    let bytes = match weight.dtype {
        DType::F32 | DType::F16 | DType::I32 => raw.to_vec(),
        DType::Q4_0 => repack(raw, 18, 1, 16),
        DType::Q4_1 => repack(raw, 20, 2, 16),
        DType::Q8_0 => repack(raw, 34, 1, 32),
        other => {
            return Err(BackendError::WeightMismatch {
                name: name.into(),
                detail: format!("the GPU backend has no kernels for {other}"),
            })
        }
    };
    let size = bytes.len() as u64;
    if size > gpu.limits.max_storage_buffer_binding_size || size > gpu.limits.max_buffer_size {
        return Err(BackendError::Device(format!(
            "weight {name} ({size} bytes) exceeds the adapter's buffer limit"
        )));
    }
    let buffer = gpu.checked(name, || gpu.storage_with(name, &bytes))?;
    Ok(GpuWeight {
        buffer,
        dtype: weight.dtype,
        shape: weight.shape.clone(),
        bytes: bytes.len(),
    })
}

/// Rewrites GGUF blocks of `block` bytes that start with `scales` f16 values followed by
/// `quants` bytes into words: each scale as an f32, then the quants.
fn repack(raw: &[u8], block: usize, scales: usize, quants: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() / block * (scales * 4 + quants));
    for b in raw.chunks_exact(block) {
        for s in 0..scales {
            let v = f16::from_le_bytes([b[2 * s], b[2 * s + 1]]).to_f32();
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&b[2 * scales..2 * scales + quants]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repacked_blocks_are_whole_words() {
        // Words per block: the BLOCK_WORDS constants of the WGSL format readers.
        for (words, block, scales, quants) in [(5, 18, 1, 16), (6, 20, 2, 16), (9, 34, 1, 32)] {
            let mut raw = vec![0u8; block * 3];
            for (i, b) in raw.chunks_exact_mut(block).enumerate() {
                b[..2].copy_from_slice(&f16::from_f32(i as f32 + 0.5).to_le_bytes());
                b[2 * scales] = 0xAB;
            }
            let out = repack(&raw, block, scales, quants);
            assert_eq!(out.len(), 3 * words * 4);
            for i in 0..3 {
                let w = &out[i * words * 4..];
                assert_eq!(
                    f32::from_le_bytes(w[..4].try_into().unwrap()),
                    i as f32 + 0.5
                );
                assert_eq!(w[scales * 4], 0xAB);
            }
        }
    }
}
