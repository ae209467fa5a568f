//! The partitioner: assigns every node to a backend by declared capability, smooths
//! away short runs, merges runs into partitions and inserts one transfer per
//! (value, destination backend) on cross-backend edges.

use std::collections::BTreeMap;

use super::{smooth, Partition, Placement, Plan, PlanError, Policy, Reason, Transfer};
use crate::backend::{BackendId, Capability, Refusal};
use crate::graph::{DType, Graph, Node, Op, OpKind, ValueId};

/// Nodes of a graph placed by the caller instead of by capability priority.
pub type Pins = BTreeMap<ValueId, BackendId>;

/// Plans `graph` over `backends`: the planned graph with transfers inserted, each
/// node's placement and reason, the partitions and the transfers. The order of
/// `backends` does not matter; equal priorities go to the lower [`BackendId`].
pub fn partition(
    graph: &Graph,
    backends: &[(BackendId, &Capability)],
    policy: &Policy,
) -> Result<Plan, PlanError> {
    partition_pinned(graph, backends, policy, &Pins::new())
}

/// [`partition`] with some nodes pinned to a backend (which must support them). A
/// pinned node is never smoothed away and forms a partition of its own, so a split
/// linear's two halves are separate partitions that can run at the same time.
pub fn partition_pinned(
    graph: &Graph,
    backends: &[(BackendId, &Capability)],
    policy: &Policy,
    pins: &Pins,
) -> Result<Plan, PlanError> {
    let mut backends = backends.to_vec();
    backends.sort_by_key(|&(id, _)| id);
    if let Some(w) = backends.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(PlanError::DuplicateBackend(w[0].0));
    }
    if lookup(&backends, policy.fallback).is_none() {
        return Err(PlanError::NoFallback(policy.fallback));
    }
    // (1) Assign: inputs to the fallback, weights resident, every other node to the
    //     highest-priority backend that supports it.
    let (mut placement, mut why) = assign(graph, &backends, policy.fallback)?;
    // (2) Smooth: short runs on fast backends go back to the fallback when their
    //     transfers cost more than they save.
    smooth::smooth(graph, &backends, policy, &mut placement, &mut why);
    pin(graph, &backends, pins, &mut placement, &mut why)?;
    // (3) Merge consecutive compute nodes with equal placement into partitions.
    let groups = merge(graph, &placement, pins);
    // (4) Build the planned graph, inserting transfers on cross-backend edges.
    Ok(build(graph, &backends, &placement, &why, &groups))
}

/// The capability of backend `id` in a slice sorted by id.
pub(super) fn lookup<'a>(
    backends: &[(BackendId, &'a Capability)],
    id: BackendId,
) -> Option<&'a Capability> {
    backends
        .binary_search_by_key(&id, |&(b, _)| b)
        .ok()
        .map(|i| backends[i].1)
}

/// Pass 1: the greedy placement and its reasons, indexed by original node.
fn assign(
    graph: &Graph,
    backends: &[(BackendId, &Capability)],
    fallback: BackendId,
) -> Result<(Vec<Placement>, Vec<Reason>), PlanError> {
    let mut placement = Vec::with_capacity(graph.len());
    let mut why = Vec::with_capacity(graph.len());
    for id in graph.ids() {
        let (p, r) = match graph.node(id).op.kind() {
            OpKind::Input => (Placement::On(fallback), Reason::Input),
            OpKind::Weight => (Placement::Resident, Reason::Weight),
            _ => choose(graph, id, backends)?,
        };
        placement.push(p);
        why.push(r);
    }
    Ok((placement, why))
}

