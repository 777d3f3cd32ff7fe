//! `keep_freed_memory` keeps the heaps a worker thread has freed. Alone in its test binary, so
//! that its thread starts a heap of its own in a fresh process.

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
    assert!(llm_kernels::allocator::keep_freed_memory());
    // a new thread allocates from a heap of its own; ten buffers of 8 MiB, written, fill more than
    // one heap of 64 MiB, and freeing them all empties the second heap
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
    println!("page faults: {} in the first round, {} in the second", faults.0, faults.1);
    // 80 MiB written is 20 480 pages of 4 KiB (fewer faults where the system backs heaps with
    // huge pages); with the second heap unmapped when it emptied, the second round faulted about
    // 6 000 of them in again (measured), a third of the first
    assert!(faults.1 <= faults.0 / 10 + 50, "the second round reuses the first's pages: {faults:?}");
}
