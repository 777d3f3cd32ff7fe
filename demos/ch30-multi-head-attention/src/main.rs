//! Prints the chapter report. `--trace` prints the 34-line figure trace instead;
//! `--figure out.svg` also writes the SVG figure to `out.svg`.

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = demo_support::cli::refuse_bad_kernels() {
        return code;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let evidence = match ch30_multi_head_attention::learner_evidence() {
        Ok(evidence) => evidence,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => print!("{}", ch30_multi_head_attention::render_report(&evidence)),
        ["--trace"] => {
            for line in ch30_multi_head_attention::render_diagram_trace(&evidence) {
                println!("{line}");
            }
        }
        ["--figure", path] => {
            if let Err(error) = std::fs::write(path, ch30_multi_head_attention::render_svg(&evidence)) {
                eprintln!("error: cannot write {path}: {error}");
                return ExitCode::FAILURE;
            }
            print!("{}", ch30_multi_head_attention::render_report(&evidence));
            eprintln!("figure written to {path}");
        }
        _ => {
            eprintln!("usage: ch30-multi-head-attention [--trace | --figure out.svg]");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
