//! AVX2 float panel kernels: the AVX-512 f32 FMA one split over the panel's two halves
//! (8 rows, one 256-bit register each). Several activation rows take one half at a
//! time, up to four rows a pass (f16: both halves, three rows a pass); one row (decode)
//! takes both halves at once, so that four FMA chains are in flight. A prefill product
//! may first widen a panel to f32 ([`widen`]) and run the three-row passes over loads
//! instead of conversions. Each is a twin of [`super::scalar`], bit for bit.

use std::arch::x86_64::*;

use super::{FloatPanel, FloatPanelFn, WidenFn, WidenedPanelFn, PANEL, PREFETCH_COLUMNS};
use crate::backend::cpu::isa::{allows, Isa};

/// The kernel when this CPU has AVX2, FMA and F16C.
pub(super) fn kernel() -> Option<FloatPanelFn> {
    let ok = allows(Isa::Avx2)
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    ok.then_some(panel as FloatPanelFn)
}

/// The widening and the kernel over widened panels when this CPU has AVX2, FMA and
/// F16C.
pub(super) fn widened_kernel() -> Option<(WidenFn, WidenedPanelFn)> {
    kernel().map(|_| (widen as WidenFn, widened_panel as WidenedPanelFn))
}

/// Safe entry point: only handed out by [`widened_kernel`] after the features were
/// detected.
fn widen(w: FloatPanel<'_>, out: &mut Vec<f32>) {
    assert!(w.w.len() >= w.stored() * PANEL);
    // Every value is written below: the buffer is only resized (zeroing what it gains),
    // not cleared first, so a panel costs one pass of writes, not two.
    out.resize(w.k * PANEL, 0.0);
    // SAFETY: `widened_kernel` checked the CPU features; the assert above and the
    // resize bound every read and write.
    unsafe { widen_avx2(w, out) }
}

/// Each column's 16 values as f32 (`c·PANEL + r`), exactly: f16 converted, bf16 pairs
/// split by a shift and a mask.
///
/// # Safety
/// The CPU must have AVX2 and F16C; `w` must hold its stored values and `out` `k·PANEL`.
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen_avx2(w: FloatPanel<'_>, out: &mut [f32]) {
    let (wp, op) = (w.w.as_ptr(), out.as_mut_ptr());
    let ahead = w.ahead.map(<[u16]>::as_ptr);
    // Columns c and c + 1 are 64 bytes of the panel (f16 and bf16 alike): the next
    // panel's line at the same place asked for, since this is the product's one read of
    // the panel from memory. A prefetch never faults.
    let next = |c: usize| {
        if let Some(a) = ahead {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(c * PANEL).cast());
        }
    };
    if w.bf16 {
        let high = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
        for c in (0..w.k).step_by(2) {
            next(c);
            for h in 0..2 {
                let v = _mm256_loadu_si256(wp.add(((c / 2) * PANEL + HALF * h) * 2).cast());
                let even = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
                _mm256_storeu_ps(op.add(c * PANEL + HALF * h), even);
                if c + 1 < w.k {
                    let odd = _mm256_castsi256_ps(_mm256_and_si256(v, high));
                    _mm256_storeu_ps(op.add((c + 1) * PANEL + HALF * h), odd);
                }
            }
        }
    } else {
        for c in 0..w.k {
            if c % 2 == 0 {
                next(c);
            }
            for h in 0..2 {
                let at = c * PANEL + HALF * h;
                _mm256_storeu_ps(
                    op.add(at),
                    _mm256_cvtph_ps(_mm_loadu_si128(wp.add(at).cast())),
                );
            }
        }
    }
}

