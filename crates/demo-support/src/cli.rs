//! The command-line manners every binary of the workspace shares: the eleven chapters,
//! `generate` and `llm-bench`.
//!
//! - One parser, `clap`'s derive: `--help` prints every flag with its default on standard output
//!   and exits 0; `--version` prints the version; a wrong flag or value prints what was wrong and
//!   what is accepted on standard error and exits 2.
//! - The same words for the same things: `--figure PATH`, `--kernels TARGET` ([`RunArgs`]),
//!   `--threads N`, `--seed N`, `--steps N`, `--quiet`.
//! - Output never panics: a reader that goes away (`| head -1`) ends the program quietly with
//!   status 141, the status of a program stopped by `SIGPIPE`; any other write error
//!   (`> /dev/full`) prints one line naming the output and the error, and exits 1 ([`Failure`]).
//!
//! - The work runs on a thread of the pool, started with the flags' threads: [`on_pool`].
//!
//! A chapter's `main` is one call to [`run_chapter`]; a binary with options of its own parses
//! them with [`parse`], computes through [`on_pool`] and ends with [`finish`]:
//!
//! ```no_run
//! use std::process::ExitCode;
//! use demo_support::cli::{self, Failure, RunArgs};
//!
//! /// Prints a greeting.
//! #[derive(clap::Parser)]
//! struct Cli {
//!     /// Whom to greet
//!     #[arg(long, default_value = "world")]
//!     name: String,
//!     #[command(flatten)]
//!     run: RunArgs,
//! }
//!
//! fn main() -> ExitCode {
//!     cli::finish((|| {
//!         let cli: Cli = cli::parse("hello")?;
//!         cli.run.apply()?;
//!         let greeting = cli::on_pool(|| Ok::<_, Failure>(format!("hello, {}\n", cli.name)))?;
//!         cli::print(&greeting)
//!     })())
//! }
//! ```

use std::error::Error;
use std::ffi::OsString;
use std::fmt::{self, Display};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, Parser, ValueEnum};
use llm_from_scratch::kernels::{self, Target};

/// The exit status of a program whose reader went away: 128 + `SIGPIPE` (13), what a shell
/// reports for a program the signal stopped.
pub const BROKEN_PIPE_STATUS: u8 = 141;

/// The most worker threads `--threads` accepts.
pub const MAX_THREADS: usize = 1024;

/// Why a binary stops early; [`finish`] turns it into the exit status and at most one line on
/// standard error.
#[derive(Debug)]
pub enum Failure {
    /// A wrong command line, or `--help`/`--version` (clap's rendering says which): status 2
    /// for errors, 0 for help and version.
    Usage(clap::Error),
    /// Standard output could not be written: 141 for a closed pipe, 1 otherwise.
    Output(io::Error),
    /// The work failed: status 1, with what went wrong (the error's message, so that a failure
    /// can come back from a thread of the pool: see [`on_pool`]).
    Run(String),
}

impl Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(error) => write!(f, "{error}"),
            Failure::Output(error) => write!(f, "cannot write to standard output: {error}"),
            Failure::Run(error) => write!(f, "{error}"),
        }
    }
}

impl<E: Into<Box<dyn Error>>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure::Run(error.into().to_string())
    }
}

/// A one-line message on standard error. A failed write is ignored: there is nowhere left to
/// report it, and it must not turn into a panic.
pub fn note(message: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{message}");
}

/// The exit status for `result`, after printing what went wrong (one line on standard error;
/// help and version on standard output; nothing for a closed pipe).
pub fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(error)) => match error.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => finish(print(&error.render().to_string())),
            _ => {
                let _ = write!(io::stderr().lock(), "{}", error.render());
                ExitCode::from(2)
            }
        },
        Err(Failure::Output(error)) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(BROKEN_PIPE_STATUS),
        Err(failure) => {
            note(format!("error: {failure}"));
            ExitCode::FAILURE
        }
    }
}

