//! One process setting that matters for speed — when the C allocator gives memory back — a hint
//! for the largest fresh outputs (huge pages, [`advise_huge_pages`]), and a counting allocator for
//! the tests that measure what a call allocates.
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
//! Threads other than the main one mostly allocate from heaps of their own (glibc's arenas, at
//! most eight per core, each heap reserved 64 MiB at a time). When a thread's live buffers rise
//! past a heap, glibc adds one, and when the added heap is all free again it unmaps it, unless the
//! heap below has less free room at its end than the padding glibc keeps on top of a heap
//! (`M_TOP_PAD`, 128 KiB by default); the trim threshold plays no part. Work on a thread pool
//! allocates on the pool's threads, so a prefill of a real model, whose live buffers rise past 64
//! MiB and fall back, had heaps mapped and unmapped some 150 times a pass, each time faulting its
//! pages in again.
//!
//! [`keep_freed_memory`] pins both thresholds and that padding, so freed buffers are reused by the
//! next step.
//! It changes no result, only where memory comes from; it is process-wide, so it is left to the
//! program (the `llm-bench` binary calls it) rather than done behind a library user's back.

/// glibc's largest mmap threshold: 4 MiB × the size of a `long` on 64-bit systems (32 MiB), 512
/// KiB on 32-bit ones (half its heap size).
const LARGEST_MMAP_THRESHOLD: i32 = if cfg!(target_pointer_width = "64") { 32 << 20 } else { 512 << 10 };

/// Serve allocations of up to 32 MiB (512 KiB on 32-bit systems: glibc's largest setting) from
/// the allocator's heaps, trim the main heap only when more than 512 MiB of it is free, and keep
/// every thread's heaps once they are mapped (a padding of 64 MiB, a whole heap), instead of
/// returning freed memory to the operating system at once. Call it once at start-up. Returns
/// `true` where it took effect (glibc on Linux) and `false`, doing nothing, elsewhere.
///
/// The process keeps what it freed: up to 512 MiB on the main heap, and all of it on the other
/// threads' heaps, whose free room no trim reaches (each is at most 64 MiB). Memory never written
/// costs no resident pages, but the heaps and the main heap's padding are writable address space,
/// which a system that refuses to overcommit counts against its limit.
pub fn keep_freed_memory() -> bool {
    set_thresholds(LARGEST_MMAP_THRESHOLD, 512 << 20, 64 << 20)
}

/// The opposite choice, for a process whose resident memory is the point (decoding a real model):
/// every allocation above 128 KiB is mapped on its own and returned to the system when freed, and
/// heaps are trimmed above 128 KiB of free tail, with 128 KiB of padding — glibc's starting
/// values, pinned, so that a few large freed buffers (a prefill's activations) do not raise the
/// threshold and stay resident (and so that it undoes [`keep_freed_memory`]). Returns `true`
/// where it took effect (glibc on Linux).
pub fn return_freed_memory() -> bool {
    set_thresholds(128 << 10, 128 << 10, 128 << 10)
}

/// Pins glibc's mmap and trim thresholds and the padding kept on top of a heap (in bytes).
fn set_thresholds(mmap_bytes: i32, trim_bytes: i32, top_pad_bytes: i32) -> bool {
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
        mmap && trim && set(M_TOP_PAD, top_pad_bytes)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (mmap_bytes, trim_bytes, top_pad_bytes);
        false
    }
}

/// Below this many bytes a buffer is not worth advising ([`advise_huge_pages`]): glibc serves it
/// from its heaps (up to its largest mapping threshold, 32 MiB), whose pages are reused.
pub const HUGE_PAGE_BUFFER: usize = 32 << 20;

