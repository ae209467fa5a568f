//! Every SIMD float kernel against its scalar twin and against an f64 product.

use half::{bf16, f16};

use super::super::testutil::lcg;
use super::*;

/// Every table this CPU can run, the AVX-512 one also without its bf16 dot product
/// (so the widening bf16 kernel is covered on CPUs that have both).
fn tables() -> Vec<Table> {
    #[allow(unused_mut)]
    let mut t = vec![Table::SCALAR];
    #[cfg(target_arch = "x86_64")]
    {
        t.extend(Table::avx2());
        if let Some(a) = Table::avx512() {
            t.push(a);
            t.push(Table {
                bf16_dot: None,
                ..a
            });
        }
    }
    t
}

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
fn every_table_matches_its_twin_and_the_f64_product() {
    for (ti, t) in tables().into_iter().enumerate() {
        for kind in [FloatKind::F16, FloatKind::Bf16] {
            for k in [1, 7, 16, 31, 33, 64, 100, 576] {
                for m in 1..=MAX_ROWS {
                    let n = 19;
                    let (wb, w) = encode(kind, &lcg(k as u64 * 7 + m as u64, n * k));
                    let x: Vec<f32> = lcg(k as u64 + 100 * m as u64, m * k)
                        .iter()
                        .map(|v| 3.0 * v)
                        .collect();
                    let act = Activations::for_table(&t, kind, &x);
                    let mut got = vec![0.0; n * m];
                    dot_rows_with(&t, kind, &wb, &act, k, &mut got).unwrap();
                    let mut twin = vec![0.0; n * m];
                    let x_used: Vec<f32> = match &act {
                        Activations::F32(x) => {
                            let f = match kind {
                                FloatKind::F16 => scalar::rows_f16,
                                FloatKind::Bf16 => scalar::rows_bf16,
                            };
                            f(&wb, x, k, &mut twin);
                            x.to_vec()
                        }
                        Activations::Bf16(xb) => {
                            scalar::rows_bf16_dot(&wb, xb, k, &mut twin);
                            xb.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()
                        }
                    };
                    let what = format!("table {ti} {kind:?} k {k} m {m}");
                    for (c, &(exact, bound)) in reference(&w, &x_used, k).iter().enumerate() {
                        let (g, tw) = (got[c] as f64, twin[c] as f64);
                        assert!((g - exact).abs() <= bound, "{what} [{c}]: {g} vs {exact}");
                        assert!(
                            (tw - exact).abs() <= bound,
                            "{what} twin [{c}]: {tw} vs {exact}"
                        );
                        assert!(
                            (g - tw).abs() <= 2.0 * bound,
                            "{what} [{c}]: {g} vs twin {tw}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bf16_activations_are_rounded_to_nearest_even() {
    let x = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -2.5, 1e-40];
    let bits = round_to_bf16(&x);
    let back: Vec<f32> = bits.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
    // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: ties go to the even mantissa (1.0);
    // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ and 1 + 2⁻⁶: ties go to 1 + 2⁻⁶.
    assert_eq!(back[..3], [1.0, 1.0 + 4.0 / 256.0, -2.5]);
    assert!(back[3].abs() < 1e-38 && back[3] >= 0.0);
}

#[test]
fn every_table_widens_every_bit_pattern_exactly() {
    let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
    for (ti, t) in tables().into_iter().enumerate() {
        for (kind, widen) in [
            (FloatKind::F16, t.f16_widen),
            (FloatKind::Bf16, t.bf16_widen),
        ] {
            // Odd lengths and offsets exercise the vector body and the scalar tail.
            for (start, len) in [(0, 65536), (3, 13), (1001, 7)] {
                let b = &bytes[2 * start..2 * (start + len)];
                let mut got = vec![0.0; len];
                let mut want = vec![0.0; len];
                widen(b, &mut got);
                match kind {
                    FloatKind::F16 => scalar::f16_to_f32(b, &mut want),
                    FloatKind::Bf16 => scalar::bf16_to_f32(b, &mut want),
                }
                for (c, (g, w)) in got.iter().zip(&want).enumerate() {
                    let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                    assert!(
                        same,
                        "table {ti} {kind:?} element {}: {g} vs {w}",
                        start + c
                    );
                }
            }
        }
    }
}

#[test]
fn malformed_shapes_are_errors() {
    let x = [0.0f32; 8];
    let act = Activations::F32(&x);
    let mut out = [0.0; 4];
    // 5 activation rows of 1 is more than the kernels take.
    let five = Activations::F32(&x[..5]);
    assert!(dot_rows(FloatKind::F16, &[0; 2], &five, 1, &mut out[..1]).is_err());
    // Weights not whole rows; outputs not covering them; k of zero.
    assert!(dot_rows(FloatKind::F16, &[0; 7], &act, 4, &mut out[..2]).is_err());
    assert!(dot_rows(FloatKind::F16, &[0; 16], &act, 4, &mut out[..3]).is_err());
    assert!(dot_rows(FloatKind::F16, &[0; 16], &act, 0, &mut out).is_err());
    let bf = Activations::Bf16(vec![0; 4]);
    assert!(dot_rows(FloatKind::F16, &[0; 8], &bf, 4, &mut out[..1]).is_err());
    assert!(widen(FloatKind::Bf16, &[0; 3], &mut out[..1]).is_err());
}
