//! The packed kernels against f64 products of the dequantized weights, the AVX-512
//! and AVX2 kernels against their scalar twin bit for bit, and rows alone against rows in
//! a batch.

use half::f16;

use super::{matmul_with, scalar, PackedKind, PackedWeight, PanelFn, PANEL};
use crate::backend::cpu::kernels::testutil::lcg;
use crate::backend::cpu::quant::dequantize;

use crate::graph::DType;

const KINDS: [(PackedKind, DType); 10] = [
    (PackedKind::Q4_0, DType::Q4_0),
    (PackedKind::Q4_1, DType::Q4_1),
    (PackedKind::Q5_0, DType::Q5_0),
    (PackedKind::Q5_1, DType::Q5_1),
    (PackedKind::Q8_0, DType::Q8_0),
    (PackedKind::IQ4NL, DType::IQ4NL),
    (PackedKind::IQ4XS, DType::IQ4XS),
    (PackedKind::Q4K, DType::Q4K),
    (PackedKind::Q5K, DType::Q5K),
    (PackedKind::Q6K, DType::Q6K),
];

/// `k` made a whole number of `kind`'s source blocks (256 weights for Q4_K).
fn cols(kind: PackedKind, k: usize) -> usize {
    k.next_multiple_of(kind.source_block().0)
}

/// Random `[n, k]` blocks of `kind` with scales (and minimums) in a realistic range;
/// Q4_K's packed sub-block scales and minimums are random 6-bit values, Q6_K's scales
/// random `i8`.
fn weights(kind: PackedKind, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let (per_block, bytes) = kind.source_block();
    let noise = lcg(seed, n * k / per_block * bytes);
    let mut w: Vec<u8> = noise.iter().map(|v| (v * 255.0) as i32 as u8).collect();
    for (b, block) in w.chunks_mut(bytes).enumerate() {
        let d = f16::from_f32(0.002 + 0.001 * (b % 13) as f32).to_le_bytes();
        if kind == PackedKind::Q6K {
            block[208..210].copy_from_slice(&d);
            continue;
        }
        block[0..2].copy_from_slice(&d);
        let m = match kind {
            PackedKind::Q4_1 | PackedKind::Q5_1 => -0.01 * (b % 7) as f32,
            PackedKind::Q4K | PackedKind::Q5K => 0.0005 * (1 + b % 5) as f32,
            _ => continue,
        };
        block[2..4].copy_from_slice(&f16::from_f32(m).to_le_bytes());
    }
    w
}

/// `x · wᵀ` in f64 from the dequantized weights and the unquantized activations.
fn reference(dtype: DType, w: &[u8], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f64> {
    let mut wf = vec![0.0f32; n * k];
    dequantize(dtype, w, &mut wf).unwrap();
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|t| x[i * k + t] as f64 * wf[j * k + t] as f64)
                .sum();
        }
    }
    out
}

fn run(kernel: super::PanelFn, w: &PackedWeight, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * w.rows()];
    matmul_with(kernel, x, m, &[w], &mut [&mut out]).unwrap();
    out
}

