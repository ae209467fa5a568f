//! Prefill co-execution (FusionML): the hardware-independent core that decides how to
//! split linears across two backends and whether splitting is used at all.
//!
//! - [`calibrate`](mod@calibrate) times the real concurrent row split over a grid of ratios ρ
//!   (including 0) and keeps the fastest, per matmul shape class ([`SplitKey`]).
//! - [`table`] persists calibrations in `calibration.json` under `$SWITCHYARD_HOME`,
//!   valid for one [`HardwareFingerprint`] ([`fingerprint`]).
//! - [`gate`] picks among execution arms (baseline, split, single-backend plans) by
//!   measurement, with probation, moving averages, re-probes and hysteresis, and a
//!   probation-then-lock mode for memory pressure.
//! - [`clock`] supplies the time: the system clock, or in tests a fake clock that
//!   simulated backends advance by their modelled run time.
//!
//! - [`split`] rewrites a graph so its prefill linears run as two row halves pinned on
//!   two backends at once, joined by a concat.
//!
//! **Invariant:** knows graphs and plans, never models or kernels: calibration and the
//! gate see shapes, backend ids and measured durations; what an arm is, and timing it,
//! belongs to the caller (the model runner).

pub mod calibrate;
pub mod clock;
pub mod fingerprint;
pub mod gate;
pub mod split;
pub mod table;

pub use calibrate::{calibrate, rows_bucket, Calibration, SplitKey, GRID_PERMILLE};
#[cfg(any(test, feature = "sim"))]
pub use clock::FakeClock;
pub use clock::{timed, Clock, SystemClock};
pub use fingerprint::{Component, FingerprintChange, HardwareFingerprint, Invalidation};
pub use gate::{
    ArmId, CallRecord, Choice, Decision, EventLog, Gate, GateConfig, GateError, GateReport,
    MemoryPressure, Reason,
};
pub use split::{split_graph, split_key, SplitGraph, SplitRule};
pub use table::{table_path, CalibrationTable, LoadStatus, TableError, TABLE_FILE_NAME};
