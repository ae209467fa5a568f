//! Pass 2 of the partitioner: sends short runs on fast backends back to the fallback
//! when the transfers around them cost more than the run saves (the "excessive
//! partitioning" pitfall).

use std::collections::BTreeSet;

use super::cost;
use super::partition::lookup;
use super::{Placement, Policy, Reason};
use crate::backend::{BackendId, Capability};
use crate::graph::{Graph, ValueId};

/// Moves every maximal run of compute nodes (consecutive in topological order, same
/// backend) that is shorter than `policy.min_run` and not on the fallback back to the
/// fallback, when the fallback supports every node of it and the transfers the run
/// causes cost more than it saves. Runs are visited in order; each decision sees the
/// earlier ones. `backends` is sorted by id.
pub(super) fn smooth(
    graph: &Graph,
    backends: &[(BackendId, &Capability)],
    policy: &Policy,
    placement: &mut [Placement],
    why: &mut [Reason],
) {
    let Some(fallback) = lookup(backends, policy.fallback) else {
        return;
    };
    let consumers = graph.consumers();
    let compute: Vec<ValueId> = graph
        .ids()
        .filter(|&id| !graph.node(id).op.kind().is_source())
        .collect();
    let runs: Vec<&[ValueId]> = compute
        .chunk_by(|a, b| placement[a.index()] == placement[b.index()])
        .collect();
    for run in runs {
        let Placement::On(from) = placement[run[0].index()] else {
            continue;
        };
        if from == policy.fallback || run.len() >= policy.min_run {
            continue;
        }
        let Some(cap) = lookup(backends, from) else {
            continue;
        };
        if run.iter().any(|&id| fallback.supports(graph, id).is_err()) {
            continue;
        }
        let saves: f64 = run
            .iter()
            .map(|&id| cost::compute_us(graph, id, fallback) - cost::compute_us(graph, id, cap))
            .sum();
        let touched = touched_values(graph, run);
        let before = transfers_us(graph, &consumers, backends, placement, &touched);
        assign(placement, run, Placement::On(policy.fallback));
        let after = transfers_us(graph, &consumers, backends, placement, &touched);
        let transfers = before - after;
        if transfers > saves {
            for &id in run {
                why[id.index()] = Reason::Smoothed {
                    from,
                    run_len: run.len(),
                    saves_us: saves as f32,
                    transfers_us: transfers as f32,
                };
            }
        } else {
            assign(placement, run, Placement::On(from));
        }
    }
}

fn assign(placement: &mut [Placement], run: &[ValueId], to: Placement) {
    for id in run {
        placement[id.index()] = to;
    }
}

/// The run's nodes and the values they read: the only values whose transfers change
/// when the run moves.
fn touched_values(graph: &Graph, run: &[ValueId]) -> BTreeSet<ValueId> {
    run.iter()
        .flat_map(|&id| std::iter::once(id).chain(graph.node(id).inputs.iter().copied()))
        .collect()
}

/// Total estimated cost of the transfers of `values` under `placement`: one per
/// (value, reading backend) pair whose backend differs from the value's. Resident
/// weights never transfer.
fn transfers_us(
    graph: &Graph,
    consumers: &[Vec<ValueId>],
    backends: &[(BackendId, &Capability)],
    placement: &[Placement],
    values: &BTreeSet<ValueId>,
) -> f64 {
    let mut total = 0.0;
    for &value in values {
        let Placement::On(src) = placement[value.index()] else {
            continue;
        };
        let dests: BTreeSet<BackendId> = consumers[value.index()]
            .iter()
            .filter_map(|r| match placement[r.index()] {
                Placement::On(b) if b != src => Some(b),
                _ => None,
            })
            .collect();
        let bytes = cost::value_bytes(graph.node(value));
        for dest in dests {
            if let (Some(from), Some(to)) = (lookup(backends, src), lookup(backends, dest)) {
                total += cost::transfer_us(bytes, from, to);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use crate::backend::{BackendId, Capability};
    use crate::graph::{DType, Graph, GraphBuilder, OpKind};
    use crate::plan::testutil::cap;
    use crate::plan::{partition, Placement, Policy, Reason};

    /// x → silu → gelu, with a gpu that only runs silu.
    fn chain() -> (Graph, Capability, Capability) {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [1, 64]).unwrap();
        let s = b.silu(x).unwrap();
        let g = b.gelu(s).unwrap();
        let graph = b.finish(vec![g]).unwrap();
        (graph, cap(None, 0, 0), cap(Some(&[OpKind::Silu]), 5, 1))
    }

    fn plan(cpu: &Capability, gpu: &Capability, min_run: usize) -> crate::plan::Plan {
        let (graph, _, _) = chain();
        let backends = [(BackendId::CPU, cpu), (BackendId::GPU, gpu)];
        let policy = Policy {
            fallback: BackendId::CPU,
            min_run,
        };
        partition(&graph, &backends, &policy).unwrap()
    }

    #[test]
    fn short_run_that_saves_nothing_goes_back_to_the_fallback() {
        let (_, cpu, gpu) = chain();
        let p = plan(&cpu, &gpu, 3);
        assert_eq!(p.partitions.len(), 1);
        assert!(p.transfers.is_empty());
        assert_eq!(p.placement[1], Placement::On(BackendId::CPU));
        let Reason::Smoothed {
            from,
            run_len,
            saves_us,
            transfers_us,
        } = p.why[1]
        else {
            panic!("not smoothed: {:?}", p.why[1]);
        };
        assert_eq!((from, run_len, saves_us), (BackendId::GPU, 1, 0.0));
        // Two transfers of 256 bytes: 2 × (10 us + 256 B at 10 GB/s).
        assert!((transfers_us - 20.0512).abs() < 1e-3, "{transfers_us}");
    }

    #[test]
    fn run_that_pays_for_its_transfers_stays() {
        let (_, mut cpu, mut gpu) = chain();
        cpu.cost.gflops = 0.001;
        gpu.cost.gflops = 1000.0;
        let p = plan(&cpu, &gpu, 3);
        assert_eq!(p.partitions.len(), 2);
        assert_eq!(p.transfers.len(), 2);
    }

    #[test]
    fn long_runs_and_unsupported_fallbacks_are_left_alone() {
        let (_, cpu, gpu) = chain();
        assert_eq!(plan(&cpu, &gpu, 1).partitions.len(), 2);
        let no_silu = cap(Some(&[OpKind::Gelu]), 0, 0);
        assert_eq!(plan(&no_silu, &gpu, 3).partitions.len(), 2);
    }
}
