//! The K-quant kernels against f64 dot products of the dequantized values, and the
//! Q8_K activation quantizer.

use half::f16;

use super::kquant::QK_K;
use super::{dot_rows_k, quantize_row_k, BlockQ8K, KQuantKind};
use crate::backend::cpu::kernels::testutil::lcg;
use crate::backend::cpu::quant::dequantize;
use crate::graph::DType;

/// Every K-quant kind with its dtype and the byte offsets of its f16 fields.
const KINDS: [(KQuantKind, DType, &[usize]); 4] = [
    (KQuantKind::Q4K, DType::Q4K, &[0, 2]),
    (KQuantKind::Q5K, DType::Q5K, &[0, 2]),
    (KQuantKind::Q6K, DType::Q6K, &[208]),
    (KQuantKind::IQ4XS, DType::IQ4XS, &[0]),
];

/// Random super-blocks of `dtype` with finite scales in a realistic range.
fn weights(dtype: DType, half_at: &[usize], rows: usize, nb: usize, seed: u64) -> Vec<u8> {
    let bb = dtype.block_bytes();
    let noise = lcg(seed, rows * nb * bb);
    let mut w: Vec<u8> = noise.iter().map(|v| (v * 255.0) as i32 as u8).collect();
    for (b, block) in w.chunks_mut(bb).enumerate() {
        for (i, &at) in half_at.iter().enumerate() {
            let v = 0.001 + 0.0005 * ((b * 7 + i * 3) % 11) as f32;
            block[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
        }
    }
    w
}

fn quantized(x: &[f32]) -> Vec<BlockQ8K> {
    let mut q = vec![BlockQ8K::default(); x.len() / QK_K];
    quantize_row_k(x, &mut q).unwrap();
    q
}

fn run(kind: KQuantKind, w: &[u8], x: &[BlockQ8K], rows: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; rows];
    dot_rows_k(kind, w, x, &mut out).unwrap();
    out
}

#[test]
fn scalar_dots_equal_f64_dots_of_dequantized_values() {
    let (nb, rows) = (3, 4);
    for (kind, dtype, half_at) in KINDS {
        assert_eq!(KQuantKind::of(dtype), Some(kind));
        let w = weights(dtype, half_at, rows, nb, 30);
        let mut wf = vec![0.0; rows * nb * QK_K];
        dequantize(dtype, &w, &mut wf).unwrap();
        let x = quantized(&lcg(31, nb * QK_K));
        let xf: Vec<f64> = x
            .iter()
            .flat_map(|b| b.qs.iter().map(move |&q| b.d as f64 * q as f64))
            .collect();
        let got = run(kind, &w, &x, rows);
        for (j, wrow) in wf.chunks(nb * QK_K).enumerate() {
            let terms = wrow.iter().zip(&xf).map(|(&a, &b)| a as f64 * b);
            let want: f64 = terms.clone().sum();
            let size: f64 = terms.map(f64::abs).sum();
            let g = got[j] as f64;
            assert!(
                (g - want).abs() <= 1e-5 * (1e-3 + size),
                "{kind:?} row {j}: {g} vs {want} (size {size})"
            );
        }
    }
}

#[test]
fn q8_k_blocks_hold_their_sums_and_round_trip() {
    let mut x: Vec<f32> = lcg(9, 3 * QK_K).iter().map(|v| v * 3.0).collect();
    x[QK_K..2 * QK_K].fill(0.0);
    let q = quantized(&x);
    for (x, b) in x.chunks(QK_K).zip(&q) {
        for (s, qs) in b.bsums.iter().zip(b.qs.chunks(16)) {
            assert_eq!(*s as i32, qs.iter().map(|&v| v as i32).sum::<i32>());
        }
        for (v, &qv) in x.iter().zip(&b.qs) {
            assert!((v - b.d * qv as f32).abs() <= b.d * 0.5 + 1e-7);
        }
    }
    assert_eq!(q[1], BlockQ8K::default());
    assert!(q[0].qs.iter().any(|&v| v.abs() == 127));
}

#[test]
fn checked_entry_points_reject_bad_shapes() {
    let x = quantized(&lcg(40, 2 * QK_K));
    let w = weights(DType::Q4K, &[0, 2], 3, 2, 41);
    let mut out = vec![0.0; 3];
    dot_rows_k(KQuantKind::Q4K, &w, &x, &mut out).unwrap();
    // Weights not whole rows, wrong output count, no activations.
    assert!(dot_rows_k(KQuantKind::Q4K, &w[..300], &x, &mut out).is_err());
    assert!(dot_rows_k(KQuantKind::Q4K, &w, &x, &mut out[..2]).is_err());
    assert!(dot_rows_k(KQuantKind::Q4K, &w, &x[..0], &mut out).is_err());
    let mut q = vec![BlockQ8K::default(); 1];
    assert!(quantize_row_k(&[0.0; 255], &mut q).is_err());
}
