//! Tensor shapes: a list of dimensions, outermost first, row-major.

use serde::Serialize;

/// Most dimensions any graph value may have.
pub const MAX_RANK: usize = 8;

/// The dimensions of a value, outermost first. Values are dense and row-major.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// A shape with the given dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Shape {
        Shape(dims.into())
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements, or `None` on overflow.
    pub fn checked_numel(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Number of elements; shapes built by the graph builder never overflow.
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }

    /// The innermost dimension (1 for a scalar).
    pub fn last(&self) -> usize {
        self.0.last().copied().unwrap_or(1)
    }

    /// Product of all dimensions but the last: the number of rows.
    pub fn rows(&self) -> usize {
        match self.0.split_last() {
            Some((_, outer)) => outer.iter().product(),
            None => 1,
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, "×")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl From<Vec<usize>> for Shape {
    fn from(dims: Vec<usize>) -> Shape {
        Shape(dims)
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Shape {
        Shape(dims.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Shape {
        Shape(dims.to_vec())
    }
}
