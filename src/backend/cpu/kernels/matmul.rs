//! `x · Wᵀ` for `x [M, K]` in f32 and `W [N, K]` of any weight dtype that is not packed
//! (`packed/`; where the CPU has packed kernels, only Q2_K and Q3_K weights and f32
//! ones come here): `gemm` for f32 weights, the portable integer kernels for the
//! 32-weight block formats and the K-quants, the portable float kernels for F16/BF16
//! ([`super::matmul_float`]), and for other dtypes `gemm` on tiles of dequantized rows,
//! or per-row dot products in parallel over `N` when `M` is small (decode).

use rayon::prelude::*;

use super::float::FloatKind;
use super::{check_len, matmul_float, PARALLEL_MIN};
use crate::backend::cpu::quant::dequantize;
use crate::backend::cpu::simd::{
    dot_rows as simd_dot_rows, dot_rows_k, dot_rows_x4, interleave_x4, quantize_row_k,
    quantize_rows, BlockQ8K, KQuantKind, QuantKind, QK, QK_K,
};
use crate::backend::BackendError;
use crate::graph::DType;

/// Largest `M` taken by the dot-product path.
const DOT_MAX_ROWS: usize = 4;
/// Largest `M` taken by the K-quant integer dot path: a batched decode step (one row
/// per sequence) reads each weight panel once for all its rows, where dequantizing the
/// whole matrix for `gemm` costs more than the product (measured below at 16 rows).
const KQUANT_DOT_MAX_ROWS: usize = 16;
/// Weight rows dequantized per gemm call on the tiled path.
const TILE_ROWS: usize = 256;
/// Weight rows per rayon task on the dot-product path.
const DOT_CHUNK: usize = 16;
/// Fewest weight rows per rayon task on the row-parallel paths.
const MIN_TASK_ROWS: usize = 16;
/// Rayon tasks per pool thread on the row-parallel paths (see [`task_rows`]).
const TASKS_PER_THREAD: usize = 4;
/// Weight rows (a few KiB) dotted with every group of activation rows before moving
/// on, so they stay in L1 while the activations come from L2.
const QUANT_PANEL_ROWS: usize = 16;

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
    if let Some(kind) = QuantKind::of(w.dtype) {
        return quantized(x, m, w, kind, row_bytes, out);
    }
    if let Some(kind) = KQuantKind::of(w.dtype).filter(|_| m <= KQUANT_DOT_MAX_ROWS) {
        return k_quantized(x, m, w, kind, row_bytes, out);
    }
    if let Some(kind) = FloatKind::of(w.dtype) {
        return matmul_float::matmul(x, m, w, kind, out);
    }
    if m <= DOT_MAX_ROWS {
        return dot_rows(x, m, w, row_bytes, out);
    }
    tiled(x, m, w, row_bytes, out, |b, o| dequantize(w.dtype, b, o))
}

/// `out = x · wᵀ` through the f32 GEMM, [`TILE_ROWS`] weight rows at a time, each tile
/// expanded to f32 by `expand` (one weight row of `row_bytes` into `w.k` values), rows
/// in parallel.
pub(super) fn tiled(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    row_bytes: usize,
    out: &mut [f32],
    expand: impl Fn(&[u8], &mut [f32]) -> Result<(), BackendError> + Sync,
) -> Result<(), BackendError> {
    let mut tile = vec![0.0f32; TILE_ROWS.min(w.n) * w.k];
    for n0 in (0..w.n).step_by(TILE_ROWS) {
        let rows = TILE_ROWS.min(w.n - n0);
        let src = &w.bytes[n0 * row_bytes..(n0 + rows) * row_bytes];
        let dst = &mut tile[..rows * w.k];
        dst.par_chunks_mut(w.k.max(1))
            .zip(src.par_chunks(row_bytes.max(1)))
            .try_for_each(|(o, b)| expand(b, o))?;
        gemm_xwt(x, m, dst, rows, w.k, out, n0);
    }
    Ok(())
}

/// Weight rows per rayon task when `n` rows are split over the pool: a few tasks per
/// thread, so a thread slowed by other work on the machine is balanced by the others.
pub(super) fn task_rows(n: usize) -> usize {
    let tasks = rayon::current_num_threads() * TASKS_PER_THREAD;
    n.div_ceil(tasks).max(MIN_TASK_ROWS)
}

