//! AVX-512 VNNI packed kernels: per block, the panel's weight groups in eight registers
//! (16 rows × 4 bytes each; nibbles split, bit planes merged in, IQ4 values looked up
//! with `vpshufb`), one `vpdpbusd` per group and activation row with the row's 4 bytes
//! broadcast, then one conversion and one or two FMAs per row; the K-quants and IQ4_XS
//! instead add each unit's sum times its scale (`vpmulld`) over a super-block and
//! convert once at its end, their minimums and offsets taken by `vpdpwssd` against the
//! activations' sums. Twin of [`super::scalar`], bit for bit.

use std::arch::x86_64::*;

use super::code::*;
use super::prefetch::{PREFETCH_BLOCKS, SCALE_AHEAD};
use super::{Panel, PanelFn, PANEL, ROW_GROUP};
use crate::backend::cpu::isa::{allows, Isa};
use crate::backend::cpu::quant::IQ4_VALUES;
use crate::backend::cpu::simd::{BlockQ8, QK, QK_K};

/// The kernel when this CPU has AVX-512 F/BW/VL with VNNI and F16C.
pub(super) fn kernel() -> Option<PanelFn> {
    let ok = allows(Isa::Avx512)
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("f16c");
    ok.then_some(panel as PanelFn)
}

/// Safe entry point: only handed out by [`kernel`] after the features were detected.
fn panel(w: Panel<'_>, x: &[BlockQ8], sums: &[i16], rows: usize, out: &mut [f32], _again: bool) {
    let parts = w.kind.sums_per_block();
    assert!(rows <= ROW_GROUP && x.len() >= rows * w.nb && sums.len() >= rows * w.nb * parts);
    assert!(out.len() >= rows * PANEL && w.is_whole() && !w.kind.is_float());
    // SAFETY: `kernel` checked the CPU features; the asserts above bound every read and
    // write the kernels make.
    unsafe {
        by_kind!(w.kind, by_rows(w, x, sums, rows, out));
    }
}

/// [`rows_of`] for `rows` (1 to [`ROW_GROUP`]) activation rows.
///
/// # Safety
/// As [`rows_of`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma,avx2")]
unsafe fn by_rows<const K: u8>(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    rows: usize,
    out: &mut [f32],
) {
    match rows {
        1 => rows_of::<1, K>(w, x, sums, out),
        2 => rows_of::<2, K>(w, x, sums, out),
        3 => rows_of::<3, K>(w, x, sums, out),
        4 => rows_of::<4, K>(w, x, sums, out),
        5 => rows_of::<5, K>(w, x, sums, out),
        6 => rows_of::<6, K>(w, x, sums, out),
        7 => rows_of::<7, K>(w, x, sums, out),
        8 => rows_of::<8, K>(w, x, sums, out),
        _ => {}
    }
}