/// Runs a binary's work on a worker of the thread pool, after [`RunArgs::apply`] has started it
/// ([`llm_from_scratch::kernels::parallel::on_pool`]): a program's `main` is not one of the pool's
/// threads, and each parallel region it starts would otherwise wait for the pool and wake it
/// again (chapter 37's release run takes 0.79 of the time on the pool, `docs/performance.md`).
/// Nothing computed changes; a panic in `work` names the worker thread rather than `main`.
///
/// # Errors
/// What `work` returns.
pub fn on_pool<T: Send>(work: impl FnOnce() -> Result<T, Failure> + Send) -> Result<T, Failure> {
    kernels::parallel::on_pool(work)
}

/// Writes `text` to standard output and flushes it.
///
/// # Errors
/// [`Failure::Output`] when standard output cannot be written.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(Failure::Output)
}

/// Parses the process's arguments into `T`, with `program` as the name in the usage and help.
///
/// # Errors
/// [`Failure::Usage`] for a wrong command line, and for `--help` and `--version`.
pub fn parse<T: Parser>(program: &'static str) -> Result<T, Failure> {
    parse_from(program, std::env::args_os())
}

/// [`parse`] over the given arguments (the first is the program's name, as in `argv`).
///
/// # Errors
/// As [`parse`].
pub fn parse_from<T: Parser>(
    program: &'static str,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<T, Failure> {
    let command = T::command().name(program).bin_name(program).version(env!("CARGO_PKG_VERSION"));
    let mut matches = command.try_get_matches_from(args).map_err(Failure::Usage)?;
    T::from_arg_matches_mut(&mut matches).map_err(Failure::Usage)
}

/// A kernel target as `--kernels` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelTarget(pub Target);

impl ValueEnum for KernelTarget {
    fn value_variants<'a>() -> &'a [Self] {
        &[KernelTarget(Target::Portable), KernelTarget(Target::Avx2), KernelTarget(Target::Avx512)]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

/// A whole number of worker threads, 1 to [`MAX_THREADS`].
fn threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {MAX_THREADS}")),
    }
}

/// The flags of every binary that computes: which kernels, and how many threads.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct RunArgs {
    /// Instruction set of the fast kernels; every target prints the same numbers
    /// [default: $LLM_KERNELS, else the widest this processor runs]
    #[arg(long, value_name = "TARGET", value_enum)]
    pub kernels: Option<KernelTarget>,
    /// Worker threads; results do not depend on it [default: every core]
    #[arg(long, value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,
}

impl RunArgs {
    /// Forces the kernel target (else checks `LLM_KERNELS`) and starts the thread pool; call it
    /// before any work.
    ///
    /// # Errors
    /// [`Failure::Usage`] (status 2) when the processor cannot run the target or `LLM_KERNELS`
    /// names no target; [`Failure::Run`] when the threads cannot be started.
    pub fn apply(&self) -> Result<Target, Failure> {
        let target = match self.kernels {
            Some(KernelTarget(target)) => kernels::force(target).map_err(|e| e.to_string()),
            None => kernels::configured().map_err(|e| format!("{}: {e}", kernels::target::ENV_VAR)),
        }
        .map_err(|e| Failure::Usage(clap::Error::raw(ErrorKind::InvalidValue, format!("{e}\n"))))?;
        if let Some(n) = self.threads {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global()
                .map_err(|e| format!("cannot start {n} threads: {e}"))?;
        }
        Ok(target)
    }
}

/// The command line of a chapter: its figure, kernels and threads.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
pub struct ChapterArgs {
    /// Also draw the chapter's figure as an SVG file at PATH; the report still goes to standard
    /// output [default: no figure]
    #[arg(long, value_name = "PATH")]
    pub figure: Option<PathBuf>,
    /// Also draw the figure's key panel, 300 px wide with larger text (the README's gallery and
    /// the book's list of chapters), as an SVG file at PATH [default: none]
    #[arg(long, value_name = "PATH")]
    pub thumbnail: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub run: RunArgs,
}

impl ChapterArgs {
    /// Writes the figure and the thumbnail that were asked for, drawn from `evidence`.
    ///
    /// # Errors
    /// The I/O error of a file that cannot be written, with its path.
    pub fn draw<E>(
        &self,
        evidence: &E,
        figure: impl FnOnce(&E) -> String,
        thumbnail: impl FnOnce(&E) -> String,
    ) -> Result<(), Failure> {
        if let Some(path) = &self.figure {
            write_figure(path, &figure(evidence))?;
        }
        if let Some(path) = &self.thumbnail {
            write_figure(path, &thumbnail(evidence))?;
        }
        Ok(())
    }

