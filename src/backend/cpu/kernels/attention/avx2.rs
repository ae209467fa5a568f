//! AVX2 attention loops for head sizes of whole registers (64 and 128): scores of eight
//! cache positions at a time in eight vertical accumulators, summed across with one
//! transpose (no horizontal sum per position); the softmax with a vectorised `exp`;
//! each output row held in eight registers while the positions stream past. Keys and
//! values are widened to f32 once per task and read by every query row of it, or, for
//! a task of at most four rows (decode), converted from the cache as they are used and
//! asked for ahead of the loops that read them.

use std::arch::x86_64::*;
use std::sync::Arc;

use half::f16;

use super::{GroupTask, Rows, Scratch};
use crate::backend::cpu::kernels::vexp::exp_avx2;
use crate::backend::cpu::prefetch;
use crate::backend::KV_BLOCK;

impl GroupTask<'_> {
    /// The tiled loops where the head size allows, else the plain ones compiled for
    /// AVX2. Same results as [`Self::run`] but for the order of each dot product's sum
    /// and the vectorised `exp`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn run_avx2(&self, scratch: &mut Scratch, out: &mut [f32]) {
        self.run_avx2_direct_to(DIRECT_ROWS, scratch, out)
    }

    /// [`Self::run_avx2`] reading the cache directly for at most `direct_rows` rows
    /// (tests compare both ways of reading it).
    ///
    /// # Safety
    /// As [`Self::run_avx2`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn run_avx2_direct_to(
        &self,
        direct_rows: usize,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        match self.head_dim {
            64 => self.tiled::<8>(direct_rows, scratch, out),
            128 => self.tiled::<16>(direct_rows, scratch, out),
            _ => self.run::<true>(scratch, out),
        }
    }

    /// [`Self::run_avx2`] for head size `8·D`: with at most `direct_rows` query rows
    /// (decode) keys and values are read from the cache where they lie, converted as
    /// they are used; with more, widened to f32 once and read by every row. The
    /// conversion is exact, so both give the same bits.
    #[inline(always)]
    unsafe fn tiled<const D: usize>(
        &self,
        direct_rows: usize,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        let dh = 8 * D;
        let rows = out.len() / dh;
        let seen_max = self.first_seen + rows / self.group - 1;
        if rows <= direct_rows {
            match (self.keys, self.values) {
                (Rows::F16(k, kw), Rows::F16(v, vw)) => {
                    let (k, v) = (
                        Src::cache(k, kw, self.kv_off),
                        Src::cache(v, vw, self.kv_off),
                    );
                    return self.tiled_from::<D, f16, f16>(&k, &v, seen_max, scratch, out);
                }
                (Rows::F32(k, kw), Rows::F32(v, vw)) => {
                    let (k, v) = (
                        Src::cache(k, kw, self.kv_off),
                        Src::cache(v, vw, self.kv_off),
                    );
                    return self.tiled_from::<D, f32, f32>(&k, &v, seen_max, scratch, out);
                }
                _ => {}
            }
        }
        let (mut keys, mut values) = (
            std::mem::take(&mut scratch.keys),
            std::mem::take(&mut scratch.values),
        );
        widen_all(self.keys, self.kv_off, dh, seen_max, &mut keys);
        widen_all(self.values, self.kv_off, dh, seen_max, &mut values);
        let (k, v) = (Src::widened(&keys, dh), Src::widened(&values, dh));
        self.tiled_from::<D, f32, f32>(&k, &v, seen_max, scratch, out);
        (scratch.keys, scratch.values) = (keys, values);
    }

    /// The tiled loops over keys `k` and values `v` of positions `0..seen_max`.
    #[inline(always)]
    unsafe fn tiled_from<const D: usize, K: Lanes, V: Lanes>(
        &self,
        k: &Src<'_, K>,
        v: &Src<'_, V>,
        seen_max: usize,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        let dh = 8 * D;
        let rows = out.len() / dh;
        let seen = |r: usize| self.first_seen + r / self.group;
        let scores = &mut scratch.scores;
        scores.clear();
        scores.resize(rows * seen_max, 0.0);
        let scale = _mm256_set1_ps(self.scale);
        // Where keys and values are read from the cache: the first [`AHEAD`] positions'
        // keys asked for at once, then, in the first row's pass, each key `AHEAD`
        // positions on and the values of the positions it scores, which the value loop
        // reads next.
        for j in 0..AHEAD.min(seen_max) {
            k.prefetch(j, dh);
        }
        for r in 0..rows {
            let q = self.query(r).as_ptr();
            let n = seen(r);
            let row = &mut scores[r * seen_max..][..n];
            for j0 in (0..n).step_by(8) {
                if r == 0 {
                    for p in j0..j0 + 8 {
                        k.prefetch(p + AHEAD, dh);
                        v.prefetch(p, dh);
                    }
                }
                // Eight positions in one block (blocks hold a multiple of eight), each
                // `stride` values after the last; those past `seen_max` count as zero.
                let (base, stride) = (k.at(j0), k.stride);
                let live = (seen_max - j0).min(8);
                let mut acc = [_mm256_setzero_ps(); 8];
                // A constant count for whole groups, so that loop unrolls.
                match live {
                    8 => scores8::<D, K>(&mut acc, 8, q, base, stride),
                    _ => scores8::<D, K>(&mut acc, live, q, base, stride),
                }
                let s = _mm256_mul_ps(scale, sum_across(acc));
                if j0 + 8 <= n {
                    _mm256_storeu_ps(row.as_mut_ptr().add(j0), s);
                } else {
                    let mut tail = [0f32; 8];
                    _mm256_storeu_ps(tail.as_mut_ptr(), s);
                    row[j0..].copy_from_slice(&tail[..n - j0]);
                }
            }
        }
        self.normalise(scores, seen_max, |probs| {
            // SAFETY: this function's caller has AVX2 and FMA.
            unsafe { softmax_avx2(probs) }
        });
        for r in 0..rows {
            let probs = &scores[r * seen_max..][..seen(r)];
            for c0 in (0..D).step_by(8) {
                let mut acc = [_mm256_setzero_ps(); 8];
                for (j, &p) in probs.iter().enumerate() {
                    let p = _mm256_set1_ps(p);
                    let at = v.at(j).add(8 * c0);
                    for (c, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_fmadd_ps(p, V::load8(at.add(8 * c)), *acc);
                    }
                }
                let dst = out.as_mut_ptr().add(r * dh + 8 * c0);
                for (c, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(dst.add(8 * c), *acc);
                }
            }
        }
    }
}

