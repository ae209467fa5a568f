//! Keeps the CPU pool's other workers awake for the length of one partition run.
//!
//! A step is hundreds of parallel regions separated by short serial ops (norms, adds,
//! rope). Between regions an idle rayon worker yields a few dozen times and then
//! sleeps on a futex, so the next region starts on one thread and waits for the
//! other's wake-up. Here each other worker runs a helper for the whole run that takes
//! the pool's jobs as they appear ([`rayon::yield_now`]) and otherwise yields the
//! core (to the OS, so a server's other threads still run), never sleeping until the
//! run ends. Which thread runs a job never changes its result.

use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` on the current pool with its other workers kept awake until `f` returns.
/// Outside a pool, or in a pool of one thread, it just runs `f`.
pub(crate) fn awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    let threads = rayon::current_num_threads();
    if threads < 2 {
        return f();
    }
    let done = AtomicBool::new(false);
    rayon::in_place_scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| {
                // A helper popped by the thread running `f` (while it waits inside a
                // region) would spin on `done`, which only that thread sets.
                if rayon::current_thread_index() == Some(me) {
                    return;
                }
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::thread::yield_now();
                    }
                }
            });
        }
        // Set on return and on unwinding alike: a panic in `f` must not leave the
        // helpers spinning while the scope waits for them.
        let _done = SetOnDrop(&done);
        f()
    })
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::awake;

    fn pool(name: &'static str) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .expect("pool")
    }

    /// The scheduler state (`R`, `S`, ...) of this process's thread named `name`.
    #[cfg(target_os = "linux")]
    fn thread_state(name: &str) -> Option<char> {
        std::fs::read_dir("/proc/self/task").ok()?.find_map(|task| {
            let dir = task.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            if comm.trim() != name {
                return None;
            }
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            stat.rsplit_once(") ")?.1.chars().next()
        })
    }

    /// Through a long serial stretch inside `awake`, the pool's other worker keeps
    /// running (its helper yields the core but never sleeps); outside it, the same
    /// worker falls asleep.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_other_worker_stays_awake_only_inside() {
        use std::time::{Duration, Instant};
        let pool = pool("awk");
        // Whichever worker runs the closure, its sibling is the other name.
        let sibling = || match rayon::current_thread_index() {
            Some(0) => "awk-1",
            _ => "awk-0",
        };
        // The sibling's states seen every millisecond until `stop` says enough.
        let watch = |stop: &dyn Fn(&[Option<char>]) -> bool| {
            let (name, deadline) = (sibling(), Instant::now() + Duration::from_secs(5));
            let mut seen = Vec::new();
            while !stop(&seen) && Instant::now() < deadline {
                let until = Instant::now() + Duration::from_millis(1);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                seen.push(thread_state(name));
            }
            seen
        };
        let inside = pool.install(|| awake(|| watch(&|seen| seen.len() == 50)));
        assert!(inside.iter().all(|&s| s == Some('R')), "{inside:?}");
        let outside = pool.install(|| watch(&|seen| seen.last() == Some(&Some('S'))));
        assert_eq!(outside.last(), Some(&Some('S')), "{outside:?}");
    }

    /// The result comes back; parallel work inside still runs; a panic inside reaches
    /// the caller instead of leaving the helpers spinning.
    #[test]
    fn returns_results_runs_parallel_work_and_propagates_panics() {
        use rayon::prelude::*;
        let pool = pool("awp");
        let sum: u64 = pool.install(|| awake(|| (0..10_000u64).into_par_iter().sum()));
        assert_eq!(sum, 49_995_000);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| awake(|| panic!("inside")))
        }));
        assert!(caught.is_err());
        assert_eq!(pool.install(|| awake(|| 7)), 7);
        assert_eq!(awake(|| 8), 8);
    }
}
