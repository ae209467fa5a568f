//! Errors raised while building or rewriting graphs.

use super::{DType, OpKind, Shape, ValueId};

/// Why a graph could not be built. Every variant names the operation and operands.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GraphError {
    /// A value id that does not exist in the graph.
    #[error("value {0} does not exist in the graph")]
    UnknownValue(ValueId),
    /// A node reads a value that is not earlier in the node list.
    #[error("node {node} reads {input}, which does not come before it")]
    NotTopological {
        /// The reader.
        node: ValueId,
        /// The value read too early.
        input: ValueId,
    },
    /// Operand shapes do not fit the operation.
    #[error("{op}: shapes do not fit: {detail}")]
    Shape {
        /// The operation being added.
        op: OpKind,
        /// What did not fit, with the shapes involved.
        detail: String,
    },
    /// An operand has a dtype the operation cannot take.
    #[error("{op}: operand {operand} has dtype {dtype}, expected {expected}")]
    DType {
        /// The operation being added.
        op: OpKind,
        /// Which operand (0-based).
        operand: usize,
        /// Its dtype.
        dtype: DType,
        /// What the operation accepts.
        expected: &'static str,
    },
    /// A shape with more dimensions than [`super::MAX_RANK`] or too many elements.
    #[error("shape {0} is too large (rank or element count)")]
    TooLarge(Shape),
    /// An attribute is out of range.
    #[error("{op}: {detail}")]
    Attribute {
        /// The operation being added.
        op: OpKind,
        /// What is wrong with the attribute.
        detail: String,
    },
}
