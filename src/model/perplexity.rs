//! Perplexity of a text, measured the way llama.cpp's `llama-perplexity` measures it so
//! that the two numbers compare: the tokens (with the model's BOS when it adds one) are
//! cut into windows of `ctx` tokens; each window starts a fresh sequence (its first
//! token replaced by BOS when the model adds one), and only its second half is scored —
//! each token from position `ctx / 2 + 1` on, predicted from everything before it in the
//! window. The result is `exp` of the mean negative log-likelihood, with the standard
//! error of that mean carried through the exponential.

use crate::step::Runner;

use super::ModelError;

/// A perplexity measurement.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Perplexity {
    /// `exp(mean negative log-likelihood)`.
    pub ppl: f64,
    /// Its standard error (`ppl · σ / √(n − 1)` of the per-token log-likelihoods).
    pub error: f64,
    /// Windows evaluated.
    pub windows: usize,
    /// Tokens scored.
    pub scored: usize,
}

/// Running sums of per-token negative log-likelihoods.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    n: usize,
    nll: f64,
    nll2: f64,
}

impl Sums {
    fn add(&mut self, nll: f64) {
        self.n += 1;
        self.nll += nll;
        self.nll2 += nll * nll;
    }

    fn perplexity(&self, windows: usize) -> Perplexity {
        let n = self.n.max(1) as f64;
        let mean = self.nll / n;
        let variance = self.nll2 / n - mean * mean;
        let ppl = mean.exp();
        let error = match self.n > 1 && variance > 0.0 {
            true => ppl * (variance / (n - 1.0)).sqrt(),
            false => 0.0,
        };
        Perplexity {
            ppl,
            error,
            windows,
            scored: self.n,
        }
    }
}

/// `log Σ exp(logits) − logits[target]`, in f64: the negative log-likelihood of
/// `target` under the softmax of `logits`.
fn nll(logits: &[f32], target: u32) -> Result<f64, ModelError> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let picked = *logits.get(target as usize).ok_or_else(|| {
        ModelError::internal(format!(
            "token {target} has no logit among {}",
            logits.len()
        ))
    })?;
    if !max.is_finite() || !picked.is_finite() {
        return Err(ModelError::internal(format!(
            "non-finite logits scoring token {target} (largest {max}, its own {picked})"
        )));
    }
    let max = f64::from(max);
    let sum: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
    let nll = max + sum.ln() - f64::from(picked);
    match nll.is_finite() {
        true => Ok(nll),
        false => Err(ModelError::internal(format!(
            "a NaN among the logits scoring token {target}"
        ))),
    }
}

/// The perplexity of `tokens` in windows of `ctx` (at most `max_windows` of them);
/// `bos` is the model's BOS when it adds one. Calls `on_window(done, total, so_far)`
/// after each window. An error when `tokens` fill fewer than two windows (as
/// llama.cpp refuses) or `ctx` is under 4.
pub fn perplexity(
    runner: &mut Runner,
    tokens: &[u32],
    bos: Option<u32>,
    ctx: usize,
    max_windows: Option<usize>,
    on_window: &mut dyn FnMut(usize, usize, Perplexity),
) -> Result<Perplexity, ModelError> {
    if ctx < 4 {
        return Err(ModelError::Input(format!(
            "a perplexity window of {ctx} tokens is too short: it takes at least 4"
        )));
    }
    if tokens.len() < 2 * ctx {
        return Err(ModelError::Input(format!(
            "the text has {} tokens; a perplexity with windows of {ctx} needs at least {} \
             (two windows)",
            tokens.len(),
            2 * ctx
        )));
    }
    let total = (tokens.len() / ctx).min(max_windows.unwrap_or(usize::MAX));
    let first = ctx / 2;
    let mut sums = Sums::default();
    for (w, window) in tokens.chunks_exact(ctx).take(total).enumerate() {
        let mut window = window.to_vec();
        if let Some(bos) = bos {
            window[0] = bos;
        }
        let mut seq = runner.new_sequence()?;
        runner.forward(&mut seq, &window[..first])?;
        let chunks = runner.forward_every_logit(&mut seq, &window[first..ctx - 1])?;
        let rows = chunks.iter().flat_map(|c| c.iter());
        for (row, &target) in rows.zip(&window[first + 1..]) {
            sums.add(nll(row, target)?);
        }
        on_window(w + 1, total, sums.perplexity(w + 1));
    }
    Ok(sums.perplexity(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_is_the_log_softmax() {
        // Uniform over four: ln 4.
        let uniform = nll(&[1.0; 4], 2).unwrap();
        assert!((uniform - 4f64.ln()).abs() < 1e-12);
        // Shifted logits give the same value, far from f32's exp range.
        let a = nll(&[0.0, 1.0, 2.0], 0).unwrap();
        let b = nll(&[1000.0, 1001.0, 1002.0], 0).unwrap();
        let expected = (1f64 + 1f64.exp() + 2f64.exp()).ln();
        assert!((a - expected).abs() < 1e-12 && (b - expected).abs() < 1e-9);
        assert!(nll(&[0.0, f32::NAN], 0).is_err());
        assert!(nll(&[0.0], 3).is_err());
    }

    #[test]
    fn sums_give_the_mean_and_its_standard_error() {
        let mut sums = Sums::default();
        for x in [1.0, 2.0, 3.0, 4.0] {
            sums.add(x);
        }
        let p = sums.perplexity(1);
        assert!((p.ppl - 2.5f64.exp()).abs() < 1e-12);
        // Population variance 1.25 over n − 1 = 3.
        assert!((p.error - 2.5f64.exp() * (1.25f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((p.windows, p.scored), (1, 4));
    }
}