/// Most query rows a task reads keys and values for straight from the cache, converting
/// each as it is used; above it, converting every position once into scratch costs
/// less than converting it once per row. Four covers one decoding token's whole group
/// of query heads (3 in SmolLM2, 4 in Llama 3.2 1B), the task of batched decode, whose
/// keys and values stream from memory: writing them to scratch and reading them back
/// cost more than converting each 3 or 4 times (decision 87).
const DIRECT_ROWS: usize = 4;

/// Values eight at a time as f32: f32 loaded, f16 converted (exactly).
trait Lanes: Copy {
    /// The eight values from `p`.
    ///
    /// # Safety
    /// Eight values from `p` must be readable; the CPU must have AVX and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
}

impl Lanes for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
}

/// Where one kv head's row of each position lies, from `off`: in the cache's blocks of
/// [`KV_BLOCK`] positions or in one contiguous buffer, rows `stride` values apart.
struct Src<'a, T> {
    rows: SrcRows<'a, T>,
    stride: usize,
    off: usize,
}

/// The storage behind a [`Src`].
enum SrcRows<'a, T> {
    Cache(&'a [Arc<Vec<T>>]),
    Buffer(&'a [T]),
}

impl<'a, T> Src<'a, T> {
    /// The cache's blocks, rows `width` values wide.
    fn cache(blocks: &'a [Arc<Vec<T>>], width: usize, off: usize) -> Src<'a, T> {
        Src {
            rows: SrcRows::Cache(blocks),
            stride: width,
            off,
        }
    }

    /// One contiguous buffer of rows `dh` values wide.
    fn widened(buf: &'a [T], dh: usize) -> Src<'a, T> {
        Src {
            rows: SrcRows::Buffer(buf),
            stride: dh,
            off: 0,
        }
    }

    /// Position `j`'s row.
    ///
    /// # Safety
    /// Position `j` must be stored.
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> *const T {
        let (base, within) = match self.rows {
            SrcRows::Cache(blocks) => (blocks.get_unchecked(j / KV_BLOCK).as_ptr(), j % KV_BLOCK),
            SrcRows::Buffer(buf) => (buf.as_ptr(), j),
        };
        base.add(within * self.stride + self.off)
    }

    /// Asks for position `j`'s `len` values where they lie in the cache (a position not
    /// stored asks for nothing); a contiguous buffer was just written, so its rows are
    /// not asked for.
    #[inline(always)]
    fn prefetch(&self, j: usize, len: usize) {
        if let SrcRows::Cache(blocks) = self.rows {
            if let Some(block) = blocks.get(j / KV_BLOCK) {
                let at = (j % KV_BLOCK) * self.stride + self.off;
                prefetch::span(block.as_ptr().wrapping_add(at).cast(), len * size_of::<T>());
            }
        }
    }
}

/// Positions ahead of the first row's score loop whose keys it asks for where it reads
/// them from the cache (decode): a step's cache rows were written a whole weight stream
/// ago, so they come from memory. As the AVX-512 loops' `AHEAD`.
const AHEAD: usize = 48;

/// `buf` = positions `0..positions` of `rows` (each `dh` values from `off`) as f32.
#[inline(always)]
fn widen_all(rows: Rows<'_>, off: usize, dh: usize, positions: usize, buf: &mut Vec<f32>) {
    buf.clear();
    buf.resize(positions * dh, 0.0);
    for (j, dst) in buf.chunks_exact_mut(dh).enumerate() {
        match rows {
            Rows::F32(b, width) => {
                dst.copy_from_slice(&b[j / KV_BLOCK][(j % KV_BLOCK) * width + off..][..dh])
            }
            Rows::F16(..) => {
                rows.get::<true>(j, off, dst);
            }
        }
    }
}

/// Adds to `acc[p]` the lane products of query row `q` (`8·D` values) and the key of
/// position `p` (at `base + p·stride`), for the first `live` of eight positions.
///
/// # Safety
/// `q` and the `live` keys must be readable; the CPU must have AVX2, FMA and F16C.
#[inline(always)]
unsafe fn scores8<const D: usize, K: Lanes>(
    acc: &mut [__m256; 8],
    live: usize,
    q: *const f32,
    base: *const K,
    stride: usize,
) {
    for c in 0..D {
        let qc = _mm256_loadu_ps(q.add(8 * c));
        for (p, acc) in acc.iter_mut().enumerate().take(live) {
            *acc = _mm256_fmadd_ps(qc, K::load8(base.add(p * stride + 8 * c)), *acc);
        }
    }
}

/// The eight sums of the eight vectors' lanes, in their order: two rounds of pairwise
/// horizontal adds, then the two 128-bit halves added.
#[inline(always)]
unsafe fn sum_across(v: [__m256; 8]) -> __m256 {
    let h01 = _mm256_hadd_ps(v[0], v[1]);
    let h23 = _mm256_hadd_ps(v[2], v[3]);
    let h45 = _mm256_hadd_ps(v[4], v[5]);
    let h67 = _mm256_hadd_ps(v[6], v[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let low = _mm256_permute2f128_ps::<0x20>(h0123, h4567);
    let high = _mm256_permute2f128_ps::<0x31>(h0123, h4567);
    _mm256_add_ps(low, high)
}

/// Softmax of `row` in place, max-subtracted, eight lanes at a time with [`exp_avx2`]
/// (the tail through a vector padded with −∞, whose `exp` is 0).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn softmax_avx2(row: &mut [f32]) {
    let n = row.len();
    let whole = n / 8 * 8;
    let ptr = row.as_mut_ptr();
    let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
    for i in (0..whole).step_by(8) {
        max = _mm256_max_ps(max, _mm256_loadu_ps(ptr.add(i)));
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), max);
    let max = lanes
        .iter()
        .chain(&row[whole..])
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let max = _mm256_set1_ps(max);
    let mut sum = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(ptr.add(i)), max));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(ptr.add(i), e);
    }
    let mut tail = [f32::NEG_INFINITY; 8];
    tail[..n - whole].copy_from_slice(&row[whole..]);
    let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(tail.as_ptr()), max));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(tail.as_mut_ptr(), e);
    row[whole..].copy_from_slice(&tail[..n - whole]);
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    let inv = 1.0 / lanes.iter().sum::<f32>();
    for i in (0..whole).step_by(8) {
        let v = _mm256_loadu_ps(ptr.add(i));
        _mm256_storeu_ps(ptr.add(i), _mm256_mul_ps(v, _mm256_set1_ps(inv)));
    }
    row[whole..].iter_mut().for_each(|v| *v *= inv);
}
