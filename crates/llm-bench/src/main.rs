//! `llm-bench`: the workload benchmarks of `docs/performance.md`.
//!
//! ```text
//! cargo run --release --locked -p llm-bench -- <workload> [--threads N] [--kernels TARGET]
//! ```
//!
//! First prints a line naming the machine — `machine cpu="<model>" threads=<N> simd=<features>
//! kernels=<op>:<target>,...` — then one line per measured variant,
//! `<workload> <variant> median_ms=<float> [gflops=<float> [of_gemm=<float>]] [peak_mib=<float>]`,
//! each the median of several runs after warm-ups. `of_gemm` (`mha-train`, `long-causal`) is the
//! rate as a fraction of the 1024³ matrix product's on the same target, the product timed in
//! blocks that alternate with the runs of the workload's line of issue 31 (`forward-backward`,
//! `tiled`), so that both rates come from the same minutes. The workload runs inside a rayon pool
//! of `N` threads (default: every core).
//!
//! `--kernels portable|avx2|avx512` (or `LLM_KERNELS`) forces the instruction set of every fast
//! kernel, the matrix product included (`llm_kernels::target`); a target this processor
//! cannot run is a usage error.
//!
//! At start-up the binary calls [`llm_from_scratch::kernels::allocator::keep_freed_memory`], so that
//! glibc reuses freed buffers instead of returning them to the system between runs, and its
//! global allocator, [`KeepLargeBuffers`], keeps the few buffers above glibc's reach (a prefill's
//! logits) for the next run; set `LLM_BENCH_MALLOC=default` to measure with the allocator's
//! defaults. `real-decode` instead calls `return_freed_memory` (the same module): it reports the
//! resident memory of a generating process.
//!
//! Exit codes: 0 on success, 1 when a workload fails (a library error or
//! a wrong result) or standard output cannot be written, 2 for a usage error (with what was wrong
//! and what is accepted), 141 when the reader of standard output went away.

mod measure;
mod real;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::CommandFactory;
use clap::error::ErrorKind;
use demo_support::cli::{self, Failure, RunArgs};
use llm_from_scratch::gguf::{MODEL_ENV, model_path_from_env};
use llm_from_scratch::kernels::allocator::KeepLargeBuffers;
use llm_from_scratch::kernels::gemm::micro_kernel_name;
use llm_from_scratch::kernels::target::{self, Target};
use workloads::{Outcome, Workload};

/// The workload benchmarks of docs/performance.md: a line naming the machine, then one line per
/// measured variant, each the median of several runs after warm-ups.
#[derive(Debug, PartialEq, clap::Parser)]
struct Cli {
    /// What to measure
    #[arg(value_enum, value_name = "WORKLOAD")]
    workload: Workload,
    /// The GGUF file of SmolLM2-135M-Instruct for real-prefill, real-decode and stream
    /// (scripts/fetch-model downloads it) [default: $LLM_MODEL, else the file scripts/fetch-model writes]
    #[arg(long, value_name = "PATH", value_parser = model_file)]
    model: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

/// A path to an existing file.
fn model_file(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if path.is_file() { Ok(path) } else { Err("expected the path of a GGUF model file".to_string()) }
}

/// The first output line: the processor, the threads, its SIMD features and the kernel each fast
/// operation runs on.
fn machine_line(threads: usize, target: Target) -> String {
    let kernels: Vec<String> = kernels_for(target).iter().map(|(op, k)| format!("{op}:{k}")).collect();
    format!(
        "machine cpu=\"{}\" threads={threads} simd={} kernels={}",
        cpu_model(),
        target::features_found().join(","),
        kernels.join(",")
    )
}

/// The kernel each fast operation runs on when `target` is in force: the matrix product
/// (`gemm-f64`'s micro-kernels), the strip kernels of tiled attention, the exponential and
/// softmax, RoPE, and one-token decoding over a KV cache.
fn kernels_for(target: Target) -> Vec<(&'static str, &'static str)> {
    let mut ops = vec![("gemm", micro_kernel_name(target))];
    ops.extend(["strips", "softmax", "rope", "decode"].map(|op| (op, target.name())));
    ops
}

/// The processor's model name (`/proc/cpuinfo` on Linux), else the architecture.
fn cpu_model() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':'));
    model.map_or_else(|| std::env::consts::ARCH.to_string(), |(_, name)| name.trim().replace('"', "'"))
}

/// The system's allocator, keeping a few freed buffers of 32 MiB and more while
/// `keep_freed_memory` is in effect ([`KeepLargeBuffers`]).
#[global_allocator]
static ALLOCATOR: KeepLargeBuffers = KeepLargeBuffers;

fn main() -> ExitCode {
    cli::finish(measure_and_print(std::env::args_os()))
}