/// The 32-weight block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): quantizes `x` once to Q8 blocks, then integer dot
/// products in parallel over weight rows. With several rows of `x`, they are
/// interleaved by four and each weight panel is reused across all groups.
///
/// Taken at every `M`, by measurement (CPU time per call, 1 thread, AVX2, perf
/// task-clock): for 64×576×1536 this path takes 1.07 ms (Q4_1), 1.12 ms (Q4_0),
/// 1.14 ms (Q8_0) against 1.38, 1.34 and 1.31 ms for dequantize + f32 gemm; for
/// 64×1536×576, 1.12 / 1.14 / 1.17 ms against 1.38 / 1.36 / 1.31 ms. Decode
/// (1×576×1536) takes ≈38 µs for all three.
fn quantized(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    kind: QuantKind,
    row_bytes: usize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let (k, n) = (w.k, w.n);
    let nb = k / QK;
    let xq = quantize_rows(x, m, k)?;
    let task_rows = task_rows(n);
    let weights = w.bytes.par_chunks(task_rows * row_bytes);
    if m == 1 {
        return out
            .par_chunks_mut(task_rows)
            .zip(weights)
            .try_for_each(|(o, wb)| simd_dot_rows(kind, wb, &xq, o));
    }
    let x4 = interleave_x4(&xq, m, nb);
    // Transposed output, rows padded to whole groups: row `j` of `w` gives `out_t[j·m4..]`.
    let m4 = m.div_ceil(4) * 4;
    let mut out_t = vec![0.0f32; n * m4];
    out_t
        .par_chunks_mut(task_rows * m4)
        .zip(weights)
        .try_for_each(|(o, wb)| {
            let panels = o
                .chunks_mut(QUANT_PANEL_ROWS * m4)
                .zip(wb.chunks(QUANT_PANEL_ROWS * row_bytes));
            for (o, wb) in panels {
                for (g, xg) in x4.chunks(nb).enumerate() {
                    dot_rows_x4(kind, wb, xg, &mut o[4 * g..], m4)?;
                }
            }
            Ok::<(), BackendError>(())
        })?;
    transpose_into(&out_t, m4, m, n, out);
    Ok(())
}

/// Q4_K, Q5_K, Q6_K and IQ4_XS weights with few rows of `x` (decode): quantizes each row of
/// `x` to Q8_K super-blocks, then integer dot products in parallel over weight rows,
/// each task dotting its rows with every row of `x`. More rows take dequantize +
/// gemm, which the f32 microkernel makes faster than per-row dots.
fn k_quantized(
    x: &[f32],
    m: usize,
    w: Weight<'_>,
    kind: KQuantKind,
    row_bytes: usize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    let (k, n) = (w.k, w.n);
    let nb = k / QK_K;
    let mut xq = vec![BlockQ8K::default(); m * nb];
    for (q, x) in xq.chunks_mut(nb).zip(x.chunks(k)) {
        quantize_row_k(x, q)?;
    }
    let task_rows = task_rows(n);
    let weights = w.bytes.par_chunks(task_rows * row_bytes);
    if m == 1 {
        return out
            .par_chunks_mut(task_rows)
            .zip(weights)
            .try_for_each(|(o, wb)| dot_rows_k(kind, wb, &xq, o));
    }
    // Transposed output: row `j` of `w` gives `out_t[j·m..j·m + m]`.
    let mut out_t = vec![0.0f32; n * m];
    out_t
        .par_chunks_mut(task_rows * m)
        .zip(weights)
        .try_for_each_init(
            || vec![0.0f32; task_rows],
            |tmp, (o, wb)| {
                let rows = o.len() / m;
                for (i, xi) in xq.chunks(nb).enumerate() {
                    dot_rows_k(kind, wb, xi, &mut tmp[..rows])?;
                    for (o, &v) in o.iter_mut().skip(i).step_by(m).zip(tmp.iter()) {
                        *o = v;
                    }
                }
                Ok::<(), BackendError>(())
            },
        )?;
    transpose_into(&out_t, m, m, n, out);
    Ok(())
}

/// `out [m, n]` from its transpose `out_t [n, stride]` (`stride ≥ m`), writing `out`
/// in order (strided reads are much cheaper than strided writes), rows in parallel
/// when large.
pub(super) fn transpose_into(out_t: &[f32], stride: usize, m: usize, n: usize, out: &mut [f32]) {
    let row = |(i, o): (usize, &mut [f32])| {
        for (o, &v) in o.iter_mut().zip(out_t[i..].iter().step_by(stride)) {
            *o = v;
        }
    };
    if m * n >= PARALLEL_MIN {
        out.par_chunks_mut(n).enumerate().for_each(row);
    } else {
        out.chunks_mut(n).enumerate().for_each(row);
    }
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
                        *o = dot_f32(xi, row);
                    }
                }
                Ok::<(), BackendError>(())
            },
        )?;
    transpose_into(&out_t, m, m, w.n, out);
    Ok(())
}

