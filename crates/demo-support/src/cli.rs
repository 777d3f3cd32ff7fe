//! The command line every chapter demo shares: `chNN-<topic> [--figure out.svg]`.
//!
//! Without arguments a demo prints its report on standard output. With `--figure out.svg` it also
//! writes its figure to `out.svg` and still prints the same report: the figure never goes to
//! standard output, so the report stays comparable with the golden file. Anything else prints the
//! usage line on standard error and exits with status 2.

use std::error::Error;
use std::fmt::Display;
use std::path::PathBuf;
use std::process::ExitCode;

use thiserror::Error;

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Print the report.
    Report,
    /// Write the figure to this path, then print the report.
    Figure(PathBuf),
}

/// Arguments that are not `[]` or `[--figure PATH]`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unexpected arguments: {arguments:?}")]
pub struct UsageError {
    /// The arguments as given.
    pub arguments: Vec<String>,
}

/// Reads the arguments after the program's name.
///
/// ```
/// use demo_support::cli::{Command, parse_args};
/// assert_eq!(parse_args(&[]), Ok(Command::Report));
/// assert_eq!(parse_args(&["--figure".into(), "a.svg".into()]), Ok(Command::Figure("a.svg".into())));
/// assert!(parse_args(&["--figure".into()]).is_err());
/// ```
///
/// # Errors
/// [`UsageError`] for anything else.
pub fn parse_args(arguments: &[String]) -> Result<Command, UsageError> {
    match arguments {
        [] => Ok(Command::Report),
        [flag, path] if flag == "--figure" && !path.is_empty() && !path.starts_with("--") => {
            Ok(Command::Figure(PathBuf::from(path)))
        }
        _ => Err(UsageError { arguments: arguments.to_vec() }),
    }
}

/// The usage line of `program`.
pub fn usage(program: &str) -> String {
    format!("usage: {program} [--figure out.svg]")
}

/// Status 2, with the message on standard error, when `LLM_KERNELS` names a kernel target this
/// processor cannot run (or none at all); `None` when the kernels are fine. Every demo calls it
/// before any work.
pub fn refuse_bad_kernels() -> Option<ExitCode> {
    let error = llm_from_scratch::dispatch::configured().err()?;
    eprintln!("error: {error}");
    Some(ExitCode::from(2))
}

/// Runs a chapter demo with the process' arguments: parses them (usage on standard error and
/// status 2 if they are wrong, or if `LLM_KERNELS` names a kernel target this processor cannot run, before
/// any work), computes the evidence, writes the figure if asked
/// (`figure written to PATH` on standard error) and prints the report.
pub fn run_chapter<E, Err: Display>(
    program: &str,
    evidence: impl FnOnce() -> Result<E, Err>,
    report: impl FnOnce(&E) -> String,
    figure: impl FnOnce(&E) -> String,
) -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse_args(&arguments) {
        Ok(command) => command,
        Err(_) => {
            eprintln!("{}", usage(program));
            return ExitCode::from(2);
        }
    };
    if let Some(code) = refuse_bad_kernels() {
        return code;
    }
    let evidence = match evidence() {
        Ok(evidence) => evidence,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Command::Figure(path) = &command {
        if let Err(error) = write_figure(path, &figure(&evidence)) {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
        eprintln!("figure written to {}", path.display());
    }
    print!("{}", report(&evidence));
    ExitCode::SUCCESS
}

/// The `main` of a demo binary with options of its own: `parse` reads the arguments (`Ok(None)`
/// asks for help: `usage` goes to standard output, exit 0; `Err` is a usage error: one line on
/// standard error, exit 2), then `run` does the work (an error: one line on standard error,
/// exit 1).
///
/// ```
/// use std::process::ExitCode;
/// use demo_support::cli::main_with_options;
/// let parse = |args: &[String]| match args {
///     [] => Ok(Some(())),
///     [flag] if flag == "--help" => Ok(None),
///     _ => Err("unknown argument".to_string()),
/// };
/// let code = main_with_options(&["--bogus".to_string()], "usage: demo", parse, |_: &()| Ok(()));
/// assert_eq!(code, ExitCode::from(2));
/// assert_eq!(main_with_options(&[], "usage: demo", parse, |_: &()| Ok(())), ExitCode::SUCCESS);
/// ```
pub fn main_with_options<O>(
    args: &[String],
    usage: &str,
    parse: impl FnOnce(&[String]) -> Result<Option<O>, String>,
    run: impl FnOnce(&O) -> Result<(), Box<dyn Error>>,
) -> ExitCode {
    let options = match parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    if let Some(code) = refuse_bad_kernels() {
        return code;
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `svg` to `path`, naming the path in the error.
///
/// # Errors
/// The I/O error, with the path.
pub fn write_figure(path: &std::path::Path, svg: &str) -> Result<(), Box<dyn Error>> {
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_nothing_or_one_figure_path_is_accepted() {
        assert_eq!(parse_args(&args(&[])), Ok(Command::Report));
        assert_eq!(parse_args(&args(&["--figure", "out.svg"])), Ok(Command::Figure("out.svg".into())));
        for bad in [&["--figure"][..], &["--figure", ""], &["--figure", "--trace"], &["out.svg"], &["-x", "a"]] {
            assert_eq!(parse_args(&args(bad)), Err(UsageError { arguments: args(bad) }), "{bad:?}");
        }
        assert_eq!(usage("ch27"), "usage: ch27 [--figure out.svg]");
    }

    #[test]
    fn an_unwritable_path_is_an_error_that_names_it() {
        let error = write_figure(std::path::Path::new("/nonexistent-dir/x.svg"), "<svg/>").unwrap_err();
        assert!(error.to_string().starts_with("cannot write /nonexistent-dir/x.svg"), "{error}");
    }
}
