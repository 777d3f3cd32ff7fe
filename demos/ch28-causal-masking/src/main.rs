//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch28_causal_masking::learner_evidence() {
        Ok(evidence) => print!("{}", ch28_causal_masking::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