/// `G` activation rows against the panel, accumulators in registers. The eight
/// `vpdpbusd` of a row form two chains of four (the integer sum is exact in any order),
/// so that one row's latency overlaps the next row's work.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL, VNNI and F16C; the slices must be as [`panel`]
/// asserts; `K` must be `w.kind`'s constant.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma,avx2")]
unsafe fn rows_of<const G: usize, const K: u8>(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    out: &mut [f32],
) {
    let nb = w.nb;
    let mut acc = [_mm512_setzero_ps(); G];
    // The K-quants' and IQ4_XS's integer sums over the current super-block.
    let mut dots = [_mm512_setzero_si512(); G];
    let low = _mm512_set1_epi8(0x0F);
    let iq4 = iq4_table();
    let offset = w.kind.int_offset();
    let units = w.kind.sums_per_block();
    let (xp, sp) = (x.as_ptr(), sums.as_ptr());
    let half =
        |v: &[u16], at: usize| _mm512_cvtph_ps(_mm256_loadu_si256(v.as_ptr().add(at).cast()));
    // Each entry of `d` (and `m`) converted once, when its first block comes: per block
    // for the 32-weight kinds, per super-block of eight for the K-quants and IQ4_XS.
    let per_scale = scale_blocks::<K>();
    debug_assert_eq!(per_scale, w.kind.blocks_per_scale());
    let (mut sd, mut sm) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for b in 0..nb {
        if b % per_scale == 0 {
            let at = b / per_scale * PANEL;
            sd = half(w.d, at);
            if K == Q4_1 || K == Q5_1 || K == Q4K || K == Q5K {
                sm = half(w.m, at);
            }
        }
        let qs = w.qs.as_ptr().add(b * w.kind.panel_qs());
        // The weights stream from memory once per step: ask for blocks ahead, so the
        // loads are in flight while this block's arithmetic runs.
        w.prefetch_block(b + PREFETCH_BLOCKS);
        // The K-quants' and IQ4_XS's scale entries are streams of their own, a line of
        // which lasts one or two super-blocks: asked for ahead like the weights, or each
        // new line stalls a decode (decision 121).
        if per_scale > 1 && b % per_scale == 0 {
            w.prefetch_scales(b / per_scale + SCALE_AHEAD);
        }
        let groups: [__m512i; 8] = if K == Q8_0 {
            std::array::from_fn(|g| _mm512_loadu_si512(qs.add(64 * g).cast()))
        } else {
            let raw: [__m512i; 4] =
                std::array::from_fn(|g| _mm512_loadu_si512(qs.add(64 * g).cast()));
            let nibbles: [__m512i; 8] = std::array::from_fn(|g| match g {
                0..4 => _mm512_and_si512(raw[g], low),
                _ => _mm512_and_si512(_mm512_srli_epi16::<4>(raw[g - 4]), low),
            });
            if K == Q6K {
                // Group g's top bits sit at bits 2(g % 4) of plane g / 4: moved to bits
                // 4..6 (16-bit shifts; what crosses a byte is masked off).
                let planes = [4, 5].map(|p| _mm512_loadu_si512(qs.add(64 * p).cast()));
                let top = _mm512_set1_epi8(0x30);
                std::array::from_fn(|g| {
                    let p = planes[g / 4];
                    let bits = match g % 4 {
                        0 => _mm512_slli_epi16::<4>(p),
                        1 => _mm512_slli_epi16::<2>(p),
                        2 => p,
                        _ => _mm512_srli_epi16::<2>(p),
                    };
                    _mm512_or_si512(nibbles[g], _mm512_and_si512(bits, top))
                })
            } else if K == Q5K || K == Q5_0 || K == Q5_1 {
                // Group g's fifth bits sit at bit g of the plane: moved to bit 4.
                let plane = _mm512_loadu_si512(qs.add(64 * 4).cast());
                let bit = _mm512_set1_epi8(0x10);
                std::array::from_fn(|g| {
                    let bits = match g {
                        0 => _mm512_slli_epi16::<4>(plane),
                        1 => _mm512_slli_epi16::<3>(plane),
                        2 => _mm512_slli_epi16::<2>(plane),
                        3 => _mm512_slli_epi16::<1>(plane),
                        4 => plane,
                        5 => _mm512_srli_epi16::<1>(plane),
                        6 => _mm512_srli_epi16::<2>(plane),
                        _ => _mm512_srli_epi16::<3>(plane),
                    };
                    _mm512_or_si512(nibbles[g], _mm512_and_si512(bits, bit))
                })
            } else if K == IQ4NL || K == IQ4XS {
                // Each nibble looked up in the 16 values (per 128-bit lane).
                std::array::from_fn(|g| _mm512_shuffle_epi8(iq4, nibbles[g]))
            } else {
                nibbles
            }
        };
        // The scale units' `i32` scales of this block (Q6_K: its two halves), taken
        // from their pair: the low `i16` of each lane for even units, the high for odd.
        let scales = if per_scale > 1 {
            let first = b * units;
            let p = unit_pair(w.sub[0], first / 2);
            let even = _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(p));
            let odd = _mm512_srai_epi32::<16>(p);
            if K == Q6K {
                [even, odd]
            } else if first.is_multiple_of(2) {
                [even, even]
            } else {
                [odd, odd]
            }
        } else {
            [_mm512_setzero_si512(); 2]
        };
        for (i, (acc, dots)) in acc.iter_mut().zip(dots.iter_mut()).enumerate() {
            let xb = &*xp.add(i * nb + b);
            // Groups 0..4 are elements 4g.., 4..8 are 16 + 4(g − 4).. (high nibbles),
            // which is where the activation bytes of group g sit for every kind.
            let q = xb.qs.as_ptr().cast::<i32>();
            let bcast = |g: usize| _mm512_set1_epi32(q.add(g).read_unaligned());
            if K == Q6K {
                // One chain per 16-weight half, each times its scale.
                let mut lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), groups[0], bcast(0));
                let mut hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), groups[4], bcast(4));
                for g in 1..4 {
                    lo = _mm512_dpbusd_epi32(lo, groups[g], bcast(g));
                    hi = _mm512_dpbusd_epi32(hi, groups[g + 4], bcast(g + 4));
                }
                let scaled = _mm512_add_epi32(
                    _mm512_mullo_epi32(lo, scales[0]),
                    _mm512_mullo_epi32(hi, scales[1]),
                );
                *dots = _mm512_add_epi32(*dots, scaled);
                continue;
            }
            let mut even = _mm512_dpbusd_epi32(_mm512_setzero_si512(), groups[0], bcast(0));
            let mut odd = _mm512_dpbusd_epi32(_mm512_setzero_si512(), groups[1], bcast(1));
            for g in (2..8).step_by(2) {
                even = _mm512_dpbusd_epi32(even, groups[g], bcast(g));
                odd = _mm512_dpbusd_epi32(odd, groups[g + 1], bcast(g + 1));
            }
            let dot = _mm512_add_epi32(even, odd);
            if per_scale > 1 {
                *dots = _mm512_add_epi32(*dots, _mm512_mullo_epi32(dot, scales[0]));
                continue;
            }
            let mut dot = dot;
            if K == Q4_0 || K == Q5_0 || K == Q8_0 || K == IQ4NL {
                dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(offset * *sp.add(i * nb + b) as i32));
            }
            let dd = _mm512_mul_ps(sd, _mm512_set1_ps(xb.d));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), dd, *acc);
            if K == Q4_1 || K == Q5_1 {
                *acc = _mm512_fmadd_ps(sm, _mm512_set1_ps(xb.s), *acc);
            }
        }
        if per_scale > 1 && b % per_scale == per_scale - 1 {
            super_block_end::<G, K>(w, x, sums, b / per_scale, [sd, sm], &mut dots, &mut acc);
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        _mm512_storeu_ps(out.as_mut_ptr().add(i * PANEL), *acc);
    }
}

