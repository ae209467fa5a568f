//! AVX2 packed kernels for CPUs without `vpdpbusd`: each half of a panel (8 rows) per
//! block (both halves in one pass for a single activation row), one 4-byte group at a
//! time unpacked into one register and used by every activation row of the pass (one
//! `vpmaddubsw` each, the row's 4 bytes broadcast), so that only the rows' running sums
//! stay live beside it (AVX2 has sixteen registers; all eight groups unpacked at once
//! spilled). 4-bit formats add the eight groups' `i16` pair sums before one `vpmaddwd`
//! (each pair is at most 2·15·127, eight of them fit in `i16`); 5-bit ones widen each
//! half of four groups (2·31·127 a pair); Q6_K adds two groups in `i16` (2·63·127 a
//! pair) and widens them by `vpmaddwd` with the 16-weight half's scale, taking 32·Σx
//! off once per block; Q8_0 and the IQ4 kinds (signed values) move the weights' signs
//! onto the activations (`vpsignb`) and widen each group to `i32` at once (a pair can
//! reach 2·128·127). The first pass over a panel asks for its weights and scale entries
//! ahead, as the AVX-512 kernel does. Where several passes read a panel of a kind
//! whose groups cost most to unpack (the 5-bit kinds, Q6_K, IQ4, Q4_K), it is unpacked
//! once into bytes that every pass of every row group then loads. Twin of
//! [`super::scalar`], bit for bit: the integer dot is exact and the f32 steps are the
//! scalar ones in the same order.

use std::arch::x86_64::*;

use super::code::*;
use super::prefetch::{PREFETCH_BLOCKS, SCALE_AHEAD};
use super::{Panel, PanelFn, PANEL};
use crate::backend::cpu::isa::{allows, Isa};
use crate::backend::cpu::quant::IQ4_VALUES;
use crate::backend::cpu::simd::BlockQ8;

/// The kernel when this CPU has AVX2, FMA and F16C.
pub(super) fn kernel() -> Option<PanelFn> {
    let ok = allows(Isa::Avx2)
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    ok.then_some(panel as PanelFn)
}

/// Weight rows of one half of a panel: one 256-bit register of `i32` lanes.
const HALF: usize = PANEL / 2;

/// Activation rows one pass takes: each keeps an integer sum and an f32 accumulator
/// (the 5-bit kinds a pair sum as well), and what does not fit in AVX2's sixteen
/// registers spills to L1, which costs less than unpacking the weights again. Measured
/// (2 threads, `[64, 2048] × [8192, 2048]`, GMAC/s against the former 3 or 4 rows):
/// Q8_0 and IQ4_XS best at 8 (+28 %, +14 %), the nibble kinds at 6 (+5 to +8 %), Q6_K
/// and the 5-bit kinds at 4 (+25 %, +20 %).
const fn rows_per_pass(kind: u8) -> usize {
    match kind {
        Q8_0 | IQ4NL | IQ4XS => 8,
        Q4_0 | Q4_1 | Q4K => 6,
        _ => 4,
    }
}

/// Safe entry point: only handed out by [`kernel`] after the features were detected.
fn panel(w: Panel<'_>, x: &[BlockQ8], sums: &[i16], rows: usize, out: &mut [f32], again: bool) {
    assert!(x.len() >= rows * w.nb && sums.len() >= rows * w.nb * w.kind.sums_per_block());
    assert!(out.len() >= rows * PANEL && w.is_whole() && !w.kind.is_float());
    // SAFETY: `kernel` checked the CPU features; the asserts above bound every read and
    // write the kernels make.
    unsafe { by_kind!(w.kind, passes(w, x, sums, rows, out, again)) }
}

/// Whether [`passes`] unpacks a panel of `kind` once into [`UNPACKED`] when more than
/// one pass reads it: the kinds whose groups cost most to unpack. The 5-bit kinds' and
/// Q6_K's bit planes took a quarter of a Q5_K prefill product unpacked in every pass
/// (`[64, 2048] × [8192, 2048]`: 6.3 ms, 4.8 without the fifth bits); IQ4's lookup 8 %.
/// Q4_K's 64-row products gain 6–8 % and its 16-row ones nothing; Q4_0's and Q4_1's
/// nibbles cost so little that the 16-row `[16, 576] × [1536, 576]` of batched decode
/// ran 13 % slower unpacked once, and Q8_0's 16-row head 8 %, so they unpack as they go.
const fn unpacks_once(kind: u8) -> bool {
    matches!(kind, Q5_0 | Q5_1 | Q5K | Q6K | IQ4NL | IQ4XS | Q4K)
}

