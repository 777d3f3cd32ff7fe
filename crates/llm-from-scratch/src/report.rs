//! Formatting used by every chapter report: six decimals, canonical zero, compact shapes.

use crate::tensor::Tensor;

/// `{:.6}` with negative zero (and anything that rounds to it) printed as `0.000000`.
///
/// ```
/// assert_eq!(llm_from_scratch::report::fmt_f64(-1e-9), "0.000000");
/// assert_eq!(llm_from_scratch::report::fmt_f64(0.5), "0.500000");
/// ```
pub fn fmt_f64(value: f64) -> String {
    let text = format!("{value:.6}");
    if text == "-0.000000" { "0.000000".to_string() } else { text }
}

/// `[a,b,…]` with [`fmt_f64`] entries.
pub fn fmt_values(values: &[f64]) -> String {
    let items: Vec<String> = values.iter().map(|&v| fmt_f64(v)).collect();
    format!("[{}]", items.join(","))
}

/// `shape:[..] values:[..]`, the way reports print a tensor.
pub fn fmt_tensor(tensor: &Tensor) -> String {
    format!("shape:{} values:{}", crate::fmt_shape(tensor.shape()), fmt_values(tensor.as_slice()))
}
