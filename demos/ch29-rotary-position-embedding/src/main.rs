//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch29_rotary_position_embedding::learner_evidence() {
        Ok(evidence) => print!("{}", ch29_rotary_position_embedding::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