thread_local! {
    /// This thread's last panel unpacked by [`passes`]: its quants' address and length,
    /// and its groups in the order [`rows_of`] reads them (block, half, group).
    /// [`super::for_panels`] calls a panel's row groups one after another on one
    /// thread and says so (`again`), so the later calls read the groups the first left.
    static UNPACKED: std::cell::RefCell<(usize, usize, Vec<__m256i>)> =
        const { std::cell::RefCell::new((0, 0, Vec::new())) };
}

/// The passes over `rows` activation rows, [`rows_per_pass`] at a time (a constant per
/// kind, so only those row counts are instantiated), each over both halves in turn;
/// one row takes both halves in one pass. A panel that [`unpacks_once`] is unpacked
/// into [`UNPACKED`] first where more than one pass reads it, or found there `again`.
///
/// # Safety
/// As [`rows_of`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn passes<const K: u8>(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    rows: usize,
    out: &mut [f32],
    again: bool,
) {
    let most = const { rows_per_pass(K) };
    let once = const { unpacks_once(K) };
    if rows == 1 && !(again && once) {
        // One row (decode): both halves in one pass over the block, so each block's
        // loads and arithmetic are in flight together and the loop runs once (decision
        // 127). A first group of one row is the product's only one, so no later group
        // looks for this panel in `UNPACKED`.
        rows_of::<1, K, 2, false>(w, x, sums, std::ptr::null(), 0, 0, out);
        return;
    }
    if !once {
        return passes_of::<K, false>(w, x, sums, std::ptr::null(), rows, out);
    }
    UNPACKED.with_borrow_mut(|(at, len, groups)| {
        let key = (w.qs.as_ptr() as usize, w.qs.len());
        if rows <= most && !again {
            // One pass reads the panel now. Its later row groups, if any, unpack it
            // themselves: the buffer must not pass for this panel (weights freed since
            // may have left another panel's bytes at its address).
            *at = 0;
            return passes_of::<K, false>(w, x, sums, std::ptr::null(), rows, out);
        }
        if !again || (*at, *len) != key {
            unpack::<K>(w, groups);
            (*at, *len) = key;
        }
        passes_of::<K, true>(w, x, sums, groups.as_ptr(), rows, out);
    });
}

/// `groups` = every group of the panel, in [`UNPACKED`]'s order.
///
/// # Safety
/// The CPU must have AVX2; `K` must be `w.kind`'s constant.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack<const K: u8>(w: Panel<'_>, groups: &mut Vec<__m256i>) {
    groups.clear();
    groups.reserve(w.nb * 2 * 8);
    let unpacking = Unpacking::new();
    for b in 0..w.nb {
        for h in 0..2 {
            let qs = w.qs.as_ptr().add(b * w.kind.panel_qs() + 32 * h);
            for g in 0..8 {
                groups.push(group_of::<K>(qs, g, unpacking));
            }
        }
    }
}

/// [`passes`]' passes of more than one row (or of a row on an unpacked panel), reading
/// the groups from `unpacked` where `PRE`.
///
/// # Safety
/// As [`rows_of`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn passes_of<const K: u8, const PRE: bool>(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    unpacked: *const __m256i,
    rows: usize,
    out: &mut [f32],
) {
    let most = const { rows_per_pass(K) };
    let mut r0 = 0;
    while r0 < rows {
        let g = most.min(rows - r0);
        for h in 0..2 {
            let u = unpacked;
            match g {
                1 => rows_of::<1, K, 1, PRE>(w, x, sums, u, r0, h, out),
                2 => rows_of::<2, K, 1, PRE>(w, x, sums, u, r0, h, out),
                3 => rows_of::<3, K, 1, PRE>(w, x, sums, u, r0, h, out),
                4 => rows_of::<4, K, 1, PRE>(w, x, sums, u, r0, h, out),
                5 if most >= 5 => rows_of::<5, K, 1, PRE>(w, x, sums, u, r0, h, out),
                6 if most >= 6 => rows_of::<6, K, 1, PRE>(w, x, sums, u, r0, h, out),
                7 if most >= 7 => rows_of::<7, K, 1, PRE>(w, x, sums, u, r0, h, out),
                8 if most >= 8 => rows_of::<8, K, 1, PRE>(w, x, sums, u, r0, h, out),
                _ => {}
            }
        }
        r0 += g;
    }
}

