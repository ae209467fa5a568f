//! What a step returns for a sequence: nothing, the logits of its last token, only a
//! token picked from them where they were computed (greedy, decision 147, or drawn at a
//! temperature, decision 196), or the logits of every token it evaluates (a scored
//! prompt's chunk).

use crate::backend::cpu::cut::Cut;
use crate::backend::cpu::edit::{Edit, Edits};
use crate::backend::{Tensor, TensorData};
use crate::cache::Pick;
use crate::graph::{DType, Graph, GraphBuilder, GraphError, DRAW_PARAMS};

use super::{inputs, BatchLogits, StepError};

/// What one sequence's share of a step asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a plain value a step copies a few times per sequence: its 1.6 KB of draw \
              settings (edits inline) cost nothing beside the step, and a box would make \
              every share a clone"
)]
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
    /// Only a token drawn from its last position's logits at a temperature on the
    /// device that computed them (the graph's `Draw`, the sampler's whole-vocabulary
    /// rule), reading back 4 bytes as [`Returns::Token`] does.
    Draw(DrawSettings),
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
            Returns::Logits | Returns::Token | Returns::Draw(_) => 1,
            Returns::Every => tokens,
        }
    }
}

/// What a device draw picks with: a temperature above 0 (or 0 for the greedy pick of
/// edited logits), a min-p in `[0, 1]` (0: none), top-k and top-p as a [`Cut`], the 32
/// random bits the sequence's sampler gave for this pick, and the logit edits its bias
/// and penalties make first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrawSettings {
    temperature: u32,
    min_p: u32,
    cut: Cut,
    bits: u32,
    edits: Edits,
}

impl DrawSettings {
    /// The settings of a draw at `temperature` with `min_p`, `cut` and random `bits`;
    /// `None` unless the temperature is finite and above 0 (0 is [`Returns::Token`],
    /// or [`DrawSettings::greedy`] with edits) and `min_p` lies in `[0, 1]`.
    pub fn new(temperature: f32, min_p: f32, cut: Cut, bits: u32) -> Option<DrawSettings> {
        let valid = temperature.is_finite() && temperature > 0.0 && (0.0..=1.0).contains(&min_p);
        valid.then_some(DrawSettings {
            temperature: temperature.to_bits(),
            min_p: min_p.to_bits(),
            cut,
            bits,
            edits: Edits::NONE,
        })
    }

    /// The greedy pick of the logits after `edits` (temperature 0).
    pub fn greedy(edits: Edits) -> DrawSettings {
        DrawSettings {
            temperature: 0,
            min_p: 0,
            cut: Cut::NONE,
            bits: 0,
            edits,
        }
    }

    /// These settings with `edits` made to the logits first.
    pub fn with_edits(self, edits: Edits) -> DrawSettings {
        DrawSettings { edits, ..self }
    }

    /// The temperature (0: greedy).
    pub fn temperature(&self) -> f32 {
        f32::from_bits(self.temperature)
    }

    /// The min-p (0: none).
    pub fn min_p(&self) -> f32 {
        f32::from_bits(self.min_p)
    }

    /// Top-k and top-p.
    pub fn cut(&self) -> Cut {
        self.cut
    }

    /// The random bits.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The logit edits made before the pick.
    pub fn edits(&self) -> &[Edit] {
        self.edits.as_slice()
    }

    /// Its row of the step's `draw` input ([`DRAW_PARAMS`] words): the temperature's
    /// bits, the min-p's, the random bits, the cut's two words, then the edits'.
    pub(super) fn row(&self) -> impl Iterator<Item = i32> + '_ {
        let [top_k, top_p] = self.cut.words();
        let head = [self.temperature, self.min_p, self.bits, top_k, top_p];
        head.into_iter().chain(self.edits.words()).map(|w| w as i32)
    }
}

/// What a batched step returned for the sequences that asked, in order: their logits,
/// or their tokens when every one of them asked only for a token.
#[derive(Debug)]
pub enum StepOutput {
    /// Logits rows (a sequence that asked for its token picks it from its row).
    Logits(BatchLogits),
    /// Tokens picked on the device (greedy or drawn); `None` where every logit was
    /// -inf or NaN.
    Tokens(Vec<Option<u32>>),
}

/// One sequence's share of a [`StepOutput`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Returned<'a> {
    /// Its logits.
    Logits(&'a [f32]),
    /// Its token, picked where the logits were computed; `None` where every logit was
    /// -inf or NaN.
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

/// `graph` (a step whose one output is `[n, vocab]` logits) with `pick` after its
/// head, so its one output is each row's token, `[n] i32`: greedy decoding's
/// (`Argmax`), or drawn at each row of an `[n, DRAW_PARAMS] i32` input named
/// [`inputs::DRAW`] (`Draw`); unchanged for [`Pick::Logits`].
pub(super) fn with_pick(graph: Graph, pick: Pick) -> Result<Graph, GraphError> {
    if pick == Pick::Logits {
        return Ok(graph);
    }
    let (mut b, outputs) = GraphBuilder::extend(graph);
    let mut picks = Vec::with_capacity(outputs.len());
    for &logits in &outputs {
        picks.push(match pick {
            Pick::Draw => {
                let rows = b.node(logits)?.shape.dims()[0];
                let params = b.input(inputs::DRAW, DType::I32, [rows, DRAW_PARAMS])?;
                b.draw(logits, params)?
            }
            _ => b.argmax(logits)?,
        });
    }
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
