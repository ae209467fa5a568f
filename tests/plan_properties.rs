//! Properties of the partitioner over random graphs and random backend sets: placements
//! respect capabilities, cross-backend edges only go through transfers, partitions tile
//! the compute nodes, and plans are deterministic and independent of backend order.

use std::collections::BTreeSet;

use proptest::prelude::*;
use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};
use switchyard::backend::{BackendId, Capability, CostHints, DTypeSet, MemorySpace, OpSet};
use switchyard::graph::{DType, Graph, GraphBuilder, Op, OpKind, ValueId};
use switchyard::plan::{partition, Placement, Plan, PlanError, Policy, Reason};

/// Inner dimensions of random values (20 is deliberately not a multiple of 16).
const DIMS: [usize; 4] = [16, 20, 32, 48];

/// The compute ops random graphs use, in the bit order of [`CapSpec::ops`].
const COMPUTE: [OpKind; 9] = [
    OpKind::MatMul,
    OpKind::Add,
    OpKind::Mul,
    OpKind::Silu,
    OpKind::Gelu,
    OpKind::Softmax,
    OpKind::RmsNorm,
    OpKind::SwiGlu,
    OpKind::Cast,
];

/// Dtypes a narrow backend may declare, in the bit order of [`CapSpec::dtypes`].
const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::Q4_0];

/// One step of a random graph: an op selector and numbers picking operands and sizes.
#[derive(Clone, Debug)]
struct Step {
    op: u8,
    a: u16,
    b: u16,
    c: u8,
}

/// A random backend: op and dtype subsets (bit masks), alignment, priority, memory
/// space, speed and size limit.
#[derive(Clone, Debug)]
struct CapSpec {
    ops: u16,
    dtypes: u8,
    align16: bool,
    priority: u8,
    space: u8,
    speed: usize,
    small: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (0u8..10, any::<u16>(), any::<u16>(), any::<u8>()).prop_map(|(op, a, b, c)| Step {
        op,
        a,
        b,
        c,
    })
}

fn cap_spec() -> impl Strategy<Value = CapSpec> {
    // Op and dtype bits are set three times in four, so narrow backends win often.
    let bits = || (any::<u16>(), any::<u16>()).prop_map(|(a, b)| a | b);
    (
        bits(),
        bits(),
        any::<bool>(),
        0u8..8,
        0u8..3,
        0usize..3,
        any::<bool>(),
    )
        .prop_map(
            |(ops, dtypes, align16, priority, space, speed, small)| CapSpec {
                ops,
                dtypes: dtypes as u8,
                align16,
                priority,
                space,
                speed,
                small,
            },
        )
}

/// Builds a valid graph from `steps`; a step the builder rejects is skipped.
fn build(rows: usize, steps: &[Step]) -> Graph {
    let mut g = GraphBuilder::new();
    let Ok(x0) = g.input("x0", DType::F32, [rows, DIMS[0]]) else {
        return Graph::default();
    };
    let mut acts = vec![x0];
    for (i, s) in steps.iter().enumerate() {
        let x = acts[s.a as usize % acts.len()];
        let Ok(shape) = g.shape(x).cloned() else {
            continue;
        };
        let d = shape.last();
        let pick = DIMS[s.b as usize % DIMS.len()];
        let same: Vec<ValueId> = acts
            .iter()
            .copied()
            .filter(|&v| g.shape(v).is_ok_and(|sh| *sh == shape))
            .collect();
        let other = same[s.b as usize % same.len()];
        let float = [DType::F32, DType::F16][s.c as usize % 2];
        let made = match s.op {
            0 => g.input(&format!("x{i}"), float, [rows, pick]),
            1 => {
                let dtype = [DType::F32, DType::F16, DType::Q4_0][s.c as usize % 3];
                let dtype = if dtype == DType::Q4_0 && !d.is_multiple_of(32) {
                    DType::F16
                } else {
                    dtype
                };
                g.weight(&format!("w{i}"), dtype, [pick, d])
                    .and_then(|w| g.matmul(x, w))
            }
            2 | 3 => {
                let y = if s.c % 3 == 0 {
                    g.weight(&format!("b{i}"), float, [d])
                } else {
                    Ok(other)
                };
                y.and_then(|y| if s.op == 2 { g.add(x, y) } else { g.mul(x, y) })
            }
            4 => g.silu(x),
            5 => g.gelu(x),
            6 => g.softmax(x),
            7 => g
                .weight(&format!("n{i}"), float, [d])
                .and_then(|w| g.rms_norm(x, w, 1e-5)),
            8 => g.swiglu(x, other),
            _ => g.cast(x, [DType::F32, DType::F16, DType::BF16][s.c as usize % 3]),
        };
        if let Ok(v) = made {
            acts.push(v);
        }
    }
    let mut outputs = vec![acts[acts.len() - 1], acts[steps.len() * 7 % acts.len()]];
    outputs.dedup();
    g.finish(outputs).unwrap_or_default()
}