/// Activation rows `r0..r0 + G` against `H` halves of the panel from half `h0` (half
/// `h` is its rows `8h..8h + 8`), accumulators in registers: each block's halves one
/// after the other within the block loop, so that with `H = 2` one pass covers the
/// panel.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the slices must be as [`panel`] asserts; `K`
/// must be `w.kind`'s constant.
#[target_feature(enable = "avx2,fma,f16c")]
// Each instance compiled on its own: inlined into `passes`, the one-row decode loops
// ran 5 to 10 % slower (IQ4_XS, Q5_K, Q6_K [1, 2048] × [8192, 2048], 3 rounds).
#[inline(never)]
unsafe fn rows_of<const G: usize, const K: u8, const H: usize, const PRE: bool>(
    w: Panel<'_>,
    x: &[BlockQ8],
    sums: &[i16],
    unpacked: *const __m256i,
    r0: usize,
    h0: usize,
    out: &mut [f32],
) {
    let nb = w.nb;
    let mut acc_h = [[_mm256_setzero_ps(); G]; H];
    // The K-quants' and IQ4_XS's integer sums over the current super-block.
    let mut sums_h = [[_mm256_setzero_si256(); G]; H];
    let per_scale = w.kind.blocks_per_scale();
    // A pair of scale units' bytes (`sub_index`), this half's rows widened: each row's
    // two as `i16` in one 32-bit lane.
    let pair_of = |v: &[u8], j: usize, h: usize| {
        let at = v.as_ptr().add(2 * PANEL * j + 2 * HALF * h);
        _mm256_cvtepi8_epi16(_mm_loadu_si128(at.cast()))
    };
    let even = |p: __m256i| _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(p));
    let unpacking = Unpacking::new();
    let ones = _mm256_set1_epi16(1);
    let parts = w.kind.sums_per_block();
    let (xp, sp) = (x.as_ptr().add(r0 * nb), sums.as_ptr().add(r0 * nb * parts));
    for b in 0..nb {
        // The first pass streams the panel from memory (the others find it in cache):
        // it asks for the weights and the scale entries ahead, as the AVX-512 kernel
        // does; without, a one-row product's loads and arithmetic took turns
        // (decision 124: 1B-class decode 17–70 % faster).
        if r0 == 0 && h0 == 0 {
            w.prefetch_block(b + PREFETCH_BLOCKS);
            if per_scale > 1 && b % per_scale == 0 {
                w.prefetch_scales(b / per_scale + SCALE_AHEAD);
            }
        }
        for hi in 0..H {
            let h = h0 + hi;
            let pair = |v: &[u8], j: usize| pair_of(v, j, h);
            let acc = &mut acc_h[hi];
            let sums_k = &mut sums_h[hi];
            // Group g of the block's 8 rows as bytes: unpacked now, or by an earlier call
            // on this panel (`unpacked`, [`UNPACKED`]'s order).
            let qs = w.qs.as_ptr().add(b * w.kind.panel_qs() + 32 * h);
            let group = |g: usize| match PRE {
                true => _mm256_load_si256(unpacked.add((2 * b + h) * 8 + g)),
                false => group_of::<K>(qs, g, unpacking),
            };
            // Row i's 4 bytes of group g, broadcast.
            let bcast = |i: usize, g: usize| {
                let q = (*xp.add(i * nb + b)).qs.as_ptr().cast::<i32>();
                _mm256_set1_epi32(q.add(g).read_unaligned())
            };
            // Each row's integer dot product over the block (exact, so the order of its
            // sums is free).
            let mut dot = [_mm256_setzero_si256(); G];
            if K == Q8_0 || K == IQ4NL || K == IQ4XS {
                // Signed weights: `vpmaddubsw` of |w| and x with w's sign; a pair can reach
                // 2·128·127, so each group widens at once.
                for g in 0..8 {
                    let wq = group(g);
                    let magnitude = _mm256_abs_epi8(wq);
                    for (i, dot) in dot.iter_mut().enumerate() {
                        let pairs =
                            _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(bcast(i, g), wq));
                        *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(pairs, ones));
                    }
                }
            } else if K == Q6K {
                // Values up to 63: two groups' pair sums fit in `i16` (2·2·63·127), and
                // `vpmaddwd` by the half's scale (as an `i16` pair per row) widens them
                // already scaled. The 32·Σx each half loses is taken once per block below.
                let both = pair(w.sub[0], b);
                let (sc0, sc1) = (even(both), _mm256_srai_epi32::<16>(both));
                // Lane r of `lo` and `hi` as one `i16` pair per 32-bit lane.
                let pair = |lo: __m256i, hi: __m256i| {
                    let low = _mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF));
                    _mm256_or_si256(low, _mm256_slli_epi32::<16>(hi))
                };
                for half in 0..2 {
                    let sc = if half == 0 { sc0 } else { sc1 };
                    let sc = pair(sc, sc);
                    for g in (4 * half..4 * half + 4).step_by(2) {
                        let (w0, w1) = (group(g), group(g + 1));
                        for (i, dot) in dot.iter_mut().enumerate() {
                            let p = _mm256_add_epi16(
                                _mm256_maddubs_epi16(w0, bcast(i, g)),
                                _mm256_maddubs_epi16(w1, bcast(i, g + 1)),
                            );
                            *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(p, sc));
                        }
                    }
                }
                // Each row's (Σx of half 0, Σx of half 1) as an `i16` pair (|Σx| ≤ 16·127)
                // against the two halves' scales: 32·(sc₀·s₀ + sc₁·s₁) in one `vpmaddwd`.
                for (i, dot) in dot.iter_mut().enumerate() {
                    let s =
                        _mm256_set1_epi32(sp.add((i * nb + b) * 2).cast::<i32>().read_unaligned());
                    let less = _mm256_slli_epi32::<5>(_mm256_madd_epi16(s, both));
                    *dot = _mm256_sub_epi32(*dot, less);
                }
            } else if K == Q5K || K == Q5_0 || K == Q5_1 {
                // Values up to 31: four groups' pair sums fit in `i16`, eight may not, so
                // each four-group half widens on its own.
                for half in 0..2 {
                    let mut pairs = [_mm256_setzero_si256(); G];
                    for g in 4 * half..4 * half + 4 {
                        let wq = group(g);
                        for (i, pairs) in pairs.iter_mut().enumerate() {
                            *pairs =
                                _mm256_add_epi16(*pairs, _mm256_maddubs_epi16(wq, bcast(i, g)));
                        }
                    }
                    for (dot, pairs) in dot.iter_mut().zip(&pairs) {
                        *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(*pairs, ones));
                    }
                }
            } else {
                // Nibbles: eight groups' pair sums (each at most 2·15·127) fit in `i16`.
                let mut pairs = [_mm256_setzero_si256(); G];
                for g in 0..8 {
                    let wq = group(g);
                    for (i, pairs) in pairs.iter_mut().enumerate() {
                        *pairs = _mm256_add_epi16(*pairs, _mm256_maddubs_epi16(wq, bcast(i, g)));
                    }
                }
                for (dot, pairs) in dot.iter_mut().zip(&pairs) {
                    *dot = _mm256_madd_epi16(*pairs, ones);
                }
            }
            let half = |v: &[u16], at: usize| {
                _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(at + HALF * h).cast()))
            };
            if w.kind.is_super() {
                // Summed over the super-block in integers: Q6_K's dots come scaled and
                // offset; the others' times their unit's scale (IQ4_XS's are signed, so
                // already without the 128 the other kernels take off).
                let scaled = if K == Q6K {
                    dot
                } else {
                    let sc = pair(w.sub[0], b / 2);
                    let sc = if b.is_multiple_of(2) {
                        even(sc)
                    } else {
                        _mm256_srai_epi32::<16>(sc)
                    };
                    dot.map(|dot| _mm256_mullo_epi32(dot, sc))
                };
                for (total, dot) in sums_k.iter_mut().zip(scaled) {
                    *total = _mm256_add_epi32(*total, dot);
                }
                if b % per_scale == per_scale - 1 {
                    let s = b / per_scale;
                    let sd = half(w.d, s * PANEL);
                    // Q4_K's and Q5_K's `dmin` and four pairs of minimums, the same for every
                    // activation row: read once per super-block.
                    let minimums = K == Q4K || K == Q5K;
                    let sm = if minimums {
                        half(w.m, s * PANEL)
                    } else {
                        _mm256_setzero_ps()
                    };
                    let mins: [__m256i; 4] = std::array::from_fn(|j| {
                        if minimums {
                            pair(w.sub[1], s * per_scale / 2 + j)
                        } else {
                            _mm256_setzero_si256()
                        }
                    });
                    debug_assert_eq!(per_scale / 2, mins.len());
                    for (i, (acc, total)) in acc.iter_mut().zip(sums_k.iter_mut()).enumerate() {
                        let first = i * nb + s * per_scale;
                        let xd = _mm256_set1_ps((*xp.add(first)).d);
                        *acc = _mm256_fmadd_ps(
                            _mm256_cvtepi32_ps(*total),
                            _mm256_mul_ps(sd, xd),
                            *acc,
                        );
                        if minimums {
                            // Σ mn·Σx over the super-block's four pairs of blocks.
                            let at = sp.add(first).cast::<i32>();
                            let mut less = _mm256_setzero_si256();
                            for (j, mn) in mins.iter().enumerate() {
                                let s2 = _mm256_set1_epi32(at.add(j).read_unaligned());
                                less = _mm256_add_epi32(less, _mm256_madd_epi16(*mn, s2));
                            }
                            let dm = _mm256_mul_ps(sm, xd);
                            *acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(less), dm, *acc);
                        }
                        *total = _mm256_setzero_si256();
                    }
                }
                continue;
            }
            let (dw, mw) = if K == Q4_1 || K == Q5_1 {
                (half(w.d, b * PANEL), half(w.m, b * PANEL))
            } else {
                (half(w.d, b * PANEL), _mm256_setzero_ps())
            };
            for (i, (acc, dot)) in acc.iter_mut().zip(dot).enumerate() {
                let xb = &*xp.add(i * nb + b);
                let mut dot = dot;
                if K == Q4_0 || K == Q5_0 {
                    let offset = w.kind.int_offset();
                    let sum = *sp.add(i * nb + b) as i32;
                    dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(offset * sum));
                }
                let dd = _mm256_mul_ps(dw, _mm256_set1_ps(xb.d));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), dd, *acc);
                if K == Q4_1 || K == Q5_1 {
                    *acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(xb.s), *acc);
                }
            }
        }
    }
    for (hi, acc) in acc_h.iter().enumerate() {
        for (i, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(
                out.as_mut_ptr().add((r0 + i) * PANEL + HALF * (h0 + hi)),
                *acc,
            );
        }
    }
}

