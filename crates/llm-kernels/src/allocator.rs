//! One process setting that matters for speed — when the C allocator gives memory back — a global
//! allocator that keeps a program's largest freed buffers ([`KeepLargeBuffers`]), a hint for the
//! largest fresh outputs (huge pages, [`advise_huge_pages`]), and a counting allocator for the
//! tests that measure what a call allocates.
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
//!
//! Buffers larger than glibc's largest threshold (32 MiB) are mapped on their own whatever the
//! settings, and unmapped when freed: a prefill's logits (100 MB for 256 tokens of SmolLM2) come
//! back as fresh pages every time, which Linux zeroes on their first write. In a virtual machine
//! whose host takes back the pages a guest frees (a balloon device that reports free pages), that
//! first write can also wait for the host to back the page again. A program that installs
//! [`KeepLargeBuffers`] as its global allocator keeps a few such buffers while
//! [`keep_freed_memory`] is in effect and hands each back to the next request of its size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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
///
/// Where the program's global allocator is [`KeepLargeBuffers`], that allocator keeps freed
/// buffers of [`LARGE_BUFFER`] bytes and more from now on (on every system).
pub fn keep_freed_memory() -> bool {
    KEEP_LARGE.store(true, Ordering::Relaxed);
    set_thresholds(LARGEST_MMAP_THRESHOLD, 512 << 20, 64 << 20)
}

