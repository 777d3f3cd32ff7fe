//! Keeping the thread pool's workers awake through a call made of many short parallel steps, and
//! running such a call on one of the pool's own threads.
//!
//! The teaching crate's layers' forwards, its backward sweep and its decoder's passes run inside
//! it. Why it exists is measured in `docs/performance.md`.
//!
//! A training step or a decoding step is dozens of parallel regions (matrix products, copies,
//! attention lanes) separated by short serial stretches (recording the tape, small tensors). rayon
//! parks a worker that has found no work for a few tens of microseconds, and waking a parked
//! worker is slow where threads are virtual CPUs — tens of microseconds, a sizeable part of a
//! region of a decode step (`docs/performance.md` has the timings).
//!
//! [`with_workers_awake`] runs a call while one task of the pool spins, executing pending work of
//! the pool (`rayon::yield_now`: in practice the call's own regions) instead of parking. The
//! attention layer's forward (`GroupedQueryAttention::forward_with`) and its decoding step
//! (`forward_cached`), the tape's backward sweep, the decoder's forward passes and a training
//! step (`model::Trainer`) of the teaching crate run inside it. It changes which thread runs a task, never
//! what a task computes, so results stay bitwise the same.
//!
//! The spinning task is started with `rayon::spawn`, so the call never waits for it (a caller
//! outside the pool would otherwise wait for a worker to pick it up). It stops when the call
//! returns or unwinds, after [`IDLE_LIMIT`] without finding work, or after [`SPIN_LIMIT`] in all,
//! and it does not start on a thread that is itself inside such a call or already spinning for
//! another: a thread that picks it up while it waits for its own work goes back to waiting at
//! once. Between attempts it yields its CPU to any other runnable thread.
//!
//! A call made from a thread outside the pool (a program's `main`) pays once more for every
//! region: rayon hands the region to the pool and puts the calling thread to sleep until it is
//! done, and waking it is again a switch of threads. [`on_pool`] moves the whole call onto a
//! worker of the pool, so that its regions start where they are needed; a real model's decoding
//! step takes about a tenth less time, its prefill about a fifth (`docs/performance.md`).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the spinning task looks for work before it stops and leaves the worker to rayon's
/// idle loop: longer than the serial stretches between the regions of a step (a few to a few
/// tens of microseconds).
pub const IDLE_LIMIT: Duration = Duration::from_millis(1);

/// The longest the spinning task runs, whatever it finds to do: the calls it serves take
/// milliseconds, and in longer ones a few wake-ups weigh little.
pub const SPIN_LIMIT: Duration = Duration::from_millis(100);

thread_local! {
    /// Whether this thread is inside [`with_workers_awake`] (nested calls add no second task).
    static AWAKE: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is running a spinning task (one it picks up meanwhile returns).
    static SPINNING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (on the calling thread) while one of the pool's other workers is kept from parking:
/// see the module docs. With one thread, or inside another such call on this thread, it simply
/// runs `f`. A panic in `f` ends the spinning task and propagates.
pub fn with_workers_awake<R>(f: impl FnOnce() -> R) -> R {
    if rayon::current_num_threads() < 2 || AWAKE.with(Cell::get) {
        return f();
    }
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&done);
    rayon::spawn(move || spin_until(&seen));
    /// Ends the spinning task when `f` returns or unwinds.
    struct Finish(Arc<AtomicBool>);
    impl Drop for Finish {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
            AWAKE.with(|awake| awake.set(false));
        }
    }
    AWAKE.with(|awake| awake.set(true));
    let _finish = Finish(done);
    f()
}

/// Runs `f` on a worker of the current pool — the global one when called from outside any pool —
/// and returns what it returns; on a thread of a pool already, it simply runs `f`. The kernel
/// target in force on the calling thread ([`crate::target::with_target`]) is in force for `f`
/// too. A panic in `f` propagates (rayon's message names the worker, not `main`). Nothing `f`
/// computes changes, only the thread that starts it (see the module docs).
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    // the target is the calling thread's (`with_target` keeps it per thread): hand it on
    let target = crate::target::active();
    // rayon runs a scope's body on a worker, the calling thread waiting once for all of it
    rayon::scope(|_| target.within(f))
}

