//! The executor: one compiled partition per plan partition, run in order with transfers
//! between them. Cross-partition values are dropped after their last reader, so memory
//! follows lifetimes across partitions as the buffer plan does within one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::ExecError;
use crate::backend::{
    plain_bytes, Backend, BackendId, BackendSet, CompiledPartition, PartitionSpec, StepState,
    Tensor, WeightProvider,
};
use crate::graph::{BufferPlan, ValueId};
use crate::plan::{Placement, Plan};

/// A plan compiled for a set of backends, ready to run any number of steps.
pub struct Executor {
    plan: Plan,
    backends: BackendSet,
    compiled: Mutex<Vec<Box<dyn CompiledPartition>>>,
    transfers_into: Vec<Vec<usize>>,
    last_reader: Vec<usize>,
    inputs: Vec<(String, ValueId)>,
    compiled_bytes: usize,
    compile_time: Duration,
    runs: AtomicU64,
}

/// What an executor reports about itself.
#[derive(Clone, Debug, Serialize)]
pub struct ExecutorStats {
    /// Partitions compiled.
    pub partitions: usize,
    /// Transfers per run.
    pub transfers: usize,
    /// Bytes held by compiled partitions (buffers, kernels), weights excluded.
    pub bytes: usize,
    /// Time spent compiling.
    pub compile_time: Duration,
    /// Steps run so far.
    pub runs: u64,
}

/// Marks values that are never dropped (graph outputs).
const KEEP: usize = usize::MAX;

impl Executor {
    /// Compiles every partition of `plan` on its backend, resolving weights through
    /// `weights` (resident once per memory space).
    pub fn compile(
        plan: Plan,
        backends: &BackendSet,
        weights: &dyn WeightProvider,
    ) -> Result<Executor, ExecError> {
        let started = Instant::now();
        let mut compiled = Vec::with_capacity(plan.partitions.len());
        for (index, part) in plan.partitions.iter().enumerate() {
            let backend = backends
                .get(part.backend)
                .ok_or(ExecError::MissingBackend(part.backend))?;
            let graph = &plan.graph;
            let buffers = BufferPlan::new(graph, &part.nodes, &part.outputs, |id| {
                let node = graph.node(id);
                plain_bytes(node.dtype, &node.shape).unwrap_or(0)
            });
            let spec = PartitionSpec {
                graph,
                nodes: &part.nodes,
                inputs: &part.inputs,
                outputs: &part.outputs,
                buffers: &buffers,
            };
            let partition =
                backend
                    .compile(&spec, weights)
                    .map_err(|source| ExecError::Backend {
                        partition: index,
                        id: backend.id(),
                        backend: backend.name().to_string(),
                        source,
                    })?;
            compiled.push(partition);
        }
        for transfer in &plan.transfers {
            for id in [transfer.from, transfer.to] {
                backends.get(id).ok_or(ExecError::MissingBackend(id))?;
            }
        }
        let transfers_into = plan
            .partitions
            .iter()
            .map(|part| {
                let inputs: HashSet<ValueId> = part.inputs.iter().copied().collect();
                (0..plan.transfers.len())
                    .filter(|&t| inputs.contains(&plan.transfers[t].node))
                    .collect()
            })
            .collect();
        let last_reader = last_readers(&plan);
        let inputs = plan
            .graph
            .inputs()
            .map(|(id, name)| (name.to_string(), id))
            .collect();
        let compiled_bytes = compiled.iter().map(|c| c.bytes()).sum();
        Ok(Executor {
            plan,
            backends: backends.clone(),
            compiled: Mutex::new(compiled),
            transfers_into,
            last_reader,
            inputs,
            compiled_bytes,
            compile_time: started.elapsed(),
            runs: AtomicU64::new(0),
        })
    }

    /// The plan this executor runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Bytes held by the compiled partitions (not the shared weights).
    pub fn bytes(&self) -> usize {
        self.compiled_bytes
    }

    /// Counters and sizes.
    pub fn stats(&self) -> ExecutorStats {
        ExecutorStats {
            partitions: self.plan.partitions.len(),
            transfers: self.plan.transfers.len(),
            bytes: self.compiled_bytes,
            compile_time: self.compile_time,
            runs: self.runs.load(Ordering::Relaxed),
        }
    }

