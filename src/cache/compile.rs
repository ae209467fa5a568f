//! The compile path behind a step key: on a step miss, trace the graph, eliminate dead
//! code, partition it, key it by graph + placement + backend versions, and compile it
//! only when no executor with equal canonical bytes is cached.

use std::sync::Arc;

use super::{CacheEntry, GraphCache, StepKey};
use crate::backend::{BackendSet, WeightProvider};
use crate::exec::{ExecError, Executor};
use crate::graph::{eliminate_dead_code, Graph, GraphError};
use crate::plan::{partition, Plan, PlanError, Policy};

impl CacheEntry for Executor {
    fn bytes(&self) -> usize {
        Executor::bytes(self)
    }
}

/// Why a step's executor could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Tracing the step failed.
    #[error("tracing: {0}")]
    Graph(#[from] GraphError),
    /// No valid placement exists.
    #[error("planning: {0}")]
    Plan(#[from] PlanError),
    /// A backend failed to compile a partition.
    #[error("compiling: {0}")]
    Exec(#[from] ExecError),
}

/// What a compile needs besides the graph.
pub struct CompileContext<'a> {
    /// Backends the plan may use.
    pub backends: &'a BackendSet,
    /// Partitioner settings.
    pub policy: &'a Policy,
    /// Where weights come from, resident once per memory space.
    pub weights: &'a dyn WeightProvider,
}

/// The executor for `step`: a step hit returns at once without calling `trace`.
pub fn get_or_compile(
    cache: &mut GraphCache<Executor>,
    step: &StepKey,
    context: &CompileContext<'_>,
    trace: impl FnOnce() -> Result<Graph, GraphError>,
) -> Result<Arc<Executor>, CompileError> {
    get_or_compile_plan(cache, step, context, || {
        let graph = eliminate_dead_code(&trace()?);
        Ok(partition(
            &graph,
            &context.backends.capabilities(),
            context.policy,
        )?)
    })
}

/// [`get_or_compile`] for a caller that plans the step itself (co-execution's split
/// and single-backend arms): a step hit returns at once without calling `plan`.
pub fn get_or_compile_plan(
    cache: &mut GraphCache<Executor>,
    step: &StepKey,
    context: &CompileContext<'_>,
    plan: impl FnOnce() -> Result<Plan, CompileError>,
) -> Result<Arc<Executor>, CompileError> {
    cache.get_or_insert_with(
        step,
        |writer| {
            let plan = plan()?;
            plan.write_canonical(writer);
            context.backends.write_canonical(writer);
            Ok::<_, CompileError>(plan)
        },
        |plan| Ok(Executor::compile(plan, context.backends, context.weights)?),
    )
}