/// Safe entry point: only handed out by [`widened_kernel`] after the features were
/// detected.
fn widened_panel(w: &[f32], k: usize, x: &[f32], rows: usize, out: &mut [f32]) {
    assert!(w.len() >= k * PANEL && x.len() >= rows * k && out.len() >= rows * PANEL);
    let mut r0 = 0;
    // SAFETY: `widened_kernel` checked the CPU features; the assert above bounds every
    // read and write the kernel makes.
    unsafe {
        while r0 < rows {
            let g = WIDE_ROWS.min(rows - r0);
            match g {
                1 => wide_rows::<1, false, _>(Widened(w.as_ptr()), None, k, x, r0, out),
                2 => wide_rows::<2, false, _>(Widened(w.as_ptr()), None, k, x, r0, out),
                _ => wide_rows::<WIDE_ROWS, false, _>(Widened(w.as_ptr()), None, k, x, r0, out),
            }
            r0 += g;
        }
    }
}

/// Rows of one half of a panel.
const HALF: usize = PANEL / 2;

/// Activation rows a pass over one half keeps in registers: eight accumulators (even
/// and odd columns), beside two weight registers, a broadcast and a mask.
const ROWS: usize = 4;

/// Activation rows an f16 pass over the whole panel keeps in registers: twelve
/// accumulators (two halves, even and odd columns), two weight registers and a
/// broadcast.
const WIDE_ROWS: usize = 3;

/// Safe entry point: only handed out by [`kernel`] after the features were detected.
fn panel(w: FloatPanel<'_>, x: &[f32], rows: usize, out: &mut [f32]) {
    assert!(x.len() >= rows * w.k && out.len() >= rows * PANEL);
    assert!(w.w.len() >= w.stored() * PANEL);
    // SAFETY: `kernel` checked the CPU features; the asserts above bound every read and
    // write the kernel makes.
    unsafe {
        if rows == 1 {
            // One row (decode): both halves at once, four FMA chains in flight.
            match w.bf16 {
                false => one_row::<false>(w, x, out),
                true => one_row::<true>(w, x, out),
            }
            return;
        }
        let mut r0 = 0;
        if !w.bf16 {
            while rows - r0 >= WIDE_ROWS {
                // The first pass reads the panel from memory: it asks for the next.
                match (r0, w.ahead) {
                    (0, Some(next)) => wide_rows::<WIDE_ROWS, true, _>(
                        Halves(w.w.as_ptr()),
                        Some(next.as_ptr()),
                        w.k,
                        x,
                        r0,
                        out,
                    ),
                    _ => wide_rows::<WIDE_ROWS, false, _>(
                        Halves(w.w.as_ptr()),
                        None,
                        w.k,
                        x,
                        r0,
                        out,
                    ),
                }
                r0 += WIDE_ROWS;
            }
        }
        while r0 < rows {
            let g = ROWS.min(rows - r0);
            for h in 0..2 {
                match (g, w.bf16) {
                    (1, false) => half_rows::<1, false>(w, x, r0, h, out),
                    (2, false) => half_rows::<2, false>(w, x, r0, h, out),
                    (3, false) => half_rows::<3, false>(w, x, r0, h, out),
                    (4, false) => half_rows::<4, false>(w, x, r0, h, out),
                    (1, true) => half_rows::<1, true>(w, x, r0, h, out),
                    (2, true) => half_rows::<2, true>(w, x, r0, h, out),
                    (3, true) => half_rows::<3, true>(w, x, r0, h, out),
                    (4, true) => half_rows::<4, true>(w, x, r0, h, out),
                    _ => {}
                }
            }
            r0 += g;
        }
    }
}

