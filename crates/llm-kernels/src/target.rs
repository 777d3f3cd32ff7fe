//! Which instruction set the fast kernels run on: chosen once per process, forced on request.
//!
//! The hot loops — the strip kernels of tiled attention (forward and backward), the exponential
//! and softmax, RoPE, one-token decoding over a KV cache, the matrix product — are written once
//! and compiled for three [`Target`]s:
//!
//! | target | instructions | who runs it |
//! |---|---|---|
//! | [`Target::Avx512`] | AVX-512F with FMA, 8 values per register | recent Xeons, AMD Zen 4/5 |
//! | [`Target::Avx2`] | AVX2 with FMA, 4 values per register | x86-64 processors since 2013 |
//! | [`Target::Portable`] | plain Rust, vectorised by the compiler for the build's baseline (on x86-64 with the FMA instruction where the processor has it) | aarch64 (Apple silicon), anything else |
//!
//! Every target performs the same IEEE operations in the same order on every value — a fused
//! multiply-add is one exactly rounded operation whether a register or the C library computes
//! it — so **our kernels give bitwise the same results on all three** (tests hold them to it).
//! The matrix product is `gemm-f64`'s: forcing AVX2 on an AVX-512 processor runs its AVX2
//! micro-kernels, and the portable target leaves it to `gemm-f64`'s own choice (its scalar
//! kernels round differently; see [`crate::gemm`]). The golden reports are byte-identical on
//! every target (`.ci/run` runs them with the portable target forced): a learner's report does
//! not depend on their processor, only the time does. (On x86-64 the baseline instruction set has
//! no FMA instruction, so the portable code is compiled twice: with FMA, for every processor
//! since 2013, and for the baseline, where each fused multiply-add is a library call and the
//! kernels are many times slower. Both round each fused multiply-add once: the same bits. On
//! aarch64 FMA is part of the baseline.)
//!
//! By default the widest target the processor runs is used. `LLM_KERNELS=portable|avx2|avx512`
//! forces one for the whole process (read once, at the first kernel call); [`with_target`]
//! forces one for everything its closure runs. One rule holds for every kernel: its entry point
//! reads the target once ([`active`]) and hands it to the threads it uses; and a caller that runs
//! kernels from its own parallel loop (a softmax row, one product of a batch) reads the target
//! once too and hands it to its workers with [`Target::within`], so a forced target holds in
//! every worker. [`recorded`] tells which targets ran, for the tests that check this. Forcing a target the processor lacks is a
//! [`KernelsError`], never a crash: binaries call [`configured`] at start and stop with the
//! message; a library call that meets a bad `LLM_KERNELS` prints it once and uses the widest
//! target instead.
//!
//! ```
//! use llm_kernels::target::{self, Target};
//!
//! // the portable target runs everywhere
//! let inside = target::with_target(Target::Portable, target::active)?;
//! assert_eq!(inside, Target::Portable);
//! assert!(Target::available().contains(&Target::Portable));
//! // a name that is no target is a typed error
//! assert!(Target::parse("sse9").is_err());
//! # Ok::<(), target::KernelsError>(())
//! ```

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

use thiserror::Error;

/// The environment variable that forces a target for the whole process.
pub const ENV_VAR: &str = "LLM_KERNELS";

/// An instruction set the fast kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Plain Rust for the build's baseline instruction set; runs everywhere.
    Portable,
    /// x86-64 with AVX2 and FMA.
    Avx2,
    /// x86-64 with AVX-512F, AVX2 and FMA.
    Avx512,
}

impl Target {
    /// Every target, narrowest first.
    pub const ALL: [Target; 3] = [Target::Portable, Target::Avx2, Target::Avx512];

