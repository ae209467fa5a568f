//! f32 kernels, one file per family. Each takes plain slices and returns a
//! `BackendError` on malformed sizes rather than panicking.

pub(super) mod argmax;
pub(super) mod attention;
pub mod cut;
pub mod draw;
pub mod edit;
pub(super) mod elementwise;
pub(super) mod embedding;
mod float;
pub(super) mod layout;
pub(super) mod matmul;
mod matmul_float;
pub(super) mod norm;
pub(super) mod rope;
mod vexp;

use crate::backend::BackendError;

/// Elements below which kernels run on the calling thread: splitting smaller work
/// across the pool costs more than it saves.
pub(super) const PARALLEL_MIN: usize = 1 << 14;

/// An error when `got` differs from `want`, naming the operand.
pub(super) fn check_len(what: &str, got: usize, want: usize) -> Result<(), BackendError> {
    if got != want {
        return Err(BackendError::Input(format!(
            "{what}: {got} elements, expected {want}"
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod testutil {
    //! Deterministic pseudo-random data and approximate comparison for kernel tests.

    /// The successive states of a linear congruential generator from `seed`: the
    /// 64-bit words the tests draw their data and random bits from.
    pub fn stream(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s
        }
    }

    /// `n` values in [-1, 1) from a fixed-seed linear congruential generator.
    pub fn lcg(seed: u64, n: usize) -> Vec<f32> {
        let mut next = stream(seed);
        next();
        (0..n)
            .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }

    /// Asserts `a` and `b` agree to `tol` (absolute plus relative).
    pub fn assert_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len(), "lengths differ");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "index {i}: {x} vs {y}"
            );
        }
    }
}
