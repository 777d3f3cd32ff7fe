//! `llm-bench`: the workload benchmarks of `docs/performance.md`.
//!
//! ```text
//! cargo run --release --locked -p llm-bench -- <workload> [--threads N] [--kernels TARGET]
//! ```
//!
//! First prints a line naming the machine — `machine cpu="<model>" threads=<N> simd=<features>
//! kernels=<op>:<target>,...` — then one line per measured variant,
//! `<workload> <variant> median_ms=<float> [gflops=<float> [of_gemm=<float>]] [peak_mib=<float>]`,
//! each the median of several runs after warm-ups. `of_gemm` (attention workloads) is the rate
//! as a fraction of the 1024³ matrix product's, measured in the same run on the same target. The
//! workload runs inside a rayon pool of `N` threads (default: every core).
//!
//! `--kernels portable|avx2|avx512` (or `LLM_KERNELS`) forces the instruction set of every fast
//! kernel, the matrix product included (`llm_from_scratch::dispatch`); a target this processor
//! cannot run is a usage error.
//!
//! At start-up the binary calls [`llm_from_scratch::allocator::keep_freed_memory`], so that
//! glibc reuses freed buffers instead of returning them to the system between runs; set
//! `LLM_BENCH_MALLOC=default` to measure with the allocator's defaults.
//!
//! Exit codes: 0 on success, 1 when a workload fails (a library error or
//! a wrong result), 2 for a usage error.

mod measure;
mod workloads;

use std::process::ExitCode;

use llm_from_scratch::dispatch::{self, Target};
use workloads::{Outcome, Workload};

const USAGE: &str = "usage: llm-bench <workload> [--threads N] [--kernels TARGET]
workloads: gemm, mha-train, decode, long-causal, train-step, train-text
  --threads N        run inside a rayon pool of N threads (N >= 1; default: every core)
  --kernels TARGET   portable, avx2 or avx512 (default: LLM_KERNELS, else the widest available)";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Run { workload: Workload, threads: usize, kernels: Option<Target> },
}

/// Parses the arguments after the program name. Errors are messages for the user.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut workload = None;
    let mut threads = None;
    let mut kernels = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let kernels_value = match arg.as_str() {
            "--kernels" => Some(args.next().ok_or_else(|| "--kernels needs a value".to_string())?),
            _ => arg.strip_prefix("--kernels=").map(str::to_string),
        };
        if let Some(value) = kernels_value {
            if kernels.is_some() {
                return Err("--kernels given twice".into());
            }
            kernels = Some(Target::parse(&value).map_err(|e| e.to_string())?);
            continue;
        }
        let value = match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--threads" => Some(args.next().ok_or_else(|| "--threads needs a value".to_string())?),
            _ => arg.strip_prefix("--threads=").map(str::to_string),
        };
        if let Some(value) = value {
            if threads.is_some() {
                return Err("--threads given twice".into());
            }
            threads = Some(parse_threads(&value)?);
        } else if arg.starts_with('-') {
            return Err(format!("unknown option `{arg}`"));
        } else if let Some(first) = &workload {
            return Err(format!("one workload at a time (got `{}` and `{arg}`)", Workload::name(*first)));
        } else {
            workload = Some(Workload::from_name(&arg).ok_or_else(|| format!("unknown workload `{arg}`"))?);
        }
    }
    let workload = workload.ok_or_else(|| "no workload given".to_string())?;
    let threads = match threads {
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    Ok(Command::Run { workload, threads, kernels })
}

fn parse_threads(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("--threads wants a whole number >= 1, got `{value}`")),
    }
}

/// The first output line: the processor, the threads, its SIMD features and the kernel each fast
/// operation runs on.
fn machine_line(threads: usize, target: Target) -> String {
    let kernels: Vec<String> = dispatch::kernels_for(target).iter().map(|(op, k)| format!("{op}:{k}")).collect();
    format!(
        "machine cpu=\"{}\" threads={threads} simd={} kernels={}",
        cpu_model(),
        dispatch::features_found().join(","),
        kernels.join(",")
    )
}

/// The processor's model name (`/proc/cpuinfo` on Linux), else the architecture.
fn cpu_model() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':'));
    model.map_or_else(|| std::env::consts::ARCH.to_string(), |(_, name)| name.trim().replace('"', "'"))
}

fn main() -> ExitCode {
    let (workload, threads, kernels) = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run { workload, threads, kernels }) => (workload, threads, kernels),
        Err(message) => {
            eprintln!("llm-bench: error: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let target = match kernels.map_or_else(dispatch::configured, dispatch::force) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("llm-bench: error: {error}");
            return ExitCode::from(2);
        }
    };
    // glibc would otherwise return the buffers of each step to the system and fault them in again
    // in the next (see `llm_from_scratch::allocator`); LLM_BENCH_MALLOC=default measures without
    if std::env::var_os("LLM_BENCH_MALLOC").is_none_or(|v| v != "default") {
        llm_from_scratch::allocator::keep_freed_memory();
    }
    let pool = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("llm-bench: error: cannot start {threads} threads: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", machine_line(threads, target));
    let measured = pool.install(|| {
        let Outcome::Measured(lines) = workload.run()?;
        if !workload.is_attention() {
            return Ok(lines);
        }
        let gemm = workloads::gemm_gflops()?;
        Ok::<_, String>(lines.into_iter().map(|line| line.relative_to_gemm(gemm)).collect::<Vec<_>>())
    });
    match measured {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("llm-bench: {} failed: {message}", workload.name());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn workloads_and_thread_counts_parse() {
        assert_eq!(
            parse(&["gemm", "--threads", "2"]),
            Ok(Command::Run { workload: Workload::Gemm, threads: 2, kernels: None })
        );
        assert_eq!(
            parse(&["--threads=1", "long-causal", "--kernels", "avx2"]),
            Ok(Command::Run { workload: Workload::LongCausal, threads: 1, kernels: Some(Target::Avx2) })
        );
        assert_eq!(
            parse(&["--kernels=portable", "gemm", "--threads=1"]),
            Ok(Command::Run { workload: Workload::Gemm, threads: 1, kernels: Some(Target::Portable) })
        );
        for name in ["gemm", "mha-train", "decode", "long-causal", "train-step", "train-text"] {
            let Ok(Command::Run { workload, .. }) = parse(&[name]) else {
                panic!("{name} does not parse");
            };
            assert_eq!(workload.name(), name);
        }
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
    }

    #[test]
    fn the_machine_line_names_the_processor_and_every_kernel() {
        let line = machine_line(2, Target::Portable);
        assert!(line.starts_with("machine cpu=\""), "{line}");
        assert!(line.contains(" threads=2 simd="), "{line}");
        assert!(line.contains("kernels=gemm:") && line.contains("strips:portable"), "{line}");
    }

    #[test]
    fn bad_arguments_are_messages() {
        for (args, needle) in [
            (&["gemmm"][..], "unknown workload `gemmm`"),
            (&[][..], "no workload"),
            (&["gemm", "--threads"][..], "needs a value"),
            (&["gemm", "--threads", "0"][..], ">= 1"),
            (&["gemm", "--threads", "two"][..], "`two`"),
            (&["gemm", "--threads=1", "--threads=2"][..], "twice"),
            (&["gemm", "--fast"][..], "unknown option `--fast`"),
            (&["gemm", "decode"][..], "one workload"),
            (&["gemm", "--kernels"][..], "--kernels needs a value"),
            (&["gemm", "--kernels", "sse9"][..], "unknown kernel target \"sse9\""),
            (&["gemm", "--kernels=avx2", "--kernels=avx2"][..], "--kernels given twice"),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