    /// The name `LLM_KERNELS` and `--kernels` take: `portable`, `avx2` or `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            Target::Portable => "portable",
            Target::Avx2 => "avx2",
            Target::Avx512 => "avx512",
        }
    }

    /// The target called `name` (as [`Target::name`] spells it).
    ///
    /// # Errors
    /// [`KernelsError::Unknown`] for any other name.
    pub fn parse(name: &str) -> Result<Target, KernelsError> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == name.trim())
            .ok_or_else(|| KernelsError::Unknown { name: name.to_string() })
    }

    /// Whether this processor has the instructions of the target.
    pub fn is_available(self) -> bool {
        match self {
            Target::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Target::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Target::Avx512 => Target::Avx2.is_available() && std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            Target::Avx2 | Target::Avx512 => false,
        }
    }

    /// The targets this processor runs, narrowest first.
    pub fn available() -> Vec<Target> {
        Target::ALL.into_iter().filter(|t| t.is_available()).collect()
    }

    /// The widest target this processor runs.
    pub fn widest() -> Target {
        static WIDEST: OnceLock<Target> = OnceLock::new();
        *WIDEST.get_or_init(|| Target::ALL.into_iter().rev().find(|t| t.is_available()).unwrap_or(Target::Portable))
    }

    /// This target if the processor runs it.
    ///
    /// # Errors
    /// [`KernelsError::Unavailable`] when it does not.
    pub fn check(self) -> Result<Target, KernelsError> {
        if self.is_available() { Ok(self) } else { Err(self.unavailable()) }
    }

    /// The error for this target on a processor that lacks it.
    fn unavailable(self) -> KernelsError {
        KernelsError::Unavailable { target: self, found: features_found().join(" ") }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A target that cannot be used.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum KernelsError {
    /// The name is none of `portable`, `avx2`, `avx512`.
    #[error("unknown kernel target {name:?}: expected portable, avx2 or avx512")]
    Unknown {
        /// The name given.
        name: String,
    },
    /// The processor lacks the target's instructions.
    #[error("this processor cannot run the {target} kernels (SIMD features found: {found})")]
    Unavailable {
        /// The target asked for.
        target: Target,
        /// The SIMD features the processor has, as [`features_found`] lists them.
        found: String,
    },
    /// [`force`] came after the first kernel call, which chose another target.
    #[error("cannot force the {target} kernels: the process already runs {chosen}")]
    AlreadyChosen {
        /// The target asked for.
        target: Target,
        /// The target in use.
        chosen: Target,
    },
}

/// The target `LLM_KERNELS` asks for, or the widest available when it is not set.
///
/// Read once per process; binaries call it at start so that a bad value stops them with its
/// message.
///
/// # Errors
/// [`KernelsError::Unknown`] or [`KernelsError::Unavailable`] for a bad `LLM_KERNELS`.
pub fn configured() -> Result<Target, KernelsError> {
    CONFIGURED
        .get_or_init(|| match std::env::var(ENV_VAR) {
            Ok(name) if !name.trim().is_empty() => Target::parse(&name).and_then(Target::check),
            _ => Ok(Target::widest()),
        })
        .clone()
}

/// The process's target, chosen at the first kernel call (or by [`force`] before it).
static CONFIGURED: OnceLock<Result<Target, KernelsError>> = OnceLock::new();

/// Forces `target` for the whole process, in place of `LLM_KERNELS` (what `llm-bench --kernels`
/// does). Call it before the first kernel runs; returns the target in force.
///
/// # Errors
/// [`KernelsError::Unavailable`] when the processor cannot run `target`;
/// [`KernelsError::AlreadyChosen`] when another target was already in use.
pub fn force(target: Target) -> Result<Target, KernelsError> {
    target.check()?;
    let chosen = CONFIGURED.get_or_init(|| Ok(target)).clone();
    match chosen {
        Ok(t) if t == target => Ok(t),
        Ok(t) => Err(KernelsError::AlreadyChosen { target, chosen: t }),
        // a bad LLM_KERNELS was read first: the process has been using the widest target
        Err(_) if target == Target::widest() => Ok(target),
        Err(_) => Err(KernelsError::AlreadyChosen { target, chosen: Target::widest() }),
    }
}

thread_local! {
    /// The target [`with_target`] forces on this thread, if any.
    static SCOPED: Cell<Option<Target>> = const { Cell::new(None) };
}

/// The target the next kernel call on this thread runs: the one [`with_target`] forces, else the
/// [`configured`] one. A bad `LLM_KERNELS` is reported on standard error once and the widest
/// available target is used.
#[inline]
pub fn active() -> Target {
    if let Some(target) = SCOPED.get() {
        return target;
    }
    configured().unwrap_or_else(|error| {
        static WARNED: OnceLock<()> = OnceLock::new();
        WARNED.get_or_init(|| eprintln!("warning: {ENV_VAR}: {error}; using {}", Target::widest()));
        Target::widest()
    })
}

/// Runs `f` with the kernels it calls on this thread forced to `target`, and on the worker
/// threads of their parallel loops (each kernel hands its target on; a caller's own parallel
/// loop carries it with [`Target::within`]).
///
/// # Errors
/// [`KernelsError::Unavailable`] when the processor cannot run `target`; `f` is not called.
pub fn with_target<R>(target: Target, f: impl FnOnce() -> R) -> Result<R, KernelsError> {
    target.check()?;
    Ok(target.within(f))
}

impl Target {
    /// Runs `f` with this target in force on this thread, then restores the one before: how a
    /// parallel loop hands the target its caller read ([`active`]) to its workers, so that the
    /// kernels a worker calls run what the caller runs.
    ///
    /// ```
    /// use llm_kernels::target::{Target, active, with_target};
    ///
    /// let seen = with_target(Target::Portable, || {
    ///     let target = active(); // read once, where the call begins
    ///     std::thread::scope(|s| s.spawn(move || target.within(active)).join().unwrap())
    /// })?;
    /// assert_eq!(seen, Target::Portable);
    /// # Ok::<(), llm_kernels::KernelsError>(())
    /// ```
    ///
    /// No availability check: a target the processor lacks runs the portable code (every kernel
    /// falls back to it), so this never fails; [`with_target`] is the checked entry.
    pub fn within<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Target>);
        impl Drop for Restore {
            fn drop(&mut self) {
                SCOPED.set(self.0);
            }
        }
        let _restore = Restore(SCOPED.replace(Some(self)));
        f()
    }
}

