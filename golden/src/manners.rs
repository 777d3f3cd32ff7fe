//! The command-line manners every binary of the workspace keeps (`demo_support::cli`), checked by
//! running the binary as a user does.

use std::process::{Command, Output, Stdio};

/// What a run of the binary printed, for the messages.
fn shown(out: &Output) -> String {
    format!(
        "status {}, stdout {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(binary: &str, args: &[&str], stdout: Stdio) -> Result<Output, String> {
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {binary}: {e}"))
}

/// Checks, by running `binary` (called `name` in its usage line):
/// - `--help` prints the usage and every shared flag on standard output and exits 0;
/// - `--version` prints `name version` and exits 0;
/// - a wrong flag and a wrong value each say what was wrong (and, for the value, what is
///   accepted) on standard error, print nothing on standard output and exit 2;
/// - run with `writes` (arguments that print something to standard output), a reader that went
///   away before the first line ends the program quietly with status 141, and a full disk
///   (`/dev/full`, on Linux) with one line on standard error and status 1.
///
/// No case may panic (status 101).
///
/// # Errors
/// A message naming the case and what the binary did.
pub fn check_command_line_manners(binary: &str, name: &str, writes: &[&str]) -> Result<(), String> {
    let help = run(binary, &["--help"], Stdio::piped())?;
    let text = String::from_utf8_lossy(&help.stdout);
    let flags = ["--help", "--version", "--kernels <TARGET>", "--threads <N>", "[default: "];
    if help.status.code() != Some(0)
        || !help.stderr.is_empty()
        || !text.contains(&format!("Usage: {name} "))
        || flags.iter().any(|flag| !text.contains(flag))
    {
        return Err(format!("{name} --help: {}", shown(&help)));
    }
    let version = run(binary, &["--version"], Stdio::piped())?;
    if version.status.code() != Some(0)
        || version.stdout != format!("{name} {}\n", env!("CARGO_PKG_VERSION")).as_bytes()
    {
        return Err(format!("{name} --version: {}", shown(&version)));
    }
    for (args, needles) in [
        (
            &["--nonsense"][..],
            &["error: unexpected argument '--nonsense' found", "For more information, try '--help'."][..],
        ),
        (
            &["--kernels", "sse9"],
            &["error: invalid value 'sse9' for '--kernels <TARGET>'", "[possible values: portable, avx2, avx512]"],
        ),
        (
            &["--threads", "0"],
            &["error: invalid value '0' for '--threads <N>': expected a whole number from 1 to 1024"],
        ),
    ] {
        let out = run(binary, args, Stdio::piped())?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) || !out.stdout.is_empty() || needles.iter().any(|n| !stderr.contains(n)) {
            return Err(format!("{name} {}: {}", args.join(" "), shown(&out)));
        }
    }
    // the read end is closed before the program starts, so its first write meets a closed pipe
    let (reader, writer) = std::io::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    drop(reader);
    let closed = run(binary, writes, Stdio::from(writer))?;
    if closed.status.code() != Some(141) || !closed.stderr.is_empty() {
        return Err(format!("{name} {} | (closed): {}", writes.join(" "), shown(&closed)));
    }
    if cfg!(target_os = "linux") {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").map_err(|e| e.to_string())?;
        let out = run(binary, writes, Stdio::from(full))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(1)
            || stderr != "error: cannot write to standard output: No space left on device (os error 28)\n"
        {
            return Err(format!("{name} {} > /dev/full: {}", writes.join(" "), shown(&out)));
        }
    }
    Ok(())
}
