//! The graph IR: a model step as a list of nodes in topological order.
//!
//! **Invariant:** this module knows nothing of backends, plans or models. A graph is
//! plain data: nodes (op, inputs, output shape, dtype) and the list of outputs.

mod builder;
mod dtype;
mod error;
mod key;
mod lifetime;
mod op;
mod passes;
mod shape;

pub use builder::{AttentionParams, AttentionVariant, GraphBuilder};
pub use dtype::DType;
pub use error::GraphError;
pub use key::{default_hasher, CanonicalWriter, KeyHasher, StructuralKey};
pub use lifetime::BufferPlan;
pub use op::{Op, OpKind, RopeMode, DRAW_EDITS, DRAW_PARAMS};
pub use passes::eliminate_dead_code;
pub use shape::{Shape, MAX_RANK};

use serde::Serialize;

/// Index of a node, and so of the value it produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The node's position in the graph's node list.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for ValueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// One operation and the value it produces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// What the node computes.
    pub op: Op,
    /// Values read, all earlier in the graph.
    pub inputs: Vec<ValueId>,
    /// Shape of the produced value.
    pub shape: Shape,
    /// Element type of the produced value.
    pub dtype: DType,
}

/// A computation: nodes in topological order (every input precedes its reader) and the
/// values returned to the caller.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Graph {
    nodes: Vec<Node>,
    outputs: Vec<ValueId>,
}

impl Graph {
    /// Builds a graph from raw parts, checking topological order and input arity.
    /// Used by passes that rewrite graphs; models use [`GraphBuilder`].
    pub fn from_parts(nodes: Vec<Node>, outputs: Vec<ValueId>) -> Result<Graph, GraphError> {
        for (idx, node) in nodes.iter().enumerate() {
            for input in &node.inputs {
                if input.index() >= idx {
                    return Err(GraphError::NotTopological {
                        node: ValueId(idx as u32),
                        input: *input,
                    });
                }
            }
        }
        for out in &outputs {
            if out.index() >= nodes.len() {
                return Err(GraphError::UnknownValue(*out));
            }
        }
        Ok(Graph { nodes, outputs })
    }

    /// The nodes and outputs, for a builder that appends to them.
    fn into_parts(self) -> (Vec<Node>, Vec<ValueId>) {
        (self.nodes, self.outputs)
    }

    /// All nodes, in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node producing `id`.
    pub fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Values returned to the caller, in order.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// Ids of every node, in order.
    pub fn ids(&self) -> impl Iterator<Item = ValueId> + '_ {
        (0..self.nodes.len() as u32).map(ValueId)
    }

    /// The `Input` nodes with their names, in graph order.
    pub fn inputs(&self) -> impl Iterator<Item = (ValueId, &str)> + '_ {
        self.ids().filter_map(|id| match &self.node(id).op {
            Op::Input { name } => Some((id, name.as_str())),
            _ => None,
        })
    }

    /// For each node, the nodes that read it (in increasing order, one entry per edge).
    pub fn consumers(&self) -> Vec<Vec<ValueId>> {
        let mut users = vec![Vec::new(); self.nodes.len()];
        for id in self.ids() {
            for input in &self.node(id).inputs {
                users[input.index()].push(id);
            }
        }
        users
    }

    /// Canonical bytes and 128-bit hash over ops, attributes, shapes, dtypes and edges.
    pub fn structural_key(&self) -> StructuralKey {
        let mut writer = CanonicalWriter::new();
        self.write_canonical(&mut writer);
        writer.finish()
    }

    /// Appends this graph's canonical encoding, so callers can extend the key
    /// (the plan adds placements and backend versions).
    pub fn write_canonical(&self, writer: &mut CanonicalWriter) {
        key::write_graph(self, writer);
    }
}
