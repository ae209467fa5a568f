//! What a step returns for a sequence: nothing, the logits of its last token, only
//! greedy decoding's pick from them, computed where the logits were (decision 147), or
//! the logits of every token it evaluates (a scored prompt's chunk).

use crate::backend::{Tensor, TensorData};
use crate::graph::{DType, Graph, GraphBuilder, GraphError};

use super::{BatchLogits, StepError};

/// What one sequence's share of a step asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// Nothing: a prompt chunk with more of its prompt to come only fills the KV cache,
    /// and the step's head reads no row for it (decision 118).
    Nothing,
    /// The logits of its last token (sampling, constraints, log-probabilities).
    Logits,
    /// Only the greedy token of its last position: the step ends with an argmax on the
    /// device that computed the logits and reads back 4 bytes instead of the
    /// vocabulary's scores. The pick is the sampler's greedy rule
    /// ([`crate::backend::cpu::greedy`]).
    Token,
    /// The logits of every token it evaluates, in order (row `i` is the distribution of
    /// the token after `tokens[i]`): a scored prompt's chunk, at most
    /// [`super::PREFILL_CHUNK`] tokens.
    Every,
}

impl Returns {
    /// Whether the step computes this sequence's logits (as scores or as a token).
    pub fn head(self) -> bool {
        self != Returns::Nothing
    }

    /// Logits rows the step computes for a share of `tokens` tokens.
    pub fn rows(self, tokens: usize) -> usize {
        match self {
            Returns::Nothing => 0,
            Returns::Logits | Returns::Token => 1,
            Returns::Every => tokens,
        }
    }
}

/// What a batched step returned for the sequences that asked, in order: their logits,
/// or their greedy tokens when every one of them asked only for that.
#[derive(Debug)]
pub enum StepOutput {
    /// Logits rows (a sequence that asked for its token picks it from its row).
    Logits(BatchLogits),
    /// Greedy tokens; `None` where every logit was -inf or NaN.
    Tokens(Vec<Option<u32>>),
}

/// One sequence's share of a [`StepOutput`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Returned<'a> {
    /// Its logits.
    Logits(&'a [f32]),
    /// Its greedy token; `None` where every logit was -inf or NaN.
    Token(Option<u32>),
}

impl<'a> Returned<'a> {
    /// The logits, when that is what came back.
    pub fn logits(self) -> Option<&'a [f32]> {
        match self {
            Returned::Logits(logits) => Some(logits),
            Returned::Token(_) => None,
        }
    }
}

impl StepOutput {
    /// Nothing returned: a step whose sequences all only filled their KV caches.
    pub fn none() -> Self {
        StepOutput::Logits(BatchLogits::none())
    }

    /// The tokens of an argmax step's output (`[rows] i32`, -1 for no pick), of which
    /// the first `rows` are the sequences'.
    pub fn from_picks(output: Tensor, rows: usize) -> Result<Self, StepError> {
        picks(output, rows).map(StepOutput::Tokens)
    }

    /// How many sequences it holds a return for.
    pub fn len(&self) -> usize {
        match self {
            StepOutput::Logits(logits) => logits.len(),
            StepOutput::Tokens(tokens) => tokens.len(),
        }
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each sequence's return, in order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Returned<'_>> + '_> {
        match self {
            StepOutput::Logits(logits) => Box::new(logits.iter().map(Returned::Logits)),
            StepOutput::Tokens(tokens) => Box::new(tokens.iter().map(|&t| Returned::Token(t))),
        }
    }
}

/// The first `rows` picks of an argmax step's output as tokens (-1: none).
fn picks(output: Tensor, rows: usize) -> Result<Vec<Option<u32>>, StepError> {
    let TensorData::Host(bytes) = &output.data else {
        return Err(StepError::internal(
            "a step's tokens were not read back to the host",
        ));
    };
    if output.dtype != DType::I32 || bytes.len() < rows * 4 {
        return Err(StepError::Internal(format!(
            "a greedy step returned {} bytes of {} for {rows} sequences",
            bytes.len(),
            output.dtype
        )));
    }
    Ok(bytes.view::<i32>()[..rows]
        .iter()
        .map(|&t| u32::try_from(t).ok())
        .collect())
}

/// `graph` (a step whose one output is `[n, vocab]` logits) with an argmax after its
/// head, so its one output is each row's greedy token, `[n] i32`.
pub(super) fn with_argmax(graph: Graph) -> Result<Graph, GraphError> {
    let (mut b, outputs) = GraphBuilder::extend(graph);
    let picks = outputs
        .iter()
        .map(|&logits| b.argmax(logits))
        .collect::<Result<Vec<_>, _>>()?;
    b.finish(picks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_become_tokens_and_minus_one_none() {
        let picks = Tensor::from_i32([3], &[5, -1, 0]).unwrap();
        let out = StepOutput::from_picks(picks, 2).unwrap();
        let got: Vec<Returned> = out.iter().collect();
        assert_eq!(got, [Returned::Token(Some(5)), Returned::Token(None)]);
        let short = Tensor::from_i32([1], &[5]).unwrap();
        assert!(StepOutput::from_picks(short, 2).is_err());
        let floats = Tensor::from_f32([2], &[1.0, 2.0]).unwrap();
        assert!(StepOutput::from_picks(floats, 2).is_err());
        assert!(StepOutput::none().is_empty());
    }
}
