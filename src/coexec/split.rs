//! The row split of linears: a graph rewrite that turns each eligible matmul
//! `y = x · Wᵀ` (`x [M, K]`, prefill-sized M) into `x[..r] · Wᵀ` pinned on backend `a`
//! and `x[r..] · Wᵀ` pinned on `b`, joined by a concat where the consumer can read it.
//! The slices materialise the input before either half starts (the eager boundary);
//! the `b` half is emitted first so an asynchronous GPU starts on its rows while the
//! CPU computes its own. Everything else in the graph is untouched.

use crate::backend::{BackendId, Capability};
use crate::graph::{Graph, GraphError, Node, Op, OpKind, Shape, ValueId};
use crate::plan::Pins;

use super::SplitKey;

/// A graph with its linears split, the halves to pin, and what was split.
#[derive(Debug)]
pub struct SplitGraph {
    /// The rewritten graph.
    pub graph: Graph,
    /// Placement of each half.
    pub pins: Pins,
    /// Per split linear: its shape class and the rows given to `a`, of `M`.
    pub splits: Vec<(SplitKey, usize, usize)>,
}

/// Which linears split and how.
pub struct SplitRule<'a> {
    /// Backends `(a, b)`: `a` (the CPU) takes the first rows.
    pub pair: (BackendId, BackendId),
    /// Their capabilities: a linear splits only when both can run it.
    pub capabilities: (&'a Capability, &'a Capability),
    /// Linears with fewer rows never split (decode's single rows included).
    pub min_rows: usize,
}

/// The shape class of matmul `id` of `graph` for this rule, when it may split.
pub fn split_key(graph: &Graph, id: ValueId, rule: &SplitRule<'_>) -> Option<(SplitKey, usize)> {
    let node = graph.node(id);
    if node.op.kind() != OpKind::MatMul {
        return None;
    }
    let (x, w) = (graph.node(node.inputs[0]), graph.node(node.inputs[1]));
    let (&[m, k], &[n, _]) = (x.shape.dims(), w.shape.dims()) else {
        return None;
    };
    let fits = rule.capabilities.0.supports(graph, id).is_ok()
        && rule.capabilities.1.supports(graph, id).is_ok();
    if m < rule.min_rows || !fits {
        return None;
    }
    let key = SplitKey::new(
        u32::try_from(m).ok()?,
        u32::try_from(k).ok()?,
        u32::try_from(n).ok()?,
        w.dtype,
        rule.pair,
    );
    Some((key, m))
}

/// Rewrites every matmul that may split and for which `rho` gives a ratio (permille of
/// rows on `a`); a ratio that rounds to no rows leaves the matmul whole.
pub fn split_graph(
    graph: &Graph,
    rule: &SplitRule<'_>,
    rho: impl Fn(&SplitKey) -> Option<u16>,
) -> Result<SplitGraph, GraphError> {
    let mut nodes: Vec<Node> = Vec::with_capacity(graph.len());
    let mut new_id: Vec<ValueId> = Vec::with_capacity(graph.len());
    let mut pins = Pins::new();
    let mut splits = Vec::new();
    let push = |nodes: &mut Vec<Node>, node: Node| {
        nodes.push(node);
        ValueId(nodes.len() as u32 - 1)
    };
    for id in graph.ids() {
        let old = graph.node(id);
        let inputs: Vec<ValueId> = old.inputs.iter().map(|v| new_id[v.index()]).collect();
        let rows = split_key(graph, id, rule).and_then(|(key, m)| {
            let permille = rho(&key)?;
            let r = (m * permille as usize + 500) / 1000;
            (r > 0 && r < m).then_some((key, m, r))
        });
        let Some((key, m, r)) = rows else {
            new_id.push(push(
                &mut nodes,
                Node {
                    inputs,
                    ..old.clone()
                },
            ));
            continue;
        };
        let (x, w) = (inputs[0], inputs[1]);
        let (k, n) = (graph.node(old.inputs[0]).shape.last(), old.shape.last());
        let x_dtype = graph.node(old.inputs[0]).dtype;
        let slice = |start: usize, end: usize| Node {
            op: Op::Slice {
                axis: 0,
                start: start as u32,
                end: end as u32,
            },
            inputs: vec![x],
            shape: Shape::new([end - start, k]),
            dtype: x_dtype,
        };
        let half = |x: ValueId, rows: usize| Node {
            op: Op::MatMul,
            inputs: vec![x, w],
            shape: Shape::new([rows, n]),
            dtype: old.dtype,
        };
        let xa = push(&mut nodes, slice(0, r));
        let xb = push(&mut nodes, slice(r, m));
        let yb = push(&mut nodes, half(xb, m - r));
        let ya = push(&mut nodes, half(xa, r));
        pins.insert(yb, rule.pair.1);
        pins.insert(ya, rule.pair.0);
        let joined = Node {
            op: Op::Concat { axis: 0 },
            inputs: vec![ya, yb],
            shape: old.shape.clone(),
            dtype: old.dtype,
        };
        new_id.push(push(&mut nodes, joined));
        splits.push((key, r, m));
    }
    let outputs = graph.outputs().iter().map(|o| new_id[o.index()]).collect();
    Ok(SplitGraph {
        graph: Graph::from_parts(nodes, outputs)?,
        pins,
        splits,
    })
}
