//! Causal grouped-query attention over a sequence's KV cache.

use std::sync::Arc;

use rayon::prelude::*;

use super::check_len;
use half::f16;

use crate::backend::cpu::prefetch;
use crate::backend::{BackendError, KvBlocks, KvRows, StepState, KV_BLOCK};

/// Attention attributes (see [`crate::graph::Op::Attention`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttentionParams {
    /// KV cache layer.
    pub layer: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Score scale.
    pub scale: f32,
    /// Positions each query sees, itself included (`None`: all earlier ones).
    pub window: Option<usize>,
    /// Score soft-capping `c · tanh(s / c)` before the softmax (`None`: none).
    pub softcap: Option<f32>,
}

/// For each sequence of the step (each [`crate::backend::Segment`]): appends its rows of
/// `k`, `v` (`[N, n_kv_heads·head_dim]`) to layer `p.layer` of its cache at its
/// `kv_len`, then writes to `out` (`[N, n_heads·head_dim]`) the attention of each of its
/// query tokens `t` over cache positions `0..=kv_len + t` (the last `p.window` of them
/// with a sliding window). Rows of no sequence (padding) get zeros.
pub(crate) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    p: AttentionParams,
    state: &mut StepState<'_>,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if p.n_heads == 0
        || p.n_kv_heads == 0
        || p.head_dim == 0
        || !p.n_heads.is_multiple_of(p.n_kv_heads)
    {
        return Err(BackendError::Input(format!(
            "attention: {} heads do not group over {} kv heads of dim {}",
            p.n_heads, p.n_kv_heads, p.head_dim
        )));
    }
    let (q_width, kv_width) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    let n = q.len() / q_width.max(1);
    check_len("attention q", q.len(), n * q_width)?;
    check_len("attention k", k.len(), n * kv_width)?;
    check_len("attention v", v.len(), n * kv_width)?;
    check_len("attention output", out.len(), q.len())?;
    if state.segments().is_empty() {
        return Err(BackendError::KvCache("attention needs a KV cache".into()));
    }
    // Append every sequence's new rows, then read all caches at once.
    prefetch_appends(state, p.layer);
    let mut spans = Vec::with_capacity(state.segments().len());
    for seg in state.segments_mut() {
        let rows = seg.rows_within(n)?;
        let (kv_len, cache) = (seg.kv_len, &mut *seg.kv);
        let layout = cache.layout();
        if layout.n_kv_heads != p.n_kv_heads || layout.head_dim != p.head_dim {
            return Err(BackendError::KvCache(format!(
                "cache has {} kv heads of dim {}, layer {} needs {} of dim {}",
                layout.n_kv_heads, layout.head_dim, p.layer, p.n_kv_heads, p.head_dim
            )));
        }
        if kv_len + rows.len() > layout.capacity {
            return Err(BackendError::KvCache(format!(
                "{kv_len} cached + {} new positions exceed capacity {}",
                rows.len(),
                layout.capacity
            )));
        }
        let (keys, values) = cache.layer_mut(p.layer, kv_len)?;
        let new = rows.start * kv_width..rows.end * kv_width;
        keys.write(kv_len, &k[new.clone()])?;
        values.write(kv_len, &v[new])?;
        spans.push((rows, kv_len));
    }
    let mut caches = Vec::with_capacity(spans.len());
    for seg in state.segments() {
        let (keys, values) = seg.kv.layer(p.layer)?;
        caches.push((Rows::of(keys), Rows::of(values)));
    }
    let group = p.n_heads / p.n_kv_heads;
    let dh = p.head_dim;
    let wide = super::vexp::avx2_available();
    let widest = super::vexp::avx512_available();
    // One task per (block of a sequence's tokens, kv head): every query row of the
    // block's tokens whose head shares that kv head is scored together, so each key and
    // value row is loaded (and converted from f16) once for up to `TOKEN_BLOCK · group`
    // rows. Blocks never span two sequences. Too few such tasks for the pool are split
    // by query head (how few depends on the loops that run them). Each query row's
    // result depends on nothing else in its task, so no split changes it.
    let mut tasks = Vec::new();
    for (s, (rows, _)) in spans.iter().enumerate() {
        let block = rows.len().clamp(1, TOKEN_BLOCK);
        for first in rows.clone().step_by(block) {
            for kv_head in 0..p.n_kv_heads {
                tasks.push(Task {
                    seq: s,
                    first,
                    tokens: block.min(rows.end - first),
                    kv_head,
                    heads: 0..group,
                });
            }
        }
    }
    // The loops every task of this call runs: AVX-512 with rows in registers, or not.
    let registers = widest && fits_registers(dh);
    let split_below = if registers {
        REGISTER_SPLIT_BELOW_TASKS_PER_THREAD
    } else {
        SPLIT_BELOW_TASKS_PER_THREAD
    };
    if tasks.len() < split_below * rayon::current_num_threads() && group > 1 {
        tasks = tasks
            .into_iter()
            .flat_map(|t| {
                (0..group).map(move |h| Task {
                    heads: h..h + 1,
                    ..t.clone()
                })
            })
            .collect();
    }
    let results: Vec<Vec<f32>> = tasks
        .par_iter()
        .map_init(
            || Scratch {
                row: vec![0.0; dh],
                ..Scratch::default()
            },
            |scratch, t| {
                let ((rows, kv_len), (keys, values)) = (&spans[t.seq], caches[t.seq]);
                let task = GroupTask {
                    queries: &q[t.first * q_width..(t.first + t.tokens) * q_width],
                    q_width,
                    head_off: (t.kv_head * group + t.heads.start) * dh,
                    group: t.heads.len(),
                    keys,
                    values,
                    kv_off: t.kv_head * dh,
                    first_seen: kv_len + (t.first - rows.start) + 1,
                    head_dim: dh,
                    scale: p.scale,
                    window: p.window,
                    softcap: p.softcap,
                };
                let mut local = vec![0.0; t.tokens * t.heads.len() * dh];
                if registers {
                    // SAFETY: `registers` holds only where `avx512_available` found
                    // AVX-512 F, F16C and FMA.
                    unsafe { task.run_avx512(scratch, &mut local) }
                } else if wide {
                    // SAFETY: `avx2_available` checked that this CPU has AVX2, FMA and F16C.
                    unsafe { task.run_avx2(scratch, &mut local) }
                } else {
                    task.run::<false>(scratch, &mut local)
                }
                local
            },
        )
        .collect();
    out.fill(0.0);
    for (t, local) in tasks.iter().zip(&results) {
        let width = t.heads.len() * dh;
        for (i, rows) in local.chunks_exact(width).enumerate() {
            let at = (t.first + i) * q_width + (t.kv_head * group + t.heads.start) * dh;
            out[at..at + width].copy_from_slice(rows);
        }
    }
    Ok(())
}