/// One activation row against the whole panel (decode, bound by reading the weights):
/// per column, the two halves' weights are converted and the row's broadcast value
/// goes into both halves' accumulator of that column's parity (even or odd, added at
/// the end as the twin does), so four independent FMA chains are in flight; the
/// panel's lines are asked for [`PREFETCH_COLUMNS`] ahead.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the slices must be as [`panel`] asserts.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn one_row<const BF16: bool>(w: FloatPanel<'_>, x: &[f32], out: &mut [f32]) {
    let (k, wp) = (w.k, w.w.as_ptr());
    let high = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
    // Column c of half h: f16 is a 128-bit load at c·PANEL + 8h; bf16 pairs (each row's
    // two values side by side) are a 256-bit load at (c/2·PANEL + 8h)·2, the even
    // column its low halves (shifted up), the odd one its high halves (masked).
    let column = |c: usize, h: usize| {
        if BF16 {
            let v = _mm256_loadu_si256(wp.add(((c / 2) * PANEL + HALF * h) * 2).cast());
            _mm256_castsi256_ps(if c.is_multiple_of(2) {
                _mm256_slli_epi32::<16>(v)
            } else {
                _mm256_and_si256(v, high)
            })
        } else {
            _mm256_cvtph_ps(_mm_loadu_si128(wp.add(c * PANEL + HALF * h).cast()))
        }
    };
    // Even and odd columns of each half.
    let mut even = [_mm256_setzero_ps(); 2];
    let mut odd = [_mm256_setzero_ps(); 2];
    let xp = x.as_ptr();
    let mut c = 0;
    while c + 2 <= k {
        // Two columns are 64 bytes of the panel (f16 and bf16 alike): its line
        // `PREFETCH_COLUMNS` ahead asked for, as the AVX-512 kernel does (decision 124).
        // A prefetch never faults.
        _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add((c + PREFETCH_COLUMNS) * PANEL).cast());
        let (v0, v1) = (
            _mm256_broadcast_ss(&*xp.add(c)),
            _mm256_broadcast_ss(&*xp.add(c + 1)),
        );
        for h in 0..2 {
            even[h] = _mm256_fmadd_ps(column(c, h), v0, even[h]);
            odd[h] = _mm256_fmadd_ps(column(c + 1, h), v1, odd[h]);
        }
        c += 2;
    }
    if c < k {
        let v0 = _mm256_broadcast_ss(&*xp.add(c));
        for (h, even) in even.iter_mut().enumerate() {
            *even = _mm256_fmadd_ps(column(c, h), v0, *even);
        }
    }
    for h in 0..2 {
        let o = out.as_mut_ptr().add(HALF * h);
        _mm256_storeu_ps(o, _mm256_add_ps(even[h], odd[h]));
    }
}

/// Activation rows `r0..r0 + G` against half `h` of the panel (the passes of two or more
/// rows): per column pair, the half's 8 rows of both columns converted once, then one
/// FMA per activation row and column into the row's even or odd accumulator. The loop walks pointers with no
/// branch inside, so the 2G accumulators, both weight columns and one broadcast stay in
/// registers (AVX2 has sixteen).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the slices must be as [`panel`] asserts.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_rows<const G: usize, const BF16: bool>(
    w: FloatPanel<'_>,
    x: &[f32],
    r0: usize,
    h: usize,
    out: &mut [f32],
) {
    let k = w.k;
    let xp = x.as_ptr().add(r0 * k);
    // Column pair p of the half: f16 columns 2p and 2p + 1 are 128-bit loads PANEL
    // values apart; a bf16 pair is one 256-bit load of the 8 rows' pairs.
    let half = w.w.as_ptr().add(if BF16 { 2 * HALF * h } else { HALF * h });
    let high = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
    let mut even = [_mm256_setzero_ps(); G];
    let mut odd = [_mm256_setzero_ps(); G];
    for p in 0..k / 2 {
        let wp = half.add(2 * p * PANEL);
        let (w0, w1) = if BF16 {
            let v = _mm256_loadu_si256(wp.cast());
            (
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
                _mm256_castsi256_ps(_mm256_and_si256(v, high)),
            )
        } else {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(wp.cast())),
                _mm256_cvtph_ps(_mm_loadu_si128(wp.add(PANEL).cast())),
            )
        };
        let xc = xp.add(2 * p);
        for i in 0..G {
            even[i] = _mm256_fmadd_ps(w0, _mm256_broadcast_ss(&*xc.add(i * k)), even[i]);
            odd[i] = _mm256_fmadd_ps(w1, _mm256_broadcast_ss(&*xc.add(i * k + 1)), odd[i]);
        }
    }
    if !k.is_multiple_of(2) {
        // The last column, alone (bf16: the low half of a pair padded with zero).
        let c = k - 1;
        let w0 = if BF16 {
            let v = _mm256_loadu_si256(half.add(c * PANEL).cast());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
        } else {
            _mm256_cvtph_ps(_mm_loadu_si128(half.add(c * PANEL).cast()))
        };
        for (i, even) in even.iter_mut().enumerate() {
            *even = _mm256_fmadd_ps(w0, _mm256_broadcast_ss(&*xp.add(i * k + c)), *even);
        }
    }
    for i in 0..G {
        let o = out.as_mut_ptr().add((r0 + i) * PANEL + HALF * h);
        _mm256_storeu_ps(o, _mm256_add_ps(even[i], odd[i]));
    }
}

