//! How a step's sequences become its rows: the one builder of a step's inputs (token ids,
//! positions, logits rows, draw settings, KV segments), its key's shape (phase, padded
//! rows, logits rows, pick) and the reading of what it returns, for every step the runner takes —
//! one sequence's prompt chunk or decode, a scored chunk, or a batch of several.

use std::ops::Range;

use crate::backend::{KvCache, Segment, StepState, Tensor};
use crate::cache::{Phase, Pick};
use crate::graph::DRAW_PARAMS;

use super::returns::{Returns, StepOutput};
use super::{inputs, step_bucket, BatchLogits, StepError, MAX_STEP_TOKENS, PREFILL_CHUNK};

/// One step's inputs and shape, built from its sequences' shares in order. A lone
/// sequence pads as a prompt chunk (a power of two up to [`PREFILL_CHUNK`], the
/// co-execution gates' buckets); several pad to [`step_bucket`]. Rows past the tokens
/// are padding: token 0 at position 0, outside every KV segment, never read back.
#[derive(Debug)]
pub(super) struct StepInputs {
    phase: Phase,
    bucket: usize,
    logits: usize,
    wanted: usize,
    pick: Pick,
    gated: bool,
    segments: Vec<(Range<usize>, usize)>,
    tensors: Vec<(&'static str, Tensor)>,
}

impl StepInputs {
    /// The inputs of a step over `shares`: each sequence's positions evaluated so far,
    /// its new tokens (at least one) and what it wants read back. At most
    /// [`PREFILL_CHUNK`] tokens alone, [`MAX_STEP_TOKENS`] for several.
    pub(super) fn new(shares: &[(usize, &[u32], Returns)]) -> Result<StepInputs, StepError> {
        let total: usize = shares.iter().map(|(_, tokens, _)| tokens.len()).sum();
        let lone = shares.len() == 1;
        let most = if lone { PREFILL_CHUNK } else { MAX_STEP_TOKENS };
        if shares.is_empty() || shares.iter().any(|(_, tokens, _)| tokens.is_empty()) {
            return Err(StepError::internal("a step needs tokens of every sequence"));
        }
        if total > most {
            return Err(StepError::Internal(format!(
                "a step of {} sequences takes at most {most} tokens, got {total}",
                shares.len()
            )));
        }
        let pad = |rows: usize| match (rows, lone) {
            (0, _) => 0,
            (rows, true) => rows.next_power_of_two(),
            (rows, false) => step_bucket(rows),
        };
        let bucket = pad(total);
        let mut ids = Vec::with_capacity(bucket);
        let mut positions = Vec::with_capacity(bucket);
        let mut rows = Vec::new();
        let mut segments = Vec::with_capacity(shares.len());
        for &(start, tokens, wants) in shares {
            let first = ids.len();
            ids.extend(tokens.iter().map(|&t| t as i32));
            positions.extend((start..start + tokens.len()).map(|p| p as i32));
            let read = wants.rows(tokens.len());
            rows.extend((ids.len() - read..ids.len()).map(|r| r as i32));
            segments.push((first..ids.len(), start));
        }
        // No logits rows at all: the step runs on the graph that ends at the last
        // layer's attention (decision 115).
        let wanted = rows.len();
        let logits = pad(wanted);
        ids.resize(bucket, 0);
        positions.resize(bucket, 0);
        rows.resize(logits, 0);
        let mut tensors = vec![
            (inputs::TOKENS, Tensor::from_i32([bucket], &ids)?),
            (inputs::POSITIONS, Tensor::from_i32([bucket], &positions)?),
        ];
        if logits > 0 {
            tensors.push((inputs::LOGITS_ROW, Tensor::from_i32([logits], &rows)?));
        }
        let heads = || shares.iter().map(|s| s.2).filter(|w| w.rows(1) > 0);
        // Tokens come back only when no sequence needs its logits; drawn when one draws
        // (a greedy row draws at temperature 0, which is the greedy pick).
        let token = |w: Returns| matches!(w, Returns::Token | Returns::Draw(_));
        let pick = match (wanted > 0 && heads().all(token), draws(heads())) {
            (false, _) => Pick::Logits,
            (true, false) => Pick::Greedy,
            (true, true) => Pick::Draw,
        };
        if pick == Pick::Draw {
            let mut params = Vec::with_capacity(DRAW_PARAMS * logits);
            for w in heads() {
                match w {
                    Returns::Draw(d) => params.extend(d.row()),
                    _ => params.extend([0; DRAW_PARAMS]),
                }
            }
            params.resize(DRAW_PARAMS * logits, 0);
            let shape = [logits, DRAW_PARAMS];
            tensors.push((inputs::DRAW, Tensor::from_i32(shape, &params)?));
        }
        Ok(StepInputs {
            phase: match shares.iter().all(|(_, tokens, _)| tokens.len() == 1) {
                true => Phase::Decode,
                false => Phase::Prefill,
            },
            bucket,
            logits,
            wanted,
            pick,
            gated: lone && shares[0].2 != Returns::Every,
            segments,
            tensors,
        })
    }

