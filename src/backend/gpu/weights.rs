//! Weights made resident on the GPU. WGSL storage buffers are read in 4-byte words, so
//! block formats whose GGUF blocks are not word-aligned (Q4_0, Q5_0, Q8_0: 18, 22 and 34
//! bytes; Q6_K: 210) are repacked once at upload into whole words per block, the f16
//! scale widened to f32; Q4_1 is widened the same way. Q5_1, Q4_K and Q5_K blocks
//! (24, 144 and 176 bytes) are word-aligned and stay as in the file, their f16 pairs
//! read with `unpack2x16float`: a K-quant weight takes within 1% of its file's bytes,
//! keeping decode, which streams the weights, as bandwidth-bound as the file allows.

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
        // Word-aligned as in the file: f16 pairs are read with unpack2x16float.
        DType::F32 | DType::F16 | DType::BF16 | DType::I32 => raw.to_vec(),
        DType::Q5_1 | DType::Q4K | DType::Q5K => raw.to_vec(),
        DType::Q4_0 => repack(raw, 18, 1, 16),
        DType::Q4_1 => repack(raw, 20, 2, 16),
        DType::Q8_0 => repack(raw, 34, 1, 32),
        DType::Q5_0 => repack(raw, 22, 1, 20),
        DType::Q6K => repack_q6_k(raw),
        other => {
            return Err(BackendError::WeightMismatch {
                name: name.into(),
                detail: format!("the GPU backend has no kernels for {other}"),
            })
        }
    };
    let size = bytes.len() as u64;
    if size > gpu.limits.max_storage_buffer_binding_size || size > gpu.limits.max_buffer_size {
        return Err(BackendError::limit(
            format!("bytes of weight {name}"),
            size,
            gpu.limits
                .max_storage_buffer_binding_size
                .min(gpu.limits.max_buffer_size),
        ));
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

/// Rewrites Q6_K super-blocks (`ql[128] qh[64] scales[16] d`, 210 bytes) into 53 words:
/// the first 208 bytes as they are, then d as an f32.
fn repack_q6_k(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() / 210 * 212);
    for b in raw.chunks_exact(210) {
        out.extend_from_slice(&b[..208]);
        let d = f16::from_le_bytes([b[208], b[209]]).to_f32();
        out.extend_from_slice(&d.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repacked_blocks_are_whole_words() {
        // Words per block: the BLOCK_WORDS constants of the WGSL format readers.
        let formats = [
            (5, 18, 1, 16),
            (6, 20, 2, 16),
            (9, 34, 1, 32),
            (6, 22, 1, 20),
        ];
        for (words, block, scales, quants) in formats {
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

    #[test]
    fn q6_k_super_blocks_keep_their_bytes_and_widen_d() {
        let mut raw: Vec<u8> = (0..420).map(|i| (i % 251) as u8).collect();
        raw[208..210].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
        raw[418..420].copy_from_slice(&f16::from_f32(-3.0).to_le_bytes());
        let out = repack_q6_k(&raw);
        assert_eq!(out.len(), 2 * 53 * 4);
        assert_eq!(&out[..208], &raw[..208]);
        assert_eq!(&out[212..420], &raw[210..418]);
        assert_eq!(f32::from_le_bytes(out[208..212].try_into().unwrap()), 0.25);
        assert_eq!(f32::from_le_bytes(out[420..424].try_into().unwrap()), -3.0);
    }
}
