//! Timing (warm-ups, then the median of several runs), the output line, and resident-memory growth.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One output line: `<workload> <variant> median_ms=<float> [gflops=<float> [of_gemm=<float>]]
/// [peak_mib=<float>] [gbs=<float> [of_stream=<float>]] [rss_mib=<float>]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub workload: &'static str,
    pub variant: &'static str,
    pub median_ms: f64,
    pub gflops: Option<f64>,
    /// `gflops` as a fraction of the matrix product's rate in the same run and on the same target.
    pub of_gemm: Option<f64>,
    pub peak_mib: Option<f64>,
    /// Bytes read per millisecond, in GB/s (bandwidth-bound workloads).
    pub gbs: Option<f64>,
    /// `gbs` as a fraction of a read-only pass's rate over as many bytes, in the same run.
    pub of_stream: Option<f64>,
    /// The process's peak resident memory, in MiB.
    pub rss_mib: Option<f64>,
}

impl Measurement {
    /// A line with the time only.
    pub fn new(workload: &'static str, variant: &'static str, median_ms: f64) -> Self {
        Self {
            workload,
            variant,
            median_ms,
            gflops: None,
            of_gemm: None,
            peak_mib: None,
            gbs: None,
            of_stream: None,
            rss_mib: None,
        }
    }

    /// Adds the rate `flops / median time`, in GFLOP/s.
    pub fn with_flops(mut self, flops: f64) -> Self {
        self.gflops = Some(flops / (self.median_ms * 1e6));
        self
    }

    /// Adds the rate as a fraction of `gemm_gflops` (nothing for a line without a rate).
    pub fn relative_to_gemm(mut self, gemm_gflops: f64) -> Self {
        self.of_gemm = self.gflops.map(|g| g / gemm_gflops);
        self
    }

    /// Adds the rate over the bytes read, GB/s, and its fraction of `stream_gbs` (a read-only
    /// pass over as many bytes in the same run), if given.
    pub fn with_bandwidth(mut self, gbs: f64, stream_gbs: Option<f64>) -> Self {
        self.gbs = Some(gbs);
        self.of_stream = stream_gbs.map(|s| gbs / s);
        self
    }

    /// Adds the process's peak resident memory in MiB, if known.
    pub fn with_rss_mib(mut self, mib: Option<f64>) -> Self {
        self.rss_mib = mib;
        self
    }

    /// Adds the resident-memory growth of the call, in MiB (see [`resident_growth`]).
    pub fn with_peak_mib(mut self, mib: f64) -> Self {
        self.peak_mib = Some(mib);
        self
    }
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} median_ms={:.3}", self.workload, self.variant, self.median_ms)?;
        if let Some(gflops) = self.gflops {
            write!(f, " gflops={gflops:.1}")?;
        }
        if let Some(fraction) = self.of_gemm {
            write!(f, " of_gemm={fraction:.2}")?;
        }
        if let Some(mib) = self.peak_mib {
            write!(f, " peak_mib={mib:.2}")?;
        }
        if let Some(gbs) = self.gbs {
            write!(f, " gbs={gbs:.2}")?;
        }
        if let Some(fraction) = self.of_stream {
            write!(f, " of_stream={fraction:.2}")?;
        }
        if let Some(mib) = self.rss_mib {
            write!(f, " rss_mib={mib:.1}")?;
        }
        Ok(())
    }
}

/// How many untimed and timed runs a variant gets.
#[derive(Clone, Copy, Debug)]
pub struct Runs {
    pub warmups: usize,
    pub timed: usize,
}

/// Runs `run(i)` `warmups` times untimed, then `timed` times timed (`i` counts every call from 0,
/// so a caller can rotate inputs with it), and returns the median time in milliseconds.
/// The first error stops the measurement.
pub fn median_ms<E>(runs: Runs, mut run: impl FnMut(usize) -> Result<(), E>) -> Result<f64, E> {
    let mut times = Vec::with_capacity(runs.timed.max(1));
    block(runs, 0, &mut run, &mut times)?;
    Ok(median(&mut times).as_secs_f64() * 1e3)
}

