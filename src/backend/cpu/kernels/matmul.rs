//! `x · Wᵀ` for `x [M, K]` in f32 and `W [N, K]` of any weight dtype: `gemm` for f32
//! weights and for other dtypes dequantized a tile of rows at a time; per-row dot
//! products in parallel over `N` when `M` is small (decode).

use rayon::prelude::*;

use super::check_len;
use crate::backend::cpu::quant::dequantize;
use crate::backend::BackendError;
use crate::graph::DType;

/// Largest `M` taken by the dot-product path.
const DOT_MAX_ROWS: usize = 4;
/// Weight rows dequantized per gemm call on the tiled path.
const TILE_ROWS: usize = 256;
/// Weight rows per rayon task on the dot-product path.
const DOT_CHUNK: usize = 16;

/// A weight matrix `[n, k]` as raw bytes of `dtype`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weight<'a> {
    /// Element or block type.
    pub dtype: DType,
    /// Raw bytes, row-major, whole blocks per row.
    pub bytes: &'a [u8],
    /// Rows (output features).
    pub n: usize,
    /// Columns (input features).
    pub k: usize,
}

/// `out [m, n] = x [m, k] · wᵀ`, on the current rayon pool.
pub(crate) fn matmul(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let row_bytes = w
        .dtype
        .bytes_for(w.k)
        .filter(|&b| w.dtype != DType::I32 && b.checked_mul(w.n) == Some(w.bytes.len()))
        .ok_or_else(|| {
            BackendError::Input(format!(
                "matmul weight of {} bytes is not [{}, {}] {}",
                w.bytes.len(),
                w.n,
                w.k,
                w.dtype
            ))
        })?;
    check_len("matmul x", x.len(), m * w.k)?;
    check_len("matmul output", out.len(), m * w.n)?;
    if m == 0 || w.n == 0 || w.k == 0 {
        out.fill(0.0);
        return Ok(());
    }
    if w.dtype == DType::F32 {
        if let Ok(wf) = bytemuck::try_cast_slice::<u8, f32>(w.bytes) {
            gemm_xwt(x, m, wf, w.n, w.k, out, 0);
            return Ok(());
        }
    }
    if m <= DOT_MAX_ROWS {
        return dot_rows(x, m, w, row_bytes, out);
    }
    let mut tile = vec![0.0f32; TILE_ROWS.min(w.n) * w.k];
    for n0 in (0..w.n).step_by(TILE_ROWS) {
        let rows = TILE_ROWS.min(w.n - n0);
        let src = &w.bytes[n0 * row_bytes..(n0 + rows) * row_bytes];
        let dst = &mut tile[..rows * w.k];
        dst.par_chunks_mut(w.k.max(1))
            .zip(src.par_chunks(row_bytes.max(1)))
            .try_for_each(|(o, b)| dequantize(w.dtype, b, o))?;
        gemm_xwt(x, m, dst, rows, w.k, out, n0);
    }
    Ok(())
}

/// Few input rows: each task dequantizes a few weight rows and dots them with every
/// row of `x`, writing `out` transposed, then transposes back.
fn dot_rows(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    row_bytes: usize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let k = w.k;
    let mut out_t = vec![0.0f32; w.n * m];
    out_t
        .par_chunks_mut(DOT_CHUNK * m)
        .zip(w.bytes.par_chunks(DOT_CHUNK * row_bytes.max(1)))
        .try_for_each_init(
            || vec![0.0f32; k],
            |row, (o, bytes)| {
                for (o, b) in o.chunks_mut(m).zip(bytes.chunks(row_bytes.max(1))) {
                    dequantize(w.dtype, b, row)?;
                    for (i, o) in o.iter_mut().enumerate() {
                        let xi = &x[i * k..(i + 1) * k];
                        *o = xi.iter().zip(row.iter()).map(|(a, b)| a * b).sum();
                    }
                }
                Ok::<(), BackendError>(())
            },
        )?;
    for (j, col) in out_t.chunks(m).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * w.n + j] = v;
        }
    }
    Ok(())
}

