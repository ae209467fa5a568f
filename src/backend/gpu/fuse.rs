//! Which nodes of a GPU partition run together. A decode step is dominated by how many
//! dispatches it issues, not by the bytes it moves, so the partition's nodes are
//! grouped into units before recording:
//! - a reshape is a view of its input's buffer (no dispatch);
//! - products of one input by several weights of one format (q, k, v; gate, up) are
//!   one dispatch, and a product read only by a residual `Add` writes the sum itself;
//! - an RMS norm or a SwiGLU read only by such block-format products writes their
//!   8-bit activations directly, never its f32 result, with the scale grouping the
//!   products' format takes ([`scale_group`]; attention, which sees one head, quantizes
//!   per block of 32 for every format);
//! - the rotary embedding of attention's queries and keys runs in the dispatch that
//!   writes the keys and values into the cache, and attention itself is one kernel.
//!
//! Anything that does not fit a pattern stays a unit of its own, recorded as before, so
//! fusion never changes what a graph computes, only how many dispatches compute it.

use std::collections::{HashMap, HashSet};

use crate::backend::PartitionSpec;
use crate::graph::{DType, Graph, Op, ValueId};

/// One fused product: a matmul, and the residual `Add` that consumes it alone, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Part {
    /// The matmul node.
    pub matmul: ValueId,
    /// `(add, other)`: the `Add` node that writes `other + product`, when fused.
    pub residual: Option<(ValueId, ValueId)>,
}

impl Part {
    /// The value this part leaves in memory: the sum when a residual is fused.
    pub fn output(&self) -> ValueId {
        self.residual.map_or(self.matmul, |(add, _)| add)
    }
}

/// What one recorded unit computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    /// A node recorded alone.
    Node(ValueId),
    /// A reshape: its value is `of`'s buffer.
    View {
        /// The reshape node.
        id: ValueId,
        /// The value it reshapes.
        of: ValueId,
    },
    /// Products of `x` by the weights of `parts`, all of one format and width.
    Products {
        /// The shared input.
        x: ValueId,
        /// The products, in node order.
        parts: Vec<Part>,
    },
    /// An RMS norm whose only readers are the block-format products of the next units:
    /// it writes their quantized activations, not its own f32 result.
    NormQuant {
        /// The norm node.
        node: ValueId,
        /// Blocks of 32 sharing one scale ([`scale_group`] of the products' format).
        group: u32,
    },
    /// A SwiGLU whose only readers are the block-format products of the next units.
    SwiGluQuant {
        /// The SwiGLU node.
        node: ValueId,
        /// Blocks of 32 sharing one scale ([`scale_group`] of the products' format).
        group: u32,
    },
    /// Attention; with `rope = [q, k]`, those rope nodes run in its KV-write dispatch.
    Attention {
        /// The attention node.
        node: ValueId,
        /// The query and key rope nodes fused into it.
        rope: Option<[ValueId; 2]>,
        /// Whether it writes the quantized activations of the next units' block-format
        /// products, its only readers, instead of its f32 output.
        quantize: bool,
    },
}

/// Blocks of 32 activations that share one scale for a product with weights of
/// `dtype`: 8 for the 256-element K-quant formats, whose activations the CPU (like
/// llama.cpp) quantizes a super-block at a time, so the integer sums match it; 1 for
/// the rest.
pub(super) fn scale_group(dtype: DType) -> u32 {
    (dtype.block_elems() / 32).max(1) as u32
}

/// The dtype of a matmul node's weight.
fn weight_dtype(graph: &Graph, matmul: ValueId) -> Option<DType> {
    let weight = graph.node(matmul).inputs.get(1)?;
    Some(graph.node(*weight).dtype)
}

/// Whether a weight of this node's dtype goes through 8-bit activations.
pub(super) fn quantized_weight(graph: &Graph, matmul: ValueId) -> bool {
    weight_dtype(graph, matmul).is_some_and(DType::is_quantized)
}

/// What the adapter's binding limits allow fusion to build.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Most products one dispatch computes (each binds a weight, an output and maybe a
    /// residual).
    pub max_parts: usize,
    /// Whether the rope-and-KV-write kernel's ten storage buffers fit.
    pub rope_kv: bool,
}

