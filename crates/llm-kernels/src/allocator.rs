//! One process setting that matters for speed — when the C allocator gives memory back — and a
//! counting allocator for the tests that measure what a call allocates.
//!
//! It belongs to the benchmarks (`crates/llm-bench`, `docs/performance.md`) and to programs that
//! train with the teaching crate: of the chapters, only chapter 37's binary calls it (800 training
//! steps, where page faults took about a sixth of a run without it).
//!
//! Every operation allocates its output, and a training step frees dozens of buffers of a few
//! MiB. glibc's malloc serves buffers above a self-adjusting threshold straight from the operating
//! system and returns them on `free`, and it trims its heaps whenever their free tail grows. Each
//! return makes the kernel interrupt the other cores running the process to flush their address
//! translations, and the next allocation faults the pages in again. How often that happens
//! depends on which allocation last moved the threshold, so the same training step can run much
//! slower in a build that differs only in the order of a few allocations (the timings are in
//! `docs/performance.md`, "Measurements behind the code").
//!
//! Threads other than the main one allocate from heaps of their own (glibc's arenas, reserved
//! 64 MiB at a time), and glibc unmaps such a heap as soon as all of it is free, whatever the trim
//! threshold says, unless the padding it keeps on top of a heap (`M_TOP_PAD`) is at least a heap.
//! Work on a thread pool allocates on the pool's threads, so a prefill of a real model, whose live
//! buffers rise past 64 MiB and fall back, had heaps mapped and unmapped some 150 times a pass,
//! each time faulting its pages in again.
//!
//! [`keep_freed_memory`] pins both thresholds and that padding, so freed buffers are reused by the
//! next step.
//! It changes no result, only where memory comes from; it is process-wide, so it is left to the
//! program (the `llm-bench` binary calls it) rather than done behind a library user's back.

/// Serve allocations of up to 32 MiB (16 MiB on 32-bit systems, glibc's largest setting there)
/// from the allocator's heaps, keep up to 512 MiB of freed memory in the process instead of
/// returning it to the operating system at once, and keep every thread's heaps mapped once they
/// are (a padding of 64 MiB, the size of one). Call it once at start-up. Returns `true` where it
/// took effect (glibc on Linux) and `false`, doing nothing, elsewhere.
///
/// Untouched memory costs nothing: the padding is address space, not resident pages.
pub fn keep_freed_memory() -> bool {
    // glibc's largest mmap threshold: 4 MiB × the size of a pointer
    set_thresholds(4 << 20 << (std::mem::size_of::<usize>() / 4), 512 << 20, Some(64 << 20))
}

/// The opposite choice, for a process whose resident memory is the point (decoding a real model):
/// every allocation above 128 KiB is mapped on its own and returned to the system when freed, and
/// heaps are trimmed above 128 KiB of free tail — glibc's starting values, pinned, so that a few
/// large freed buffers (a prefill's panels) do not raise the threshold and stay resident.
/// Returns `true` where it took effect (glibc on Linux).
pub fn return_freed_memory() -> bool {
    set_thresholds(128 << 10, 128 << 10, None)
}

/// Pins glibc's mmap and trim thresholds and, where given, the padding kept on top of a heap (in
/// bytes).
fn set_thresholds(mmap_bytes: i32, trim_bytes: i32, top_pad_bytes: Option<i32>) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    {
        use std::os::raw::c_int;
        // glibc's <malloc.h>
        const M_TRIM_THRESHOLD: c_int = -1;
        const M_TOP_PAD: c_int = -2;
        const M_MMAP_THRESHOLD: c_int = -3;
        unsafe extern "C" {
            fn mallopt(param: c_int, value: c_int) -> c_int;
        }
        // SAFETY: `mallopt` only records the parameter; glibc documents it as safe to call at any
        // time, and the callers' values are in range. It returns 1 on success.
        let set = |param, value| unsafe { mallopt(param, value) } == 1;
        let (mmap, trim) = (set(M_MMAP_THRESHOLD, mmap_bytes), set(M_TRIM_THRESHOLD, trim_bytes));
        let pad = top_pad_bytes.is_none_or(|bytes| set(M_TOP_PAD, bytes));
        mmap && trim && pad
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (mmap_bytes, trim_bytes, top_pad_bytes);
        false
    }
}

/// The system allocator, counting the bytes every thread requests: for tests that measure what a
/// call allocates (`#[global_allocator] static A: CountingAllocator = CountingAllocator::new();`,
/// then [`CountingAllocator::requested`] before and after). It counts every thread's requests, so
/// such a test runs alone in its binary.
#[derive(Debug, Default)]
pub struct CountingAllocator {
    requested: std::sync::atomic::AtomicUsize,
}

impl CountingAllocator {
    /// A counter at 0.
    pub const fn new() -> Self {
        Self { requested: std::sync::atomic::AtomicUsize::new(0) }
    }

    /// The bytes requested so far (allocations, zeroed allocations and the new sizes of
    /// reallocations; frees are not subtracted).
    pub fn requested(&self) -> usize {
        self.requested.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn add(&self, bytes: usize) {
        self.requested.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

// SAFETY: each method forwards its arguments to the system allocator, whose contract is the same;
// the counter is only added to.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        self.add(layout.size());
        // SAFETY: the caller's promises about `layout` hold for this call too.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        self.add(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        self.add(new_size);
        // SAFETY: `ptr` came from this allocator (so from the system one) with `layout`.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as for `realloc`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn takes_effect_on_glibc_and_changes_no_result() {
        let product = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let (a, b) = (vec![0.5; 1 << 20], vec![3.0; 1 << 20]);
        let before = product(&a, &b);
        let applied = super::keep_freed_memory();
        assert_eq!(applied, cfg!(all(target_os = "linux", target_env = "gnu")));
        let (a2, b2) = (a.clone(), b.clone());
        assert_eq!(product(&a2, &b2).to_bits(), before.to_bits());
    }

    /// The page faults of the calling thread so far (`minflt`, the tenth field of Linux's
    /// `/proc/thread-self/stat`; the command name before it is in parentheses and may hold spaces).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(7).unwrap().parse().unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_worker_thread_reuses_the_heaps_it_freed() {
        assert!(super::keep_freed_memory());
        // a new thread allocates from a heap of its own; ten buffers of 8 MiB, written, fill more
        // than one heap of 64 MiB, and freeing them all empties the second heap
        let faults = std::thread::spawn(|| {
            let round = || {
                let before = minor_faults();
                let buffers: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8 + 1; 8 << 20]).collect();
                assert!(buffers.iter().enumerate().all(|(i, b)| b[b.len() / 2] == i as u8 + 1));
                drop(buffers);
                minor_faults() - before
            };
            (round(), round())
        })
        .join()
        .unwrap();
        // 80 MiB written is 20 480 pages of 4 KiB; with the second heap unmapped when it emptied,
        // the second round faulted about 6 000 of them in again (measured)
        assert!(faults.0 > 10_000, "the first round writes fresh pages: {faults:?}");
        assert!(faults.1 < 1_000, "the second round reuses them: {faults:?}");
    }
}