/// `out[i, col0 + j] = Σ_k x[i, k] · w[j, k]` for `j < n`, `out` having rows of
/// `stride` ≥ `col0 + n`.
fn gemm_xwt(x: &[f32], m: usize, w: &[f32], n: usize, k: usize, out: &mut [f32], col0: usize) {
    let threads = rayon::current_num_threads();
    let stride = out.len() / m;
    assert!(x.len() >= m * k && w.len() >= n * k && col0 + n <= stride && m * stride == out.len());
    let parallelism = if threads > 1 && m * n * k >= 1 << 16 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the assert above bounds every access: dst rows `i < m` of `stride`
    // columns starting at `col0` with `n ≤ stride - col0` columns; lhs `x` is `[m, k]`
    // row-major (col stride 1, row stride k); rhs is `wᵀ`, i.e. element (kk, j) at
    // `w[j * k + kk]` (col stride k, row stride 1) within `n * k` elements. The
    // destination does not alias the inputs (distinct borrows).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr().add(col0),
            1,
            stride as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::super::testutil::{assert_close, lcg};
    use super::*;

    fn naive(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|kk| x[i * k + kk] as f64 * w[j * k + kk] as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    fn run(x: &[f32], m: usize, dtype: DType, bytes: &[u8], n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        let w = Weight { dtype, bytes, n, k };
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
            .install(|| matmul(x, m, w, &mut out))
            .unwrap();
        out
    }

    #[test]
    fn f32_weights_match_naive() {
        for (m, n, k) in [(1, 7, 5), (3, 33, 19), (17, 300, 41)] {
            let x = lcg(40, m * k);
            let w = lcg(41, n * k);
            let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_close(
                &run(&x, m, DType::F32, &bytes, n, k),
                &naive(&x, m, &w, n, k),
                1e-4,
            );
        }
    }

    #[test]
    fn f16_and_quantized_weights_match_dequantized_naive() {
        let k = 64;
        for (m, n) in [(2, 37), (9, 300)] {
            let x = lcg(42, m * k);
            let w: Vec<f32> = lcg(43, n * k)
                .iter()
                .map(|&v| f16::from_f32(v).to_f32())
                .collect();
            let f16_bytes: Vec<u8> = w
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect();
            assert_close(
                &run(&x, m, DType::F16, &f16_bytes, n, k),
                &naive(&x, m, &w, n, k),
                1e-4,
            );
            // Q8_0 with arbitrary bytes; reference: dequantize the whole matrix.
            let mut q8: Vec<u8> = lcg(44, n * k / 32 * 34)
                .iter()
                .map(|&v| (v * 127.0) as i8 as u8)
                .collect();
            for block in q8.chunks_mut(34) {
                block[..2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
            }
            let mut wq = vec![0.0; n * k];
            dequantize(DType::Q8_0, &q8, &mut wq).unwrap();
            assert_close(
                &run(&x, m, DType::Q8_0, &q8, n, k),
                &naive(&x, m, &wq, n, k),
                1e-4,
            );
        }
    }

    #[test]
    fn k_quant_weights_match_dequantized_naive() {
        let (m, n, k) = (5, 6, 512);
        let x = lcg(45, m * k);
        for (dtype, scale_at) in [
            (DType::Q4K, [0, 2]),
            (DType::Q5K, [0, 2]),
            (DType::Q6K, [208, 208]),
        ] {
            let blocks = n * k / 256;
            let mut bytes: Vec<u8> = lcg(46, blocks * dtype.block_bytes())
                .iter()
                .map(|&v| (v * 127.0) as i8 as u8)
                .collect();
            // Finite scales: arbitrary bytes could encode f16 NaN or infinity.
            for block in bytes.chunks_mut(dtype.block_bytes()) {
                for at in scale_at {
                    block[at..at + 2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
                }
            }
            let mut wq = vec![0.0; n * k];
            dequantize(dtype, &bytes, &mut wq).unwrap();
            assert_close(
                &run(&x, m, dtype, &bytes, n, k),
                &naive(&x, m, &wq, n, k),
                1e-4,
            );
        }
    }

    #[test]
    fn wrong_weight_size_is_an_error() {
        let w = Weight {
            dtype: DType::Q4_0,
            bytes: &[0; 17],
            n: 1,
            k: 32,
        };
        assert!(matmul(&[0.0; 32], 1, w, &mut [0.0]).is_err());
    }
}
