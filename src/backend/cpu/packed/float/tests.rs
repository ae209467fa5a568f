//! The float panel kernels: the scalar twin against an f64 product, the AVX-512 and
//! AVX2 FMA kernels (the latter over widened panels too) against the twin bit for bit,
//! the bf16 pair kernel against an f64 product of its rounded activations, rows alone
//! against rows in a batch.

use half::{bf16, f16};

use super::super::{PackedKind, PackedWeight};
use super::{matmul_with, scalar, Kernel};
use crate::backend::cpu::kernels::testutil::lcg;

/// Random `[n, k]` weights in `[-1, 1)` as `kind`'s bytes, and their exact f32 values.
fn weights(kind: PackedKind, n: usize, k: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::with_capacity(2 * n * k);
    let mut values = Vec::with_capacity(n * k);
    for v in lcg(seed, n * k) {
        let v = v * 2.0 - 1.0;
        let (b, exact) = match kind {
            PackedKind::BF16 => (bf16::from_f32(v).to_le_bytes(), bf16::from_f32(v).to_f32()),
            _ => (f16::from_f32(v).to_le_bytes(), f16::from_f32(v).to_f32()),
        };
        bytes.extend_from_slice(&b);
        values.push(exact);
    }
    (bytes, values)
}

fn run(kernel: Kernel, w: &PackedWeight, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * w.rows()];
    matmul_with(kernel, x, m, &[w], &mut [&mut out]);
    out
}