/// Whether the kernels note the targets they run (only while [`recorded`] runs).
static RECORDING: AtomicBool = AtomicBool::new(false);
/// The targets that ran while recording, one bit per target in [`Target::ALL`]'s order.
static RAN: AtomicU8 = AtomicU8::new(0);

/// Notes that a kernel runs on `target`, while [`recorded`] is listening: one relaxed read of a
/// flag otherwise.
#[inline]
pub(crate) fn note(target: Target) {
    if RECORDING.load(Ordering::Relaxed) {
        RAN.fetch_or(1 << target as u8, Ordering::Relaxed);
    }
}

/// Runs `f` and returns its result with the targets the kernels ran on meanwhile, in any thread
/// of the process, narrowest first. For tests: the record is process-wide, so a test that reads
/// it runs alone in its process (an integration test of its own); calls do not nest.
pub fn recorded<R>(f: impl FnOnce() -> R) -> (R, Vec<Target>) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    RAN.store(0, Ordering::SeqCst);
    RECORDING.store(true, Ordering::SeqCst);
    let out = f();
    RECORDING.store(false, Ordering::SeqCst);
    let ran = RAN.load(Ordering::SeqCst);
    (out, Target::ALL.into_iter().filter(|&t| ran & (1 << t as u8) != 0).collect())
}

/// The SIMD features of this processor that the targets use, e.g. `["avx2", "fma", "avx512f"]`
/// (`["neon"]` on aarch64).
pub fn features_found() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut found = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            found.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("fma") {
            found.push("fma");
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            found.push("avx512f");
        }
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        found.push("neon");
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_typed_errors() {
        for t in Target::ALL {
            assert_eq!(Target::parse(t.name()), Ok(t));
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!(Target::parse(" avx2\n"), Ok(Target::Avx2));
        assert!(matches!(Target::parse("sse9"), Err(KernelsError::Unknown { name }) if name == "sse9"));
    }

    #[test]
    fn the_portable_target_runs_everywhere_and_the_widest_is_available() {
        assert!(Target::Portable.is_available());
        assert_eq!(Target::available().first(), Some(&Target::Portable));
        assert!(Target::widest().is_available());
        if let Ok(t) = configured() {
            assert!(t.is_available());
        }
    }

    #[test]
    fn the_unavailable_error_names_the_target_and_what_the_processor_has() {
        // built directly: on a processor that runs every target, no call returns it
        let message = Target::Avx512.unavailable().to_string();
        assert!(message.starts_with("this processor cannot run the avx512 kernels"), "{message}");
        assert!(message.contains(&features_found().join(" ")), "{message}");
    }

    #[test]
    fn forcing_a_target_the_processor_lacks_is_an_error_and_runs_nothing() {
        // (every target is available on an AVX-512 processor: the loop is empty there)
        for t in Target::ALL.into_iter().filter(|t| !t.is_available()) {
            let mut ran = false;
            let got = with_target(t, || ran = true);
            assert!(matches!(got, Err(KernelsError::Unavailable { target, .. }) if target == t));
            assert!(!ran);
            assert!(got.unwrap_err().to_string().contains("cannot run"));
        }
    }

    #[test]
    fn forcing_after_the_first_kernel_call_is_an_error_unless_it_agrees() {
        let chosen = active();
        assert_eq!(force(chosen), Ok(chosen));
        for t in Target::available().into_iter().filter(|&t| t != chosen) {
            assert_eq!(force(t), Err(KernelsError::AlreadyChosen { target: t, chosen }));
        }
    }

    #[test]
    fn with_target_forces_this_thread_and_restores_after() {
        let before = active();
        for t in Target::available() {
            assert_eq!(with_target(t, active), Ok(t));
            let nested = with_target(t, || with_target(Target::Portable, active).map(|inner| (inner, active())));
            assert_eq!(nested, Ok(Ok((Target::Portable, t))));
            assert_eq!(active(), before);
        }
    }
}
