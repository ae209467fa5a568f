//! The cheap cache key: which model, which phase, which shape bucket, which backends,
//! which co-execution arm. It finds a compiled executor without tracing the step.

use serde::Serialize;

use crate::backend::BackendId;

/// Which kind of step a graph computes. Prefill and decode of the same bucket are
/// different graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Phase {
    /// A chunk of prompt tokens.
    Prefill,
    /// One new token per sequence.
    Decode,
}

/// Which plan of a step's graph an executor runs. Co-execution offers several plans for
/// one graph, each compiled and cached under its own key; a typed field rather than a
/// value folded into the backends' fingerprint, so that reports and tests can name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum StepArm {
    /// The capability-greedy plan over every backend in the set.
    Baseline,
    /// The baseline with large linears split by rows across two backends, at the
    /// calibrated ratios whose fingerprint `ratios` is (new ratios, new executors).
    Split {
        /// Fingerprint of the split ratios.
        ratios: u64,
    },
    /// Every compute node on one backend.
    Only(BackendId),
}

/// Identifies a step by what determines its graph, so that a decode loop can find its
/// executor without tracing. The caller must fold everything that changes the traced
/// graph or the plan (model weights and config, backend versions) into the two
/// fingerprints; the structural key stays the source of truth on a step-index miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct StepKey {
    /// Fingerprint of the model (config and weight layout), see [`fingerprint`].
    pub model: u64,
    /// Prefill or decode.
    pub phase: Phase,
    /// Shape bucket: token rows of the step (tokens per chunk for prefill, batch for decode).
    pub bucket: u32,
    /// Sequences whose logits the step returns (its batch bucket); 1 for one sequence,
    /// 0 for a prompt chunk before the last (its graph has no output head).
    pub sequences: u32,
    /// Whether the step returns those sequences' logits or a token picked from them on
    /// the device that computed them.
    pub pick: Pick,
    /// Fingerprint of the backend set (ids, capabilities, versions), see [`fingerprint`].
    pub backends: u64,
    /// The plan the executor runs.
    pub arm: StepArm,
}

/// What a step's head ends with: its logits rows come back, or only a token picked
/// from each on the device that computed them (4 bytes a row instead of the
/// vocabulary's scores).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Pick {
    /// No pick: the logits come back.
    Logits,
    /// Greedy decoding's token (the graph's `Argmax`).
    Greedy,
    /// A token drawn at each row's temperature, or greedy where it is 0 (the graph's
    /// `Draw`).
    Draw,
}

/// A 64-bit fingerprint (XXH3) of `bytes`, for the fields of a [`StepKey`].
pub fn fingerprint(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_distinguish_inputs() {
        assert_eq!(fingerprint(b"llama"), fingerprint(b"llama"));
        assert_ne!(fingerprint(b"llama"), fingerprint(b"llamb"));
    }

    #[test]
    fn phase_is_part_of_the_key() {
        let decode = StepKey {
            model: fingerprint(b"m"),
            phase: Phase::Decode,
            bucket: 1,
            sequences: 1,
            pick: Pick::Logits,
            backends: fingerprint(b"cpu"),
            arm: StepArm::Baseline,
        };
        let prefill = StepKey {
            phase: Phase::Prefill,
            ..decode
        };
        assert_ne!(decode, prefill);
        for pick in [Pick::Greedy, Pick::Draw] {
            assert_ne!(decode, StepKey { pick, ..decode });
        }
    }
}