/// `run(i)` for `i` from `first`: `runs.warmups` calls untimed, then `runs.timed` (at least one)
/// timed, their times pushed onto `times`.
fn block<E>(
    runs: Runs,
    first: usize,
    run: &mut impl FnMut(usize) -> Result<(), E>,
    times: &mut Vec<Duration>,
) -> Result<(), E> {
    let timed_from = first + runs.warmups;
    for i in first..timed_from {
        run(i)?;
    }
    for i in timed_from..timed_from + runs.timed.max(1) {
        let start = Instant::now();
        run(i)?;
        times.push(start.elapsed());
    }
    Ok(())
}

/// Times two things in alternating blocks, so that both are measured in the same minutes: each
/// of `blocks` blocks runs `a` `runs[0].warmups` times untimed and `runs[0].timed` times timed,
/// then `b` as `runs[1]` says (as many runs of each as take about as long: a block of the faster
/// one then covers about as many of the host's seconds). Returns the median time of each over all
/// its timed runs, in milliseconds.
///
/// A ratio of the two medians then follows the host's minutes less than two measurements taken
/// one after the other would; the warm-ups at the start of each block bring back into the caches
/// what the other's block evicted. `a` and `b` each count their own calls from 0 (the first
/// warm-ups of each are the first block's). The first error stops the measurement.
pub fn alternating_medians_ms<E>(
    blocks: usize,
    runs: [Runs; 2],
    mut a: impl FnMut(usize) -> Result<(), E>,
    mut b: impl FnMut(usize) -> Result<(), E>,
) -> Result<(f64, f64), E> {
    let per_block = runs.map(|r| r.warmups + r.timed.max(1));
    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    for k in 0..blocks.max(1) {
        block(runs[0], k * per_block[0], &mut a, &mut times_a)?;
        block(runs[1], k * per_block[1], &mut b, &mut times_b)?;
    }
    Ok((median(&mut times_a).as_secs_f64() * 1e3, median(&mut times_b).as_secs_f64() * 1e3))
}