    /// Runs one step: binds `inputs` by name (host tensors), runs every partition in
    /// order, and returns the graph's outputs as host tensors.
    pub fn run(
        &self,
        inputs: &[(&str, Tensor)],
        state: &mut StepState<'_>,
    ) -> Result<Vec<Tensor>, ExecError> {
        let mut values: Vec<Option<Tensor>> = vec![None; self.plan.graph.len()];
        self.bind_inputs(inputs, &mut values)?;
        let mut compiled = self.compiled.lock().unwrap_or_else(PoisonError::into_inner);
        for (index, part) in self.plan.partitions.iter().enumerate() {
            for &t in &self.transfers_into[index] {
                self.transfer(t, &mut values)?;
            }
            let backend = self.backend(part.backend)?;
            let args: Vec<&Tensor> = part
                .inputs
                .iter()
                .map(|id| {
                    values[id.index()]
                        .as_ref()
                        .expect("producers run before readers")
                })
                .collect();
            let outputs =
                compiled[index]
                    .run(&args, state)
                    .map_err(|source| ExecError::Backend {
                        partition: index,
                        id: backend.id(),
                        backend: backend.name().to_string(),
                        source,
                    })?;
            for (&id, tensor) in part.outputs.iter().zip(outputs) {
                values[id.index()] = Some(tensor);
            }
            for (idx, value) in values.iter_mut().enumerate() {
                if self.last_reader[idx] == index {
                    *value = None;
                }
            }
        }
        drop(compiled);
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.plan
            .graph
            .outputs()
            .iter()
            .map(|&id| self.to_host(id, &values))
            .collect()
    }

    fn bind_inputs(
        &self,
        supplied: &[(&str, Tensor)],
        values: &mut [Option<Tensor>],
    ) -> Result<(), ExecError> {
        for (name, _) in supplied {
            if !self.inputs.iter().any(|(n, _)| n == name) {
                return Err(ExecError::UnknownInput(name.to_string()));
            }
        }
        for (name, id) in &self.inputs {
            let tensor = supplied
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| ExecError::MissingInput(name.clone()))?;
            let node = self.plan.graph.node(*id);
            if tensor.dtype != node.dtype || tensor.shape != node.shape {
                return Err(ExecError::InputMismatch {
                    name: name.clone(),
                    want_dtype: node.dtype,
                    want_shape: node.shape.clone(),
                    got_dtype: tensor.dtype,
                    got_shape: tensor.shape.clone(),
                });
            }
            let backend = self.backend_of(*id)?;
            let imported = if backend.takes_host_inputs() {
                tensor.clone()
            } else {
                backend
                    .import(tensor.clone())
                    .map_err(|source| ExecError::Transfer {
                        value: name.clone(),
                        from: "caller".into(),
                        to: backend.name().to_string(),
                        at: backend.id(),
                        source: Box::new(source),
                    })?
            };
            values[id.index()] = Some(imported);
        }
        Ok(())
    }

    fn transfer(&self, index: usize, values: &mut [Option<Tensor>]) -> Result<(), ExecError> {
        let t = &self.plan.transfers[index];
        let (from, to) = (self.backend(t.from)?, self.backend(t.to)?);
        let fail = |at: BackendId| {
            move |source| ExecError::Transfer {
                value: t.source.to_string(),
                from: from.name().to_string(),
                to: to.name().to_string(),
                at,
                source: Box::new(source),
            }
        };
        let source = values[t.source.index()]
            .as_ref()
            .expect("transfer sources are produced before the transfer");
        let host = from.export(source).map_err(fail(from.id()))?;
        let converted = host.converted(t.to_dtype).map_err(fail(to.id()))?;
        values[t.node.index()] = Some(if to.takes_host_inputs() {
            converted
        } else {
            to.import(converted).map_err(fail(to.id()))?
        });
        Ok(())
    }

    fn to_host(&self, id: ValueId, values: &[Option<Tensor>]) -> Result<Tensor, ExecError> {
        let backend = self.backend_of(id)?;
        let tensor = values[id.index()]
            .as_ref()
            .expect("graph outputs are never dropped");
        backend
            .export(tensor)
            .map_err(|source| ExecError::Transfer {
                value: id.to_string(),
                from: backend.name().to_string(),
                to: "caller".into(),
                at: backend.id(),
                source: Box::new(source),
            })
    }

    fn backend_of(&self, id: ValueId) -> Result<&Arc<dyn Backend>, ExecError> {
        match self.plan.placement[id.index()] {
            Placement::On(b) => self.backend(b),
            _ => Err(ExecError::NotMaterialised(id)),
        }
    }

    fn backend(&self, id: BackendId) -> Result<&Arc<dyn Backend>, ExecError> {
        self.backends.get(id).ok_or(ExecError::MissingBackend(id))
    }
}

/// For every value, the index of the last partition that reads it (directly or through
/// a transfer placed in it); [`KEEP`] for graph outputs.
fn last_readers(plan: &Plan) -> Vec<usize> {
    let mut last = vec![0usize; plan.graph.len()];
    let mut read = vec![false; plan.graph.len()];
    for (index, part) in plan.partitions.iter().enumerate() {
        for id in &part.inputs {
            last[id.index()] = index;
            read[id.index()] = true;
        }
        for t in &plan.transfers {
            if part.inputs.contains(&t.node) {
                last[t.source.index()] = index;
                read[t.source.index()] = true;
            }
        }
    }
    for (idx, was_read) in read.iter().enumerate() {
        if !was_read {
            last[idx] = KEEP;
        }
    }
    for out in plan.graph.outputs() {
        last[out.index()] = KEEP;
    }
    last
}