/// Asks Linux to back the pages of a buffer not yet written with transparent huge pages (2 MiB on
/// x86-64) — where the system enables them on request, its `madvise` mode — so that its first
/// writes take one page fault per 2 MiB instead of one per 4 KiB. For a fresh output of at least
/// [`HUGE_PAGE_BUFFER`] bytes, which glibc maps on its own and unmaps when it is freed (a
/// prefill's logits: 100 MB for 256 tokens of a vocabulary of 49 152; the scores of explicit
/// attention over 4096 tokens, 1 GB). The products ask it for their outputs. Only the whole 2 MiB pages
/// inside the buffer are advised. A hint: it changes no value, and where it cannot take effect
/// (another system, huge pages off, a smaller buffer) it does nothing. Returns whether the system
/// took the advice.
pub fn advise_huge_pages<T>(buffer: &mut [std::mem::MaybeUninit<T>]) -> bool {
    let bytes = std::mem::size_of_val(buffer);
    if bytes < HUGE_PAGE_BUFFER {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    {
        use std::os::raw::{c_int, c_void};
        const HUGE: usize = 2 << 20;
        // Linux's <sys/mman.h>
        const MADV_HUGEPAGE: c_int = 14;
        unsafe extern "C" {
            fn madvise(addr: *mut c_void, length: usize, advice: c_int) -> c_int;
        }
        let start = buffer.as_mut_ptr() as usize;
        let (first, end) = (start.next_multiple_of(HUGE), (start + bytes) / HUGE * HUGE);
        if end <= first {
            return false;
        }
        // SAFETY: `first..end` lies inside `buffer`, which this call borrows exclusively; the
        // advice changes how its pages are backed, never their contents (none written yet, and
        // Linux keeps a page's contents whatever backs it).
        unsafe { madvise(first as *mut c_void, end - first, MADV_HUGEPAGE) == 0 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Storage for a fresh product of `len` values, none written yet: where `gemm::matmul_new`,
/// `gemm::matmul_new_batch` and `gemm::matmul_in_stripes` take their outputs from, so that the largest are on huge pages
/// ([`advise_huge_pages`]). The caller checked that `len` values can be allocated. (Not
/// `rows::build_rows`: rows on huge pages made a softmax over 1 GB of scores 15–20 % slower.)
pub(crate) fn unfilled(len: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(len);
    advise_huge_pages(&mut out.spare_capacity_mut()[..len]);
    out
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
    fn huge_pages_are_asked_for_large_fresh_buffers_only_and_change_no_value() {
        let mut small: Vec<f64> = Vec::with_capacity(1 << 10);
        assert!(!super::advise_huge_pages(&mut small.spare_capacity_mut()[..1 << 10]));
        let len = (super::HUGE_PAGE_BUFFER + (4 << 20)) / 8;
        // the storage every kernel's fresh output comes from
        let mut large = super::unfilled(len);
        // where Linux has transparent huge pages on x86-64, the mapping now carries the advice
        // (`hg` among its flags in /proc/self/smaps), whatever the system's mode
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
        if cfg!(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64")) && thp {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let at = large.as_ptr() as usize + (4 << 20);
            // each mapping: a line `from-to perms …`, then its fields, the last `VmFlags: …`
            let (mut inside, mut flags) = (false, None);
            for line in smaps.lines() {
                let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
                if let Some((from, to)) = range
                    && let (Ok(from), Ok(to)) = (usize::from_str_radix(from, 16), usize::from_str_radix(to, 16))
                {
                    inside = (from..to).contains(&at);
                } else if inside && let Some(listed) = line.strip_prefix("VmFlags:") {
                    flags = Some(listed.to_string());
                }
            }
            let flags = flags.expect("the buffer's mapping and its flags");
            assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
        }
        large.extend((0..len).map(|i| i as f64));
        assert!(large.iter().enumerate().all(|(i, &v)| v == i as f64));
    }

    #[test]
    fn takes_effect_on_glibc_and_changes_no_result() {
        let product = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let (a, b) = (vec![0.5; 1 << 20], vec![3.0; 1 << 20]);
        let before = product(&a, &b);
        let glibc = cfg!(all(target_os = "linux", target_env = "gnu"));
        assert_eq!(super::return_freed_memory(), glibc);
        assert_eq!(super::keep_freed_memory(), glibc, "every value within glibc's limits");
        let (a2, b2) = (a.clone(), b.clone());
        assert_eq!(product(&a2, &b2).to_bits(), before.to_bits());
    }
}
