//! The portable float kernels against an f64 product and an independent decoding of
//! every two-byte bit pattern.

use half::{bf16, f16};

use super::super::testutil::lcg;
use super::*;

/// `values` stored as `kind` (little-endian), and the stored values back as f32.
fn encode(kind: FloatKind, values: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::with_capacity(2 * values.len());
    let mut exact = Vec::with_capacity(values.len());
    for &v in values {
        let (b, e) = match kind {
            FloatKind::F16 => (f16::from_f32(v).to_le_bytes(), f16::from_f32(v).to_f32()),
            FloatKind::Bf16 => (bf16::from_f32(v).to_le_bytes(), bf16::from_f32(v).to_f32()),
        };
        bytes.extend_from_slice(&b);
        exact.push(e);
    }
    (bytes, exact)
}

/// `(w row j · x row i, k·ε·Σ|w·x|)` at `[j·m + i]`: the f64 product and the
/// worst-case error of any f32 summation order of it.
fn reference(w: &[f32], x: &[f32], k: usize) -> Vec<(f64, f64)> {
    let mut r = Vec::new();
    for wj in w.chunks(k) {
        for xi in x.chunks(k) {
            let p = wj.iter().zip(xi).map(|(&a, &b)| a as f64 * b as f64);
            let exact: f64 = p.clone().sum();
            let mag: f64 = p.map(f64::abs).sum();
            r.push((exact, (k as f64 + 2.0) * f32::EPSILON as f64 * mag + 1e-30));
        }
    }
    r
}

#[test]
fn dot_rows_match_the_f64_product() {
    for kind in [FloatKind::F16, FloatKind::Bf16] {
        for k in [1, 7, 16, 31, 33, 64, 100, 576] {
            for m in 1..=MAX_ROWS {
                let n = 19;
                let (wb, w) = encode(kind, &lcg(k as u64 * 7 + m as u64, n * k));
                let x: Vec<f32> = lcg(k as u64 + 100 * m as u64, m * k)
                    .iter()
                    .map(|v| 3.0 * v)
                    .collect();
                let mut got = vec![0.0; n * m];
                dot_rows(kind, &wb, &x, k, &mut got).unwrap();
                for (c, &(exact, bound)) in reference(&w, &x, k).iter().enumerate() {
                    let g = got[c] as f64;
                    assert!(
                        (g - exact).abs() <= bound,
                        "{kind:?} k {k} m {m} [{c}]: {g} vs {exact}"
                    );
                }
            }
        }
    }
}

/// The f16 bit pattern `b` decoded from its fields, in f64.
fn f16_fields(b: u16) -> f64 {
    let sign = if b >> 15 == 1 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((b >> 10) & 0x1F), f64::from(b & 0x3FF));
    sign * match e {
        0 => m * 2f64.powi(-24),
        31 if m == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1024.0 + m) * 2f64.powi(e - 25),
    }
}

#[test]
fn widening_decodes_every_bit_pattern_exactly() {
    let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
    for kind in [FloatKind::F16, FloatKind::Bf16] {
        let mut got = vec![0.0; 65536];
        widen(kind, &bytes, &mut got).unwrap();
        for (b, &g) in (0..=u16::MAX).zip(&got) {
            let want = match kind {
                FloatKind::F16 => f16_fields(b),
                FloatKind::Bf16 => f64::from(f32::from_bits(u32::from(b) << 16)),
            };
            let same = f64::from(g) == want || (g.is_nan() && want.is_nan());
            assert!(same, "{kind:?} {b:#06x}: {g} vs {want}");
        }
    }
}

#[test]
fn malformed_shapes_are_errors() {
    let x = [0.0f32; 8];
    let mut out = [0.0; 4];
    // 5 activation rows of 1 is more than the kernels take.
    assert!(dot_rows(FloatKind::F16, &[0; 2], &x[..5], 1, &mut out[..1]).is_err());
    // Weights not whole rows; outputs not covering them; k of zero.
    assert!(dot_rows(FloatKind::F16, &[0; 7], &x, 4, &mut out[..2]).is_err());
    assert!(dot_rows(FloatKind::F16, &[0; 16], &x, 4, &mut out[..3]).is_err());
    assert!(dot_rows(FloatKind::F16, &[0; 16], &x, 0, &mut out).is_err());
    assert!(widen(FloatKind::Bf16, &[0; 3], &mut out[..1]).is_err());
}
