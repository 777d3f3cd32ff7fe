//! Golden-file checking shared by the demos' tests.
//!
//! A demo's report is compared byte for byte with `expected/<demo>.txt`. On a mismatch the
//! failure shows a line diff (`-` expected, `+` actual) instead of two walls of text.
//! `UPDATE_EXPECTED=1` rewrites the file instead — only ever on purpose, never in CI.

use std::path::PathBuf;

/// `expected/<demo>.txt` at the workspace root.
pub fn expected_path(demo: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("expected").join(format!("{demo}.txt"))
}

/// The demos of the workspace (folder names under `demos/`), sorted.
pub fn demo_names() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("demos");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.path().join("Cargo.toml").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A readable line diff: the first differing lines with their numbers, at most `limit` of them.
pub fn line_diff(expected: &str, actual: &str, limit: usize) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.split('\n').collect(), actual.split('\n').collect());
    let mut out = String::new();
    let mut shown = 0;
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            if shown == limit {
                out.push_str("…\n");
                break;
            }
            let column = match (x, y) {
                (Some(x), Some(y)) => x.chars().zip(y.chars()).take_while(|(a, b)| a == b).count() + 1,
                _ => 1,
            };
            out.push_str(&format!(
                "line {} (first difference at column {column}):\n- {}\n+ {}\n",
                i + 1,
                x.unwrap_or(&"<missing>"),
                y.unwrap_or(&"<missing>")
            ));
            shown += 1;
        }
    }
    out
}

/// Compares `actual` with the golden file of `demo` (or rewrites it with `UPDATE_EXPECTED=1`).
///
/// # Errors
/// A message with the line diff when they differ, or when the file cannot be read or written.
pub fn check(demo: &str, actual: &str) -> Result<(), String> {
    let path = expected_path(demo);
    if std::env::var_os("UPDATE_EXPECTED").is_some_and(|v| v == "1") {
        return std::fs::write(&path, actual).map_err(|e| format!("cannot write {}: {e}", path.display()));
    }
    let expected = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if expected == actual {
        Ok(())
    } else {
        Err(format!(
            "{demo}: report differs from {} (rerun with UPDATE_EXPECTED=1 only if the change is intended)\n{}",
            path.display(),
            line_diff(&expected, actual, 12)
        ))
    }
}

/// Runs a demo binary with `args` and checks its standard output against the golden file.
///
/// # Errors
/// As [`check`], or when the binary cannot run or exits unsuccessfully.
pub fn check_binary(binary: &str, demo: &str) -> Result<(), String> {
    let out = std::process::Command::new(binary).output().map_err(|e| format!("cannot run {binary}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{demo} exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let stdout = String::from_utf8(out.stdout).map_err(|e| format!("{demo}: stdout is not UTF-8: {e}"))?;
    check(demo, &stdout)
}

/// `docs/figures/<demo>.svg` at the workspace root: the committed copy of a demo's figure.
pub fn figure_path(demo: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("docs").join("figures").join(format!("{demo}.svg"))
}

/// `docs/figures/thumbnails/<demo>.svg`: the committed copy of a demo's thumbnail.
pub fn thumbnail_path(demo: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs")
        .join("figures")
        .join("thumbnails")
        .join(format!("{demo}.svg"))
}

/// Compares `actual` with the committed figure of `demo`; the message says how to regenerate.
///
/// # Errors
/// A message naming the file and the first differing line when they differ, or when the file
/// cannot be read.
pub fn check_figure(demo: &str, actual: &str) -> Result<(), String> {
    check_drawing(demo, &figure_path(demo), actual)
}

/// Compares `actual` with the committed thumbnail of `demo`, as [`check_figure`] does.
///
/// # Errors
/// As [`check_figure`].
pub fn check_thumbnail(demo: &str, actual: &str) -> Result<(), String> {
    check_drawing(demo, &thumbnail_path(demo), actual)
}

fn check_drawing(demo: &str, path: &std::path::Path, actual: &str) -> Result<(), String> {
    let committed = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e} (run scripts/figures.sh to draw the figures)", path.display()))?;
    if committed == actual {
        Ok(())
    } else {
        Err(format!(
            "{demo}: the drawing differs from {} — if the change is intended, run scripts/figures.sh and commit \
             docs/figures\n{}",
            path.display(),
            line_diff(&committed, actual, 3)
        ))
    }
}

/// Runs a demo binary with `--figure` into a temporary file: standard output must still be the
/// golden report, the file a well-formed SVG document whose path is named on standard error.
///
/// # Errors
/// As [`check`], or what is wrong with the figure or the exit status.
pub fn check_binary_with_figure(binary: &str, demo: &str) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("{demo}-figure-{}.svg", std::process::id()));
    let out = std::process::Command::new(binary)
        .arg("--figure")
        .arg(&path)
        .output()
        .map_err(|e| format!("cannot run {binary}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{demo} --figure exited with {}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let stdout = String::from_utf8(out.stdout).map_err(|e| format!("{demo}: stdout is not UTF-8: {e}"))?;
    check(demo, &stdout)?;
    let svg = std::fs::read_to_string(&path).map_err(|e| format!("{demo}: no figure at {}: {e}", path.display()))?;
    std::fs::remove_file(&path).ok();
    demo_support::xml::check_well_formed(&svg).map_err(|e| format!("{demo}: the figure is not well formed: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains(&format!("figure written to {}", path.display())) {
        return Err(format!("{demo} --figure does not say where it wrote: {stderr:?}"));
    }
    Ok(())
}

mod manners;
pub use manners::check_command_line_manners;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_the_lines() {
        let d = line_diff("a\nb\nc\n", "a\nB\nc\nd\n", 5);
        assert!(d.contains("line 2 (first difference at column 1):\n- b\n+ B"), "{d}");
        assert!(d.contains("line 4:\n- \n+ d") || d.contains("line 4"), "{d}");
    }
}
