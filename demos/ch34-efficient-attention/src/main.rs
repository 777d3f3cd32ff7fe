//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch34_efficient_attention::learner_evidence() {
        Ok(evidence) => print!("{}", ch34_efficient_attention::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