/// Parses `args`, measures the workload inside a pool of the asked threads and prints its lines.
fn measure_and_print(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<(), Failure> {
    let Cli { workload, model, run } = cli::parse_from("llm-bench", args)?;
    let model = match model {
        Some(path) => Some(path),
        None => match model_path_from_env() {
            Some(path) if !path.is_file() => {
                let message = format!("{MODEL_ENV}={}: expected the path of a GGUF model file", path.display());
                return Err(Failure::Usage(Cli::command().error(ErrorKind::InvalidValue, message)));
            }
            found => found,
        },
    };
    // the kernels as every binary takes them; the threads are this pool's, not the global one
    let target = RunArgs { threads: None, ..run }.apply()?;
    // glibc would otherwise return the buffers of each step to the system and fault them in again
    // in the next (see `llm_kernels::allocator`); LLM_BENCH_MALLOC=default measures without
    // (real-decode does the opposite: it reports the resident memory of a generating process,
    // so the large buffers of its prefill are returned when freed)
    if std::env::var_os("LLM_BENCH_MALLOC").is_none_or(|v| v != "default") {
        if workload == Workload::RealDecode {
            llm_from_scratch::kernels::allocator::return_freed_memory();
        } else {
            llm_from_scratch::kernels::allocator::keep_freed_memory();
        }
    }
    let threads = run.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| format!("cannot start {threads} threads: {e}"))?;
    cli::print(&format!("{}\n", machine_line(threads, target)))?;
    let lines = pool.install(|| {
        let lines = match workload.run(model.as_deref())? {
            Outcome::Measured(lines) => lines,
            Outcome::Skipped(why) => return Ok(format!("{why}\n")),
        };
        Ok::<_, String>(lines.iter().map(|line| format!("{line}\n")).collect::<String>())
    });
    let lines = lines.map_err(|message| format!("{} failed: {message}", workload.name()))?;
    cli::print(&lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        cli::parse_from("llm-bench", std::iter::once("llm-bench").chain(args.iter().copied())).map_err(|e| match e {
            Failure::Usage(e) => e.render().to_string(),
            other => other.to_string(),
        })
    }

    #[test]
    fn workloads_and_thread_counts_parse() {
        let run = |kernels: Option<Target>, threads| RunArgs { kernels: kernels.map(cli::KernelTarget), threads };
        let cli = |workload, run| Cli { workload, model: None, run };
        assert_eq!(parse(&["gemm", "--threads", "2"]), Ok(cli(Workload::Gemm, run(None, Some(2)))));
        assert_eq!(
            parse(&["--threads=1", "long-causal", "--kernels", "avx2"]),
            Ok(cli(Workload::LongCausal, run(Some(Target::Avx2), Some(1))))
        );
        assert_eq!(parse(&["--kernels=portable", "gemm"]), Ok(cli(Workload::Gemm, run(Some(Target::Portable), None))));
        let this_file = file!().replace("crates/llm-bench/", "");
        let parsed = parse(&["real-decode", "--model", &this_file]).map(|c| c.model);
        assert_eq!(parsed, Ok(Some(PathBuf::from(&this_file))));
        for name in [
            "gemm",
            "mha-train",
            "decode",
            "long-causal",
            "train-step",
            "train-text",
            "real-prefill",
            "real-decode",
            "stream",
        ] {
            let Ok(Cli { workload, .. }) = parse(&[name]) else {
                panic!("{name} does not parse");
            };
            assert_eq!(workload.name(), name);
        }
        assert!(parse(&["--help"]).unwrap_err().contains("Usage: llm-bench [OPTIONS] <WORKLOAD>"));
    }

    #[test]
    fn the_machine_line_names_the_processor_and_every_kernel() {
        let line = machine_line(2, Target::Portable);
        assert!(line.starts_with("machine cpu=\""), "{line}");
        assert!(line.contains(" threads=2 simd="), "{line}");
        assert!(line.contains("kernels=gemm:") && line.contains("strips:portable"), "{line}");
    }

    #[test]
    fn bad_arguments_say_what_was_wrong_and_what_is_accepted() {
        for (args, needle) in [
            (&["gemmm"][..], "invalid value 'gemmm' for '<WORKLOAD>'"),
            (
                &["gemmm"][..],
                "[possible values: gemm, mha-train, decode, long-causal, train-step, train-text, real-prefill, real-decode, stream]",
            ),
            (&["real-decode", "--model", "/nonexistent/model.gguf"][..], "expected the path of a GGUF model file"),
            (&["real-decode", "--model", "/"][..], "expected the path of a GGUF model file"),
            (&[][..], "the following required arguments were not provided"),
            (&["gemm", "--threads"][..], "a value is required for '--threads <N>'"),
            (&["gemm", "--threads", "0"][..], "expected a whole number from 1 to 1024"),
            (&["gemm", "--threads", "two"][..], "invalid value 'two'"),
            (&["gemm", "--threads=1", "--threads=2"][..], "cannot be used multiple times"),
            (&["gemm", "--fast"][..], "unexpected argument '--fast'"),
            (&["gemm", "decode"][..], "unexpected argument 'decode'"),
            (&["gemm", "--kernels", "sse9"][..], "[possible values: portable, avx2, avx512]"),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