/// The highest-priority backend supporting compute node `id` (ties to the lower id),
/// with the refusals of every backend of at least its priority.
fn choose(
    graph: &Graph,
    id: ValueId,
    backends: &[(BackendId, &Capability)],
) -> Result<(Placement, Reason), PlanError> {
    // Candidates by descending priority, then ascending id.
    let mut verdicts: Vec<(BackendId, u8, Result<(), Refusal>)> = backends
        .iter()
        .map(|&(b, cap)| (b, cap.priority, cap.supports(graph, id)))
        .collect();
    verdicts.sort_by_key(|&(b, priority, _)| (std::cmp::Reverse(priority), b));
    let Some(&(chosen, priority, _)) = verdicts.iter().find(|v| v.2.is_ok()) else {
        let mut refusals: Vec<(BackendId, Refusal)> = verdicts
            .into_iter()
            .filter_map(|(b, _, r)| r.err().map(|e| (b, e)))
            .collect();
        refusals.sort_by_key(|&(b, _)| b);
        return Err(PlanError::Unplaceable {
            node: id,
            op: graph.node(id).op.kind(),
            refusals,
        });
    };
    let refused = verdicts
        .into_iter()
        .filter(|&(_, p, _)| p >= priority)
        .filter_map(|(b, _, r)| r.err().map(|e| (b, e)))
        .collect();
    Ok((Placement::On(chosen), Reason::Preferred { refused }))
}

/// Applies `pins` after smoothing, checking that each pinned backend supports its node.
fn pin(
    graph: &Graph,
    backends: &[(BackendId, &Capability)],
    pins: &Pins,
    placement: &mut [Placement],
    why: &mut [Reason],
) -> Result<(), PlanError> {
    for (&id, &b) in pins {
        if id.index() >= graph.len() || graph.node(id).op.kind().is_source() {
            continue;
        }
        let refusal = match lookup(backends, b) {
            Some(cap) => cap.supports(graph, id).err(),
            None => Some(Refusal::Op(graph.node(id).op.kind())),
        };
        if let Some(refusal) = refusal {
            return Err(PlanError::Unplaceable {
                node: id,
                op: graph.node(id).op.kind(),
                refusals: vec![(b, refusal)],
            });
        }
        placement[id.index()] = Placement::On(b);
        why[id.index()] = Reason::Pinned;
    }
    Ok(())
}

/// Pass 3: maximal groups of consecutive compute nodes (original order) on one backend;
/// a pinned node is a group of its own.
fn merge(graph: &Graph, placement: &[Placement], pins: &Pins) -> Vec<(BackendId, Vec<ValueId>)> {
    let mut groups: Vec<(BackendId, Vec<ValueId>)> = Vec::new();
    let mut after_pin = false;
    for id in graph.ids() {
        let Placement::On(b) = placement[id.index()] else {
            continue;
        };
        if graph.node(id).op.kind().is_source() {
            continue;
        }
        let pinned = pins.contains_key(&id);
        match groups.last_mut() {
            Some((last, nodes)) if *last == b && !pinned && !after_pin => nodes.push(id),
            _ => groups.push((b, vec![id])),
        }
        after_pin = pinned;
    }
    groups
}

/// Nodes, placements and reasons of the planned graph as it is built.
#[derive(Default)]
struct Planned {
    nodes: Vec<Node>,
    placement: Vec<Placement>,
    why: Vec<Reason>,
}

impl Planned {
    fn push(&mut self, node: Node, placement: Placement, why: Reason) -> ValueId {
        self.nodes.push(node);
        self.placement.push(placement);
        self.why.push(why);
        ValueId(self.nodes.len() as u32 - 1)
    }
}

