//! Switchyard: runs transformer LLMs across every compute unit of a machine.
//!
//! A model step is traced into a [`graph::Graph`]; every [`backend::Backend`] declares
//! what it can run as a [`backend::Capability`]; the [`plan`] partitioner places each
//! node and inserts transfers; the [`cache`] keeps compiled [`exec::Executor`]s so that
//! decode compiles once. See `docs/architecture.md`.
#![warn(missing_docs)]

pub mod backend;
pub mod bench;
pub mod cache;
pub mod coexec;
pub mod decode;
pub mod exec;
pub mod graph;
pub mod harness;
pub mod model;
pub mod plan;
pub mod sched;
pub mod server;
pub mod step;
