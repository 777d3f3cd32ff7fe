//! Formatting used by every chapter report: six decimals, canonical zero, compact shapes.
//!
//! Every demo (chapters 27–38) prints its `key=value` lines with these helpers, and the golden files
//! in `expected/` are compared byte for byte, so one formatting rule keeps every report stable:
//! [`fmt_f64`] prints six decimals and negative zero as `0.000000`.

use llm_from_scratch::GradcheckReport;
use llm_from_scratch::{Mask, Tensor};

/// `{:.6}` with negative zero (and anything that rounds to it) printed as `0.000000`.
///
/// ```
/// assert_eq!(demo_support::report::fmt_f64(-1e-9), "0.000000");
/// assert_eq!(demo_support::report::fmt_f64(0.5), "0.500000");
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

/// `[[a,b],[c,d]]`: rows of [`fmt_values`].
pub fn fmt_rows(rows: &[Vec<f64>]) -> String {
    let items: Vec<String> = rows.iter().map(|r| fmt_values(r)).collect();
    format!("[{}]", items.join(","))
}

/// `[0,1,2]`: indices or positions.
///
/// ```
/// assert_eq!(demo_support::report::fmt_indices(&[0, 0, 1]), "[0,0,1]");
/// ```
pub fn fmt_indices(values: &[usize]) -> String {
    let items: Vec<String> = values.iter().map(usize::to_string).collect();
    format!("[{}]", items.join(","))
}

/// `shape:[..] values:[..]`, the way reports print a tensor.
pub fn fmt_tensor(tensor: &Tensor) -> String {
    format!("shape:{} values:{}", llm_from_scratch::fmt_shape(tensor.shape()), fmt_values(tensor.as_slice()))
}

/// `65536` → `65,536`.
///
/// ```
/// assert_eq!(demo_support::report::fmt_thousands(131_072), "131,072");
/// ```
pub fn fmt_thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A mask's rows as `[.xx,..x,...]` (`x` = hidden, `.` = visible), row length = the last axis.
pub fn fmt_mask_rows(mask: &Mask) -> String {
    let cols = mask.shape().last().copied().unwrap_or(0).max(1);
    let rows: Vec<String> = mask
        .as_slice()
        .chunks(cols)
        .map(|row| row.iter().map(|&hidden| if hidden { 'x' } else { '.' }).collect())
        .collect();
    format!("[{}]", rows.join(","))
}

/// `delta:1e-6 tolerance:8e-6 x:12 w:16 coordinates:28 failures:0 passed:true`: a gradient check
/// as every chapter prints it (counts and the verdict; the errors themselves depend on rounding).
pub fn fmt_gradcheck(report: &GradcheckReport) -> String {
    let per_input: Vec<String> = report.tensors.iter().map(|t| format!("{}:{}", t.name, t.coordinates)).collect();
    format!(
        "delta:{:e} tolerance:{:e} {} coordinates:{} failures:{} passed:{}",
        report.delta,
        report.tolerance,
        per_input.join(" "),
        report.coordinates(),
        report.failures(),
        report.passed()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_print_as_the_reports_expect() {
        assert_eq!(fmt_thousands(0), "0");
        assert_eq!(fmt_thousands(999), "999");
        assert_eq!(fmt_thousands(2_362_368), "2,362,368");
        assert_eq!(fmt_mask_rows(&Mask::causal(2, 3, 1).unwrap()), "[..x,...]");
        let x = Tensor::new(&[2], vec![0.5, -1.0]).unwrap();
        let report = llm_from_scratch::gradcheck(&[("x", x)], &llm_from_scratch::GradcheckConfig::default(), |v| {
            v[0].mul(&v[0])
        })
        .unwrap();
        assert_eq!(fmt_gradcheck(&report), "delta:1e-6 tolerance:8e-6 x:2 coordinates:2 failures:0 passed:true");
        assert_eq!(fmt_values(&[-0.0, 1.0]), "[0.000000,1.000000]");
    }
}