/// Pass 4: the planned graph (sources, then per partition its incoming transfers and
/// its nodes), with one transfer per (value, destination backend).
fn build(
    graph: &Graph,
    backends: &[(BackendId, &Capability)],
    placement: &[Placement],
    why: &[Reason],
    groups: &[(BackendId, Vec<ValueId>)],
) -> Plan {
    let mut out = Planned::default();
    let mut new_id: Vec<Option<ValueId>> = vec![None; graph.len()];
    for id in graph.ids() {
        if graph.node(id).op.kind().is_source() {
            let n = graph.node(id).clone();
            new_id[id.index()] = Some(out.push(n, placement[id.index()], why[id.index()].clone()));
        }
    }
    // The source backend of `v` when a reader on `b` needs it transferred.
    let needs_transfer = |v: ValueId, b: BackendId| match placement[v.index()] {
        Placement::On(a) if a != b => Some(a),
        _ => None,
    };
    let mut transfer_of: BTreeMap<(ValueId, BackendId), ValueId> = BTreeMap::new();
    let mut transfers = Vec::new();
    let mut partitions = Vec::new();
    for (b, group) in groups {
        for &id in group {
            for &v in &graph.node(id).inputs {
                let Some(a) = needs_transfer(v, *b) else {
                    continue;
                };
                if transfer_of.contains_key(&(v, *b)) {
                    continue;
                }
                let src = graph.node(v);
                let source = new_id[v.index()].expect("producers precede their readers");
                let to_dtype = lookup(backends, *b).map_or(src.dtype, |cap| {
                    [src.dtype, DType::F32, DType::F16, DType::BF16]
                        .into_iter()
                        .find(|&d| cap.dtypes.contains(d) || cap.operand_dtypes.contains(d))
                        .unwrap_or(src.dtype)
                });
                let node = Node {
                    op: Op::Transfer,
                    inputs: vec![source],
                    shape: src.shape.clone(),
                    dtype: to_dtype,
                };
                let t = out.push(node, Placement::On(*b), Reason::Transfer);
                transfer_of.insert((v, *b), t);
                transfers.push(Transfer {
                    node: t,
                    source,
                    from: a,
                    to: *b,
                    from_dtype: src.dtype,
                    to_dtype,
                });
            }
        }
        let mut nodes = Vec::with_capacity(group.len());
        for &id in group {
            let orig = graph.node(id);
            let inputs = orig
                .inputs
                .iter()
                .map(|&v| match needs_transfer(v, *b) {
                    Some(_) => transfer_of[&(v, *b)],
                    None => new_id[v.index()].expect("producers precede their readers"),
                })
                .collect();
            let node = Node {
                inputs,
                ..orig.clone()
            };
            let planned = out.push(node, placement[id.index()], why[id.index()].clone());
            new_id[id.index()] = Some(planned);
            nodes.push(planned);
        }
        partitions.push(Partition {
            backend: *b,
            nodes,
            inputs: Vec::new(),
            outputs: Vec::new(),
        });
    }
    let original_to_planned: Vec<ValueId> = new_id
        .into_iter()
        .map(|v| v.expect("every node is planned"))
        .collect();
    let outputs = graph
        .outputs()
        .iter()
        .map(|o| original_to_planned[o.index()])
        .collect();
    let planned = Graph::from_parts(out.nodes, outputs)
        .expect("sources, transfers and partitions are emitted in topological order");
    fill_boundaries(&planned, &out.placement, &mut partitions);
    Plan {
        graph: planned,
        placement: out.placement,
        why: out.why,
        partitions,
        transfers,
        original_to_planned,
    }
}