/// The opposite choice, for a process whose resident memory is the point (decoding a real model):
/// every allocation above 128 KiB is mapped on its own and returned to the system when freed, and
/// heaps are trimmed above 128 KiB of free tail, with 128 KiB of padding — glibc's starting
/// values, pinned, so that a few large freed buffers (a prefill's activations) do not raise the
/// threshold and stay resident (and so that it undoes [`keep_freed_memory`]). Returns `true`
/// where it took effect (glibc on Linux).
///
/// [`KeepLargeBuffers`] stops keeping buffers and returns those it holds.
pub fn return_freed_memory() -> bool {
    KEEP_LARGE.store(false, Ordering::Relaxed);
    KeepLargeBuffers::release_all();
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

/// The smallest buffer [`KeepLargeBuffers`] keeps, 32 MiB ([`HUGE_PAGE_BUFFER`]): on 64-bit
/// systems glibc's largest mapping threshold, above which no setting of it keeps freed memory.
pub const LARGE_BUFFER: usize = HUGE_PAGE_BUFFER;

/// The most freed buffers [`KeepLargeBuffers`] holds at once.
pub const KEPT_BUFFERS: usize = 4;

/// Whether [`KeepLargeBuffers`] keeps what is freed: set by [`keep_freed_memory`], cleared by
/// [`return_freed_memory`].
static KEEP_LARGE: AtomicBool = AtomicBool::new(false);

/// One freed buffer held for reuse: its address (its provenance exposed) and its layout.
#[derive(Clone, Copy, Debug)]
struct Kept {
    address: usize,
    layout: Layout,
}

/// The buffers [`KeepLargeBuffers`] holds. An allocation or a free takes it with `try_lock` only:
/// it never waits for another thread's, it goes to the system instead (only
/// [`return_freed_memory`] waits for it).
static KEPT: Mutex<[Option<Kept>; KEPT_BUFFERS]> = Mutex::new([None; KEPT_BUFFERS]);

/// A global allocator for programs: the system's, except that while [`keep_freed_memory`] is in
/// effect it keeps up to [`KEPT_BUFFERS`] freed buffers of at least [`LARGE_BUFFER`] bytes,
/// and hands each back to the next request of exactly its size and alignment instead of asking
/// the system for fresh pages (zeroed again where the request asks for zeros). A program installs
/// it with
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: llm_kernels::allocator::KeepLargeBuffers = llm_kernels::allocator::KeepLargeBuffers;
///
/// llm_kernels::allocator::keep_freed_memory();
/// let logits = vec![1.0f64; 5 << 20]; // 40 MiB
/// let first = logits.as_ptr();
/// drop(logits);
/// let again: Vec<f64> = Vec::with_capacity(5 << 20);
/// assert_eq!(again.as_ptr(), first); // the same pages, already backed
/// ```
///
/// Of the workloads, it serves those whose outputs pass 32 MiB: a prefill's logits (a second
/// prompt's take the first's pages), the 1 GiB scores and weights of explicit attention over
/// 4096 positions (`docs/performance.md` has the timings). The `llm-bench` binary installs it.
/// What it keeps stays resident until a request of its layout takes it or
/// [`return_freed_memory`] gives it back: at most four buffers, whatever their size; with four
/// held, a freed buffer goes to the system. So it is a program's choice, like
/// [`keep_freed_memory`]. A buffer keeps the pages it had: one that was asked to be on huge pages
/// ([`advise_huge_pages`]) may serve a request that was not. Reallocations go to the system
/// unchanged.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepLargeBuffers;

impl KeepLargeBuffers {
    /// Whether a buffer of `layout` is one to keep (and to look for among those kept) now.
    fn keeps(layout: Layout) -> bool {
        layout.size() >= LARGE_BUFFER && KEEP_LARGE.load(Ordering::Relaxed)
    }

    /// A kept buffer of exactly `layout`, if one is held and the list is free to look at.
    fn take(layout: Layout) -> Option<*mut u8> {
        if !Self::keeps(layout) {
            return None;
        }
        let mut kept = KEPT.try_lock().ok()?;
        let slot = kept.iter_mut().find(|slot| slot.is_some_and(|k| k.layout == layout))?;
        slot.take().map(|k| std::ptr::with_exposed_provenance_mut(k.address))
    }

    /// Holds `ptr` (a buffer of `layout` from the system) for reuse; `false` where it is not
    /// kept: too small, keeping off, every slot taken, or the list busy.
    fn keep(ptr: *mut u8, layout: Layout) -> bool {
        if !Self::keeps(layout) {
            return false;
        }
        let Ok(mut kept) = KEPT.try_lock() else {
            return false;
        };
        // asked again under the lock: a `return_freed_memory` that emptied the list before this
        // free took it has turned keeping off, and a buffer stored now would never be taken
        if !Self::keeps(layout) {
            return false;
        }
        let Some(slot) = kept.iter_mut().find(|slot| slot.is_none()) else {
            return false;
        };
        *slot = Some(Kept { address: ptr.expose_provenance(), layout });
        true
    }

    /// Returns every kept buffer to the system.
    fn release_all() {
        // emptied under the lock, returned after it (the system's `free` takes its own locks)
        let taken = match KEPT.lock() {
            Ok(mut kept) => std::mem::replace(&mut *kept, [None; KEPT_BUFFERS]),
            Err(_) => return, // never: nothing panics while holding the list
        };
        for k in taken.into_iter().flatten() {
            // SAFETY: a kept buffer came from the system allocator with `k.layout` and was freed
            // by its owner; taken out of the list, no one else can hand it out.
            #[allow(unsafe_code)]
            unsafe {
                System.dealloc(std::ptr::with_exposed_provenance_mut(k.address), k.layout);
            }
        }
    }

    /// The bytes of the buffers held now (for tests and diagnostics; 0 where the list is busy).
    pub fn kept_bytes() -> usize {
        KEPT.try_lock().map_or(0, |kept| kept.iter().flatten().map(|k| k.layout.size()).sum())
    }
}

// SAFETY: every buffer handed out comes from the system allocator with the requested layout:
// freshly, or kept after its owner freed it (then it is in no one else's hands: it is out of the
// list before it is returned). A kept buffer is handed out once, to a request of exactly its size
// and alignment, so its `dealloc` and `realloc` reach the system with the layout it was made
// with. A zeroed request that reuses a buffer zeroes it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for KeepLargeBuffers {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::take(layout) {
            Some(ptr) => ptr,
            // SAFETY: the caller's promises about `layout` hold for this call too.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match Self::take(layout) {
            Some(ptr) => {
                // SAFETY: the kept buffer holds `layout.size()` writable bytes and is ours alone.
                unsafe { ptr.write_bytes(0, layout.size()) };
                ptr
            }
            // SAFETY: as for `alloc`.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from the system allocator with `layout` (see above).
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !Self::keep(ptr, layout) {
            // SAFETY: as for `realloc`.
            unsafe { System.dealloc(ptr, layout) }
        }
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