/// The partition's nodes grouped into units, in recording order.
pub(super) fn plan(spec: &PartitionSpec<'_>, limits: Limits) -> Vec<Unit> {
    let max_parts = limits.max_parts.max(1);
    let graph = spec.graph;
    let order: HashMap<ValueId, usize> = spec
        .nodes
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i))
        .collect();
    let mut readers: HashMap<ValueId, Vec<ValueId>> = HashMap::new();
    for &id in spec.nodes {
        let mut seen = Vec::new();
        for &input in &graph.node(id).inputs {
            if !seen.contains(&input) {
                seen.push(input);
                readers.entry(input).or_default().push(id);
            }
        }
    }
    let readers_of = |v: ValueId| readers.get(&v).map_or(&[][..], Vec::as_slice);
    let is_output = |v: ValueId| spec.outputs.contains(&v);
    // Defined before position `at`: an input, a weight, or an earlier node.
    let before = |v: ValueId, at: usize| order.get(&v).is_none_or(|&p| p < at);

    let mut absorbed: HashSet<ValueId> = HashSet::new();
    let mut units: Vec<(usize, Unit)> = Vec::new();
    for (at, &id) in spec.nodes.iter().enumerate() {
        if absorbed.contains(&id) {
            continue;
        }
        let node = graph.node(id);
        let unit = match &node.op {
            Op::Reshape => Unit::View {
                id,
                of: node.inputs[0],
            },
            Op::MatMul => {
                let x = node.inputs[0];
                let (dtype, k) = weight_kind(graph, id);
                let mut parts = Vec::new();
                for &other in &spec.nodes[at..] {
                    let n = graph.node(other);
                    let same = matches!(n.op, Op::MatMul)
                        && n.inputs[0] == x
                        && weight_kind(graph, other) == (dtype, k)
                        && !absorbed.contains(&other);
                    if !same || parts.len() == max_parts {
                        continue;
                    }
                    let residual = residual_of(graph, other, readers_of(other), is_output(other))
                        .filter(|&(_, r)| before(r, at));
                    if let Some((add, _)) = residual {
                        absorbed.insert(add);
                    }
                    if other != id {
                        absorbed.insert(other);
                    }
                    parts.push(Part {
                        matmul: other,
                        residual,
                    });
                }
                Unit::Products { x, parts }
            }
            Op::Attention { .. } => {
                let rope = limits
                    .rope_kv
                    .then(|| fused_rope(graph, &order, &readers, at, id))
                    .flatten();
                if let Some(ropes) = rope {
                    absorbed.extend(ropes);
                }
                Unit::Attention {
                    node: id,
                    rope,
                    quantize: false,
                }
            }
            _ => Unit::Node(id),
        };
        units.push((at, unit));
    }
    // A rope absorbed into a later attention was recorded as a unit before it was seen.
    units.retain(|(_, u)| !matches!(u, Unit::Node(id) if absorbed.contains(id)));
    quantize_in_producers(graph, &mut units, &readers, &is_output);
    units.into_iter().map(|(_, u)| u).collect()
}

/// A matmul's weight dtype and inner width.
fn weight_kind(graph: &Graph, matmul: ValueId) -> (crate::graph::DType, usize) {
    let w = graph.node(graph.node(matmul).inputs[1]);
    (w.dtype, w.shape.last())
}

/// `(add, other)` when the product `id` is read only by an `Add` of its own shape.
fn residual_of(
    graph: &Graph,
    id: ValueId,
    readers: &[ValueId],
    output: bool,
) -> Option<(ValueId, ValueId)> {
    let [add] = readers else { return None };
    let node = graph.node(*add);
    if output || !matches!(node.op, Op::Add) || node.shape != graph.node(id).shape {
        return None;
    }
    match node.inputs.as_slice() {
        [a, b] if *b == id && *a != id && graph.node(*a).shape == node.shape => Some((*add, *a)),
        [a, b] if *a == id && *b != id && graph.node(*b).shape == node.shape => Some((*add, *b)),
        _ => None,
    }
}

