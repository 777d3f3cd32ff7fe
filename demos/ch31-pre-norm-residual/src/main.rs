//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch31_pre_norm_residual::learner_evidence() {
        Ok(evidence) => print!("{}", ch31_pre_norm_residual::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
