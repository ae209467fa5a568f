//! Human-readable views of a [`Plan`]: a text table and Graphviz dot. (JSON comes from
//! serde: `Plan` derives `Serialize`.)

use super::{Placement, Plan, Reason};
use crate::backend::BackendId;
use crate::graph::{Node, Op, ValueId};

/// Fill colours of the backends in dot output, indexed by backend id (wrapping).
const PALETTE: [&str; 6] = [
    "#cfe2f3", "#d9ead3", "#fff2cc", "#f4cccc", "#d9d2e9", "#fce5cd",
];

/// A table of every planned node (id, op, shape, dtype, backend, why with refusals),
/// then the partitions and transfers. `names` gives each backend's display name.
pub fn to_text(plan: &Plan, names: &dyn Fn(BackendId) -> String) -> String {
    let mut lines = vec![format!(
        "{:<6} {:<12} {:<14} {:<6} {:<12} why",
        "node", "op", "shape", "dtype", "backend"
    )];
    for id in plan.graph.ids() {
        let node = plan.graph.node(id);
        let backend = plan
            .placement
            .get(id.index())
            .map_or_else(|| "?".to_string(), |p| placement_name(*p, names));
        let why = plan
            .why
            .get(id.index())
            .map_or_else(|| "?".to_string(), |r| reason_text(r, names));
        lines.push(format!(
            "{:<6} {:<12} {:<14} {:<6} {:<12} {why}",
            id.to_string(),
            node.op.kind().name(),
            node.shape.to_string(),
            node.dtype.name(),
            backend,
        ));
    }
    lines.push(format!("partitions: {}", plan.partitions.len()));
    for (i, part) in plan.partitions.iter().enumerate() {
        lines.push(format!(
            "  #{i} {}: {} nodes [{}], inputs [{}], outputs [{}]",
            names(part.backend),
            part.nodes.len(),
            ids(&part.nodes),
            ids(&part.inputs),
            ids(&part.outputs),
        ));
    }
    lines.push(format!("transfers: {}", plan.transfers.len()));
    for t in &plan.transfers {
        lines.push(format!(
            "  {} <- {}: {} -> {}, {} -> {}",
            t.node,
            t.source,
            names(t.from),
            names(t.to),
            t.from_dtype,
            t.to_dtype
        ));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Graphviz dot of the planned graph: one cluster per partition, nodes coloured by
/// backend, transfer nodes and their edges highlighted in red, weight edges dashed.
pub fn to_dot(plan: &Plan, names: &dyn Fn(BackendId) -> String) -> String {
    let mut lines = vec![
        "digraph plan {".to_string(),
        "  rankdir=TB;".to_string(),
        "  node [shape=box, style=\"rounded,filled\", fontname=\"monospace\", fontsize=10];"
            .to_string(),
    ];
    let mut in_partition = vec![false; plan.graph.len()];
    for part in &plan.partitions {
        for id in &part.nodes {
            if let Some(slot) = in_partition.get_mut(id.index()) {
                *slot = true;
            }
        }
    }
    for id in plan.graph.ids() {
        if !in_partition[id.index()] {
            lines.push(format!("  {}", node_line(plan, id)));
        }
    }
    for (i, part) in plan.partitions.iter().enumerate() {
        lines.push(format!("  subgraph cluster_{i} {{"));
        lines.push(format!(
            "    label=\"partition {i}: {}\"; style=dashed; color=\"{}\";",
            escape(&names(part.backend)),
            color(part.backend)
        ));
        for &id in &part.nodes {
            if id.index() < plan.graph.len() {
                lines.push(format!("    {}", node_line(plan, id)));
            }
        }
        lines.push("  }".to_string());
    }
    for id in plan.graph.ids() {
        for &input in &plan.graph.node(id).inputs {
            let attrs = match (&plan.graph.node(input).op, &plan.graph.node(id).op) {
                (Op::Transfer, _) | (_, Op::Transfer) => " [color=red, penwidth=2]",
                (Op::Weight { .. }, _) => " [style=dashed]",
                _ => "",
            };
            lines.push(format!("  n{} -> n{}{attrs};", input.0, id.0));
        }
    }
    lines.push("}".to_string());
    let mut dot = lines.join("\n");
    dot.push('\n');
    dot
}

/// The dot declaration of one node.
fn node_line(plan: &Plan, id: ValueId) -> String {
    let node = plan.graph.node(id);
    let fill = match plan.placement.get(id.index()) {
        Some(Placement::On(b)) => color(*b),
        Some(Placement::Resident) | None => "#eeeeee",
    };
    let extra = if node.op == Op::Transfer {
        ", shape=cds, color=red, penwidth=2"
    } else {
        ""
    };
    format!(
        "n{} [label=\"{}\", fillcolor=\"{fill}\"{extra}];",
        id.0,
        escape(&label(id, node))
    )
}

/// `%id op [name]` over `shape dtype`, with a newline escape for dot.
fn label(id: ValueId, node: &Node) -> String {
    let name = match &node.op {
        Op::Input { name } | Op::Weight { name } => format!(" {name}"),
        _ => String::new(),
    };
    format!(
        "{id} {}{name}\n{} {}",
        node.op.kind().name(),
        node.shape,
        node.dtype
    )
}

fn color(b: BackendId) -> &'static str {
    PALETTE[b.0 as usize % PALETTE.len()]
}

/// Escapes a string for a double-quoted dot attribute.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn placement_name(p: Placement, names: &dyn Fn(BackendId) -> String) -> String {
    match p {
        Placement::On(b) => names(b),
        Placement::Resident => "resident".to_string(),
    }
}