/// Asks the caches for what appending to `layer` of each sequence of the step will
/// touch: first every target block's header (whose reference count the write checks),
/// then the rows the new position lands in (whose address that header holds). Each
/// sequence's cache was last touched a step ago, so without this the appends of a
/// batched step wait on memory one after another, three dependent misses each
/// (decision 125).
fn prefetch_appends(state: &StepState<'_>, layer: usize) {
    for rows_too in [false, true] {
        for seg in state.segments() {
            let Ok((keys, values)) = seg.kv.layer(layer) else {
                continue;
            };
            for rows in [keys, values] {
                let (block, at) = (seg.kv_len / KV_BLOCK, seg.kv_len % KV_BLOCK * rows.width());
                match rows.blocks() {
                    KvBlocks::F16(b) => prefetch_block(b.get(block), at, rows.width(), rows_too),
                    KvBlocks::F32(b) => prefetch_block(b.get(block), at, rows.width(), rows_too),
                }
            }
        }
    }
}

/// Asks for `block`'s header, or for its `width` values from `at`.
fn prefetch_block<T>(block: Option<&Arc<Vec<T>>>, at: usize, width: usize, values: bool) {
    let Some(block) = block else {
        return;
    };
    if values {
        let start = block.as_ptr().wrapping_add(at).cast();
        prefetch::span(start, width * std::mem::size_of::<T>());
    } else {
        prefetch::line(Arc::as_ptr(block).cast());
    }
}

/// Most tokens whose queries one attention task scores together.
const TOKEN_BLOCK: usize = 16;

/// Fewer (token block, kv head) tasks than this per pool thread are split by query head
/// where the AVX2 or scalar loops run them (decision 84).
const SPLIT_BELOW_TASKS_PER_THREAD: usize = 4;

/// As [`SPLIT_BELOW_TASKS_PER_THREAD`] where the AVX-512 register loops run them: one,
/// so a kv head's query heads share one read of its cache even when that leaves the
/// pool unevenly loaded (one decoding sequence of SmolLM2: 3 tasks on 2 threads, not 9
/// one-head tasks reading each key three times; attention 30 % faster, decision 92).
const REGISTER_SPLIT_BELOW_TASKS_PER_THREAD: usize = 1;

