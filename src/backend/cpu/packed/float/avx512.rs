//! AVX-512 float panel kernels. f32 FMA: per column, the panel's 16 values widened in
//! one register (`vcvtph2ps`; bf16 pairs split by a shift and a mask, exactly), then one
//! FMA per activation row into that row's even- or odd-column accumulator, twin of
//! [`super::scalar`] bit for bit. With AVX-512 BF16: one `vdpbf16ps` per pair of columns
//! and activation row, into even- or odd-pair accumulators, on activations rounded to
//! bf16 sixteen at a time.

use std::arch::x86_64::*;

use super::{Bf16DotFn, Bf16RoundFn, FloatPanel, FloatPanelFn, PANEL, PREFETCH_COLUMNS};
use crate::backend::cpu::isa::{allows, Isa};

/// The f32 FMA kernel when this CPU has AVX-512 F (with F16C and FMA).
pub(super) fn kernel() -> Option<FloatPanelFn> {
    let ok = allows(Isa::Avx512)
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("f16c")
        && is_x86_feature_detected!("fma");
    ok.then_some(panel as FloatPanelFn)
}

/// The bf16 pair kernel when this CPU has AVX-512 F and BF16.
pub(super) fn bf16_dot_kernel() -> Option<Bf16DotFn> {
    let ok = allows(Isa::Avx512)
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bf16");
    ok.then_some(bf16_panel as Bf16DotFn)
}

/// `round(x, out)`: as many leading values of `x` as fill whole registers of sixteen
/// rounded to bf16 bits into `out` (returned: how many), when this CPU has AVX-512 F.
pub(super) fn round_to_bf16_kernel() -> Option<Bf16RoundFn> {
    let ok = allows(Isa::Avx512) && is_x86_feature_detected!("avx512f");
    ok.then_some(round_to_bf16 as Bf16RoundFn)
}

/// Safe entry point: only handed out by [`round_to_bf16_kernel`] after the feature was
/// detected.
fn round_to_bf16(x: &[f32], out: &mut [u16]) -> usize {
    let whole = x.len().min(out.len()) / 16 * 16;
    // SAFETY: `round_to_bf16_kernel` checked the CPU feature; `whole` bounds every read
    // and write.
    unsafe { round_to_bf16_avx512(&x[..whole], &mut out[..whole]) };
    whole
}

/// Sixteen values at a time, the rounding of [`half::bf16::from_f32`] in integers: add
/// 0x7FFF plus the kept part's lowest bit, keep the high half; NaN keeps its high half
/// with the quiet bit set.
///
/// # Safety
/// The CPU must have AVX-512 F; `x.len()` must be a multiple of 16, at most `out.len()`.
#[target_feature(enable = "avx512f")]
unsafe fn round_to_bf16_avx512(x: &[f32], out: &mut [u16]) {
    let (bias, one, quiet) = (
        _mm512_set1_epi32(0x7FFF),
        _mm512_set1_epi32(1),
        _mm512_set1_epi32(0x40),
    );
    let abs = _mm512_set1_epi32(0x7FFF_FFFF);
    let inf = _mm512_set1_epi32(0x7F80_0000);
    for i in (0..x.len()).step_by(16) {
        let v = _mm512_loadu_si512(x.as_ptr().add(i).cast());
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(v), one);
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(v, _mm512_add_epi32(bias, lsb)));
        let nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, abs), inf);
        let nan_bits = _mm512_or_si512(_mm512_srli_epi32::<16>(v), quiet);
        let bits = _mm512_mask_blend_epi32(nan, rounded, nan_bits);
        _mm256_storeu_si256(out.as_mut_ptr().add(i).cast(), _mm512_cvtepi32_epi16(bits));
    }
}

