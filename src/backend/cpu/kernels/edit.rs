//! What a sampler's logit bias and penalties change in a row of logits before it picks
//! (decision 202): a short list of edits, each a token id, an operation and a value,
//! applied in order. The sampler applies its list on the CPU; a step that picks on its
//! device carries the same list in its `Draw` settings (at most [`DRAW_EDITS`] of them)
//! and the device applies it with the same arithmetic, so both pick from the same
//! logits.

use super::argmax::sanitize;
use crate::graph::DRAW_EDITS;

/// What an edit does to its token's sanitized logit `l` with its value `v`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditOp {
    /// `l + v`, sanitized (a logit bias; `v` −∞ bans the token).
    Add = 0,
    /// `l / v` where `l > 0`, else `l · v` (the repetition penalty).
    Scale = 1,
    /// `l − v`, sanitized (the frequency and presence penalties).
    Sub = 2,
}

/// One change to one token's logit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edit {
    id: u32,
    op: EditOp,
    value: u32,
}

impl Edit {
    /// `op` with `value` on token `id` (ids past the logits change nothing).
    pub fn new(id: u32, op: EditOp, value: f32) -> Edit {
        Edit {
            id,
            op,
            value: value.to_bits(),
        }
    }

    /// The logit `l` after this edit: sanitized first (NaN as −∞, +∞ as the largest
    /// finite value), then changed.
    #[inline]
    fn apply(self, l: f32) -> f32 {
        let (l, v) = (sanitize(l), f32::from_bits(self.value));
        match self.op {
            EditOp::Add => sanitize(l + v),
            EditOp::Scale if l > 0.0 => l / v,
            EditOp::Scale => l * v,
            EditOp::Sub => sanitize(l - v),
        }
    }

    /// Its three words in a step's `Draw` settings: id, operation, value bits.
    fn words(self) -> [u32; 3] {
        [self.id, self.op as u32, self.value]
    }
}

/// Applies `edits` to `logits` (indexed by token id) in order.
pub fn apply(edits: &[Edit], logits: &mut [f32]) {
    for e in edits {
        if let Some(l) = logits.get_mut(e.id as usize) {
            *l = e.apply(*l);
        }
    }
}

/// At most [`DRAW_EDITS`] edits, inline so that a step's settings stay a plain value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edits {
    list: [Edit; DRAW_EDITS],
    len: usize,
}

impl Edits {
    /// No edits.
    pub const NONE: Edits = Edits {
        list: [Edit {
            id: 0,
            op: EditOp::Add,
            value: 0,
        }; DRAW_EDITS],
        len: 0,
    };

    /// `edits` held inline; `None` when there are more than [`DRAW_EDITS`].
    pub fn of(edits: &[Edit]) -> Option<Edits> {
        let mut held = Edits::NONE;
        held.list.get_mut(..edits.len())?.copy_from_slice(edits);
        held.len = edits.len();
        Some(held)
    }

    /// The edits, in order.
    pub fn as_slice(&self) -> &[Edit] {
        &self.list[..self.len]
    }

    /// Their words in a step's `Draw` settings: the count, then each edit's three
    /// words, then zeros up to [`DRAW_EDITS`] edits (the unused entries are
    /// [`Edits::NONE`]'s, all zero words).
    pub fn words(&self) -> impl Iterator<Item = u32> + '_ {
        let edits = self.list.iter().flat_map(|e| e.words());
        std::iter::once(self.len as u32).chain(edits)
    }
}

/// Applies the edits a step's `Draw` settings carry (`words`: the count, then three
/// words an edit, as [`Edits::words`] wrote them) to `logits`; a count past
/// [`DRAW_EDITS`] or an unknown operation is refused.
pub fn apply_words(words: &[i32], logits: &mut [f32]) -> Result<(), String> {
    let count = words.first().map_or(0, |&n| n as u32 as usize);
    let Some(list) = words.get(1..1 + 3 * count).filter(|_| count <= DRAW_EDITS) else {
        return Err(format!("{count} edits in a draw's settings"));
    };
    for w in list.chunks_exact(3) {
        let op = match w[1] {
            0 => EditOp::Add,
            1 => EditOp::Scale,
            2 => EditOp::Sub,
            other => return Err(format!("edit operation {other} in a draw's settings")),
        };
        let edit = Edit::new(w[0] as u32, op, f32::from_bits(w[2] as u32));
        apply(&[edit], logits);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_apply_in_order_and_travel_as_words() {
        let edits = [
            Edit::new(1, EditOp::Add, 2.0),
            Edit::new(1, EditOp::Add, -0.5),
            Edit::new(0, EditOp::Scale, 2.0),
            Edit::new(2, EditOp::Scale, 2.0),
            Edit::new(3, EditOp::Sub, 1.5),
            Edit::new(9, EditOp::Sub, 1.0),
            Edit::new(4, EditOp::Add, f32::NEG_INFINITY),
        ];
        let start = [3.0, 1.0, -1.0, f32::NAN, f32::INFINITY];
        let mut direct = start;
        apply(&edits, &mut direct);
        assert_eq!(
            direct,
            [1.5, 2.5, -2.0, f32::NEG_INFINITY, f32::NEG_INFINITY]
        );
        let held = Edits::of(&edits).unwrap();
        let words: Vec<i32> = held.words().map(|w| w as i32).collect();
        assert_eq!(words.len(), 1 + 3 * DRAW_EDITS);
        let mut carried = start;
        apply_words(&words, &mut carried).unwrap();
        assert_eq!(carried, direct);
        assert!(Edits::of(&vec![edits[0]; DRAW_EDITS + 1]).is_none());
        assert!(apply_words(&[DRAW_EDITS as i32 + 1], &mut carried).is_err());
        assert!(apply_words(&[1, 0, 7, 0], &mut carried).is_err());
        assert_eq!(Edits::NONE.words().next(), Some(0));
    }
}
