//! AVX-512 float panel kernel: per column, the panel's 16 values widened in one
//! register (`vcvtph2ps`, or a zero-extend and shift for bf16), then one FMA per
//! activation row into that row's even- or odd-column accumulator. Twin of
//! [`super::scalar`], bit for bit.

use std::arch::x86_64::*;

use super::{FloatPanel, FloatPanelFn, PANEL};

/// The kernel when this CPU has AVX-512 F (with F16C and FMA).
pub(super) fn kernel() -> Option<FloatPanelFn> {
    let ok = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("f16c")
        && is_x86_feature_detected!("fma");
    ok.then_some(panel as FloatPanelFn)
}

/// Safe entry point: only handed out by [`kernel`] after the features were detected.
fn panel(w: FloatPanel<'_>, x: &[f32], rows: usize, out: &mut [f32]) {
    assert!(rows <= 8 && x.len() >= rows * w.k && out.len() >= rows * PANEL);
    assert!(w.w.len() >= w.k * PANEL);
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

/// `G` activation rows against the panel, accumulators in registers.
///
/// # Safety
/// The CPU must have AVX-512 F, F16C and FMA; the slices must be as [`panel`] asserts.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn rows_of<const G: usize, const BF16: bool>(w: FloatPanel<'_>, x: &[f32], out: &mut [f32]) {
    let k = w.k;
    let (wp, xp) = (w.w.as_ptr(), x.as_ptr());
    let column = |c: usize| {
        let v = _mm256_loadu_si256(wp.add(c * PANEL).cast());
        if BF16 {
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
        } else {
            _mm512_cvtph_ps(v)
        }
    };
    let mut even = [_mm512_setzero_ps(); G];
    let mut odd = [_mm512_setzero_ps(); G];
    let mut c = 0;
    while c + 2 <= k {
        let (w0, w1) = (column(c), column(c + 1));
        for i in 0..G {
            let xi = xp.add(i * k + c);
            even[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(*xi), even[i]);
            odd[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(*xi.add(1)), odd[i]);
        }
        c += 2;
    }
    if c < k {
        let w0 = column(c);
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