fn reason_text(r: &Reason, names: &dyn Fn(BackendId) -> String) -> String {
    match r {
        Reason::Input => "graph input".to_string(),
        Reason::Weight => "weight, resident where read".to_string(),
        Reason::Preferred { refused } if refused.is_empty() => "preferred".to_string(),
        Reason::Preferred { refused } => {
            let parts: Vec<String> = refused
                .iter()
                .map(|(b, why)| format!("{}: {why}", names(*b)))
                .collect();
            format!("preferred; refused by {}", parts.join("; "))
        }
        Reason::Smoothed {
            from,
            run_len,
            saves_us,
            transfers_us,
        } => format!(
            "smoothed from {}: run of {run_len} saves {saves_us:.1} us, transfers cost {transfers_us:.1} us",
            names(*from)
        ),
        Reason::Transfer => "transfer".to_string(),
        Reason::Pinned => "pinned: half of a row split".to_string(),
    }
}

fn ids(values: &[ValueId]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run_start = 0;
    for i in 0..values.len() {
        let run_ends = i + 1 == values.len() || values[i + 1].0 != values[i].0 + 1;
        if run_ends {
            parts.push(match i - run_start {
                0 => values[i].to_string(),
                1 => format!("{}, {}", values[run_start], values[i]),
                _ => format!("{}..{}", values[run_start], values[i]),
            });
            run_start = i + 1;
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testutil::mixed;
    use crate::plan::{partition, Policy};

    #[test]
    fn id_lists_collapse_contiguous_runs() {
        let list: Vec<ValueId> = [0, 1, 2, 5, 7, 8].into_iter().map(ValueId).collect();
        assert_eq!(ids(&list), "%0..%2, %5, %7, %8");
        assert_eq!(ids(&[]), "");
    }

    fn names(b: BackendId) -> String {
        ["cpu", "gpu"]
            .get(b.0 as usize)
            .map_or("?", |n| n)
            .to_string()
    }

    fn plan() -> Plan {
        let (g, cpu, gpu) = mixed();
        let backends = [(BackendId::CPU, &cpu), (BackendId::GPU, &gpu)];
        let policy = Policy {
            fallback: BackendId::CPU,
            min_run: 1,
        };
        partition(&g, &backends, &policy).unwrap()
    }

    #[test]
    fn text_lists_nodes_reasons_partitions_and_transfers() {
        let text = to_text(&plan(), &names);
        assert!(text.contains("softmax"), "{text}");
        assert!(
            text.contains("preferred; refused by gpu: no kernel for softmax"),
            "{text}"
        );
        assert!(text.contains("partitions: 3"), "{text}");
        assert!(text.contains("transfers: 3"), "{text}");
        assert!(text.contains("cpu -> gpu, f32 -> f32"), "{text}");
        assert_eq!(text.lines().count(), 1 + 10 + 1 + 3 + 1 + 3);
    }

    #[test]
    fn dot_has_a_cluster_per_partition_and_red_transfers() {
        let dot = to_dot(&plan(), &names);
        assert!(dot.starts_with("digraph plan {"));
        assert_eq!(dot.matches("subgraph cluster_").count(), 3);
        assert_eq!(dot.matches("shape=cds").count(), 3);
        assert_eq!(dot.matches('{').count(), dot.matches('}').count());
        assert!(dot.contains("label=\"partition 1: cpu\""), "{dot}");
        assert!(dot.contains("\\n[2×32] f32"), "{dot}");
    }
}