/// Whether [`GroupTask::run_avx512`] takes heads of `head_dim` values (it keeps rows in
/// registers).
fn fits_registers(head_dim: usize) -> bool {
    matches!(head_dim, 64 | 128)
}

/// One attention task: a block of one sequence's tokens, the query heads `heads` (of
/// the group sharing kv head `kv_head`).
#[derive(Clone)]
struct Task {
    seq: usize,
    first: usize,
    tokens: usize,
    kv_head: usize,
    heads: std::ops::Range<usize>,
}

/// One layer's cached keys or values, borrowed in their storage type.
#[derive(Clone, Copy)]
enum Rows<'a> {
    F16(&'a [Arc<Vec<f16>>], usize),
    F32(&'a [Arc<Vec<f32>>], usize),
}

impl<'a> Rows<'a> {
    fn of(rows: &'a KvRows) -> Rows<'a> {
        match rows.blocks() {
            KvBlocks::F16(b) => Rows::F16(b, rows.width()),
            KvBlocks::F32(b) => Rows::F32(b, rows.width()),
        }
    }

    /// `buf.len()` values of position `pos` from offset `off` as f32: borrowed, or
    /// converted into `buf`.
    #[inline(always)]
    fn get<'b, const WIDE: bool>(self, pos: usize, off: usize, buf: &'b mut [f32]) -> &'b [f32]
    where
        'a: 'b,
    {
        let (block, within) = (pos / KV_BLOCK, pos % KV_BLOCK);
        match self {
            Rows::F32(b, width) => &b[block][within * width + off..][..buf.len()],
            Rows::F16(b, width) => {
                widen::<WIDE>(&b[block][within * width + off..][..buf.len()], buf);
                buf
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Rows<'_> {
    /// `16·D` values of position `pos` from offset `off` as f32, in `D` registers.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and F16C.
    #[inline(always)]
    unsafe fn load<const D: usize>(self, pos: usize, off: usize) -> [std::arch::x86_64::__m512; D] {
        use std::arch::x86_64::{_mm256_loadu_si256, _mm512_cvtph_ps, _mm512_loadu_ps};
        let (block, within) = (pos / KV_BLOCK, pos % KV_BLOCK);
        match self {
            Rows::F32(b, width) => {
                let row = &b[block][within * width + off..][..16 * D];
                // SAFETY: each load reads 16 of `row`'s `16·D` values.
                std::array::from_fn(|d| unsafe { _mm512_loadu_ps(row.as_ptr().add(16 * d)) })
            }
            Rows::F16(b, width) => {
                let row = &b[block][within * width + off..][..16 * D];
                // SAFETY: as above, 16 halves (32 bytes) per load.
                std::array::from_fn(|d| unsafe {
                    _mm512_cvtph_ps(_mm256_loadu_si256(row.as_ptr().add(16 * d).cast()))
                })
            }
        }
    }
}

/// `src` as f32 into `out` (the shorter length): inline, eight at a time with F16C when
/// `WIDE` (only inside [`GroupTask::run_avx2`], on a CPU [`super::vexp::avx2_available`]
/// approved), else one by one. Inline matters: a call per cached row cost 9 % of a
/// batched decode step.
#[inline(always)]
fn widen<const WIDE: bool>(src: &[f16], out: &mut [f32]) {
    let n = src.len().min(out.len());
    let (src, out) = (&src[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if WIDE {
        use std::arch::x86_64::{_mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
        let whole = n / 8 * 8;
        for i in (0..whole).step_by(8) {
            // SAFETY: `WIDE` is set only where F16C is present (see above); `i + 8 ≤ n`
            // bounds the 16-byte load and the 32-byte store.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr().add(i).cast());
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(v));
            }
        }
        for (o, v) in out[whole..].iter_mut().zip(&src[whole..]) {
            *o = v.to_f32();
        }
        return;
    }
    for (o, v) in out.iter_mut().zip(src) {
        *o = v.to_f32();
    }
}

/// Per-thread buffers of the attention loops.
#[derive(Default)]
struct Scratch {
    /// `group · seen` scores, then probabilities.
    scores: Vec<f32>,
    /// One key or value row converted to f32.
    row: Vec<f32>,
    /// The tiled AVX2 loops' keys of every position seen, as f32.
    keys: Vec<f32>,
    /// As `keys`, the values.
    values: Vec<f32>,
}

/// Attention of a block of consecutive tokens' query heads that share one kv head.
struct GroupTask<'a> {
    /// The block's query rows, `[tokens, q_width]`.
    queries: &'a [f32],
    /// Width of a query row (all heads).
    q_width: usize,
    /// Offset of this group's first head within a query row.
    head_off: usize,
    /// Query heads per kv head.
    group: usize,
    /// The layer's keys.
    keys: Rows<'a>,
    /// The layer's values.
    values: Rows<'a>,
    /// Offset of this kv head within a key or value row.
    kv_off: usize,
    /// Cache positions the block's first token attends to; each later token sees one more.
    first_seen: usize,
    head_dim: usize,
    scale: f32,
    /// Positions each query sees, itself included (`None`: all earlier ones).
    window: Option<usize>,
    /// Score soft-capping (`None`: none).
    softcap: Option<f32>,
}

impl GroupTask<'_> {
    /// The loops with query and output rows held in AVX-512 registers: `16 / D` rows at a
    /// time, each key or value converted once per position and used for all of them,
    /// no row round-tripping through memory per position; one decoding token's group
    /// in one pass by `avx512.rs`'s loops, which give the same bits. Same results as
    /// [`Self::run`] but for the order of each dot product's sum.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, F16C and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn run_avx512(&self, scratch: &mut Scratch, out: &mut [f32]) {
        match self.head_dim {
            64 if self.try_decode::<4>(scratch, out) => {}
            128 if self.try_decode::<8>(scratch, out) => {}
            64 => self.run_in_registers::<4, 4>(scratch, out),
            128 => self.run_in_registers::<8, 2>(scratch, out),
            _ => self.run::<true>(scratch, out),
        }
    }

    /// [`Self::run_avx512`] for head size `16·D`, `R` rows per pass.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn run_in_registers<const D: usize, const R: usize>(
        &self,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let dh = self.head_dim;
        let rows = out.len() / dh;
        let tokens = rows / self.group;
        let seen_max = self.first_seen + tokens - 1;
        let first_row = |j: usize| (j + 1).saturating_sub(self.first_seen) * self.group;
        let scores = &mut scratch.scores;
        scores.clear();
        scores.resize(rows * seen_max, 0.0);
        for r0 in (0..rows).step_by(R) {
            let live = |r: usize| r0 + r < rows;
            // SAFETY: every query row holds `dh = 16·D` values.
            let q: [[__m512; D]; R] = std::array::from_fn(|r| {
                std::array::from_fn(|d| unsafe {
                    if live(r) {
                        _mm512_loadu_ps(self.query(r0 + r)[16 * d..].as_ptr())
                    } else {
                        _mm512_setzero_ps()
                    }
                })
            });
            for j in 0..seen_max {
                let key = self.keys.load::<D>(j, self.kv_off);
                let first = first_row(j);
                for (r, q) in q.iter().enumerate() {
                    let row = r0 + r;
                    if live(r) && row >= first {
                        let mut s = _mm512_mul_ps(q[0], key[0]);
                        for d in 1..D {
                            s = _mm512_fmadd_ps(q[d], key[d], s);
                        }
                        scores[row * seen_max + j] = self.scale * avx512::hsum(s);
                    }
                }
            }
        }
        self.normalise(scores, seen_max, |probs| {
            // SAFETY: this function's caller has AVX-512 F.
            unsafe { softmax_avx512(probs) }
        });
        for r0 in (0..rows).step_by(R) {
            let live = |r: usize| r0 + r < rows;
            let mut acc = [[_mm512_setzero_ps(); D]; R];
            for j in 0..seen_max {
                let value = self.values.load::<D>(j, self.kv_off);
                let first = first_row(j);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let row = r0 + r;
                    if live(r) && row >= first {
                        let p = _mm512_set1_ps(scores[row * seen_max + j]);
                        for d in 0..D {
                            acc[d] = _mm512_fmadd_ps(p, value[d], acc[d]);
                        }
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                if live(r) {
                    let dst = &mut out[(r0 + r) * dh..][..dh];
                    for d in 0..D {
                        _mm512_storeu_ps(dst[16 * d..].as_mut_ptr(), acc[d]);
                    }
                }
            }
        }
    }

    /// Turns each row of raw `scores` (`seen_max` wide) into probabilities over the
    /// positions its token sees: window, soft-capping, then `softmax` (the portable one,
    /// or a vectorised one of the same values).
    #[inline(always)]
    fn normalise(&self, scores: &mut [f32], seen_max: usize, softmax: impl Fn(&mut [f32])) {
        for (r, probs) in scores.chunks_exact_mut(seen_max).enumerate() {
            let seen = self.first_seen + r / self.group;
            // Positions before the window get probability exactly zero.
            let first = self.window.map_or(0, |w| seen.saturating_sub(w));
            probs[..first].fill(f32::NEG_INFINITY);
            if let Some(cap) = self.softcap {
                probs[first..seen]
                    .iter_mut()
                    .for_each(|s| *s = cap * (*s / cap).tanh());
            }
            softmax(&mut probs[..seen]);
        }
    }

    /// Query row `r` (token `r / group`, head `r % group` of the group).
    #[inline(always)]
    fn query(&self, r: usize) -> &[f32] {
        let (t, h) = (r / self.group, r % self.group);
        &self.queries[t * self.q_width + self.head_off + h * self.head_dim..][..self.head_dim]
    }

    /// Writes the outputs of every query row (`[tokens · group, head_dim]`) into `out`.
    #[inline(always)]
    fn run<const FMA: bool>(&self, scratch: &mut Scratch, out: &mut [f32]) {
        let dh = self.head_dim;
        let rows = out.len() / dh;
        let tokens = rows / self.group;
        let seen_max = self.first_seen + tokens - 1;
        // Rows of tokens before this one cannot see position `j`: the first row that can.
        let first_row = |j: usize| (j + 1).saturating_sub(self.first_seen) * self.group;
        let Scratch { scores, row, .. } = scratch;
        row.resize(dh, 0.0);
        scores.clear();
        scores.resize(rows * seen_max, 0.0);
        for j in 0..seen_max {
            let key = self.keys.get::<FMA>(j, self.kv_off, row);
            for r in first_row(j)..rows {
                scores[r * seen_max + j] = self.scale * dot::<FMA>(self.query(r), key);
            }
        }
        self.normalise(scores, seen_max, softmax_in_place);
        out.fill(0.0);
        for j in 0..seen_max {
            let value = self.values.get::<FMA>(j, self.kv_off, row);
            for r in first_row(j)..rows {
                axpy::<FMA>(
                    scores[r * seen_max + j],
                    value,
                    &mut out[r * dh..(r + 1) * dh],
                );
            }
        }
    }
}

/// `Σ a·b` with eight independent accumulators, so the loop vectorises.
#[inline(always)]
fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (a_tail, b_tail) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        for l in 0..8 {
            lanes[l] = madd::<FMA>(x[l], y[l], lanes[l]);
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// `a · b + c`: one fused instruction where the caller was compiled with FMA, a plain
/// multiply and add elsewhere (where `mul_add` would be a slow library call).
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `out += alpha · x`.
#[inline(always)]
fn axpy<const FMA: bool>(alpha: f32, x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = madd::<FMA>(alpha, v, *o);
    }
}

/// [`softmax_in_place`] sixteen lanes at a time, with [`exp_avx512`] for `exp`.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_avx512(row: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = row.len();
    let ptr = row.as_mut_ptr();
    let mask = |i: usize| -> __mmask16 {
        let left = n - i;
        if left >= 16 {
            0xFFFF
        } else {
            (1u16 << left) - 1
        }
    };
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut max = neg_inf;
    for i in (0..n).step_by(16) {
        // SAFETY: the mask keeps every lane within `row`.
        max = _mm512_max_ps(max, _mm512_mask_loadu_ps(neg_inf, mask(i), ptr.add(i)));
    }
    let max = _mm512_set1_ps(_mm512_reduce_max_ps(max));
    let mut sum = _mm512_setzero_ps();
    for i in (0..n).step_by(16) {
        let m = mask(i);
        let e = super::vexp::exp_avx512(_mm512_sub_ps(
            _mm512_mask_loadu_ps(neg_inf, m, ptr.add(i)),
            max,
        ));
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(ptr.add(i), m, e);
    }
    let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(sum));
    for i in (0..n).step_by(16) {
        let m = mask(i);
        _mm512_mask_storeu_ps(
            ptr.add(i),
            m,
            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, ptr.add(i)), inv),
        );
    }
}

/// Softmax of `row` in place, max-subtracted for stability.
#[inline(always)]
fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(test)]
mod tests;
