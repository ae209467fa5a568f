//! One arm of the fairness bench: a named configuration at a declared precision, and the
//! closure that runs it once and returns what it measured as a [`Sample`]. The arm, not
//! the protocol, owns the clock (see [`super::fairness`]).

use std::time::Duration;

/// What one run of an arm measured: a prefill of the prompt through the first token,
/// then `decode_tokens` decode steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Time to first token: the prompt's prefill through the first sampled token.
    pub ttft: Duration,
    /// Time of the decode steps after the first token.
    pub decode: Duration,
    /// Tokens decoded in `decode` (at least 1).
    pub decode_tokens: usize,
}

impl Sample {
    /// Decode speed, tokens per second.
    pub fn decode_tok_s(&self) -> f64 {
        self.decode_tokens as f64 / self.decode.as_secs_f64()
    }

    /// Why the sample cannot be summarized, if it cannot.
    pub(super) fn defect(&self) -> Option<&'static str> {
        if self.ttft.is_zero() {
            Some("its TTFT is zero")
        } else if self.decode.is_zero() {
            Some("its decode time is zero")
        } else if self.decode_tokens == 0 {
            Some("it decoded no tokens")
        } else {
            None
        }
    }
}

/// One configuration under comparison: a name, the precision it computes at, and a
/// closure that runs it once and returns what it measured.
pub struct Arm<'a, E> {
    name: String,
    precision: String,
    run: Box<dyn FnMut() -> Result<Sample, E> + 'a>,
}

impl<'a, E> Arm<'a, E> {
    /// An arm called `name` (`cpu`, `split`) computing at `precision` (`q4_1 weights,
    /// f16 kv`); `run` performs one prefill and decode and returns the sample.
    pub fn new(
        name: impl Into<String>,
        precision: impl Into<String>,
        run: impl FnMut() -> Result<Sample, E> + 'a,
    ) -> Arm<'a, E> {
        Arm {
            name: name.into(),
            precision: precision.into(),
            run: Box::new(run),
        }
    }

    /// The arm's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The precision it declared.
    pub fn precision(&self) -> &str {
        &self.precision
    }

    /// Runs the arm once.
    pub(super) fn run(&mut self) -> Result<Sample, E> {
        (self.run)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_without_time_or_tokens_are_defective() {
        let good = Sample {
            ttft: Duration::from_millis(10),
            decode: Duration::from_millis(500),
            decode_tokens: 50,
        };
        assert_eq!(good.defect(), None);
        assert_eq!(good.decode_tok_s(), 100.0);
        let zero_ttft = Sample {
            ttft: Duration::ZERO,
            ..good
        };
        assert!(zero_ttft.defect().is_some());
        let no_tokens = Sample {
            decode_tokens: 0,
            ..good
        };
        assert!(no_tokens.defect().is_some());
    }
}
