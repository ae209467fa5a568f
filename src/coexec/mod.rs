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
//! **Invariant:** knows nothing of graphs, plans, executors or models: it sees shapes,
//! backend ids and measured durations. Running a split, and deciding what an arm is,
//! belongs to the caller.

pub mod calibrate;
pub mod clock;
pub mod fingerprint;
pub mod gate;
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
pub use table::{table_path, CalibrationTable, LoadStatus, TableError, TABLE_FILE_NAME};