/// Safe entry point: only handed out by [`kernel`] after the features were detected.
fn panel(w: FloatPanel<'_>, x: &[f32], rows: usize, out: &mut [f32]) {
    assert!(rows <= 8 && x.len() >= rows * w.k && out.len() >= rows * PANEL);
    assert!(w.w.len() >= w.stored() * PANEL);
    // SAFETY: `kernel` checked the CPU features; the asserts above bound every read and
    // write the kernel makes.
    unsafe {
        match (rows, w.bf16) {
            (1, false) => rows_of::<1, false>(w, x, out),
            (2, false) => rows_of::<2, false>(w, x, out),
            (3, false) => rows_of::<3, false>(w, x, out),
            (4, false) => rows_of::<4, false>(w, x, out),
            (5, false) => rows_of::<5, false>(w, x, out),
            (6, false) => rows_of::<6, false>(w, x, out),
            (7, false) => rows_of::<7, false>(w, x, out),
            (8, false) => rows_of::<8, false>(w, x, out),
            (1, true) => rows_of::<1, true>(w, x, out),
            (2, true) => rows_of::<2, true>(w, x, out),
            (3, true) => rows_of::<3, true>(w, x, out),
            (4, true) => rows_of::<4, true>(w, x, out),
            (5, true) => rows_of::<5, true>(w, x, out),
            (6, true) => rows_of::<6, true>(w, x, out),
            (7, true) => rows_of::<7, true>(w, x, out),
            (8, true) => rows_of::<8, true>(w, x, out),
            _ => {}
        }
    }
}

/// [`rows_with`], asking for the next panel where the caller gave it.
///
/// # Safety
/// As [`rows_with`].
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn rows_of<const G: usize, const BF16: bool>(w: FloatPanel<'_>, x: &[f32], out: &mut [f32]) {
    match w.ahead {
        Some(_) => rows_with::<G, BF16, true>(w, x, out),
        None => rows_with::<G, BF16, false>(w, x, out),
    }
}

/// `G` activation rows against the panel, accumulators in registers; with `AHEAD`, a
/// line of `w.ahead` asked for every two columns, else a line of this panel
/// [`PREFETCH_COLUMNS`] ahead.
///
/// # Safety
/// The CPU must have AVX-512 F, F16C and FMA; the slices must be as [`panel`] asserts.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn rows_with<const G: usize, const BF16: bool, const AHEAD: bool>(
    w: FloatPanel<'_>,
    x: &[f32],
    out: &mut [f32],
) {
    let k = w.k;
    let (wp, xp) = (w.w.as_ptr(), x.as_ptr());
    // Columns c and c + 1 (c even) of the panel's 16 rows.
    let columns = |c: usize| {
        if BF16 {
            let v = _mm512_loadu_si512(wp.add(c * PANEL).cast());
            let high = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
            (
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v)),
                _mm512_castsi512_ps(_mm512_and_si512(v, high)),
            )
        } else {
            let half = |c: usize| _mm512_cvtph_ps(_mm256_loadu_si256(wp.add(c * PANEL).cast()));
            (
                half(c),
                if c + 1 < k {
                    half(c + 1)
                } else {
                    _mm512_setzero_ps()
                },
            )
        }
    };
    let ahead = w.ahead.unwrap_or(w.w).as_ptr();
    let mut even = [_mm512_setzero_ps(); G];
    let mut odd = [_mm512_setzero_ps(); G];
    let mut c = 0;
    while c + 2 <= k {
        // Two columns are 64 bytes of the panel (f16 and bf16 alike): one line of the
        // panel to come. A prefetch never faults.
        if AHEAD {
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(c * PANEL).cast());
        } else {
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add((c + PREFETCH_COLUMNS) * PANEL).cast());
        }
        let (w0, w1) = columns(c);
        for i in 0..G {
            let xi = xp.add(i * k + c);
            even[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(*xi), even[i]);
            odd[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(*xi.add(1)), odd[i]);
        }
        c += 2;
    }
    if c < k {
        let (w0, _) = columns(c);
        for (i, even) in even.iter_mut().enumerate() {
            *even = _mm512_fmadd_ps(w0, _mm512_set1_ps(*xp.add(i * k + c)), *even);
        }
    }
    for i in 0..G {
        _mm512_storeu_ps(
            out.as_mut_ptr().add(i * PANEL),
            _mm512_add_ps(even[i], odd[i]),
        );
    }
}