    /// Whether a figure or a thumbnail was asked for.
    pub fn draws(&self) -> bool {
        self.figure.is_some() || self.thumbnail.is_some()
    }
}

/// Writes `svg` to `path` and says so on standard error (`figure written to PATH`).
///
/// # Errors
/// The I/O error, with the path.
pub fn write_figure(path: &Path, svg: &str) -> Result<(), Failure> {
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    note(format!("figure written to {}", path.display()));
    Ok(())
}

/// A chapter's two drawings: the full figure and its thumbnail.
#[derive(Clone, Copy, Debug)]
pub struct Drawings<E> {
    /// The figure, 800 px wide.
    pub figure: fn(&E) -> String,
    /// One key panel, 300 px wide.
    pub thumbnail: fn(&E) -> String,
}

/// The `main` of a chapter: parses [`ChapterArgs`] (with `about` as the help's first line),
/// applies the kernels and threads, computes the evidence on the pool ([`on_pool`]), writes the
/// figure and the thumbnail if asked and prints the report.
pub fn run_chapter<E: Send, Err: Into<Box<dyn Error>>>(
    program: &'static str,
    about: &'static str,
    evidence: impl FnOnce() -> Result<E, Err> + Send,
    report: impl FnOnce(&E) -> String,
    drawings: Drawings<E>,
) -> ExitCode {
    finish((|| {
        let args: ChapterArgs = parse_about(program, about, std::env::args_os())?;
        args.run.apply()?;
        let evidence = on_pool(|| evidence().map_err(Failure::from))?;
        args.draw(&evidence, drawings.figure, drawings.thumbnail)?;
        print(&report(&evidence))
    })())
}