/// The median; the mean of the two middle values for an even count.
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let mid = times.len() / 2;
    if times.len() % 2 == 1 { times[mid] } else { (times[mid - 1] + times[mid]) / 2 }
}

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`), or `None` where there is no procfs.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

/// Resets the resident high-water mark (`VmHWM`) to the current resident size by writing `5` to
/// `/proc/self/clear_refs` (Linux ≥ 4.0). True when the reset took effect.
fn reset_high_water_mark() -> bool {
    if std::fs::write("/proc/self/clear_refs", "5").is_err() {
        return false;
    }
    match (status_kib("VmHWM"), status_kib("VmRSS")) {
        // the resident size may grow between the two reads; allow a little
        (Some(hwm), Some(rss)) => hwm <= rss + 1024,
        _ => false,
    }
}

/// Runs `call` and returns its result with the growth of resident memory during the call, in MiB:
/// the peak resident size while it ran minus the resident size before it.
///
/// The peak comes from the kernel's high-water mark after resetting it (exact), or, where the reset
/// is not allowed, from sampling `VmRSS` every millisecond on a helper thread (may miss a spike
/// shorter than that). `None` without procfs.
///
/// Caveat: memory that the allocator freed earlier but kept resident (glibc keeps small and medium
/// blocks; blocks ≥ 32 MiB are unmapped on free) is reused without growth. Measure a variant's
/// memory before running larger variants in the same process, or in a process of its own.
pub fn resident_growth<R>(call: impl FnOnce() -> R) -> (R, Option<f64>) {
    let to_mib = |before: u64, peak: u64| peak.saturating_sub(before) as f64 / 1024.0;
    if reset_high_water_mark() {
        let before = status_kib("VmRSS");
        let result = call();
        let peak = status_kib("VmHWM");
        let growth = before.zip(peak).map(|(b, p)| to_mib(b, p));
        return (result, growth);
    }
    let Some(before) = status_kib("VmRSS") else {
        return (call(), None);
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peak = before;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(status_kib("VmRSS").unwrap_or(0));
                std::thread::sleep(Duration::from_millis(1));
            }
            peak.max(status_kib("VmRSS").unwrap_or(0))
        });
        let result = call();
        done.store(true, Ordering::Relaxed);
        let peak = sampler.join().unwrap_or(before);
        (result, Some(to_mib(before, peak)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(median(&mut [ms(4), ms(1), ms(2), ms(100)]), ms(3));
    }

    #[test]
    fn median_ms_runs_warmups_then_timed_runs_with_running_indices() {
        let mut seen = Vec::new();
        let runs = Runs { warmups: 2, timed: 3 };
        let t = median_ms(runs, |i| {
            seen.push(i);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert!(t >= 0.0);
        let err = median_ms(runs, |i| if i == 1 { Err(i) } else { Ok(()) });
        assert_eq!(err, Err(1));
    }

    #[test]
    fn alternating_medians_run_blocks_in_turn_with_each_side_counting_its_own_calls() {
        // the calls of two blocks of each side, in the order they ran
        let calls = |runs: [Runs; 2]| {
            let seen = std::cell::RefCell::new(Vec::new());
            let record = |side| {
                let seen = &seen;
                move |i| {
                    seen.borrow_mut().push((side, i));
                    Ok::<(), usize>(())
                }
            };
            let (a, b) = alternating_medians_ms(2, runs, record('a'), record('b')).unwrap();
            assert!(a >= 0.0 && b >= 0.0);
            seen.into_inner()
        };
        let runs = Runs { warmups: 1, timed: 2 };
        let order = [('a', 0), ('a', 1), ('a', 2), ('b', 0), ('b', 1), ('b', 2)];
        let second = order.map(|(side, i)| (side, i + 3));
        assert_eq!(calls([runs, runs]), [order, second].concat());
        // each side its own runs a block: here `b` four calls, `a` three
        let a = |k: usize| (0..3).map(move |i| ('a', 3 * k + i));
        let b = |k: usize| (0..4).map(move |i| ('b', 4 * k + i));
        let expected: Vec<_> = a(0).chain(b(0)).chain(a(1)).chain(b(1)).collect();
        assert_eq!(calls([runs, Runs { warmups: 1, timed: 3 }]), expected);
        let err = alternating_medians_ms(2, [runs, runs], |_| Ok(()), |i| if i == 4 { Err(i) } else { Ok(()) });
        assert_eq!(err, Err(4));
    }

    #[test]
    fn lines_have_the_documented_format() {
        let line = Measurement::new("gemm", "f64", 10.0).with_flops(2e9);
        assert_eq!(line.to_string(), "gemm f64 median_ms=10.000 gflops=200.0");
        let line = Measurement::new("long-causal", "tiled", 100.0).with_flops(17.2e9).relative_to_gemm(200.0);
        assert_eq!(line.to_string(), "long-causal tiled median_ms=100.000 gflops=172.0 of_gemm=0.86");
        assert_eq!(Measurement::new("a", "b", 1.0).relative_to_gemm(200.0).of_gemm, None);
        let line = Measurement::new("long-causal", "tiled", 1.5).with_peak_mib(2.5);
        assert_eq!(line.to_string(), "long-causal tiled median_ms=1.500 peak_mib=2.50");
    }

    #[test]
    fn resident_growth_sees_a_touched_allocation() {
        if status_kib("VmRSS").is_none() {
            return; // no procfs here
        }
        // 64 MiB, every page written: glibc maps it on its own and unmaps it on free
        let (sum, growth) = resident_growth(|| {
            let v = vec![1u8; 64 << 20];
            v.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>()
        });
        assert_eq!(sum, (64 << 20) / 4096);
        let growth = growth.unwrap();
        assert!((60.0..100.0).contains(&growth), "{growth} MiB");
    }
}
