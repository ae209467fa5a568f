//! The AVX-512 loops of one decoding token: its group's query rows in registers for one
//! pass over the cache, each block walked through one pointer, four positions' scores
//! summed across in one shuffle tree, and the values asked for while the keys are read.
//! Same bits as [`GroupTask::run_in_registers`] gives the same token: every product
//! chain, lane sum and accumulation runs in the same order (decision 94).

use std::arch::x86_64::*;
use std::sync::Arc;

use half::f16;

use super::{GroupTask, Rows, Scratch};
use crate::backend::cpu::prefetch;
use crate::backend::KV_BLOCK;

/// Positions ahead of the score loop whose key rows it asks for. A decoding step's
/// cache rows were written a whole weight stream ago, so they come from memory; 48
/// positions (~1.5 blocks) measured better than 16, 24 or 32 (decision 94).
const AHEAD: usize = 48;

/// Sixteen cached values as f32 in one register: f32 loaded, f16 converted (exactly).
pub(super) trait Lanes16: Copy {
    /// The sixteen values from `p`.
    ///
    /// # Safety
    /// Sixteen values from `p` must be readable; the CPU must have AVX-512 F.
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Lanes16 for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
}

impl Lanes16 for f16 {
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
}

/// The sum of `v`'s lanes: lane `i` of `(v[i] + v[i+8]) + (v[i+4] + v[i+12])` for `i`
/// in 0..4, then `(l0 + l2) + (l1 + l3)`; [`hsum4`] sums in the same order.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[inline(always)]
pub(super) unsafe fn hsum(v: __m512) -> f32 {
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let halves = _mm256_add_ps(_mm512_castps512_ps256(v), high);
    let c = _mm_add_ps(
        _mm256_castps256_ps128(halves),
        _mm256_extractf128_ps::<1>(halves),
    );
    let pairs = _mm_add_ps(c, _mm_movehl_ps(c, c));
    _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
}

/// The lane sums of four vectors, `[Σa, Σb, Σc, Σd]`, each bit for bit [`hsum`] of it.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[inline(always)]
unsafe fn hsum4(a: __m512, b: __m512, c: __m512, d: __m512) -> __m128 {
    // 128-bit chunks [a0, a1, b0, b1] + [a2, a3, b2, b3]: chunkwise v[i] + v[i+8].
    let ab = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x44>(a, b),
        _mm512_shuffle_f32x4::<0xEE>(a, b),
    );
    let cd = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x44>(c, d),
        _mm512_shuffle_f32x4::<0xEE>(c, d),
    );
    // [ab0, ab2, cd0, cd2] + [ab1, ab3, cd1, cd3]: chunk k holds vector k's four lanes
    // (v[i] + v[i+8]) + (v[i+4] + v[i+12]).
    let t = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x88>(ab, cd),
        _mm512_shuffle_f32x4::<0xDD>(ab, cd),
    );
    // Within each chunk: lanes (0 + 2, 1 + 3, ..), then those two summed into lane 0.
    let pairs = _mm512_add_ps(t, _mm512_permute_ps::<0b01_00_11_10>(t));
    let sums = _mm512_add_ps(pairs, _mm512_permute_ps::<0b10_11_00_01>(pairs));
    let lane0s = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castps512_ps128(_mm512_permutexvar_ps(lane0s, sums))
}