/// Safe entry point: only handed out by [`bf16_dot_kernel`] after the features were
/// detected.
fn bf16_panel(w: FloatPanel<'_>, x: &[u32], rows: usize, out: &mut [f32]) {
    let pairs = w.k.div_ceil(2);
    assert!(w.bf16 && rows <= 8 && x.len() >= rows * pairs && out.len() >= rows * PANEL);
    assert!(w.w.len() >= pairs * 2 * PANEL);
    // SAFETY: `bf16_dot_kernel` checked the CPU features; the asserts above bound every
    // read and write the kernel makes.
    unsafe {
        match rows {
            1 => pairs_of::<1>(w, x, out),
            2 => pairs_of::<2>(w, x, out),
            3 => pairs_of::<3>(w, x, out),
            4 => pairs_of::<4>(w, x, out),
            5 => pairs_of::<5>(w, x, out),
            6 => pairs_of::<6>(w, x, out),
            7 => pairs_of::<7>(w, x, out),
            8 => pairs_of::<8>(w, x, out),
            _ => {}
        }
    }
}

/// [`pairs_with`], asking for the next panel where the caller gave it.
///
/// # Safety
/// As [`pairs_with`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pairs_of<const G: usize>(w: FloatPanel<'_>, x: &[u32], out: &mut [f32]) {
    match w.ahead {
        Some(_) => pairs_with::<G, true>(w, x, out),
        None => pairs_with::<G, false>(w, x, out),
    }
}

/// `G` rows of bf16 activation pairs against a bf16 panel; with `AHEAD`, two lines of
/// `w.ahead` asked for every two pairs, else two lines of this panel
/// [`PREFETCH_COLUMNS`] ahead.
///
/// # Safety
/// The CPU must have AVX-512 F and BF16; the slices must be as [`bf16_panel`] asserts.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pairs_with<const G: usize, const AHEAD: bool>(
    w: FloatPanel<'_>,
    x: &[u32],
    out: &mut [f32],
) {
    let pairs = w.k.div_ceil(2);
    let (wp, xp) = (w.w.as_ptr(), x.as_ptr());
    // Any 512 bits are a valid `__m512bh`: the bf16 operands are loaded and broadcast as
    // integers and reinterpreted.
    let load = |q: usize| wp.add(q * 2 * PANEL).cast::<__m512bh>().read_unaligned();
    let bcast = |i: usize, q: usize| {
        std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(*xp.add(i * pairs + q) as i32))
    };
    let ahead = w.ahead.unwrap_or(w.w).as_ptr();
    let mut even = [_mm512_setzero_ps(); G];
    let mut odd = [_mm512_setzero_ps(); G];
    let mut q = 0;
    while q + 2 <= pairs {
        // A pair of columns is 64 bytes of the panel: two lines of the panel to come.
        if AHEAD {
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(q * 2 * PANEL).cast());
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add((q + 1) * 2 * PANEL).cast());
        } else {
            let next = wp.wrapping_add((q + PREFETCH_COLUMNS / 2) * 2 * PANEL);
            _mm_prefetch::<_MM_HINT_T0>(next.cast());
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(2 * PANEL).cast());
        }
        let (w0, w1) = (load(q), load(q + 1));
        for i in 0..G {
            even[i] = _mm512_dpbf16_ps(even[i], w0, bcast(i, q));
            odd[i] = _mm512_dpbf16_ps(odd[i], w1, bcast(i, q + 1));
        }
        q += 2;
    }
    if q < pairs {
        let w0 = load(q);
        for (i, even) in even.iter_mut().enumerate() {
            *even = _mm512_dpbf16_ps(*even, w0, bcast(i, q));
        }
    }
    for i in 0..G {
        _mm512_storeu_ps(
            out.as_mut_ptr().add(i * PANEL),
            _mm512_add_ps(even[i], odd[i]),
        );
    }
}
