//! Numbers and text as they are written into a figure.

/// `value` with exactly `decimals` decimals; anything that rounds to zero is written without a
/// minus sign, and a value that is not finite is written as `0` so that a document never holds
/// `NaN` or `inf` in a coordinate.
///
/// ```
/// use demo_support::fmt::fixed;
/// assert_eq!(fixed(1.23456, 2), "1.23");
/// assert_eq!(fixed(-0.0001, 2), "0.00");
/// assert_eq!(fixed(f64::NAN, 1), "0.0");
/// ```
pub fn fixed(value: f64, decimals: usize) -> String {
    let value = if value.is_finite() { value } else { 0.0 };
    let text = format!("{value:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// A coordinate or a length: [`fixed`] with one decimal.
pub fn coord(value: f64) -> String {
    fixed(value, 1)
}

/// `text` with `&`, `<`, `>`, `"` and `'` replaced by their XML entities.
///
/// ```
/// assert_eq!(demo_support::fmt::escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// `bytes` in the largest binary unit that keeps the number at least 1: `1.5 KiB`, `256.0 MiB`.
///
/// ```
/// assert_eq!(demo_support::fmt::bytes(1536), "1.5 KiB");
/// assert_eq!(demo_support::fmt::bytes(512), "512 B");
/// ```
pub fn bytes(bytes: u128) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{} {}", fixed(value, 1), UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rounds_and_drops_the_sign_of_zero() {
        assert_eq!(fixed(2.0, 0), "2");
        assert_eq!(fixed(-2.5, 1), "-2.5");
        assert_eq!(fixed(-0.04, 1), "0.0");
        assert_eq!(fixed(f64::INFINITY, 2), "0.00");
        assert_eq!(coord(12.345), "12.3");
    }

    #[test]
    fn escape_leaves_plain_text_and_unicode_alone() {
        assert_eq!(escape("√d_h · softmax → P"), "√d_h · softmax → P");
        assert_eq!(escape("it's <b>"), "it&apos;s &lt;b&gt;");
    }

    #[test]
    fn bytes_pick_a_unit() {
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }
}