fn capability(spec: &CapSpec, fallback: bool) -> Capability {
    let ops: Vec<OpKind> = (0..COMPUTE.len())
        .filter(|i| spec.ops >> i & 1 == 1)
        .map(|i| COMPUTE[i])
        .collect();
    let dtypes: Vec<DType> = (0..DTYPES.len())
        .filter(|i| spec.dtypes >> i & 1 == 1)
        .map(|i| DTYPES[i])
        .collect();
    let speed = [0.1, 1.0, 100.0][spec.speed];
    Capability {
        ops: if fallback {
            OpSet::all()
        } else {
            OpSet::of(&ops)
        },
        dtypes: if fallback {
            DTypeSet::all()
        } else {
            DTypeSet::of(&dtypes)
        },
        operand_dtypes: DTypeSet::default(),
        max_dims: 8,
        alignment: if spec.align16 && !fallback { 16 } else { 1 },
        max_elements: if spec.small && !fallback {
            1024
        } else {
            usize::MAX
        },
        priority: if fallback {
            spec.priority % 3
        } else {
            spec.priority
        },
        memory_space: MemorySpace(if fallback { 0 } else { spec.space }),
        version: "prop".into(),
        cost: CostHints {
            gflops: 10.0 * speed,
            bandwidth_gbs: 10.0 * speed,
            launch_us: if spec.small { 20.0 } else { 1.0 },
            transfer_gbs: if spec.align16 { 1.0 } else { 50.0 },
            transfer_us: [1.0, 10.0, 30.0][spec.space as usize % 3],
        },
    }
}

/// Backend 0 (the fallback) runs everything; the others are narrow.
fn capabilities(fallback: &CapSpec, others: &[CapSpec]) -> Vec<(BackendId, Capability)> {
    let mut caps = vec![(BackendId(0), capability(fallback, true))];
    for (i, spec) in others.iter().enumerate() {
        caps.push((BackendId(i as u8 + 1), capability(spec, false)));
    }
    caps
}

fn refs(caps: &[(BackendId, Capability)]) -> Vec<(BackendId, &Capability)> {
    caps.iter().map(|(b, c)| (*b, c)).collect()
}

fn json(plan: &Plan) -> String {
    serde_json::to_string(plan).expect("plans serialise")
}

fn is_compute(reason: &Reason) -> bool {
    matches!(reason, Reason::Preferred { .. } | Reason::Smoothed { .. })
}

fn on(plan: &Plan, id: ValueId) -> Option<BackendId> {
    match plan.placement[id.index()] {
        Placement::On(b) => Some(b),
        _ => None,
    }
}