/// Executes the pool's pending work until `done` or a limit (see the module docs).
fn spin_until(done: &AtomicBool) {
    if AWAKE.with(Cell::get) || SPINNING.with(Cell::get) {
        return;
    }
    SPINNING.with(|spinning| spinning.set(true));
    let start = Instant::now();
    let mut last_work = start;
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            last_work = Instant::now();
        } else if last_work.elapsed() > IDLE_LIMIT || start.elapsed() > SPIN_LIMIT {
            break;
        } else {
            std::thread::yield_now();
        }
    }
    SPINNING.with(|spinning| spinning.set(false));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rayon::prelude::*;

    use super::{on_pool, with_workers_awake};

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
    }

    /// Parallel work with serial stretches between its regions, as a step has; each region sums
    /// fixed blocks in parallel and adds the block sums in order, so the result is the same on
    /// any number of threads.
    fn regions() -> Vec<u64> {
        (0..20)
            .map(|r| {
                let blocks: Vec<f64> = (0..100)
                    .into_par_iter()
                    .map(|c| (c * 100..(c + 1) * 100).map(|i| ((i * (r + 1)) as f64).sqrt()).sum())
                    .collect();
                std::thread::sleep(std::time::Duration::from_micros(50));
                blocks.iter().sum::<f64>().to_bits()
            })
            .collect()
    }

    #[test]
    fn gives_the_same_result_on_any_thread_count_nested_or_not() {
        let plain = pool(1).install(regions);
        for threads in [1, 2, 3] {
            let awake = pool(threads).install(|| with_workers_awake(regions));
            assert_eq!(awake, plain, "{threads} threads");
            // nested, and from inside parallel tasks of the same pool
            let nested = pool(threads).install(|| with_workers_awake(|| with_workers_awake(regions)));
            assert_eq!(nested, plain);
            let inside: Vec<Vec<u64>> =
                pool(threads).install(|| (0..4).into_par_iter().map(|_| with_workers_awake(regions)).collect());
            assert!(inside.iter().all(|x| *x == plain));
        }
        // outside any pool: the global one
        assert_eq!(with_workers_awake(regions), plain);
    }

    #[test]
    fn on_pool_runs_on_a_worker_with_the_same_result() {
        let plain = pool(1).install(regions);
        // from outside any pool, on a worker of the global one
        assert!(std::thread::spawn(|| on_pool(rayon::current_thread_index)).join().unwrap().is_some());
        assert_eq!(on_pool(|| with_workers_awake(regions)), plain);
        // inside a pool it stays on the calling worker, of that pool
        for threads in [1, 2] {
            let here = pool(threads).install(|| (rayon::current_thread_index(), on_pool(rayon::current_thread_index)));
            assert_eq!(here.0, here.1);
            assert_eq!(pool(threads).install(|| on_pool(regions)), plain);
        }
        let caught = std::panic::catch_unwind(|| on_pool(|| panic!("a panic inside on_pool (expected by this test)")));
        assert!(caught.is_err());
        // a target forced on the calling thread holds on the worker
        use crate::target::{Target, active, with_target};
        for target in Target::available() {
            let seen = std::thread::spawn(move || with_target(target, || on_pool(active)).unwrap()).join().unwrap();
            assert_eq!(seen, target);
        }
    }

    #[test]
    fn a_panic_ends_the_spinning_task_and_propagates() {
        let reached = AtomicUsize::new(0);
        pool(2).install(|| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_workers_awake(|| {
                    reached.fetch_add(1, Ordering::Relaxed);
                    panic!("a panic inside the call (expected by this test)")
                })
            }));
            assert!(result.is_err());
            // the same thread is not left marked as inside a call, and can run the next one
            assert!(!super::AWAKE.with(std::cell::Cell::get));
            assert_eq!(with_workers_awake(|| 7), 7);
        });
        assert_eq!(reached.load(Ordering::Relaxed), 1);
    }
}
