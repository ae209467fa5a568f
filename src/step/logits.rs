//! The logits of a batched step: one row of the vocabulary's scores per sequence, read
//! in place from the buffer the step produced rather than copied out row by row.

use crate::backend::{AlignedBytes, Tensor, TensorData};
use crate::graph::DType;

use super::StepError;

/// The logits of each stepped sequence that asked for them ([`super::Work::logits`]),
/// for its last token, in the order the sequences were given. *Why a type:* a batch of
/// 64 sequences of a 128k vocabulary is 32 MiB a step; copying it into one vector per
/// sequence cost as much as the GPU's step (decision 101).
#[derive(Debug)]
pub struct BatchLogits {
    values: Values,
    vocab: usize,
    rows: usize,
}

#[derive(Debug)]
enum Values {
    /// A step's host output, f32, with at least `rows` rows (the rest are padding).
    Host(AlignedBytes),
    /// One sequence's logits, as a single step returns them.
    One(Vec<f32>),
}

impl BatchLogits {
    /// The first `rows` rows of `vocab` scores of a step's host output, converted to f32
    /// when the step produced another type; an error when it holds fewer.
    pub fn from_output(output: Tensor, vocab: usize, rows: usize) -> Result<Self, StepError> {
        let output = match output.dtype {
            DType::F32 => output,
            _ => output.converted(DType::F32)?,
        };
        let TensorData::Host(bytes) = output.data else {
            return Err(StepError::internal(
                "a step's logits were not read back to the host",
            ));
        };
        let have = bytes.len() / 4;
        if vocab == 0 || have < rows * vocab {
            return Err(StepError::Internal(format!(
                "a step returned {have} logits for {rows} sequences of a {vocab}-token vocabulary"
            )));
        }
        Ok(BatchLogits {
            values: Values::Host(bytes),
            vocab,
            rows,
        })
    }

    /// One sequence's logits.
    pub fn one(logits: Vec<f32>) -> Self {
        BatchLogits {
            vocab: logits.len(),
            rows: 1,
            values: Values::One(logits),
        }
    }

    /// No logits: a step whose sequences all filled their KV caches only.
    pub fn none() -> Self {
        BatchLogits {
            vocab: 0,
            rows: 0,
            values: Values::One(Vec::new()),
        }
    }

    /// How many sequences' logits this holds.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether it holds none (a step where no sequence asked for logits).
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Sequence `i`'s logits, if there is such a sequence.
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        if i >= self.rows {
            return None;
        }
        let all = match &self.values {
            Values::Host(bytes) => bytes.view::<f32>(),
            Values::One(values) => values.as_slice(),
        };
        all.get(i * self.vocab..(i + 1) * self.vocab)
    }

    /// Every sequence's logits, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[f32]> {
        (0..self.rows).filter_map(|i| self.row(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_past_the_sequences_are_padding_and_short_outputs_are_refused() {
        let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let output = Tensor::from_f32([4, 3], &values).unwrap();
        let logits = BatchLogits::from_output(output.clone(), 3, 2).unwrap();
        assert_eq!(logits.len(), 2);
        assert_eq!(logits.row(1), Some(&[3.0, 4.0, 5.0][..]));
        assert_eq!(logits.row(2), None);
        let rows: Vec<&[f32]> = logits.iter().collect();
        assert_eq!(rows, [&values[0..3], &values[3..6]]);
        assert!(BatchLogits::from_output(output, 3, 5).is_err());
        let one = BatchLogits::one(vec![1.0, 2.0]);
        assert_eq!(one.iter().collect::<Vec<_>>(), [&[1.0, 2.0][..]]);
        let none = BatchLogits::none();
        assert!(none.is_empty() && none.row(0).is_none() && none.iter().next().is_none());
    }

    #[test]
    fn f16_logits_are_widened() {
        let output = Tensor::from_f32([1, 2], &[0.5, -2.0])
            .unwrap()
            .converted(DType::F16)
            .unwrap();
        let logits = BatchLogits::from_output(output, 2, 1).unwrap();
        assert_eq!(logits.row(0), Some(&[0.5, -2.0][..]));
    }
}
