//! Geometry shared by the shapes of [`crate::svg`] and the charts of [`crate::chart`]: a
//! rectangle of the document, and how wide a text is expected to be.

/// A rectangle of the document, in pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Area {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
}

impl Area {
    /// The right edge.
    pub fn right(&self) -> f64 {
        self.x + self.width
    }

    /// The bottom edge.
    pub fn bottom(&self) -> f64 {
        self.y + self.height
    }

    /// The horizontal middle.
    pub fn center_x(&self) -> f64 {
        self.x + self.width / 2.0
    }

    /// The vertical middle.
    pub fn center_y(&self) -> f64 {
        self.y + self.height / 2.0
    }
}

/// The approximate width of `text` at `size` pixels (sans-serif averages about 0.6 em per
/// character); used to size legends and boxes.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

/// `text` cut at spaces into lines no wider than `width` at `size` pixels (by [`text_width`]); a
/// word wider than `width` gets a line of its own.
///
/// ```
/// use demo_support::geom::wrap;
/// assert_eq!(wrap("one two three", 10.0, 40.0), ["one", "two", "three"]);
/// assert_eq!(wrap("one two three", 10.0, 500.0), ["one two three"]);
/// ```
pub fn wrap(text: &str, size: f64, width: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if text_width(&format!("{line} {word}"), size) <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_area_knows_its_edges_and_middle() {
        let a = Area { x: 10.0, y: 20.0, width: 100.0, height: 40.0 };
        assert_eq!((a.right(), a.bottom(), a.center_x(), a.center_y()), (110.0, 60.0, 60.0, 40.0));
    }

    #[test]
    fn wrapping_keeps_every_word_in_order() {
        let text = "Chapter 34 — efficient attention";
        let lines = wrap(text, 15.0, 200.0);
        assert_eq!(lines.join(" "), text);
        assert!(lines.iter().all(|l| text_width(l, 15.0) <= 200.0));
        assert!(wrap("", 12.0, 100.0).is_empty());
    }
}
