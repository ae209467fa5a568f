//! Errors of compiling and running an executor.

use crate::backend::{BackendError, BackendId};
use crate::graph::{DType, Shape};

/// Why an executor could not be compiled or run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The plan names a backend that is not in the set.
    #[error("plan uses backend {0}, which is not available")]
    MissingBackend(BackendId),
    /// A partition failed to compile or run.
    #[error("partition {partition} on {backend}: {source}")]
    Backend {
        /// Index of the partition.
        partition: usize,
        /// Its backend.
        id: BackendId,
        /// Its backend's name.
        backend: String,
        /// The backend's error.
        source: BackendError,
    },
    /// A graph output is not a value held by one backend (a weight, say).
    #[error("output {0} is not a computed value")]
    NotMaterialised(crate::graph::ValueId),
    /// A graph input was not supplied.
    #[error("input {0:?} was not supplied")]
    MissingInput(String),
    /// A supplied input is not a graph input.
    #[error("input {0:?} is not an input of this graph")]
    UnknownInput(String),
    /// A supplied input has the wrong dtype or shape.
    #[error("input {name:?}: expected {want_dtype} {want_shape}, got {got_dtype} {got_shape}")]
    InputMismatch {
        /// Input name.
        name: String,
        /// Declared dtype.
        want_dtype: DType,
        /// Declared shape.
        want_shape: Shape,
        /// Supplied dtype.
        got_dtype: DType,
        /// Supplied shape.
        got_shape: Shape,
    },
    /// A transfer failed.
    #[error("transfer of {value} from {from} to {to}: {source}")]
    Transfer {
        /// The value moved.
        value: String,
        /// Source backend name.
        from: String,
        /// Destination backend name.
        to: String,
        /// The backend whose call failed (for a dtype conversion between the two, the
        /// destination).
        at: BackendId,
        /// The backend's error (boxed: three names beside it already make this the
        /// largest variant).
        source: Box<BackendError>,
    },
}

impl ExecError {
    /// The backend that failed and its error, when a backend's call failed.
    pub fn backend_error(&self) -> Option<(BackendId, &BackendError)> {
        match self {
            ExecError::Backend { id, source, .. } => Some((*id, source)),
            ExecError::Transfer { at, source, .. } => Some((*at, source)),
            _ => None,
        }
    }
}
