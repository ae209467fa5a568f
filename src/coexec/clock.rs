//! Monotonic clocks for timing co-execution: [`SystemClock`] for real runs and, in
//! tests, `FakeClock`, a test double that moves only when told to.
//!
//! Calibration and the gate never read time themselves; they take durations. Code that
//! produces those durations times through a [`Clock`], so simulated backends of known
//! speed can "run" by advancing a fake clock and every test is exact and instant.

use std::time::{Duration, Instant};

/// A monotonic clock: time elapsed since the clock's own origin.
pub trait Clock: Send + Sync {
    /// Time since this clock's origin; never decreases.
    fn now(&self) -> Duration;
}

/// Runs `run` and returns its result with the time it took on `clock`. A clock that
/// went backwards (impossible for a correct clock) reads as zero, not as a panic.
pub fn timed<T>(clock: &dyn Clock, run: impl FnOnce() -> T) -> (T, Duration) {
    let start = clock.now();
    let value = run();
    (value, clock.now().saturating_sub(start))
}

/// The real clock: [`Instant`] measured from the moment the clock was made.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> SystemClock {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// Test double: a clock that stands still until [`FakeClock::advance`] moves it.
/// Simulated backends advance it by their modelled run time, so timings in tests are
/// exact. Shareable across threads (the time is one atomic count of nanoseconds).
#[cfg(any(test, feature = "sim"))]
#[derive(Debug, Default)]
pub struct FakeClock {
    nanos: std::sync::atomic::AtomicU64,
}

#[cfg(any(test, feature = "sim"))]
impl FakeClock {
    /// A fake clock at time zero.
    pub fn new() -> FakeClock {
        FakeClock::default()
    }

    /// Moves the clock forward by `by`, saturating at `u64::MAX` nanoseconds.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let ordering = std::sync::atomic::Ordering::SeqCst;
        // The closure always returns `Some`, so the update cannot fail.
        let _previous = self
            .nanos
            .fetch_update(ordering, ordering, |nanos| Some(nanos.saturating_add(by)));
    }
}

#[cfg(any(test, feature = "sim"))]
impl Clock for FakeClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(std::sync::atomic::Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_advanced() {
        let clock = FakeClock::new();
        assert_eq!(clock.now(), Duration::ZERO);
        let ((), took) = timed(&clock, || clock.advance(Duration::from_millis(7)));
        assert_eq!(took, Duration::from_millis(7));
        assert_eq!(clock.now(), Duration::from_millis(7));
    }

    #[test]
    fn fake_clock_saturates_instead_of_overflowing() {
        let clock = FakeClock::new();
        clock.advance(Duration::MAX);
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let first = clock.now();
        assert!(clock.now() >= first);
    }
}
