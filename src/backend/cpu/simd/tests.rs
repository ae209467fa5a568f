//! The AVX2 activation quantizer against its scalar twin, and the portable dot kernels
//! against f64 arithmetic on dequantized values, alone and interleaved.

use half::f16;

use super::{dot_rows, dot_rows_x4, interleave_x4, quantize_rows_shared, BlockQ8, QuantKind, QK};
use crate::backend::cpu::kernels::testutil::lcg;
use crate::graph::DType;

/// Random blocks of `kind` with finite scales in a realistic range.
fn weights(kind: QuantKind, rows: usize, nb: usize, seed: u64) -> Vec<u8> {
    let (bytes, scales) = match kind {
        QuantKind::Q4_0 | QuantKind::IQ4NL => (18, 1),
        QuantKind::Q4_1 => (20, 2),
        QuantKind::Q8_0 => (34, 1),
        QuantKind::Q5_0 => (22, 1),
        QuantKind::Q5_1 => (24, 2),
    };
    let noise = lcg(seed, rows * nb * bytes);
    let mut w: Vec<u8> = noise.iter().map(|v| (v * 255.0) as i32 as u8).collect();
    for (b, block) in w.chunks_mut(bytes).enumerate() {
        for s in 0..scales {
            let v = 0.002 + 0.01 * ((b * 7 + s * 3) % 11) as f32 * if s == 1 { -1.0 } else { 1.0 };
            block[2 * s..2 * s + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
        }
    }
    w
}

fn quantized(x: &[f32]) -> Vec<BlockQ8> {
    let mut q = vec![BlockQ8::default(); x.len() / QK];
    super::scalar::quantize_row(x, &mut q, 1);
    q
}

/// The AVX2 quantizer where this CPU has one.
#[cfg(target_arch = "x86_64")]
fn simd_quantizer() -> Option<super::QuantizeFn> {
    super::avx2_quantizer()
}

#[cfg(not(target_arch = "x86_64"))]
fn simd_quantizer() -> Option<super::QuantizeFn> {
    None
}

/// Runs `kind`'s kernels over `rows` weight rows and the `xr` rows of
/// `x` (`nb` blocks each): row by row when `xr` is 1, else interleaved by four with an
/// output stride wider than the group (the gaps must stay untouched). Returns
/// `out [rows, xr]`.
fn run(kind: QuantKind, w: &[u8], x: &[BlockQ8], xr: usize, rows: usize) -> Vec<f32> {
    let nb = x.len() / xr;
    if xr == 1 {
        let mut out = vec![f32::NAN; rows];
        dot_rows(kind, w, x, &mut out).unwrap();
        return out;
    }
    let x4 = interleave_x4(x, xr, nb);
    let stride = 4 * x4.len() / nb + 2;
    let mut out = vec![f32::NAN; rows * stride];
    for (g, xg) in x4.chunks(nb).enumerate() {
        dot_rows_x4(kind, w, xg, &mut out[4 * g..], stride).unwrap();
    }
    for row in out.chunks(stride) {
        assert!(row[stride - 2..].iter().all(|v| v.is_nan()), "gap written");
        assert!(
            row[xr..stride - 2].iter().all(|&v| v == 0.0),
            "padding rows not zero"
        );
    }
    out.chunks(stride).flat_map(|r| r[..xr].to_vec()).collect()
}

#[test]
fn quantize_matches_scalar_exactly() {
    let Some(simd) = simd_quantizer() else { return };
    for (seed, blocks) in [(1, 1), (2, 3), (3, 18), (4, 48)] {
        let mut x: Vec<f32> = lcg(seed, blocks * QK).iter().map(|v| v * 7.0).collect();
        // Exact ties (x·id = n + 0.5), an all-zero block and a constant block.
        x[5] = x.iter().take(QK).fold(0.0f32, |m, v| m.max(v.abs())) * 0.5 / 127.0 * 3.0;
        if blocks > 2 {
            x[QK..2 * QK].fill(0.0);
            x[2 * QK..3 * QK].fill(-0.3);
        }
        let mut got = vec![BlockQ8::default(); blocks];
        simd(&x, &mut got, 1);
        assert_eq!(got, quantized(&x), "{blocks} blocks");
        if blocks % 8 == 0 {
            // One scale per eight blocks (Q8_K's per 256 values), the largest |x| of all.
            let mut want = vec![BlockQ8::default(); blocks];
            super::scalar::quantize_row(&x, &mut want, 8);
            simd(&x, &mut got, 8);
            assert_eq!(got, want, "{blocks} blocks, 8 sharing a scale");
            for (x, group) in x.chunks(8 * QK).zip(want.chunks(8)) {
                let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                assert!(group.iter().all(|b| b.d == amax / 127.0));
            }
        }
    }
}

#[test]
fn quantize_round_trips_within_half_a_step() {
    let x: Vec<f32> = lcg(9, 5 * QK).iter().map(|v| v * 3.0).collect();
    let q = quantized(&x);
    for (x, b) in x.chunks(QK).zip(&q) {
        let sum: i32 = b.qs.iter().map(|&v| v as i32).sum();
        assert!((b.s - b.d * sum as f32).abs() <= 1e-6 * b.s.abs().max(1.0));
        for (v, &qv) in x.iter().zip(&b.qs) {
            assert!((v - b.d * qv as f32).abs() <= b.d * 0.5 + 1e-7);
        }
    }
}

/// Every kind with integer kernels, with its dtype.
const KINDS: [(QuantKind, DType); 6] = [
    (QuantKind::Q4_0, DType::Q4_0),
    (QuantKind::Q4_1, DType::Q4_1),
    (QuantKind::Q8_0, DType::Q8_0),
    (QuantKind::Q5_0, DType::Q5_0),
    (QuantKind::Q5_1, DType::Q5_1),
    (QuantKind::IQ4NL, DType::IQ4NL),
];

#[test]
fn scalar_dots_equal_f32_dots_of_dequantized_values() {
    let nb = 3;
    for (kind, dtype) in KINDS {
        assert_eq!(QuantKind::of(dtype), Some(kind));
        let w = weights(kind, 2, nb, 30);
        let mut wf = vec![0.0; 2 * nb * QK];
        crate::backend::cpu::quant::dequantize(dtype, &w, &mut wf).unwrap();
        let x = quantized(&lcg(31, nb * QK));
        let xf: Vec<f32> = x
            .iter()
            .flat_map(|b| b.qs.iter().map(move |&q| b.d * q as f32))
            .collect();
        let got = run(kind, &w, &x, 1, 2);
        for (j, wrow) in wf.chunks(nb * QK).enumerate() {
            let want: f64 = wrow
                .iter()
                .zip(&xf)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            let (g, want) = (got[j] as f64, want);
            assert!(
                (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{kind:?}: {g} vs {want}"
            );
        }
    }
}

#[test]
fn checked_entry_points_reject_bad_shapes() {
    let x = quantized(&lcg(40, 2 * QK));
    let w = weights(QuantKind::Q4_1, 3, 2, 41);
    let mut out = vec![0.0; 3];
    dot_rows(QuantKind::Q4_1, &w, &x, &mut out).unwrap();
    // Weights not whole rows, output too short, no activations.
    assert!(dot_rows(QuantKind::Q4_1, &w[..50], &x, &mut out).is_err());
    assert!(dot_rows(QuantKind::Q4_1, &w, &x, &mut out[..2]).is_err());
    assert!(dot_rows(QuantKind::Q4_1, &w, &x[..0], &mut out).is_err());
    let x4 = interleave_x4(&x, 1, 2);
    let mut out = vec![0.0; 3 * 4];
    dot_rows_x4(QuantKind::Q4_1, &w, &x4, &mut out, 4).unwrap();
    assert!(dot_rows_x4(QuantKind::Q4_1, &w, &x4, &mut out, 3).is_err());
    assert!(dot_rows_x4(QuantKind::Q4_1, &w, &x4, &mut out[..11], 4).is_err());
    assert!(quantize_rows_shared(&[0.0; 33], 1, 33, 1).is_err());
    assert!(
        quantize_rows_shared(&[0.0; 64], 1, 64, 8).is_err(),
        "64 values, 256 a group"
    );
    assert!(quantize_rows_shared(&[0.0; 64], 1, 64, 0).is_err());
    let q = quantize_rows_shared(&[1.0; 32], 1, 32, 1).unwrap();
    assert_eq!(q[0].qs, [127; 32]);
}

/// Batch invariance: a row of `x` gets bit-for-bit the same dot products whether it
/// runs alone (decode) or interleaved with others (a batched step), so a sequence's
/// greedy tokens do not depend on which others share its step.
fn check_x4_equals_x1_bitwise() {
    for (kind, _) in KINDS {
        for (nb, rows) in [(1, 3), (18, 7), (48, 5)] {
            let w = weights(kind, rows, nb, 50 + nb as u64);
            let xr = 6;
            let x = quantized(&lcg(60 + nb as u64, xr * nb * QK));
            let together = run(kind, &w, &x, xr, rows);
            for (i, xi) in x.chunks(nb).enumerate() {
                let alone = run(kind, &w, xi, 1, rows);
                for (j, v) in alone.iter().enumerate() {
                    assert_eq!(
                        together[j * xr + i].to_bits(),
                        v.to_bits(),
                        "{kind:?} nb {nb}: row {i} alone {v} vs batched {}",
                        together[j * xr + i]
                    );
                }
            }
        }
    }
}

#[test]
fn interleaved_rows_equal_single_rows_bitwise() {
    check_x4_equals_x1_bitwise();
}
