//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch27_scaled_dot_product_attention::learner_evidence() {
        Ok(evidence) => print!("{}", ch27_scaled_dot_product_attention::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