#[test]
fn scalar_twin_matches_an_f64_product() {
    for kind in [PackedKind::F16, PackedKind::BF16] {
        for (n, k, m) in [(16, 32, 1), (37, 95, 3), (64, 576, 9)] {
            let (raw, wf) = weights(kind, n, k, 5 + n as u64);
            let w = PackedWeight::pack(kind, &raw, n, k).unwrap();
            let x: Vec<f32> = lcg(9 + m as u64, m * k)
                .iter()
                .map(|v| v * 2.0 - 1.0)
                .collect();
            let got = run(Kernel::Fma(scalar), &w, &x, m);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|t| x[i * k + t] as f64 * wf[j * k + t] as f64)
                        .sum();
                    let g = got[i * n + j] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * k as f64,
                        "{kind:?} [{n},{k}]×{m}: {g} vs {want}"
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_matches_its_scalar_twin_bit_for_bit_and_is_batch_invariant() {
    match super::avx512::kernel() {
        Some(simd) => matches_the_scalar_twin(Kernel::Fma(simd), "AVX-512"),
        None => println!("skipped: this CPU lacks AVX-512 F"),
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_matches_its_scalar_twin_bit_for_bit_and_is_batch_invariant() {
    match super::avx2::kernel() {
        Some(simd) => matches_the_scalar_twin(Kernel::Fma(simd), "AVX2"),
        None => println!("skipped: this CPU lacks AVX2"),
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_over_widened_panels_matches_the_scalar_twin_bit_for_bit() {
    match super::avx2::widened_kernel() {
        Some((widen, f)) => matches_the_scalar_twin(Kernel::Widened(widen, f), "AVX2 widened"),
        None => println!("skipped: this CPU lacks AVX2"),
    }
}

/// `simd` equals the scalar twin bit for bit (odd `k` included), and each row alone
/// equals the same row inside a batch.
fn matches_the_scalar_twin(simd: Kernel, name: &str) {
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for kind in [PackedKind::F16, PackedKind::BF16] {
        for (n, k) in [(16, 32), (40, 161), (96, 576)] {
            let (raw, _) = weights(kind, n, k, 3 + k as u64);
            let w = PackedWeight::pack(kind, &raw, n, k).unwrap();
            for m in [1, 2, 3, 5, 8, 9, 19] {
                let x: Vec<f32> = lcg(m as u64, m * k).iter().map(|v| v * 4.0 - 2.0).collect();
                let got = run(simd, &w, &x, m);
                assert_eq!(
                    bits(&got),
                    bits(&run(Kernel::Fma(scalar), &w, &x, m)),
                    "{name} {kind:?} [{n},{k}]×{m}"
                );
                for i in 0..m {
                    let alone = run(simd, &w, &x[i * k..(i + 1) * k], 1);
                    assert_eq!(
                        bits(&alone),
                        bits(&got[i * n..(i + 1) * n]),
                        "{name} {kind:?} row {i} of {m}"
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_pair_kernel_matches_an_f64_product_of_rounded_activations() {
    let Some(dot) = super::avx512::bf16_dot_kernel() else {
        println!("skipped: this CPU lacks AVX-512 BF16");
        return;
    };
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (n, k) in [(16, 32), (40, 161), (96, 576)] {
        let (raw, wf) = weights(PackedKind::BF16, n, k, 13 + k as u64);
        let w = PackedWeight::pack(PackedKind::BF16, &raw, n, k).unwrap();
        for m in [1, 3, 8, 19] {
            let x: Vec<f32> = lcg(m as u64, m * k).iter().map(|v| v * 4.0 - 2.0).collect();
            let got = run(Kernel::Bf16Dot(dot), &w, &x, m);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|t| bf16::from_f32(x[i * k + t]).to_f64() * wf[j * k + t] as f64)
                        .sum();
                    let g = got[i * n + j] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * k as f64,
                        "[{n},{k}]×{m}: {g} vs {want}"
                    );
                }
                let alone = run(Kernel::Bf16Dot(dot), &w, &x[i * k..(i + 1) * k], 1);
                assert_eq!(
                    bits(&alone),
                    bits(&got[i * n..(i + 1) * n]),
                    "row {i} of {m}"
                );
            }
        }
    }
}

/// The activations' rounding to bf16, sixteen at a time, gives `half`'s bits for
/// every kind of value: ties both ways, denormals, the largest finite values (which
/// round to infinity), infinities and NaNs; and the pairs a row becomes hold the even
/// column in the low half, an odd row's last word padded with zero.
#[test]
fn activations_round_to_bf16_as_half_does() {
    let mut x: Vec<f32> = lcg(77, 1000).iter().map(|v| (v - 0.5) * 1e3).collect();
    let special = [
        f32::from_bits(0x3F80_8000), // a tie, kept part even: stays
        f32::from_bits(0x3F81_8000), // a tie, kept part odd: rounds up
        f32::from_bits(0x3F80_8001),
        f32::from_bits(0x0000_8001), // denormal
        f32::from_bits(0x807F_FFFF),
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0xFF80_0001), // a signalling NaN
        -0.0,
    ];
    x.extend_from_slice(&special);
    x.extend_from_slice(&special);
    let half_bits = |v: f32| bf16::from_f32(v).to_bits();
    // Two rows of 37 columns (an odd count) as bf16 pairs.
    let k = 37;
    let pairs = super::bf16_pairs(&x[..2 * k], 2, k);
    assert_eq!(pairs.len(), 2 * k.div_ceil(2));
    for (r, row) in pairs.chunks(k.div_ceil(2)).enumerate() {
        for (c, &w) in row.iter().enumerate() {
            let odd = x.get(r * k + 2 * c + 1).filter(|_| 2 * c + 1 < k);
            assert_eq!(w as u16, half_bits(x[r * k + 2 * c]), "row {r} pair {c}");
            assert_eq!(
                (w >> 16) as u16,
                odd.map_or(0, |&v| half_bits(v)),
                "row {r} pair {c}"
            );
        }
    }
    let Some(kernel) = super::round_to_bf16_kernel() else {
        eprintln!("skipped: this CPU has no vectorised bf16 rounding (AVX-512 F)");
        return;
    };
    for len in [0, 5, 16, 31, x.len()] {
        let mut out = vec![0u16; len];
        let done = kernel(&x[..len], &mut out);
        assert_eq!(done, len / 16 * 16);
        for (i, (&o, &v)) in out[..done].iter().zip(&x[..len]).enumerate() {
            assert_eq!(o, half_bits(v), "value {i}: {v:e} ({:#x})", v.to_bits());
        }
    }
}
