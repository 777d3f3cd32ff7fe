//! What the demos' `learner_evidence()` functions share: one result type, and how a demo records
//! an input that the library must reject.
//!
//! ```
//! use demo_support::evidence::{DemoResult, rejection};
//! fn parse(text: &str) -> DemoResult<(&'static str, String)> {
//!     rejection("not a number", text.parse::<u32>())
//! }
//! assert_eq!(parse("x")?.1, "invalid digit found in string");
//! assert!(parse("7").is_err()); // an accepted input is the demo's failure
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::error::Error;
use std::fmt::Display;

/// The result of a demo's steps: any error ends the demo with its message.
pub type DemoResult<T> = Result<T, Box<dyn Error>>;

/// The message of an error the library must return, with the name of the case; an `Ok` is an
/// error of the demo (the library accepted an invalid input).
///
/// # Errors
/// `"{case}: the library accepted an invalid input"` when `result` is `Ok`.
pub fn rejection<T, E: Display>(case: &'static str, result: Result<T, E>) -> DemoResult<(&'static str, String)> {
    match result {
        Err(error) => Ok((case, error.to_string())),
        Ok(_) => Err(format!("{case}: the library accepted an invalid input").into()),
    }
}
