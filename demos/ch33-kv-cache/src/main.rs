//! Prints the chapter report (see the library for the evidence it is built from).

fn main() {
    match ch33_kv_cache::learner_evidence() {
        Ok(evidence) => print!("{}", ch33_kv_cache::render_report(&evidence)),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