#[test]
fn scalar_twin_matches_an_f64_product() {
    for (kind, dtype) in KINDS {
        for (n, k, m) in [(16, 32, 1), (37, 96, 3), (64, 576, 9)] {
            let k = cols(kind, k);
            let raw = weights(kind, n, k, 7 + n as u64);
            let w = PackedWeight::pack(kind, &raw, n, k).unwrap();
            let x: Vec<f32> = lcg(11 + m as u64, m * k)
                .iter()
                .map(|v| v * 2.0 - 1.0)
                .collect();
            let got = run(scalar::panel, &w, &x, m);
            let want = reference(dtype, &raw, n, k, &x, m);
            let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
            for (g, w) in got.iter().zip(&want) {
                // Activations are quantized to 8 bits: about 1/254 of each block's range.
                assert!(
                    (*g as f64 - w).abs() <= 2e-2 * scale,
                    "{kind:?} [{n},{k}]×{m}: {g} vs {w}"
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_matches_its_scalar_twin_bit_for_bit_and_is_batch_invariant() {
    match super::avx512::kernel() {
        Some(simd) => matches_the_scalar_twin(simd, "AVX-512"),
        None => println!("skipped: this CPU lacks AVX-512 VNNI"),
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_matches_its_scalar_twin_bit_for_bit_and_is_batch_invariant() {
    match super::avx2::kernel() {
        Some(simd) => matches_the_scalar_twin(simd, "AVX2"),
        None => println!("skipped: this CPU lacks AVX2"),
    }
}

/// `simd` equals the scalar twin bit for bit on every kind, and each row computed alone
/// equals the same row inside a batch.
fn matches_the_scalar_twin(simd: PanelFn, name: &str) {
    for (kind, _) in KINDS {
        for (n, k) in [(16, 32), (40, 160), (96, 576)] {
            let k = cols(kind, k);
            let raw = weights(kind, n, k, 3 + k as u64);
            let w = PackedWeight::pack(kind, &raw, n, k).unwrap();
            for m in [1, 2, 3, 5, 8, 9, 19] {
                let x: Vec<f32> = lcg(m as u64, m * k).iter().map(|v| v * 4.0 - 2.0).collect();
                let got = run(simd, &w, &x, m);
                let want = run(scalar::panel, &w, &x, m);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name} {kind:?} [{n},{k}]×{m}"
                );
                for i in 0..m {
                    let alone = run(simd, &w, &x[i * k..(i + 1) * k], 1);
                    assert_eq!(
                        alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        got[i * n..(i + 1) * n]
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        "{name} {kind:?} row {i} of {m}"
                    );
                }
            }
        }
    }
}

/// Sibling weights in one call give each product exactly as alone (block and float
/// kinds, one row and several, a last panel padded), where this CPU (or the
/// `SWITCHYARD_ISA` cap) has the kinds' packed kernels.
#[test]
fn siblings_in_one_call_match_each_product_alone() {
    let kinds = [PackedKind::Q4_1, PackedKind::Q6K, PackedKind::F16];
    for kind in kinds.into_iter().filter(|&kind| super::available(kind)) {
        let k = cols(kind, 256);
        let ws: Vec<PackedWeight> = [48, 16, 37]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                PackedWeight::pack(kind, &weights(kind, n, k, 7 + i as u64), n, k).unwrap()
            })
            .collect();
        for m in [1, 3, 9] {
            let x: Vec<f32> = lcg(3 + m as u64, m * k)
                .iter()
                .map(|v| v * 2.0 - 1.0)
                .collect();
            let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![f32::NAN; m * w.rows()]).collect();
            let mut views: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            let refs: Vec<&PackedWeight> = ws.iter().collect();
            super::matmul_many(&x, m, &refs, &mut views).unwrap();
            for (w, got) in ws.iter().zip(&outs) {
                let mut alone = vec![f32::NAN; m * w.rows()];
                super::matmul(&x, m, w, &mut alone).unwrap();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(got), bits(&alone), "{kind:?} m={m} n={}", w.rows());
            }
        }
    }
}

#[test]
fn packing_checks_sizes_and_pads_the_last_panel() {
    let raw = weights(PackedKind::Q4_1, 20, 64, 1);
    assert!(PackedWeight::pack(PackedKind::Q4_1, &raw[1..], 20, 64).is_err());
    assert!(PackedWeight::pack(PackedKind::Q4_1, &raw, 20, 60).is_err());
    let w = PackedWeight::pack(PackedKind::Q4_1, &raw, 20, 64).unwrap();
    assert_eq!((w.rows(), w.cols()), (20, 64));
    assert_eq!(w.d.len(), 2 * 2 * PANEL);
    let mut out = vec![0.0; 3];
    assert!(matmul_with(scalar::panel, &[0.0; 64], 1, &[&w], &mut [&mut out]).is_err());
    let other = PackedWeight::pack(
        PackedKind::Q4_0,
        &weights(PackedKind::Q4_0, 16, 64, 2),
        16,
        64,
    );
    let (mut a, mut b) = (vec![0.0; 20], vec![0.0; 16]);
    let mixed = super::matmul_many(&[0.0; 64], 1, &[&w, &other.unwrap()], &mut [&mut a, &mut b]);
    assert!(mixed.is_err(), "weights of two kinds in one call");
}

#[test]
fn empty_weights_are_not_packed() {
    let cache = super::PackCache::default();
    let empty = crate::backend::SharedBytes::from_vec(Vec::new());
    for dtype in [DType::F16, DType::BF16, DType::Q4_0, DType::Q4K] {
        assert!(cache.get(dtype, &empty, 0, 256).unwrap().is_none());
        assert!(cache.get(dtype, &empty, 16, 0).unwrap().is_none());
    }
}

/// Packing hands back every source byte exactly once, in order, in ranges of
/// `RELEASE_ROWS` rows (the last one shorter), block and float layouts alike.
#[test]
fn packing_releases_the_source_as_it_goes() {
    let n = 2 * super::RELEASE_ROWS + 37;
    for (kind, k, row_bytes) in [(PackedKind::Q4_1, 64, 2 * 20), (PackedKind::F16, 32, 64)] {
        let raw = vec![0u8; n * row_bytes];
        let mut ranges = Vec::new();
        PackedWeight::pack_releasing(kind, &raw, n, k, &mut |r| ranges.push(r)).unwrap();
        let step = super::RELEASE_ROWS * row_bytes;
        let want: Vec<_> = (0..raw.len())
            .step_by(step)
            .map(|s| s..(s + step).min(raw.len()))
            .collect();
        assert_eq!(ranges, want, "{kind:?}");
    }
}

/// Weights at their extreme codes against activations that quantize to ±127 everywhere:
/// where an `i16` pair sum could saturate in a SIMD kernel (the scalar twin sums in
/// `i32`), the two would differ.
#[cfg(target_arch = "x86_64")]
#[test]
fn simd_kernels_do_not_saturate_at_extreme_codes() {
    let kernels = [super::avx2::kernel(), super::avx512::kernel()];
    for (kind, _) in KINDS {
        let (n, k) = (16, cols(kind, 64));
        let (_, bytes) = kind.source_block();
        // Scales (and minimums) stay as `weights` set them; every code byte is `fill`.
        let kept = if kind == PackedKind::Q6K {
            192..210
        } else {
            0..4
        };
        for fill in [0x00u8, 0xFF, 0x80, 0x7F] {
            let mut raw = weights(kind, n, k, 5);
            for block in raw.chunks_mut(bytes) {
                for (i, b) in block.iter_mut().enumerate() {
                    if !kept.contains(&i) {
                        *b = fill;
                    }
                }
            }
            let w = PackedWeight::pack(kind, &raw, n, k).unwrap();
            for sign in [1.0f32, -1.0] {
                let x = vec![sign; 3 * k];
                let want = run(scalar::panel, &w, &x, 3);
                for simd in kernels.iter().flatten() {
                    let got = run(*simd, &w, &x, 3);
                    assert!(
                        got.iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{kind:?} fill {fill:#04x} x {sign}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }
}

/// A panel's later row group finds its bytes unpacked only where its first group
/// unpacked them: after a first group of one pass (which reads the panel as it goes),
/// the buffer must not pass for the panel, even where it holds the bytes of an earlier
/// panel at the same address (weights freed and others packed in their place). Here the
/// same weight's codes change between the calls, as new weights at its address would.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_rereads_a_panel_its_first_row_group_did_not_unpack() {
    let Some(simd) = super::avx2::kernel() else {
        println!("skipped: this CPU lacks AVX2");
        return;
    };
    let (kind, k) = (PackedKind::Q5K, 256);
    let mut w = PackedWeight::pack(kind, &weights(kind, 16, k, 9), 16, k).unwrap();
    let x: Vec<f32> = lcg(5, 9 * k).iter().map(|v| v * 2.0 - 1.0).collect();
    let acts = super::Activations::quantize(&x, 9, k, kind).unwrap();
    let call = |w: &PackedWeight, kernel: PanelFn, rows: std::ops::Range<usize>, again| {
        let (xb, sums) = acts.rows(rows.clone());
        let mut out = vec![0.0f32; rows.len() * PANEL];
        kernel(w.panel(0), xb, sums, rows.len(), &mut out, again);
        out
    };
    // Eight rows: more than one pass, so the panel is unpacked into the buffer.
    call(&w, simd, 0..8, false);
    let codes: &mut [u8] = bytemuck::cast_slice_mut(&mut w.qs[..]);
    codes
        .iter_mut()
        .for_each(|b| *b = b.wrapping_mul(7).wrapping_add(3));
    // The changed panel's first group of two rows (one pass), then its ninth row.
    for (rows, again) in [(0..2, false), (8..9, true)] {
        let got = call(&w, simd, rows.clone(), again);
        let want = call(&w, scalar::panel, rows.clone(), again);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rows {rows:?}: {got:?} vs {want:?}"
        );
    }
}