    /// Prefill, or decode when every sequence brings one token.
    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// Token rows, padding included (the step key's bucket).
    pub(super) fn bucket(&self) -> usize {
        self.bucket
    }

    /// Logits rows, padding included (the step key's sequences; 0: the graph has no head).
    pub(super) fn logits(&self) -> usize {
        self.logits
    }

    /// Whether the step returns logits, or tokens picked from them on the device.
    pub(super) fn pick(&self) -> Pick {
        self.pick
    }

    /// Whether its bucket's co-execution gate chooses and times its plan: a lone
    /// sequence's step that reads back at most its last row. A scored chunk's head reads
    /// every row, which would skew the gate's timings, and a batch runs on the plan one
    /// sequence decodes on.
    pub(super) fn gated(&self) -> bool {
        self.gated
    }

    /// The named input tensors.
    pub(super) fn tensors(&self) -> &[(&'static str, Tensor)] {
        &self.tensors
    }

    /// The step state over the shares' KV caches, given in the shares' order: each
    /// sequence's rows only, so padding rows attend to nothing and the CPU skips them.
    pub(super) fn state<'k>(
        &self,
        kvs: impl IntoIterator<Item = &'k mut KvCache>,
    ) -> Result<StepState<'k>, StepError> {
        let segments: Vec<Segment<'k>> = self
            .segments
            .iter()
            .zip(kvs)
            .map(|((rows, kv_len), kv)| Segment {
                rows: rows.clone(),
                kv_len: *kv_len,
                kv,
            })
            .collect();
        if segments.len() != self.segments.len() {
            return Err(StepError::internal(
                "a step got fewer KV caches than sequences",
            ));
        }
        Ok(StepState::batch(segments)?.padded_to(self.bucket))
    }

    /// What the step's `outputs` hold for the rows read back, in order: nothing, their
    /// greedy tokens, or their logits rows of `vocab` scores.
    pub(super) fn output(
        &self,
        outputs: Vec<Tensor>,
        vocab: usize,
    ) -> Result<StepOutput, StepError> {
        if self.wanted == 0 {
            return Ok(StepOutput::none());
        }
        let output = outputs
            .into_iter()
            .next()
            .ok_or_else(|| StepError::internal("a step returned no logits"))?;
        match self.pick {
            Pick::Greedy | Pick::Draw => StepOutput::from_picks(output, self.wanted),
            Pick::Logits => {
                BatchLogits::from_output(output, vocab, self.wanted).map(StepOutput::Logits)
            }
        }
    }
}

