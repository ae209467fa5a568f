//! Vectorised `exp` for the kernels that need many (softmax, SiLU): libm's scalar
//! `expf` cost 3-5 % of a batched decode step.

#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::isa::{allows, Isa};

/// Whether this CPU runs the AVX-512 code of the kernels (AVX-512 F, plus the AVX2,
/// FMA and F16C they also use; checked once).
pub(super) fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            allows(Isa::Avx512)
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// ln 2 split in two, so that `x − n·ln 2` is exact for the `n` of `exp`'s range.
#[cfg(target_arch = "x86_64")]
const LN2_HI: f32 = 0.693_145_75;
/// The rest of ln 2 after [`LN2_HI`].
#[cfg(target_arch = "x86_64")]
const LN2_LO: f32 = 1.428_606_8e-6;
/// Taylor coefficients of `exp(r)`, highest degree first (Horner's order).
#[cfg(target_arch = "x86_64")]
const EXP_POLY: [f32; 7] = [
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `exp(x)`, relative error below 3e-7:
/// `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`, a degree-6 polynomial for `exp(r)`, scaled by
/// `2^n`; anything below −87 (−∞ included: masked attention positions) is exactly 0, anything
/// above 88.7 is +∞.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn exp_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let tiny = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(-87.0));
    let x = _mm512_max_ps(x, _mm512_set1_ps(-87.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_maskz_mov_ps(!tiny, _mm512_scalef_ps(p, n))
}

/// [`exp_avx512`] eight lanes at a time (same reduction and polynomial; `2^n` built in
/// two exponent-bit factors, as AVX2 has no `scalef`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.0));
    // Past 88.7 the exponent field overflows to +∞, as it should.
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
        _mm256_set1_ps(88.75),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // 2^n for n in −126..=128 as two normal factors 2^(n/2) and 2^(n − n/2), each
    // built in the exponent bits (2^128 alone has none).
    let n = _mm256_cvtps_epi32(n);
    let half = _mm256_srai_epi32::<1>(n);
    let pow2 = |e: __m256i| {
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            e,
            _mm256_set1_epi32(127),
        )))
    };
    let e = _mm256_mul_ps(
        _mm256_mul_ps(p, pow2(half)),
        pow2(_mm256_sub_epi32(n, half)),
    );
    _mm256_andnot_ps(tiny, e)
}

/// Whether this CPU runs the AVX2 code of the kernels (AVX2, FMA and F16C; checked once).
pub(super) fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            allows(Isa::Avx2)
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out = silu(gate) · up` on AVX-512 or AVX2; callers check [`avx512_available`] or
/// [`avx2_available`] first.
///
/// # Panics
/// Without AVX-512, or when the slices' lengths differ.
#[cfg(target_arch = "x86_64")]
pub(super) fn swiglu_wide(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(gate.len() == out.len() && up.len() == out.len());
    if avx512_available() {
        // SAFETY: both checked just above.
        unsafe { swiglu_avx512(gate, up, out) }
    } else {
        assert!(avx2_available(), "swiglu_wide needs AVX-512 or AVX2");
        // SAFETY: both checked just above.
        unsafe { swiglu_avx2(gate, up, out) }
    }
}

/// [`swiglu_avx512`] eight lanes at a time, the tail one by one with the same
/// arithmetic through a zero-padded vector.
///
/// # Safety
/// The CPU must have AVX2 and FMA; the three slices must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn swiglu_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let one = _mm256_set1_ps(1.0);
    let silu_up = |g: __m256, u: __m256| {
        let e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u)
    };
    let n = out.len();
    let whole = n / 8 * 8;
    for i in (0..whole).step_by(8) {
        // SAFETY: `i + 8 ≤ n`, the length of all three slices.
        let g = _mm256_loadu_ps(gate.as_ptr().add(i));
        let u = _mm256_loadu_ps(up.as_ptr().add(i));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), silu_up(g, u));
    }
    if whole < n {
        let (mut g, mut u, mut o) = ([0f32; 8], [0f32; 8], [0f32; 8]);
        g[..n - whole].copy_from_slice(&gate[whole..]);
        u[..n - whole].copy_from_slice(&up[whole..]);
        let v = silu_up(_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr()));
        _mm256_storeu_ps(o.as_mut_ptr(), v);
        out[whole..].copy_from_slice(&o[..n - whole]);
    }
}

/// `out = silu(gate) · up = gate / (1 + exp(−gate)) · up`, sixteen lanes at a time.
///
/// # Safety
/// The CPU must have AVX-512 F; the three slices must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn swiglu_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    let one = _mm512_set1_ps(1.0);
    for i in (0..n).step_by(16) {
        let left = n - i;
        let m: __mmask16 = if left >= 16 {
            0xFFFF
        } else {
            (1u16 << left) - 1
        };
        // SAFETY: the mask keeps every lane within the slices (asserted equal lengths).
        let g = _mm512_maskz_loadu_ps(m, gate.as_ptr().add(i));
        let u = _mm512_maskz_loadu_ps(m, up.as_ptr().add(i));
        let e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        let silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, _mm512_mul_ps(silu, u));
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Arguments across `exp`'s whole range, its cut-offs and infinities.
    fn arguments() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..4096).map(|i| -87.0 * i as f32 / 4095.0).collect();
        xs.extend((0..2048).map(|i| 88.0 * i as f32 / 2047.0));
        xs.extend([
            0.0,
            -1e-30,
            -0.5,
            -86.999,
            -87.5,
            -100.0,
            f32::NEG_INFINITY,
            -1e30,
            88.72,
            88.9,
            100.0,
            f32::INFINITY,
        ]);
        xs.resize(xs.len().next_multiple_of(16), 0.0);
        xs
    }

    /// `got` is `exp(x)` within 3e-7, exactly 0 below −87 and +∞ above 88.8.
    fn check(x: f32, e: f32) {
        if x < -87.0 {
            assert_eq!(e, 0.0, "exp({x})");
        } else if x > 88.8 {
            assert_eq!(e, f32::INFINITY, "exp({x})");
        } else {
            let want = (x as f64).exp();
            assert!(
                ((e as f64 - want) / want).abs() < 3e-7,
                "exp({x}) = {e}, not {want}"
            );
        }
    }

    /// `exp` of `width` lanes (`x` in, `e` out) checked over [`arguments`].
    fn check_lanes(width: usize, exp: impl Fn(&[f32], &mut [f32])) {
        let mut got = vec![0f32; width];
        for chunk in arguments().chunks(width) {
            exp(chunk, &mut got);
            chunk.iter().zip(&got).for_each(|(&x, &e)| check(x, e));
        }
    }

    #[test]
    fn exp_matches_f64() {
        if !avx512_available() {
            return;
        }
        use std::arch::x86_64::{_mm512_loadu_ps, _mm512_storeu_ps};
        // SAFETY: checked above; 16 lanes in and out.
        check_lanes(16, |x, e| unsafe {
            _mm512_storeu_ps(e.as_mut_ptr(), exp_avx512(_mm512_loadu_ps(x.as_ptr())))
        });
    }

    #[test]
    fn avx2_exp_matches_f64() {
        if !avx2_available() {
            return;
        }
        use std::arch::x86_64::{_mm256_loadu_ps, _mm256_storeu_ps};
        // SAFETY: checked above; 8 lanes in and out.
        check_lanes(8, |x, e| unsafe {
            _mm256_storeu_ps(e.as_mut_ptr(), exp_avx2(_mm256_loadu_ps(x.as_ptr())))
        });
    }
}
