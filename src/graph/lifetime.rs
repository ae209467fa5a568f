//! Buffer planning by lifetime: intermediate values whose lifetimes do not overlap
//! share a slot, so a partition's working memory is the peak, not the sum.

use std::collections::HashMap;

use super::{Graph, ValueId};

/// Where each computed value of a partition lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferPlan {
    slot_of: HashMap<ValueId, usize>,
    slot_bytes: Vec<usize>,
}

impl BufferPlan {
    /// Plans slots for `nodes` (in execution order). Values in `keep` (partition
    /// outputs) get their own slot and are never reused; others are freed after their
    /// last reader within `nodes`. `bytes_of` gives each value's size.
    pub fn new(
        graph: &Graph,
        nodes: &[ValueId],
        keep: &[ValueId],
        bytes_of: impl Fn(ValueId) -> usize,
    ) -> BufferPlan {
        let mut last_use: HashMap<ValueId, usize> = HashMap::new();
        for (step, &id) in nodes.iter().enumerate() {
            for &input in &graph.node(id).inputs {
                last_use.insert(input, step);
            }
        }
        let mut plan = BufferPlan::default();
        let mut free: Vec<usize> = Vec::new();
        for (step, &id) in nodes.iter().enumerate() {
            let need = bytes_of(id);
            let slot = if keep.contains(&id) {
                None
            } else {
                free.iter()
                    .enumerate()
                    .filter(|(_, &s)| plan.slot_bytes[s] >= need)
                    .min_by_key(|(_, &s)| plan.slot_bytes[s])
                    .or_else(|| {
                        free.iter()
                            .enumerate()
                            .max_by_key(|(_, &s)| plan.slot_bytes[s])
                    })
                    .map(|(i, _)| i)
                    .map(|i| free.swap_remove(i))
            };
            let slot = slot.unwrap_or_else(|| {
                plan.slot_bytes.push(0);
                plan.slot_bytes.len() - 1
            });
            plan.slot_bytes[slot] = plan.slot_bytes[slot].max(need);
            plan.slot_of.insert(id, slot);
            let dead = graph.node(id).inputs.iter().copied().filter(|input| {
                last_use.get(input) == Some(&step)
                    && plan.slot_of.contains_key(input)
                    && !keep.contains(input)
            });
            let mut dead: Vec<ValueId> = dead.collect();
            dead.dedup();
            free.extend(dead.iter().map(|d| plan.slot_of[d]));
            if !last_use.contains_key(&id) && !keep.contains(&id) {
                free.push(slot);
            }
        }
        plan
    }

    /// The slot holding `id`, if it is computed in this partition.
    pub fn slot(&self, id: ValueId) -> Option<usize> {
        self.slot_of.get(&id).copied()
    }

    /// Size of every slot, in bytes.
    pub fn slot_bytes(&self) -> &[usize] {
        &self.slot_bytes
    }

    /// Total bytes of all slots.
    pub fn total_bytes(&self) -> usize {
        self.slot_bytes.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn chain_reuses_two_slots_and_keeps_outputs_apart() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [4]).unwrap();
        let mut v = x;
        let mut chain = Vec::new();
        for _ in 0..6 {
            v = b.silu(v).unwrap();
            chain.push(v);
        }
        let g = b.finish(vec![v]).unwrap();
        let plan = BufferPlan::new(&g, &chain, &[v], |_| 16);
        let distinct: std::collections::HashSet<_> =
            chain[..5].iter().map(|&c| plan.slot(c).unwrap()).collect();
        assert_eq!(distinct.len(), 2);
        assert!(!distinct.contains(&plan.slot(v).unwrap()));
        // A value and its reader never share a slot.
        for pair in chain.windows(2) {
            assert_ne!(plan.slot(pair[0]), plan.slot(pair[1]));
        }
    }
}
