//! Keeps the CPU pool's other workers awake for the length of one partition run.
//!
//! A step is hundreds of parallel regions separated by short serial ops (norms, adds,
//! rope). Between regions an idle rayon worker yields a few dozen times and then
//! sleeps on a futex, so the next region starts on one thread and waits for the
//! other's wake-up. Here each other worker runs a helper for the whole run that takes
//! the pool's jobs as they appear ([`rayon::yield_now`]) and otherwise yields the
//! core (to the OS, so a server's other threads still run), never sleeping until the
//! run ends. Which thread runs a job never changes its result.
//!
//! Why this cannot hang: a helper returns only when the run ends, so it must never
//! start inside a job the run waits for. The helpers are pushed before any of the
//! run's jobs, and rayon steals oldest first, so every helper is taken before any job
//! is: by an idle thread, at the bottom of its stack, or by the run's own thread
//! (which returns from it at once). Two runs on one pool at once could each take the
//! other's helper inside a job and wait on each other, so only one run at a time per
//! pool keeps helpers (the others just run).

use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` on the current pool with its other workers kept awake until `f` returns.
/// `held` is the pool's flag that a run holds helpers; while another run holds it,
/// outside a pool, or in a pool of one thread, it just runs `f`.
pub(crate) fn awake<R: Send>(held: &AtomicBool, f: impl FnOnce() -> R + Send) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    let threads = rayon::current_num_threads();
    if threads < 2
        || held
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return f();
    }
    // Given back after the scope, that is once every helper has returned.
    let _release = StoreOnDrop(held, false);
    let done = AtomicBool::new(false);
    rayon::in_place_scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| {
                // Popped by the thread running `f` (while it waits inside a region),
                // it would spin on `done`, which only that thread sets.
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
        let _done = StoreOnDrop(&done, true);
        f()
    })
}

/// Stores its value in its flag when dropped.
struct StoreOnDrop<'a>(&'a AtomicBool, bool);

impl Drop for StoreOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(self.1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::awake;

    /// A pool of `threads` workers named `name-0`, `name-1`, ...
    fn pool(name: &'static str, threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
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
    /// running (its helper yields the core but never sleeps); outside it, or while
    /// another run holds the pool's flag, the same worker falls asleep.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_other_worker_stays_awake_only_inside() {
        use std::time::{Duration, Instant};
        let pool = pool("awk", 2);
        // Every worker started (and named) before its state is read.
        pool.broadcast(|_| ());
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
        let held = AtomicBool::new(false);
        let inside = pool.install(|| awake(&held, || watch(&|seen| seen.len() == 50)));
        assert!(inside.iter().all(|&s| s == Some('R')), "{inside:?}");
        let asleep = |seen: &[Option<char>]| seen.last() == Some(&Some('S'));
        let outside = pool.install(|| watch(&asleep));
        assert_eq!(outside.last(), Some(&Some('S')), "{outside:?}");
        // While another run holds the pool's flag, a run keeps no helper.
        let taken = AtomicBool::new(true);
        let held_elsewhere = pool.install(|| awake(&taken, || watch(&asleep)));
        assert_eq!(
            held_elsewhere.last(),
            Some(&Some('S')),
            "{held_elsewhere:?}"
        );
    }

    /// The result comes back; parallel work inside still runs; a panic inside reaches
    /// the caller instead of leaving the helpers spinning, and gives the pool's flag back.
    #[test]
    fn returns_results_runs_parallel_work_and_propagates_panics() {
        use rayon::prelude::*;
        let (pool, held) = (pool("awp", 2), AtomicBool::new(false));
        let sum: u64 = pool.install(|| awake(&held, || (0..10_000u64).into_par_iter().sum()));
        assert_eq!(sum, 49_995_000);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| awake(&held, || panic!("inside")))
        }));
        assert!(caught.is_err());
        assert!(!held.load(std::sync::atomic::Ordering::Acquire));
        assert_eq!(pool.install(|| awake(&held, || 7)), 7);
        assert_eq!(awake(&held, || 8), 8);
    }

    /// Nested joins on a pool of four threads (three helpers a run), from two callers
    /// at once sharing the pool's flag, many times over: every sum is right and every
    /// run ends. (It does not force the interleaving a helper inside a job would need
    /// to hang; the module's ordering argument covers that, the flag test above the
    /// flag.)
    #[test]
    fn many_threads_and_concurrent_runs_always_finish() {
        use rayon::prelude::*;
        use std::sync::Arc;
        let pool = Arc::new(pool("awm", 4));
        let held = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        for caller in 0..2 {
            let (pool, held, tx) = (pool.clone(), held.clone(), tx.clone());
            std::thread::spawn(move || {
                for round in 0..300usize {
                    // One job per index, so idle threads steal all through the run.
                    let sum: usize = pool.install(|| {
                        awake(&held, || {
                            (0..64usize)
                                .into_par_iter()
                                .with_max_len(1)
                                .map(|i| {
                                    (0..i)
                                        .into_par_iter()
                                        .with_max_len(1)
                                        .map(|j| std::hint::black_box(j ^ round))
                                        .sum::<usize>()
                                })
                                .sum()
                        })
                    });
                    let want: usize = (0..64usize)
                        .map(|i| (0..i).map(|j| j ^ round).sum::<usize>())
                        .sum();
                    assert_eq!(sum, want, "caller {caller}, round {round}");
                }
                tx.send(caller).expect("report");
            });
        }
        for _ in 0..2 {
            rx.recv_timeout(std::time::Duration::from_secs(120))
                .expect("every run finishes");
        }
    }
}