/// `Σ a·b` in 16 independent lanes, which the compiler vectorizes (a single running
/// sum cannot be reordered). K-quant decode, 1×1536×576, 1 thread: Q4_K 555 → 183 µs,
/// Q6_K 698 → 327 µs.
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let mut acc = [0.0f32; L];
    let (ac, bc) = (a.chunks_exact(L), b.chunks_exact(L));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..L {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
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
    use half::{bf16, f16};

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

    /// F16 and BF16 weights on the decode (`m ≤ 4`) and prefill paths.
    #[test]
    fn f16_and_bf16_weights_match_naive() {
        let k = 64;
        for (m, n) in [(1, 37), (2, 37), (4, 53), (9, 300)] {
            let x: Vec<f32> = lcg(42, m * k)
                .iter()
                .map(|&v| bf16::from_f32(v).to_f32())
                .collect();
            let values = lcg(43, n * k);
            let f16_w: Vec<f32> = values.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
            let f16_bytes: Vec<u8> = values
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect();
            assert_close(
                &run(&x, m, DType::F16, &f16_bytes, n, k),
                &naive(&x, m, &f16_w, n, k),
                1e-4,
            );
            let bf16_w: Vec<f32> = values.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
            let bf16_bytes: Vec<u8> = values
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect();
            assert_close(
                &run(&x, m, DType::BF16, &bf16_bytes, n, k),
                &naive(&x, m, &bf16_w, n, k),
                1e-4,
            );
        }
    }

    /// Asserts `out [m, n]` matches `x · wᵀ` up to 8-bit activation quantization: each
    /// activation is off by at most `max|x_block| / 254` (half a step), so output
    /// `(i, j)` by at most `Σ_blocks max|x_block|/254 · Σ_block |w_jk|`, plus f32
    /// rounding (`1e-5` relative). On these random rows that is ≈0.5% of `max|ref|`.
    fn assert_within_q8_bound(out: &[f32], x: &[f32], m: usize, w: &[f32], n: usize, k: usize) {
        let want = naive(x, m, w, n, k);
        for i in 0..m {
            let xi = &x[i * k..(i + 1) * k];
            for j in 0..n {
                let wj = &w[j * k..(j + 1) * k];
                let bound: f32 = xi
                    .chunks(32)
                    .zip(wj.chunks(32))
                    .map(|(xb, wb)| {
                        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                        amax / 254.0 * wb.iter().map(|v| v.abs()).sum::<f32>()
                    })
                    .sum();
                let (g, r) = (out[i * n + j], want[i * n + j]);
                assert!(
                    (g - r).abs() <= bound + 1e-5 * (1.0 + r.abs()),
                    "m {m} n {n} k {k} [{i}, {j}]: {g} vs {r}, bound {bound}"
                );
            }
        }
    }

    #[test]
    fn block_quantized_weights_match_dequantized_naive() {
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q8_0,
            DType::Q5_0,
            DType::Q5_1,
            DType::IQ4NL,
        ] {
            let bb = dtype.block_bytes();
            for (k, n) in [(32, 3), (96, 37), (576, 61)] {
                let mut bytes: Vec<u8> = lcg(50 + k as u64, n * k / 32 * bb)
                    .iter()
                    .map(|&v| (v * 255.0) as i32 as u8)
                    .collect();
                // Finite scales (and minima) in a realistic range.
                for (b, block) in bytes.chunks_mut(bb).enumerate() {
                    let d = 0.01 + 0.001 * (b % 7) as f32;
                    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                    if matches!(dtype, DType::Q4_1 | DType::Q5_1) {
                        block[2..4].copy_from_slice(&f16::from_f32(-8.0 * d).to_le_bytes());
                    }
                }
                let mut wq = vec![0.0; n * k];
                dequantize(dtype, &bytes, &mut wq).unwrap();
                for m in [1, 2, 3, 5, 17] {
                    let x = lcg(60 + m as u64, m * k);
                    let out = run(&x, m, dtype, &bytes, n, k);
                    assert_within_q8_bound(&out, &x, m, &wq, n, k);
                }
            }
        }
    }

    #[test]
    fn k_quant_weights_match_dequantized_naive() {
        // More rows than the integer dot path takes: dequantize + gemm, exact in f32.
        let (m, n, k) = (KQUANT_DOT_MAX_ROWS + 1, 6, 512);
        let x = lcg(45, m * k);
        for (dtype, scale_at) in [
            (DType::Q4K, [0, 2]),
            (DType::Q5K, [0, 2]),
            (DType::Q6K, [208, 208]),
            (DType::Q2K, [80, 82]),
            (DType::Q3K, [108, 108]),
            (DType::IQ4XS, [0, 0]),
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
            // Decode-sized inputs take the Q8_K integer kernels where there are some:
            // within the bound of 8-bit activations (half a step of 256-blocks).
            for m in [1, 2, 3, 4, KQUANT_DOT_MAX_ROWS] {
                let out = run(&x[..m * k], m, dtype, &bytes, n, k);
                let want = naive(&x[..m * k], m, &wq, n, k);
                if KQuantKind::of(dtype).is_none() {
                    assert_close(&out, &want, 1e-4);
                    continue;
                }
                for i in 0..m {
                    let xi = &x[i * k..(i + 1) * k];
                    for j in 0..n {
                        let wj = &wq[j * k..(j + 1) * k];
                        let bound: f32 = xi
                            .chunks(QK_K)
                            .zip(wj.chunks(QK_K))
                            .map(|(xb, wb)| {
                                let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                                amax / 254.0 * wb.iter().map(|v| v.abs()).sum::<f32>()
                            })
                            .sum();
                        let (g, r) = (out[i * n + j], want[i * n + j]);
                        assert!(
                            (g - r).abs() <= bound + 1e-5 * (1.0 + r.abs()),
                            "{dtype} m {m} [{i}, {j}]: {g} vs {r}, bound {bound}"
                        );
                    }
                }
            }
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
