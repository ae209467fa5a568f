//! Graph-to-graph passes. Each is a plain function with a name for logs.

use super::{Graph, Node, ValueId};

/// Removes nodes that neither reach an output nor have a side effect (the KV cache
/// write of attention), renumbering the rest in their original order.
pub fn eliminate_dead_code(graph: &Graph) -> Graph {
    let mut live = vec![false; graph.len()];
    for out in graph.outputs() {
        live[out.index()] = true;
    }
    for id in graph.ids() {
        if graph.node(id).op.has_side_effect() {
            live[id.index()] = true;
        }
    }
    for idx in (0..graph.len()).rev() {
        if live[idx] {
            for input in &graph.nodes()[idx].inputs {
                live[input.index()] = true;
            }
        }
    }
    let mut new_id = vec![ValueId(u32::MAX); graph.len()];
    let mut nodes = Vec::new();
    for (idx, node) in graph.nodes().iter().enumerate() {
        if !live[idx] {
            continue;
        }
        new_id[idx] = ValueId(nodes.len() as u32);
        nodes.push(Node {
            inputs: node.inputs.iter().map(|i| new_id[i.index()]).collect(),
            ..node.clone()
        });
    }
    let outputs = graph.outputs().iter().map(|o| new_id[o.index()]).collect();
    Graph::from_parts(nodes, outputs).expect("renumbering preserves topological order")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn drops_unreachable_nodes_and_keeps_outputs() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2, 4]).unwrap();
        let dead = b.silu(x).unwrap();
        let _dead_too = b.gelu(dead).unwrap();
        let y = b.softmax(x).unwrap();
        let g = b.finish(vec![y]).unwrap();
        let pruned = eliminate_dead_code(&g);
        assert_eq!(pruned.len(), 2);
        assert_eq!(pruned.outputs(), &[ValueId(1)]);
        assert_eq!(pruned.node(ValueId(1)).op, crate::graph::Op::Softmax);
    }
}
