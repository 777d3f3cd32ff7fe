//! `KeepLargeBuffers` as a program's global allocator: which freed buffers it keeps, that it hands
//! each to one request of exactly its layout, zeroed where zeros are asked for, and that
//! `return_freed_memory` gives them back. Alone in its test binary (the allocator and the list it
//! keeps are the process's); the tests take turns.

use llm_kernels::allocator::{KEPT_BUFFERS, KeepLargeBuffers, LARGE_BUFFER, keep_freed_memory, return_freed_memory};
use std::sync::Mutex;

#[global_allocator]
static ALLOCATOR: KeepLargeBuffers = KeepLargeBuffers;

/// The tests share the list of kept buffers, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Values in a large buffer: 40 MiB of `f64`.
const LARGE: usize = (LARGE_BUFFER + (8 << 20)) / 8;

fn filled(len: usize, value: f64) -> Vec<f64> {
    vec![value; len]
}

/// Where a large buffer written with `value` was, once it is freed (kept, where keeping is on).
fn freed_large(value: f64) -> *const f64 {
    let buffer = filled(LARGE, value);
    let at = buffer.as_ptr();
    drop(buffer);
    at
}

/// Takes this test's turn, starting from an empty list with keeping on (whatever a failed test
/// before it left).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    let turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    return_freed_memory();
    keep_freed_memory();
    turn
}

#[test]
fn a_freed_large_buffer_serves_the_next_request_of_its_size() {
    let _turn = turn();
    let at = freed_large(1.5);
    assert_eq!(KeepLargeBuffers::kept_bytes(), LARGE * 8);
    // another size, or the same size with another alignment, leaves it where it is
    let other: Vec<f64> = Vec::with_capacity(LARGE + 1);
    assert_eq!(KeepLargeBuffers::kept_bytes(), LARGE * 8);
    let aligned = std::alloc::Layout::from_size_align(LARGE * 8, 4096).unwrap();
    // SAFETY: the layout's size is not zero (`black_box`: an allocation nothing reads could be
    // left out by the optimiser, with its free)
    #[allow(unsafe_code)]
    let page = std::hint::black_box(unsafe { std::alloc::alloc(aligned) });
    assert!(!page.is_null() && page.addr().is_multiple_of(4096));
    assert_eq!(KeepLargeBuffers::kept_bytes(), LARGE * 8, "not handed out for another alignment");
    // SAFETY: `page` came from the global allocator with `aligned`
    #[allow(unsafe_code)]
    unsafe {
        std::alloc::dealloc(page, aligned);
    }
    drop(other); // kept too: three now
    assert_eq!(KeepLargeBuffers::kept_bytes(), (3 * LARGE + 1) * 8);
    let again: Vec<f64> = Vec::with_capacity(LARGE);
    assert_eq!(again.as_ptr(), at, "the same pages");
    assert_eq!(KeepLargeBuffers::kept_bytes(), (2 * LARGE + 1) * 8);
    return_freed_memory();
    assert_eq!(KeepLargeBuffers::kept_bytes(), 0);
}

#[test]
fn a_reused_buffer_asked_for_zeros_is_zeroed() {
    let _turn = turn();
    let at = freed_large(7.0);
    // `vec![0.0; n]` asks the allocator for zeroed memory
    let zeros = filled(LARGE, 0.0);
    assert_eq!(zeros.as_ptr(), at);
    assert!(zeros.iter().all(|&x| x.to_bits() == 0));
    drop(zeros);
    return_freed_memory();
}

#[test]
fn small_buffers_and_buffers_past_the_slots_go_back_to_the_system() {
    let _turn = turn();
    drop(filled(LARGE_BUFFER / 8 - 1, 1.0));
    assert_eq!(KeepLargeBuffers::kept_bytes(), 0, "under the threshold");
    let buffers: Vec<Vec<f64>> = (0..KEPT_BUFFERS + 2).map(|i| filled(LARGE, i as f64)).collect();
    drop(buffers);
    assert_eq!(KeepLargeBuffers::kept_bytes(), KEPT_BUFFERS * LARGE * 8, "at most {KEPT_BUFFERS}");
    return_freed_memory();
    assert_eq!(KeepLargeBuffers::kept_bytes(), 0);
    // and nothing is kept until keeping is asked for again
    drop(filled(LARGE, 2.0));
    assert_eq!(KeepLargeBuffers::kept_bytes(), 0);
}

#[test]
fn threads_never_share_a_kept_buffer() {
    let _turn = turn();
    // each thread writes its own value through a buffer and reads it back before freeing it; a
    // buffer handed to two threads at once would show the other's value
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..10 {
                    let value = (t * 1000 + round) as f64;
                    let mut buffer: Vec<f64> = Vec::with_capacity(LARGE);
                    buffer.resize(LARGE, value);
                    std::thread::yield_now();
                    assert!(buffer.iter().step_by(4096).all(|&x| x == value));
                    assert_eq!(buffer[LARGE - 1], value);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(KeepLargeBuffers::kept_bytes() <= KEPT_BUFFERS * LARGE * 8);
    return_freed_memory();
}
