//! AVX2 float panel kernel: as the AVX-512 f32 FMA one on each half of the panel (8
//! rows, one 256-bit register), up to four activation rows at a time. Twin of [`super::scalar`],
//! bit for bit.

use std::arch::x86_64::*;

use super::{FloatPanel, FloatPanelFn, PANEL};

/// The kernel when this CPU has AVX2, FMA and F16C.
pub(super) fn kernel() -> Option<FloatPanelFn> {
    let ok = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    ok.then_some(panel as FloatPanelFn)
}

/// Rows of one half of a panel.
const HALF: usize = PANEL / 2;

/// Safe entry point: only handed out by [`kernel`] after the features were detected.
fn panel(w: FloatPanel<'_>, x: &[f32], rows: usize, out: &mut [f32]) {
    assert!(x.len() >= rows * w.k && out.len() >= rows * PANEL);
    assert!(w.w.len() >= w.stored() * PANEL);
    // SAFETY: `kernel` checked the CPU features; the asserts above bound every read and
    // write the kernel makes.
    unsafe {
        let mut r0 = 0;
        while r0 < rows {
            let g = 4.min(rows - r0);
            for h in 0..2 {
                match (g, w.bf16) {
                    (1, false) => rows_of::<1, false>(w, x, r0, h, out),
                    (2, false) => rows_of::<2, false>(w, x, r0, h, out),
                    (3, false) => rows_of::<3, false>(w, x, r0, h, out),
                    (4, false) => rows_of::<4, false>(w, x, r0, h, out),
                    (1, true) => rows_of::<1, true>(w, x, r0, h, out),
                    (2, true) => rows_of::<2, true>(w, x, r0, h, out),
                    (3, true) => rows_of::<3, true>(w, x, r0, h, out),
                    (4, true) => rows_of::<4, true>(w, x, r0, h, out),
                    _ => {}
                }
            }
            r0 += g;
        }
    }
}

/// Activation rows `r0..r0 + G` against half `h` of the panel.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; the slices must be as [`panel`] asserts.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_of<const G: usize, const BF16: bool>(
    w: FloatPanel<'_>,
    x: &[f32],
    r0: usize,
    h: usize,
    out: &mut [f32],
) {
    let k = w.k;
    let (wp, xp) = (w.w.as_ptr(), x.as_ptr().add(r0 * k));
    // Columns c and c + 1 (c even) of the half's 8 rows: f16 one column a 128-bit
    // load; bf16 pairs (each row's two values side by side) split by a shift and a mask.
    let columns = |c: usize| {
        if BF16 {
            let v = _mm256_loadu_si256(wp.add(c * PANEL + 2 * HALF * h).cast());
            let high = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
            (
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
                _mm256_castsi256_ps(_mm256_and_si256(v, high)),
            )
        } else {
            let half =
                |c: usize| _mm256_cvtph_ps(_mm_loadu_si128(wp.add(c * PANEL + HALF * h).cast()));
            (
                half(c),
                if c + 1 < k {
                    half(c + 1)
                } else {
                    _mm256_setzero_ps()
                },
            )
        }
    };
    let mut even = [_mm256_setzero_ps(); G];
    let mut odd = [_mm256_setzero_ps(); G];
    let mut c = 0;
    while c + 2 <= k {
        let (w0, w1) = columns(c);
        for i in 0..G {
            let xi = xp.add(i * k + c);
            even[i] = _mm256_fmadd_ps(w0, _mm256_set1_ps(*xi), even[i]);
            odd[i] = _mm256_fmadd_ps(w1, _mm256_set1_ps(*xi.add(1)), odd[i]);
        }
        c += 2;
    }
    if c < k {
        let (w0, _) = columns(c);
        for (i, even) in even.iter_mut().enumerate() {
            *even = _mm256_fmadd_ps(w0, _mm256_set1_ps(*xp.add(i * k + c)), *even);
        }
    }
    for i in 0..G {
        let o = out.as_mut_ptr().add((r0 + i) * PANEL + HALF * h);
        _mm256_storeu_ps(o, _mm256_add_ps(even[i], odd[i]));
    }
}