/// Where [`wide_rows`] takes a column's two halves (8 rows each) as f32 from.
trait Columns: Copy {
    /// Half `h` of column `c`.
    ///
    /// # Safety
    /// Column `c` must lie in the panel; the CPU must have AVX2 and F16C.
    unsafe fn half(self, c: usize, h: usize) -> __m256;
}

/// An f16 panel: each half converted (`vcvtph2ps`) as it is used.
#[derive(Clone, Copy)]
struct Halves(*const u16);

/// A panel [`widen`] widened to f32: each half a load.
#[derive(Clone, Copy)]
struct Widened(*const f32);

impl Columns for Halves {
    #[inline(always)]
    unsafe fn half(self, c: usize, h: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(self.0.add(c * PANEL + HALF * h).cast()))
    }
}

impl Columns for Widened {
    #[inline(always)]
    unsafe fn half(self, c: usize, h: usize) -> __m256 {
        _mm256_loadu_ps(self.0.add(c * PANEL + HALF * h))
    }
}

/// Activation rows `r0..r0 + G` (of `k` values) against both halves of a panel of `k`
/// columns at once: per column, its 16 rows in two registers (converted from f16, or
/// loaded from a widened panel), then two FMAs per activation row against one
/// broadcast, into the row's even- or odd-column accumulators of each half. Half the
/// broadcasts per FMA of [`half_rows`], the same sums in the same order.
///
/// With `AHEAD`, a line of the `ahead` panel is asked for every two columns.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the panel must hold `k` columns, `x` `r0 + G`
/// rows of `k` and `out` `r0 + G` rows of [`PANEL`]; with `AHEAD`, `ahead` is `Some`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wide_rows<const G: usize, const AHEAD: bool, P: Columns>(
    w: P,
    ahead: Option<*const u16>,
    k: usize,
    x: &[f32],
    r0: usize,
    out: &mut [f32],
) {
    let xp = x.as_ptr().add(r0 * k);
    let ahead = ahead.unwrap_or(std::ptr::null());
    let mut even = [[_mm256_setzero_ps(); 2]; G];
    let mut odd = [[_mm256_setzero_ps(); 2]; G];
    // Column c's 16 weights into each row's accumulator pair `acc` (even or odd).
    let add_column = |acc: &mut [[__m256; 2]; G], c: usize| {
        let (w0, w1) = (w.half(c, 0), w.half(c, 1));
        for (i, acc) in acc.iter_mut().enumerate() {
            let v = _mm256_broadcast_ss(&*xp.add(i * k + c));
            acc[0] = _mm256_fmadd_ps(w0, v, acc[0]);
            acc[1] = _mm256_fmadd_ps(w1, v, acc[1]);
        }
    };
    for p in 0..k / 2 {
        // Two f16 columns are 64 bytes of the panel: one line of the next. A prefetch
        // never faults.
        if AHEAD {
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(2 * p * PANEL).cast());
        }
        add_column(&mut even, 2 * p);
        add_column(&mut odd, 2 * p + 1);
    }
    if !k.is_multiple_of(2) {
        add_column(&mut even, k - 1);
    }
    for i in 0..G {
        let o = out.as_mut_ptr().add((r0 + i) * PANEL);
        for h in 0..2 {
            _mm256_storeu_ps(o.add(HALF * h), _mm256_add_ps(even[i][h], odd[i][h]));
        }
    }
}
