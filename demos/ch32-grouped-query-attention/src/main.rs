//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch32_grouped_query_attention::learner_evidence() {
        Ok(evidence) => print!("{}", ch32_grouped_query_attention::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
