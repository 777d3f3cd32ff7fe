//! `llm-bench`: the workload benchmarks of `docs/performance.md`.
//!
//! ```text
//! cargo run --release --locked -p llm-bench -- <workload> [--threads N]
//! ```
//!
//! Prints one line per measured variant,
//! `<workload> <variant> median_ms=<float> [gflops=<float>] [peak_mib=<float>]`, each the median
//! of several runs after warm-ups. The workload runs inside a rayon pool of `N` threads (default:
//! every core).
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

use workloads::{Outcome, Workload};

const USAGE: &str = "usage: llm-bench <workload> [--threads N]
workloads: gemm, mha-train, decode, long-causal, train-step, train-text
  --threads N   run inside a rayon pool of N threads (N >= 1; default: every core)";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Run { workload: Workload, threads: usize },
}

/// Parses the arguments after the program name. Errors are messages for the user.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut workload = None;
    let mut threads = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
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
    Ok(Command::Run { workload, threads })
}

fn parse_threads(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("--threads wants a whole number >= 1, got `{value}`")),
    }
}

fn main() -> ExitCode {
    let (workload, threads) = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run { workload, threads }) => (workload, threads),
        Err(message) => {
            eprintln!("llm-bench: error: {message}\n{USAGE}");
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
    match pool.install(|| workload.run()) {
        Ok(Outcome::Measured(lines)) => {
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
        assert_eq!(parse(&["gemm", "--threads", "2"]), Ok(Command::Run { workload: Workload::Gemm, threads: 2 }));
        assert_eq!(
            parse(&["--threads=1", "long-causal"]),
            Ok(Command::Run { workload: Workload::LongCausal, threads: 1 })
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
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