/// Fills each partition's inputs (non-weight values read from outside it) and outputs
/// (values read outside it, by later partitions or transfers, or returned).
fn fill_boundaries(graph: &Graph, placement: &[Placement], partitions: &mut [Partition]) {
    let mut part_of: Vec<Option<usize>> = vec![None; graph.len()];
    for (p, part) in partitions.iter().enumerate() {
        for id in &part.nodes {
            part_of[id.index()] = Some(p);
        }
    }
    let consumers = graph.consumers();
    for (p, part) in partitions.iter_mut().enumerate() {
        let mut inputs: Vec<ValueId> = part
            .nodes
            .iter()
            .flat_map(|&id| graph.node(id).inputs.iter().copied())
            .filter(|v| {
                placement[v.index()] != Placement::Resident && part_of[v.index()] != Some(p)
            })
            .collect();
        inputs.sort();
        inputs.dedup();
        let outputs: Vec<ValueId> = part
            .nodes
            .iter()
            .copied()
            .filter(|&id| {
                graph.outputs().contains(&id)
                    || consumers[id.index()]
                        .iter()
                        .any(|r| part_of[r.index()] != Some(p))
            })
            .collect();
        part.inputs = inputs;
        part.outputs = outputs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testutil::{cap, mixed};

    fn policy(min_run: usize) -> Policy {
        Policy {
            fallback: BackendId::CPU,
            min_run,
        }
    }

    #[test]
    fn places_by_priority_with_one_transfer_per_destination() {
        let (g, cpu, gpu) = mixed();
        let backends = [(BackendId::CPU, &cpu), (BackendId::GPU, &gpu)];
        let plan = partition(&g, &backends, &policy(1)).unwrap();
        let on: Vec<BackendId> = plan.partitions.iter().map(|p| p.backend).collect();
        assert_eq!(on, [BackendId::GPU, BackendId::CPU, BackendId::GPU]);
        // x to the gpu, the matmul once to the cpu (two readers), softmax back.
        let copied: Vec<(ValueId, BackendId)> =
            plan.transfers.iter().map(|t| (t.source, t.to)).collect();
        let m = plan.original_to_planned[2];
        let sm = plan.original_to_planned[4];
        assert_eq!(
            copied,
            [
                (ValueId(0), BackendId::GPU),
                (m, BackendId::CPU),
                (sm, BackendId::GPU)
            ]
        );
        // The add reads silu straight from the earlier gpu partition.
        let s = plan.original_to_planned[3];
        let last = &plan.partitions[2];
        assert_eq!(last.inputs, [s, plan.transfers[2].node]);
        assert_eq!(plan.partitions[0].outputs, [m, s]);
        assert_eq!(
            plan.why[sm.index()],
            Reason::Preferred {
                refused: vec![(BackendId::GPU, Refusal::Op(OpKind::Softmax))]
            }
        );
        let outputs = [plan.original_to_planned[6], plan.original_to_planned[5]];
        assert_eq!(plan.graph.outputs(), outputs);
        assert_eq!(plan.placement[1], Placement::Resident);
    }

    #[test]
    fn ties_go_to_the_lower_id_whatever_the_order() {
        let (g, cpu, _) = mixed();
        let a = cap(None, 3, 1);
        let b = cap(None, 3, 2);
        let forward = [
            (BackendId::CPU, &cpu),
            (BackendId(1), &a),
            (BackendId(2), &b),
        ];
        let backward = [
            (BackendId(2), &b),
            (BackendId(1), &a),
            (BackendId::CPU, &cpu),
        ];
        let p1 = partition(&g, &forward, &policy(1)).unwrap();
        let p2 = partition(&g, &backward, &policy(1)).unwrap();
        assert_eq!(p1.partitions.len(), 1);
        assert_eq!(p1.partitions[0].backend, BackendId(1));
        let json = |p: &Plan| serde_json::to_string(p).unwrap();
        assert_eq!(json(&p1), json(&p2));
    }

    #[test]
    fn refuses_bad_backend_sets() {
        let (g, cpu, gpu) = mixed();
        let only_gpu = [(BackendId::GPU, &gpu)];
        assert_eq!(
            partition(&g, &only_gpu, &policy(1)),
            Err(PlanError::NoFallback(BackendId::CPU))
        );
        let twice = [(BackendId::CPU, &cpu), (BackendId::CPU, &gpu)];
        assert_eq!(
            partition(&g, &twice, &policy(1)),
            Err(PlanError::DuplicateBackend(BackendId::CPU))
        );
        let narrow_cpu = cap(Some(&[OpKind::MatMul, OpKind::Silu, OpKind::Softmax]), 0, 0);
        let backends = [(BackendId::CPU, &narrow_cpu), (BackendId::GPU, &gpu)];
        let err = partition(&g, &backends, &policy(1)).unwrap_err();
        assert_eq!(
            err,
            PlanError::Unplaceable {
                node: ValueId(5),
                op: OpKind::Gelu,
                refusals: vec![
                    (BackendId::CPU, Refusal::Op(OpKind::Gelu)),
                    (BackendId::GPU, Refusal::Op(OpKind::Gelu)),
                ],
            }
        );
        assert!(err.to_string().contains("b1: no kernel for gelu"), "{err}");
    }
}