/// Every structural property of one plan of `graph`.
fn check(
    graph: &Graph,
    caps: &[(BackendId, Capability)],
    plan: &Plan,
) -> Result<(), TestCaseError> {
    let g = &plan.graph;
    prop_assert_eq!(plan.placement.len(), g.len());
    prop_assert_eq!(plan.why.len(), g.len());
    let compute: Vec<ValueId> = g
        .ids()
        .filter(|id| is_compute(&plan.why[id.index()]))
        .collect();
    // Compute nodes land on a backend that supports them in the planned graph.
    for &id in &compute {
        let b =
            on(plan, id).ok_or_else(|| TestCaseError::fail(format!("{id} not on a backend")))?;
        let cap = &caps
            .iter()
            .find(|(c, _)| *c == b)
            .expect("placed on an offered backend")
            .1;
        prop_assert_eq!(cap.supports(g, id), Ok(()), "{} on {}", id, b);
    }
    // Cross-backend edges only through transfers; transfers join different backends.
    let mut copied = BTreeSet::new();
    for id in g.ids().filter(|id| !g.node(*id).op.kind().is_source()) {
        let b =
            on(plan, id).ok_or_else(|| TestCaseError::fail(format!("{id} not on a backend")))?;
        for &input in &g.node(id).inputs {
            match plan.placement[input.index()] {
                Placement::Resident => {
                    let weight = matches!(g.node(input).op, Op::Weight { .. });
                    prop_assert!(weight, "{} is resident but no weight", input)
                }
                Placement::On(a) if g.node(id).op == Op::Transfer => prop_assert_ne!(a, b),
                Placement::On(a) => prop_assert_eq!(a, b, "edge {} -> {}", input, id),
            }
        }
        if g.node(id).op == Op::Transfer {
            prop_assert_eq!(&plan.why[id.index()], &Reason::Transfer);
            prop_assert!(
                copied.insert((g.node(id).inputs[0], b)),
                "second transfer of {:?}",
                (id, b)
            );
        }
    }
    let listed: Vec<ValueId> = plan.transfers.iter().map(|t| t.node).collect();
    let nodes: Vec<ValueId> = g
        .ids()
        .filter(|id| g.node(*id).op == Op::Transfer)
        .collect();
    prop_assert_eq!(listed, nodes);
    for t in &plan.transfers {
        prop_assert_eq!(
            (on(plan, t.source), on(plan, t.node)),
            (Some(t.from), Some(t.to))
        );
    }
    // Partitions tile the compute nodes in order, each a contiguous id range.
    let tiled: Vec<ValueId> = plan
        .partitions
        .iter()
        .flat_map(|p| p.nodes.iter().copied())
        .collect();
    prop_assert_eq!(&tiled, &compute);
    for (i, part) in plan.partitions.iter().enumerate() {
        prop_assert!(!part.nodes.is_empty());
        prop_assert!(part.nodes.windows(2).all(|w| w[1].0 == w[0].0 + 1));
        prop_assert!(part
            .nodes
            .iter()
            .all(|&n| on(plan, n) == Some(part.backend)));
        prop_assert!(i == 0 || plan.partitions[i - 1].backend != part.backend);
        prop_assert!(part.inputs.windows(2).all(|w| w[0] < w[1]));
        for &n in &part.nodes {
            for v in &g.node(n).inputs {
                let outside =
                    !part.nodes.contains(v) && plan.placement[v.index()] != Placement::Resident;
                prop_assert!(
                    !outside || part.inputs.contains(v),
                    "{} missing from inputs",
                    v
                );
            }
        }
    }
    // The planned graph computes the original: same ops, same edges up to transfers.
    prop_assert_eq!(plan.original_to_planned.len(), graph.len());
    for id in graph.ids() {
        let planned = g.node(plan.original_to_planned[id.index()]);
        prop_assert_eq!(&planned.op, &graph.node(id).op);
        for (orig, now) in graph.node(id).inputs.iter().zip(&planned.inputs) {
            let want = plan.original_to_planned[orig.index()];
            let via = if g.node(*now).op == Op::Transfer {
                g.node(*now).inputs[0]
            } else {
                *now
            };
            prop_assert_eq!(via, want);
        }
    }
    let outputs: Vec<ValueId> = graph
        .outputs()
        .iter()
        .map(|o| plan.original_to_planned[o.index()])
        .collect();
    prop_assert_eq!(g.outputs(), &outputs[..]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn plans_respect_capabilities_and_are_deterministic(
        rows in prop::sample::select(vec![1usize, 2, 4]),
        steps in prop::collection::vec(step(), 1..24),
        fallback in cap_spec(),
        others in prop::collection::vec(cap_spec(), 1..4),
        min_run in 1usize..5,
        seed in any::<u64>(),
    ) {
        let graph = build(rows, &steps);
        let caps = capabilities(&fallback, &others);
        let policy = Policy { fallback: BackendId(0), min_run };
        let plan = partition(&graph, &refs(&caps), &policy).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(&graph, &caps, &plan)?;
        let again = partition(&graph, &refs(&caps), &policy).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(json(&plan), json(&again));
        let mut shuffled = refs(&caps);
        shuffled.shuffle(&mut StdRng::seed_from_u64(seed));
        let reordered = partition(&graph, &shuffled, &policy).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(json(&plan), json(&reordered));
    }

    #[test]
    fn a_node_no_backend_supports_is_named(
        rows in prop::sample::select(vec![1usize, 2, 4]),
        steps in prop::collection::vec(step(), 1..24),
        fallback in cap_spec(),
        others in prop::collection::vec(cap_spec(), 1..4),
    ) {
        let graph = build(rows, &steps);
        let first = graph.ids().find(|id| !graph.node(*id).op.kind().is_source());
        prop_assume!(first.is_some());
        let first = first.expect("assumed above");
        let missing = graph.node(first).op.kind();
        let mut caps = capabilities(&fallback, &others);
        for (_, cap) in &mut caps {
            cap.ops = OpSet::of(&cap.ops.kinds().filter(|&k| k != missing).collect::<Vec<_>>());
        }
        let policy = Policy { fallback: BackendId(0), min_run: 2 };
        match partition(&graph, &refs(&caps), &policy) {
            Err(PlanError::Unplaceable { node, op, refusals }) => {
                prop_assert_eq!(node, first);
                prop_assert_eq!(op, missing);
                let backends: Vec<BackendId> = refusals.iter().map(|r| r.0).collect();
                let all: Vec<BackendId> = caps.iter().map(|c| c.0).collect();
                prop_assert_eq!(backends, all);
            }
            other => prop_assert!(false, "expected Unplaceable, got {:?}", other.map(|p| p.partitions.len())),
        }
    }
}