/// The end of super-block `s` for the K-quants and IQ4_XS: each row's `Σ c·Σx` over the
/// super-block's scale units (`vpdpwssd` of each pair's `c` with the row's two sums),
/// `c` the minimum (Q4_K, Q5_K) or the offset times the scale; then `acc += dots·d·xd`
/// (less `Σ c·Σx · dmin·xd`, or with it taken off `dots` first), and `dots` restarts.
///
/// # Safety
/// As [`rows_of`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma,avx2")]
#[inline]
unsafe fn super_block_end<const G: usize, const K: u8>(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    s: usize,
    [sd, sm]: [__m512; 2],
    dots: &mut [__m512i; G],
    acc: &mut [__m512; G],
) {
    let (nb, units) = (w.nb, w.kind.sums_per_block());
    // Pairs of scale units in this super-block: four, Q6_K's eight.
    let pairs = QK_K / QK * units / 2;
    // `c` per unit pair: the minimums, or the scales times the kind's offset (Q6_K's
    // 32, IQ4_XS's 128), |c| ≤ 4096 in `i16`.
    let offset = _mm512_set1_epi16(w.kind.int_offset() as i16);
    let c: [__m512i; 8] = std::array::from_fn(|j| {
        if j >= pairs {
            _mm512_setzero_si512()
        } else if K == Q4K || K == Q5K {
            unit_pair(w.sub[1], s * pairs + j)
        } else {
            _mm512_mullo_epi16(unit_pair(w.sub[0], s * pairs + j), offset)
        }
    });
    for (i, (acc, dots)) in acc.iter_mut().zip(dots.iter_mut()).enumerate() {
        let at = sums
            .as_ptr()
            .add((i * nb + s * (QK_K / QK)) * units)
            .cast::<i32>();
        let mut less = _mm512_setzero_si512();
        for (j, c) in c.iter().enumerate().take(pairs) {
            less = _mm512_dpwssd_epi32(less, *c, _mm512_set1_epi32(at.add(j).read_unaligned()));
        }
        let xd = _mm512_set1_ps(x.get_unchecked(i * nb + s * (QK_K / QK)).d);
        if K == Q4K || K == Q5K {
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*dots), _mm512_mul_ps(sd, xd), *acc);
            *acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(less), _mm512_mul_ps(sm, xd), *acc);
        } else {
            let total = _mm512_sub_epi32(*dots, less);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(sd, xd), *acc);
        }
        *dots = _mm512_setzero_si512();
    }
}

/// Scale-unit pair `j` of a panel's `sub` bytes ([`super::sub_index`]) widened: each
/// row's two units as `i16` in one 32-bit lane.
///
/// # Safety
/// The CPU must have AVX-512 F and BW; `v` must hold pair `j`'s 32 bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn unit_pair(v: &[u8], j: usize) -> __m512i {
    _mm512_cvtepi8_epi16(_mm256_loadu_si256(v.as_ptr().add(2 * PANEL * j).cast()))
}

/// Blocks sharing one entry of `d` for the kind coded `K`: [`super::PackedKind`]'s
/// `blocks_per_scale`, as a constant of the specialised kernel.
const fn scale_blocks<const K: u8>() -> usize {
    if K == Q4K || K == Q5K || K == Q6K || K == IQ4XS {
        QK_K / QK
    } else {
        1
    }
}

/// [`IQ4_VALUES`] plus 128 (unsigned for `vpdpbusd`) in every 128-bit lane, for
/// `vpshufb`.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[target_feature(enable = "avx512f")]
unsafe fn iq4_table() -> __m512i {
    let lane: [u8; 16] = std::array::from_fn(|i| (IQ4_VALUES[i] as i32 + 128) as u8);
    _mm512_broadcast_i32x4(_mm_loadu_si128(lane.as_ptr().cast()))
}