impl GroupTask<'_> {
    /// Runs [`Self::decode_in_registers`] when this task is one token whose `group`
    /// query rows fit one pass at head size `16·D` and keys and values are stored
    /// alike; returns whether it did.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, F16C and FMA.
    #[inline(always)]
    pub(super) unsafe fn try_decode<const D: usize>(
        &self,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) -> bool {
        if out.len() != self.group * 16 * D {
            return false;
        }
        macro_rules! rows {
            ($keys:expr, $values:expr, $width:expr) => {
                match (D, self.group) {
                    (4 | 8, 1) => {
                        self.decode_in_registers::<D, 1, _>($keys, $values, $width, scratch, out)
                    }
                    (4 | 8, 2) => {
                        self.decode_in_registers::<D, 2, _>($keys, $values, $width, scratch, out)
                    }
                    (4, 3) => {
                        self.decode_in_registers::<D, 3, _>($keys, $values, $width, scratch, out)
                    }
                    (4, 4) => {
                        self.decode_in_registers::<D, 4, _>($keys, $values, $width, scratch, out)
                    }
                    _ => return false,
                }
            };
        }
        match (self.keys, self.values) {
            (Rows::F16(k, kw), Rows::F16(v, vw)) if kw == vw => rows!(k, v, kw),
            (Rows::F32(k, kw), Rows::F32(v, vw)) if kw == vw => rows!(k, v, kw),
            _ => return false,
        }
        true
    }

    /// One decoding token's `G` query rows of head size `16·D` (`out`, `[G, 16·D]`)
    /// over the `self.first_seen` positions in `keys` and `values` (blocks of
    /// [`KV_BLOCK`] rows `width` values apart).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, F16C and FMA. (A kv head's row outside its
    /// position's, or a block of another size, panics.)
    #[inline(always)]
    unsafe fn decode_in_registers<const D: usize, const G: usize, T: Lanes16>(
        &self,
        keys: &[Arc<Vec<T>>],
        values: &[Arc<Vec<T>>],
        width: usize,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        let dh = 16 * D;
        let seen = self.first_seen;
        let scores = &mut scratch.scores;
        scores.clear();
        scores.resize(G * seen, 0.0);
        let sp = scores.as_mut_ptr();
        let q: [[__m512; D]; G] = std::array::from_fn(|r| {
            std::array::from_fn(|d| _mm512_loadu_ps(self.query(r)[16 * d..].as_ptr()))
        });
        let dot = |q: &[__m512; D], k: &[__m512; D]| {
            let mut s = _mm512_mul_ps(q[0], k[0]);
            for d in 1..D {
                s = _mm512_fmadd_ps(q[d], k[d], s);
            }
            s
        };
        assert!(
            self.kv_off + dh <= width,
            "a kv head's row lies inside the position's"
        );
        let blocks = |rows| blocks(rows, seen, width, self.kv_off);
        let scale = _mm_set1_ps(self.scale);
        for (j0, base) in blocks(keys) {
            let n = (seen - j0).min(KV_BLOCK);
            // SAFETY (the loads here and below): position `j0 + p` of the block is row
            // `p < n ≤ KV_BLOCK` of it, whose 16·D values from `kv_off` lie inside it.
            let row = |p: usize, d: usize| T::load16(base.add(p * width + 16 * d));
            // This block's values from `kv_off`: asked for here, read by the second loop.
            let value_base = values[j0 / KV_BLOCK][self.kv_off..].as_ptr();
            let mut p = 0;
            while p + 4 <= n {
                if j0 + p + AHEAD + 4 <= seen {
                    for i in 0..4 {
                        let j = j0 + p + AHEAD + i;
                        let block = keys[j / KV_BLOCK].as_ptr();
                        prefetch_row::<T, D>(
                            block.wrapping_add((j % KV_BLOCK) * width + self.kv_off),
                        );
                    }
                }
                for i in 0..4 {
                    prefetch_row::<T, D>(value_base.wrapping_add((p + i) * width));
                }
                let k: [[__m512; D]; 4] =
                    std::array::from_fn(|i| std::array::from_fn(|d| row(p + i, d)));
                for (r, q) in q.iter().enumerate() {
                    let s = hsum4(dot(q, &k[0]), dot(q, &k[1]), dot(q, &k[2]), dot(q, &k[3]));
                    // SAFETY: row `r < G` of `seen` scores, positions `j0 + p + 0..4 ≤ seen`.
                    _mm_storeu_ps(sp.add(r * seen + j0 + p), _mm_mul_ps(scale, s));
                }
                p += 4;
            }
            for p in p..n {
                let k: [__m512; D] = std::array::from_fn(|d| row(p, d));
                for (r, q) in q.iter().enumerate() {
                    // SAFETY: as above, one position.
                    *sp.add(r * seen + j0 + p) = self.scale * hsum(dot(q, &k));
                }
            }
        }
        self.normalise(scores, seen, |probs| {
            // SAFETY: this function's caller has AVX-512 F.
            unsafe { super::softmax_avx512(probs) }
        });
        let sp = scores.as_ptr();
        let mut acc = [[_mm512_setzero_ps(); D]; G];
        for (j0, base) in blocks(values) {
            for p in 0..(seen - j0).min(KV_BLOCK) {
                let v: [__m512; D] =
                    std::array::from_fn(|d| T::load16(base.add(p * width + 16 * d)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: row `r < G`, position `j0 + p < seen`.
                    let w = _mm512_set1_ps(*sp.add(r * seen + j0 + p));
                    for d in 0..D {
                        acc[d] = _mm512_fmadd_ps(w, v[d], acc[d]);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let dst = &mut out[r * dh..][..dh];
            for d in 0..D {
                _mm512_storeu_ps(dst[16 * d..].as_mut_ptr(), acc[d]);
            }
        }
    }
}

/// Asks for the cache lines of one kv head's row, `16·D` values from `row`.
#[inline(always)]
fn prefetch_row<T, const D: usize>(row: *const T) {
    prefetch::span(row.cast(), 16 * D * std::mem::size_of::<T>());
}

/// Each block holding one of the first `seen` positions of `rows`: its first position and
/// a pointer to its first row's values from `off` (rows `width` apart).
fn blocks<T>(
    rows: &[Arc<Vec<T>>],
    seen: usize,
    width: usize,
    off: usize,
) -> impl Iterator<Item = (usize, *const T)> + '_ {
    rows[..seen.div_ceil(KV_BLOCK)]
        .iter()
        .enumerate()
        .map(move |(b, block)| {
            assert_eq!(block.len(), KV_BLOCK * width, "cache blocks are whole");
            (b * KV_BLOCK, block[off..].as_ptr())
        })
}