/// [`parse_from`] with `about` as the first line of the help.
///
/// # Errors
/// As [`parse`].
pub fn parse_about<T: Parser>(
    program: &'static str,
    about: &'static str,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<T, Failure> {
    let command = T::command().name(program).bin_name(program).about(about).version(env!("CARGO_PKG_VERSION"));
    let mut matches = command.try_get_matches_from(args).map_err(Failure::Usage)?;
    T::from_arg_matches_mut(&mut matches).map_err(Failure::Usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chapter(args: &[&str]) -> Result<ChapterArgs, Failure> {
        parse_about("ch99", "a chapter", std::iter::once("ch99").chain(args.iter().copied()))
    }

    fn usage_error(args: &[&str]) -> String {
        match chapter(args) {
            Err(Failure::Usage(e)) => e.render().to_string(),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn a_chapter_takes_a_figure_kernels_and_threads() {
        assert_eq!(chapter(&[]).unwrap(), ChapterArgs { figure: None, thumbnail: None, run: RunArgs::default() });
        let all = chapter(&["--figure", "a.svg", "--kernels", "avx2", "--threads=3"]).unwrap();
        assert_eq!(all.figure, Some(PathBuf::from("a.svg")));
        assert_eq!(all.run, RunArgs { kernels: Some(KernelTarget(Target::Avx2)), threads: Some(3) });
    }

    #[test]
    fn wrong_flags_and_values_say_what_was_wrong_and_what_is_accepted() {
        assert!(usage_error(&["--nonsense"]).contains("unexpected argument '--nonsense'"));
        let kernels = usage_error(&["--kernels", "sse9"]);
        assert!(
            kernels.contains("invalid value 'sse9'") && kernels.contains("[possible values: portable, avx2, avx512]")
        );
        for n in ["0", "two", "1025"] {
            assert!(usage_error(&["--threads", n]).contains("expected a whole number from 1 to 1024"), "{n}");
        }
        assert!(usage_error(&["--figure"]).contains("a value is required for '--figure <PATH>'"));
    }

    #[test]
    fn help_lists_every_flag_with_its_default() {
        let Err(Failure::Usage(help)) = chapter(&["--help"]) else { panic!("--help parsed") };
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        let text = help.render().to_string();
        assert!(text.starts_with("a chapter\n\nUsage: ch99 [OPTIONS]"), "{text}");
        for flag in
            ["--figure <PATH>", "--thumbnail <PATH>", "--kernels <TARGET>", "--threads <N>", "--help", "--version"]
        {
            assert!(text.contains(flag), "{flag} missing from\n{text}");
        }
        assert_eq!(text.matches("[default: ").count(), 4, "{text}");
        let Err(Failure::Usage(version)) = chapter(&["--version"]) else { panic!("--version parsed") };
        assert_eq!(version.render().to_string(), format!("ch99 {}\n", env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn failures_map_to_their_statuses() {
        assert_eq!(finish(Ok(())), ExitCode::SUCCESS);
        let pipe = Failure::Output(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(finish(Err(pipe)), ExitCode::from(BROKEN_PIPE_STATUS));
        let full = Failure::Output(io::Error::from(io::ErrorKind::StorageFull));
        assert!(full.to_string().starts_with("cannot write to standard output: "));
        assert_eq!(finish(Err(full)), ExitCode::FAILURE);
        assert_eq!(finish(Err("boom".into())), ExitCode::FAILURE);
        assert_eq!(finish(Err(Failure::Usage(chapter(&["-x"]).unwrap_err_usage()))), ExitCode::from(2));
    }

    #[test]
    fn work_on_the_pool_returns_its_value_and_keeps_its_failures_statuses() {
        // from this thread (outside any pool) the work runs on a worker of the global pool
        assert!(on_pool(|| Ok(rayon::current_thread_index())).unwrap().is_some());
        let pipe = on_pool(|| -> Result<(), Failure> { Err(Failure::Output(io::ErrorKind::BrokenPipe.into())) });
        assert_eq!(finish(pipe), ExitCode::from(BROKEN_PIPE_STATUS));
        let usage = on_pool(|| -> Result<(), Failure> { Err(Failure::Usage(chapter(&["-x"]).unwrap_err_usage())) });
        assert_eq!(finish(usage), ExitCode::from(2));
        let run = on_pool(|| -> Result<(), Failure> { Err(std::fmt::Error.into()) }).unwrap_err();
        assert!(matches!(&run, Failure::Run(message) if message == &std::fmt::Error.to_string()), "{run}");
    }

    #[test]
    fn a_chapter_draws_the_figure_and_the_thumbnail_it_was_asked_for() {
        let dir = std::env::temp_dir().join(format!("demo-support-draw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (figure, thumbnail) = (dir.join("f.svg"), dir.join("t.svg"));
        let args = chapter(&["--thumbnail", thumbnail.to_str().unwrap()]).unwrap();
        assert!(args.draws());
        args.draw(&7, |n| format!("figure {n}"), |n| format!("thumbnail {n}")).unwrap();
        assert_eq!(std::fs::read_to_string(&thumbnail).unwrap(), "thumbnail 7");
        assert!(!figure.exists(), "only what was asked for is drawn");
        let both = chapter(&["--figure", figure.to_str().unwrap(), "--thumbnail", "/nonexistent-dir/t.svg"]).unwrap();
        let error = both.draw(&7, |n| format!("figure {n}"), |n| format!("thumbnail {n}")).unwrap_err();
        assert!(error.to_string().contains("/nonexistent-dir/t.svg"), "{error}");
        assert_eq!(std::fs::read_to_string(&figure).unwrap(), "figure 7");
        assert!(!chapter(&[]).unwrap().draws());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_figure_path_is_an_error_that_names_it() {
        let error = write_figure(Path::new("/nonexistent-dir/x.svg"), "<svg/>").unwrap_err();
        assert!(error.to_string().starts_with("cannot write /nonexistent-dir/x.svg"), "{error}");
    }

    trait UsageOf {
        fn unwrap_err_usage(self) -> clap::Error;
    }

    impl UsageOf for Result<ChapterArgs, Failure> {
        fn unwrap_err_usage(self) -> clap::Error {
            match self {
                Err(Failure::Usage(e)) => e,
                other => panic!("{other:?}"),
            }
        }
    }
}
