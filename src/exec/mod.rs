//! Execution of a plan: compiled partitions run in order, values cross memory spaces
//! through transfers at partition boundaries, and every partition's outputs are
//! materialised before a consumer on another backend starts (eager boundaries).
//!
//! **Invariant:** the executor does not know how its plan was chosen; it runs any
//! valid [`crate::plan::Plan`].

mod error;
mod executor;

pub use error::ExecError;
pub use executor::{Executor, ExecutorStats};