/// The registers [`group_of`] unpacks with, made once per pass.
#[derive(Clone, Copy)]
struct Unpacking {
    low: __m256i,
    flip: __m256i,
    iq4: __m256i,
}

impl Unpacking {
    /// The masks and the IQ4 table.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline(always)]
    unsafe fn new() -> Unpacking {
        Unpacking {
            low: _mm256_set1_epi8(0x0F),
            flip: _mm256_set1_epi8(0x80u8 as i8),
            // IQ4_VALUES, signed: the weights' signs go onto the activations as for Q8_0.
            iq4: _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_VALUES.as_ptr().cast())),
        }
    }
}

/// Group `g` (4 weights) of a block's half (8 rows) whose stored groups start at `qs`,
/// as bytes, one 32-bit lane a row. Nibbles: groups 0..4 are the low nibbles of the
/// four stored groups, 4..8 the high ones (elements 16 + 4(g − 4)..). Q8_0: the stored
/// `q + 128` back to `q`.
///
/// # Safety
/// The CPU must have AVX2; `qs` must be a half's groups of a block of kind `K`.
#[inline(always)]
unsafe fn group_of<const K: u8>(qs: *const u8, g: usize, u: Unpacking) -> __m256i {
    let load = |g: usize| _mm256_loadu_si256(qs.add(64 * g).cast());
    if K == Q8_0 {
        return _mm256_xor_si256(load(g), u.flip);
    }
    let low = u.low;
    let raw = load(g % 4);
    let nibbles = if g < 4 {
        _mm256_and_si256(raw, low)
    } else {
        _mm256_and_si256(_mm256_srli_epi16::<4>(raw), low)
    };
    if K == Q6K {
        // Group g's top bits sit at bits 2(g % 4) of plane g / 4: moved to bits 4..6
        // (16-bit shifts; what crosses a byte is masked off).
        let p = load(4 + g / 4);
        let bits = match g % 4 {
            0 => _mm256_slli_epi16::<4>(p),
            1 => _mm256_slli_epi16::<2>(p),
            2 => p,
            _ => _mm256_srli_epi16::<2>(p),
        };
        _mm256_or_si256(nibbles, _mm256_and_si256(bits, _mm256_set1_epi8(0x30)))
    } else if K == Q5K || K == Q5_0 || K == Q5_1 {
        // Group g's fifth bits sit at bit g of the plane: moved to bit 4.
        let plane = load(4);
        let bits = match g {
            0 => _mm256_slli_epi16::<4>(plane),
            1 => _mm256_slli_epi16::<3>(plane),
            2 => _mm256_slli_epi16::<2>(plane),
            3 => _mm256_slli_epi16::<1>(plane),
            4 => plane,
            5 => _mm256_srli_epi16::<1>(plane),
            6 => _mm256_srli_epi16::<2>(plane),
            _ => _mm256_srli_epi16::<3>(plane),
        };
        _mm256_or_si256(nibbles, _mm256_and_si256(bits, _mm256_set1_epi8(0x10)))
    } else if K == IQ4NL || K == IQ4XS {
        // Each nibble looked up in the 16 values (per 128-bit lane).
        _mm256_shuffle_epi8(u.iq4, nibbles)
    } else {
        nibbles
    }
}