/// Follows reshapes back to the value they view.
fn viewed(graph: &Graph, mut v: ValueId) -> ValueId {
    while matches!(graph.node(v).op, Op::Reshape) {
        v = graph.node(v).inputs[0];
    }
    v
}

/// The query and key rope nodes attention `id` (at position `at`) can run in its KV
/// write: both in this partition, of the same positions and rotation, and read (through
/// views) by nothing before the attention.
fn fused_rope(
    graph: &Graph,
    order: &HashMap<ValueId, usize>,
    readers: &HashMap<ValueId, Vec<ValueId>>,
    at: usize,
    id: ValueId,
) -> Option<[ValueId; 2]> {
    let inputs = &graph.node(id).inputs;
    let (q, k) = (
        viewed(graph, *inputs.first()?),
        viewed(graph, *inputs.get(1)?),
    );
    let (nq, nk) = (graph.node(q), graph.node(k));
    let same_rotation = match (&nq.op, &nk.op) {
        (Op::Rope { .. }, Op::Rope { .. }) => nq.op == nk.op,
        _ => false,
    };
    if q == k || !same_rotation || nq.inputs.get(1) != nk.inputs.get(1) {
        return None;
    }
    if !order.contains_key(&q) || !order.contains_key(&k) {
        return None;
    }
    // Every reader, through views, comes at or after the attention.
    let mut stack = vec![q, k];
    while let Some(v) = stack.pop() {
        for &r in readers.get(&v).map_or(&[][..], Vec::as_slice) {
            if matches!(graph.node(r).op, Op::Reshape) {
                stack.push(r);
            } else if order.get(&r).is_none_or(|&p| p < at) {
                return None;
            }
        }
    }
    Some([q, k])
}

/// Turns a norm, SwiGLU or attention unit into its quantizing form when its only
/// readers are the block-format products of the units right after it.
fn quantize_in_producers(
    graph: &Graph,
    units: &mut [(usize, Unit)],
    readers: &HashMap<ValueId, Vec<ValueId>>,
    is_output: &dyn Fn(ValueId) -> bool,
) {
    for i in 0..units.len().saturating_sub(1) {
        let id = match units[i].1 {
            Unit::Node(id) | Unit::Attention { node: id, .. } => id,
            _ => continue,
        };
        let node = graph.node(id);
        let fits = match node.op {
            Op::RmsNorm { .. } => true,
            Op::SwiGlu => graph.node(node.inputs[0]).shape == graph.node(node.inputs[1]).shape,
            Op::Attention { head_dim, .. } => head_dim.is_multiple_of(32),
            _ => false,
        };
        if !fits || is_output(id) || !node.shape.last().is_multiple_of(32) {
            continue;
        }
        // The product units right after it that read it: they take the quantized
        // activations one after another (q and k in one format, v in another).
        let parts: Vec<&Part> = units[i + 1..]
            .iter()
            .map_while(|(_, u)| match u {
                Unit::Products { x, parts } if *x == id => Some(parts),
                _ => None,
            })
            .flatten()
            .collect();
        let mine = readers.get(&id).map_or(&[][..], Vec::as_slice);
        let all_parts = !mine.is_empty()
            && mine.iter().all(|r| parts.iter().any(|p| p.matmul == *r))
            && parts.iter().all(|p| quantized_weight(graph, p.matmul));
        if all_parts {
            // One scale a group where every reader takes the same grouping, else one a
            // block (finer than a K-quant reader's, never coarser than another's).
            let groups: Vec<u32> = parts
                .iter()
                .map(|p| weight_dtype(graph, p.matmul).map_or(1, scale_group))
                .collect();
            let group = match groups.split_first() {
                Some((&g, rest)) if rest.iter().all(|&r| r == g) => g,
                _ => 1,
            };
            let quantizing = match (&node.op, &units[i].1) {
                (Op::RmsNorm { .. }, _) => Unit::NormQuant { node: id, group },
                (_, Unit::Attention { rope, .. }) => Unit::Attention {
                    node: id,
                    rope: *rope,
                    quantize: true,
                },
                _ => Unit::SwiGluQuant { node: id, group },
            };
            units[i].1 = quantizing;
        }
    }
}