/// Whether any of the heads is drawn.
fn draws(mut heads: impl Iterator<Item = Returns>) -> bool {
    heads.any(|w| matches!(w, Returns::Draw(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::cut::Cut;
    use crate::backend::cpu::edit::{Edit, EditOp, Edits};
    use crate::step::DrawSettings;

    fn i32s(inputs: &StepInputs, name: &str) -> Vec<i32> {
        let (_, tensor) = inputs.tensors().iter().find(|(n, _)| *n == name).unwrap();
        tensor.host_bytes().unwrap().view::<i32>().to_vec()
    }

    #[test]
    fn a_lone_chunk_pads_to_a_power_of_two_and_reads_its_last_row() {
        let chunk = [7; 20];
        let step = StepInputs::new(&[(5, &chunk[..], Returns::Token)]).unwrap();
        assert_eq!(
            (step.phase(), step.bucket(), step.logits()),
            (Phase::Prefill, 32, 1)
        );
        assert!(step.pick() == Pick::Greedy && step.gated());
        assert_eq!(i32s(&step, inputs::LOGITS_ROW), [19]);
        let positions = i32s(&step, inputs::POSITIONS);
        assert_eq!((positions[0], positions[19], positions[20]), (5, 24, 0));
        let fill = StepInputs::new(&[(0, &chunk[..], Returns::Nothing)]).unwrap();
        assert_eq!(fill.logits(), 0);
        assert!(fill.tensors().iter().all(|(n, _)| *n != inputs::LOGITS_ROW));
    }

    #[test]
    fn a_scored_chunk_reads_every_row_outside_the_gate() {
        let chunk = [1, 2, 3];
        let step = StepInputs::new(&[(0, &chunk[..], Returns::Every)]).unwrap();
        assert_eq!((step.bucket(), step.logits()), (4, 4));
        assert!(step.pick() == Pick::Logits && !step.gated());
        assert_eq!(i32s(&step, inputs::LOGITS_ROW), [0, 1, 2, 0]);
    }

    #[test]
    fn a_batch_pads_to_step_buckets_and_returns_tokens_only_when_all_ask() {
        let (a, b, c) = ([1], [2], [3; 9]);
        let shares = [
            (4, &a[..], Returns::Token),
            (9, &b[..], Returns::Logits),
            (0, &c[..], Returns::Nothing),
        ];
        let step = StepInputs::new(&shares).unwrap();
        assert_eq!(
            (step.phase(), step.bucket(), step.logits()),
            (Phase::Prefill, 16, 2)
        );
        assert!(step.pick() == Pick::Logits && !step.gated());
        assert_eq!(i32s(&step, inputs::LOGITS_ROW), [0, 1]);
        assert_eq!(&i32s(&step, inputs::POSITIONS)[..3], [4, 9, 0]);
        let decode = StepInputs::new(&shares[..1].repeat(3)).unwrap();
        assert_eq!((decode.phase(), decode.bucket()), (Phase::Decode, 4));
        assert_eq!(decode.pick(), Pick::Greedy);
    }

    #[test]
    fn a_batch_with_a_draw_draws_every_row_and_greedy_ones_at_temperature_zero() {
        let (a, b, c) = ([1], [2], [3]);
        let edits = Edits::of(&[Edit::new(7, EditOp::Add, 1.5)]).unwrap();
        let draw = DrawSettings::new(0.7, 0.05, Cut::new(40, 0.5), 0xDEAD_BEEF)
            .unwrap()
            .with_edits(edits);
        let shares = [
            (4, &a[..], Returns::Draw(draw)),
            (9, &b[..], Returns::Token),
            (2, &c[..], Returns::Nothing),
        ];
        let step = StepInputs::new(&shares).unwrap();
        assert_eq!(step.pick(), Pick::Draw);
        let params = i32s(&step, inputs::DRAW);
        // Two logits rows padded to the step's bucket of sequences, each its settings.
        assert_eq!(params.len(), DRAW_PARAMS * step.logits());
        let first = [
            0.7f32.to_bits(),
            0.05f32.to_bits(),
            0xDEAD_BEEF,
            40,
            32768,
            1,
            7,
            EditOp::Add as u32,
            1.5f32.to_bits(),
        ];
        assert_eq!(params[..first.len()], first.map(|w| w as i32));
        assert!(params[first.len()..].iter().all(|&p| p == 0));
        // Without a draw, no settings; with a sequence reading logits, no pick.
        let greedy = StepInputs::new(&shares[1..]).unwrap();
        assert_eq!(greedy.pick(), Pick::Greedy);
        assert!(greedy.tensors().iter().all(|(n, _)| *n != inputs::DRAW));
        let mixed = [
            (4, &a[..], Returns::Draw(draw)),
            (9, &b[..], Returns::Logits),
        ];
        assert_eq!(StepInputs::new(&mixed).unwrap().pick(), Pick::Logits);
        for (t, min_p) in [(0.0, 0.0), (f32::NAN, 0.0), (1.0, 1.5), (1.0, -0.1)] {
            assert!(
                DrawSettings::new(t, min_p, Cut::NONE, 1).is_none(),
                "{t} {min_p}"
            );
        }
    }

    #[test]
    fn empty_and_oversized_steps_are_refused() {
        assert!(StepInputs::new(&[]).is_err());
        assert!(StepInputs::new(&[(0, &[][..], Returns::Every)]).is_err());
        let long = [0; PREFILL_CHUNK + 1];
        assert!(StepInputs::new(&[(0, &long[..], Returns::Every)]).is_err());
    }
}
