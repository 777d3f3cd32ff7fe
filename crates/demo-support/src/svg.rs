//! An SVG document and the shapes every figure is made of.
//!
//! Coordinates are in pixels of the `viewBox`, origin top left, `y` growing downwards. Every
//! number is written with one decimal ([`coord`]) and every text is escaped ([`escape`]).

use std::fmt::Write as _;

use crate::fmt::{coord, escape};
use crate::geom::{Area, wrap};

/// Colours of the series, distinguishable with the common colour-vision deficiencies
/// (Okabe & Ito): blue, vermillion, green, purple, orange, sky blue, yellow, black.
pub const PALETTE: [&str; 8] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#f0e442", "#000000"];

/// The colour of series `index` (the palette repeats after eight).
pub fn color(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// Font size of ordinary labels, in pixels: readable when the figure is shown 800 px wide.
pub const LABEL_SIZE: f64 = 13.0;
/// Font size of the figure's title.
pub const TITLE_SIZE: f64 = 18.0;
/// Width of a thumbnail (a figure's key panel for a gallery), in pixels.
pub const THUMBNAIL_WIDTH: f64 = 300.0;
/// The smallest font size of a thumbnail: readable at its own width.
pub const THUMBNAIL_TEXT: f64 = 13.0;
/// Font size of a thumbnail's heading.
pub const THUMBNAIL_TITLE_SIZE: f64 = 15.0;

/// Where a text's `x` lies: its start, its middle or its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// `x` is the left end of the text.
    Start,
    /// `x` is the middle of the text.
    Middle,
    /// `x` is the right end of the text.
    End,
}

impl Anchor {
    fn attribute(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// How a line or an outline is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stroke<'a> {
    /// CSS colour.
    pub color: &'a str,
    /// Width in pixels.
    pub width: f64,
    /// Dashed (`6 4`) instead of solid.
    pub dashed: bool,
}

impl<'a> Stroke<'a> {
    /// A solid line of `width` pixels.
    pub fn solid(color: &'a str, width: f64) -> Self {
        Stroke { color, width, dashed: false }
    }

    /// A dashed line of `width` pixels.
    pub fn dashed(color: &'a str, width: f64) -> Self {
        Stroke { color, width, dashed: true }
    }

    fn attributes(&self) -> String {
        let dash = if self.dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        format!(r#"stroke="{}" stroke-width="{}"{dash}"#, self.color, coord(self.width))
    }
}

/// A text's size, anchor, colour and weight; [`TextStyle::label`] is the default look.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextStyle<'a> {
    /// Font size in pixels.
    pub size: f64,
    /// Horizontal anchor.
    pub anchor: Anchor,
    /// CSS colour.
    pub color: &'a str,
    /// Bold.
    pub bold: bool,
}

impl TextStyle<'static> {
    /// Black, [`LABEL_SIZE`], anchored at its start.
    pub fn label() -> Self {
        TextStyle { size: LABEL_SIZE, anchor: Anchor::Start, color: "#222222", bold: false }
    }

    /// [`TextStyle::label`] centred on `x`.
    pub fn centered() -> Self {
        TextStyle { anchor: Anchor::Middle, ..Self::label() }
    }

    /// [`TextStyle::label`] ending at `x`.
    pub fn right() -> Self {
        TextStyle { anchor: Anchor::End, ..Self::label() }
    }

    /// A bold heading of `size` pixels, anchored at its start.
    pub fn heading(size: f64) -> Self {
        TextStyle { size, bold: true, ..Self::label() }
    }
}

impl<'a> TextStyle<'a> {
    /// The same style with another size.
    pub fn size(self, size: f64) -> Self {
        TextStyle { size, ..self }
    }

    /// The same style in another colour.
    pub fn color(self, color: &'a str) -> TextStyle<'a> {
        TextStyle { color, ..self }
    }
}

/// A standalone SVG document being drawn; [`Svg::finish`] closes it.
#[derive(Clone, Debug)]
pub struct Svg {
    body: String,
}

impl Svg {
    /// A `width × height` document with a white background, `title` as its `<title>` (what a
    /// browser shows as the tab's name) and as a bold heading along the top edge.
    pub fn new(width: f64, height: f64, title: &str) -> Self {
        let mut svg = Self::blank(width, height, title);
        svg.text(20.0, 30.0, TextStyle::heading(TITLE_SIZE), title);
        svg
    }

    /// A thumbnail [`THUMBNAIL_WIDTH`] wide and `height` tall, `title` as its `<title>`; its
    /// visible heading is the part of `title` before the first colon (`Chapter 34 — efficient
    /// attention`), wrapped onto as many lines as it needs. Returns the document and the `y` below
    /// the heading where the panel may start.
    pub fn thumbnail(height: f64, title: &str) -> (Self, f64) {
        let mut svg = Self::blank(THUMBNAIL_WIDTH, height, title);
        let heading = title.split(':').next().unwrap_or(title);
        // bold text runs a little wider than text_width's estimate
        let lines = wrap(heading, THUMBNAIL_TITLE_SIZE * 1.1, THUMBNAIL_WIDTH - 20.0);
        let spacing = THUMBNAIL_TITLE_SIZE + 4.0;
        svg.text_lines(10.0, 22.0, spacing, TextStyle::heading(THUMBNAIL_TITLE_SIZE), &lines);
        let top = 22.0 + lines.len() as f64 * spacing;
        (svg, top)
    }

    /// A white `width × height` document titled `title` (in `<title>` only).
    fn blank(width: f64, height: f64, title: &str) -> Self {
        let (w, h) = (coord(width), coord(height));
        let mut body = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
             font-family=\"DejaVu Sans, Verdana, sans-serif\">\n<title>{}</title>\n",
            escape(title)
        );
        let _ = writeln!(body, r#"<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>"#);
        Svg { body }
    }

    /// `content` at `(x, y)` (`y` is the baseline).
    pub fn text(&mut self, x: f64, y: f64, style: TextStyle, content: &str) {
        let weight = if style.bold { " font-weight=\"bold\"" } else { "" };
        let _ = writeln!(
            self.body,
            r#"<text x="{}" y="{}" font-size="{}" text-anchor="{}" fill="{}"{weight}>{}</text>"#,
            coord(x),
            coord(y),
            coord(style.size),
            style.anchor.attribute(),
            style.color,
            escape(content)
        );
    }

    /// One text per line from `(x, y)` down, `spacing` pixels apart (an empty line leaves a gap).
    pub fn text_lines<S: AsRef<str>>(&mut self, x: f64, y: f64, spacing: f64, style: TextStyle, lines: &[S]) {
        for (i, line) in lines.iter().enumerate() {
            if !line.as_ref().is_empty() {
                self.text(x, y + i as f64 * spacing, style, line.as_ref());
            }
        }
    }

    /// `content` written upwards (rotated by −90°) with its middle at `(x, y)`: a y-axis label.
    pub fn vertical_text(&mut self, x: f64, y: f64, style: TextStyle, content: &str) {
        let (x, y) = (coord(x), coord(y));
        let _ = writeln!(
            self.body,
            r#"<text x="{x}" y="{y}" font-size="{}" text-anchor="middle" fill="{}" transform="rotate(-90 {x} {y})">{}</text>"#,
            coord(style.size),
            style.color,
            escape(content)
        );
    }

    /// A rectangle filled with `fill` (`none` for an outline only), outlined by `stroke`.
    pub fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, fill: &str, stroke: Option<Stroke>) {
        let outline = stroke.map_or_else(String::new, |s| format!(" {}", s.attributes()));
        let _ = writeln!(
            self.body,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}"{outline}/>"#,
            coord(x),
            coord(y),
            coord(width.max(0.0)),
            coord(height.max(0.0))
        );
    }

    /// A straight line from `(x1, y1)` to `(x2, y2)`.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: Stroke) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {}/>"#,
            coord(x1),
            coord(y1),
            coord(x2),
            coord(y2),
            stroke.attributes()
        );
    }

    /// A polyline through `points`; nothing when there are fewer than two.
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: Stroke) {
        if points.len() < 2 {
            return;
        }
        let list: Vec<String> = points.iter().map(|&(x, y)| format!("{},{}", coord(x), coord(y))).collect();
        let _ = writeln!(
            self.body,
            r#"<polyline points="{}" fill="none" {} stroke-linejoin="round"/>"#,
            list.join(" "),
            stroke.attributes()
        );
    }

    /// A filled circle of radius `r` centred on `(cx, cy)`.
    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, fill: &str) {
        let _ =
            writeln!(self.body, r#"<circle cx="{}" cy="{}" r="{}" fill="{fill}"/>"#, coord(cx), coord(cy), coord(r));
    }

    /// A filled polygon through `points`.
    pub fn polygon(&mut self, points: &[(f64, f64)], fill: &str) {
        let list: Vec<String> = points.iter().map(|&(x, y)| format!("{},{}", coord(x), coord(y))).collect();
        let _ = writeln!(self.body, r#"<polygon points="{}" fill="{fill}"/>"#, list.join(" "));
    }

    /// An arrow from `(x1, y1)` to `(x2, y2)`, its head a filled triangle at the end. A zero-length
    /// arrow is drawn as a dot.
    pub fn arrow(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: Stroke) {
        let (dx, dy) = (x2 - x1, y2 - y1);
        let length = (dx * dx + dy * dy).sqrt();
        if length < 1e-9 {
            self.circle(x1, y1, stroke.width + 1.0, stroke.color);
            return;
        }
        let (ux, uy) = (dx / length, dy / length);
        let head = (4.0 * stroke.width + 4.0).min(length);
        // the shaft stops where the head begins, so a thick line does not poke through its tip
        let (bx, by) = (x2 - ux * head, y2 - uy * head);
        self.line(x1, y1, bx, by, stroke);
        let half = head * 0.5;
        self.polygon(&[(x2, y2), (bx - uy * half, by + ux * half), (bx + uy * half, by - ux * half)], stroke.color);
    }

    /// A box with `label` centred in it.
    pub fn labelled_box(&mut self, area: Area, fill: &str, stroke: Stroke, label: &str) {
        self.rect(area.x, area.y, area.width, area.height, fill, Some(stroke));
        let (cx, cy) = (area.x + area.width / 2.0, area.y + area.height / 2.0);
        self.text(cx, cy + LABEL_SIZE * 0.35, TextStyle::centered(), label);
    }

    /// Draws a finished document (an [`Svg::finish`]ed figure or thumbnail) scaled into the box
    /// at `(x, y)`, `width × height`, centred where its proportions differ. A string that is not
    /// such a document draws nothing.
    pub fn place(&mut self, x: f64, y: f64, width: f64, height: f64, document: &str) {
        let Some(open_end) = document.find('>') else { return };
        let (open, rest) = (&document[..open_end], &document[open_end + 1..]);
        let Some(view_box) = open.split("viewBox=\"").nth(1).and_then(|v| v.split('"').next()) else { return };
        if !open.starts_with("<svg") {
            return;
        }
        let _ = write!(
            self.body,
            "<svg x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" viewBox=\"{view_box}\">{rest}",
            coord(x),
            coord(y),
            coord(width),
            coord(height)
        );
        if !rest.ends_with('\n') {
            self.body.push('\n');
        }
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.body.push_str("</svg>\n");
        self.body
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml::check_well_formed;

    #[test]
    fn a_placed_document_is_nested_scaled_into_its_box() {
        let inner = Svg::new(300.0, 200.0, "inner").finish();
        let mut outer = Svg::new(800.0, 300.0, "outer");
        outer.place(10.0, 20.0, 150.0, 100.0, &inner);
        outer.place(0.0, 0.0, 1.0, 1.0, "not a document");
        let svg = outer.finish();
        assert!(
            svg.contains("<svg x=\"10.0\" y=\"20.0\" width=\"150.0\" height=\"100.0\" viewBox=\"0 0 300.0 200.0\">")
        );
        assert_eq!(svg.matches("<svg").count(), 2);
        check_well_formed(&svg).unwrap();
    }

    #[test]
    fn a_document_has_its_title_twice_and_closes() {
        let svg = Svg::new(800.0, 300.0, "A <title>").finish();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800.0\""));
        assert_eq!(svg.matches("A &lt;title&gt;").count(), 2);
        assert!(svg.ends_with("</svg>\n"));
        check_well_formed(&svg).unwrap();
    }

    #[test]
    fn shapes_write_fixed_decimals_and_escaped_text() {
        let mut svg = Svg::new(100.0, 100.0, "t");
        svg.line(0.0, 1.0 / 3.0, 10.0, -0.01, Stroke::dashed("#000000", 1.0));
        svg.text(5.0, 5.0, TextStyle::centered(), "a & b");
        svg.polyline(&[(0.0, 0.0)], Stroke::solid("red", 1.0));
        let out = svg.finish();
        assert!(out.contains(r#"<line x1="0.0" y1="0.3" x2="10.0" y2="0.0""#), "{out}");
        assert!(out.contains("stroke-dasharray=\"6 4\""));
        assert!(out.contains(">a &amp; b</text>"));
        assert!(!out.contains("polyline"), "one point draws no polyline");
        check_well_formed(&out).unwrap();
    }

    #[test]
    fn text_lines_step_down_and_skip_empty_ones() {
        let mut svg = Svg::new(100.0, 100.0, "t");
        svg.text_lines(5.0, 40.0, 20.0, TextStyle::label(), &["a", "", "c"]);
        let out = svg.finish();
        assert!(out.contains(r#"<text x="5.0" y="40.0""#) && out.contains(r#"<text x="5.0" y="80.0""#));
        assert!(!out.contains(r#"y="60.0""#), "the empty line draws nothing");
    }

    #[test]
    fn an_arrow_ends_in_a_head_at_its_tip() {
        let mut svg = Svg::new(100.0, 100.0, "t");
        svg.arrow(0.0, 0.0, 100.0, 0.0, Stroke::solid("#000000", 2.0));
        svg.arrow(5.0, 5.0, 5.0, 5.0, Stroke::solid("#000000", 2.0));
        let out = svg.finish();
        assert!(out.contains(r#"x2="88.0" y2="0.0""#), "{out}");
        assert!(out.contains(r#"<polygon points="100.0,0.0 88.0,6.0 88.0,-6.0""#), "{out}");
        assert!(out.contains("<circle cx=\"5.0\""));
    }

    #[test]
    fn a_thumbnail_is_300_wide_and_wraps_its_heading() {
        let (svg, top) = Svg::thumbnail(200.0, "Chapter 35 — multi-head latent attention: cache a latent");
        let out = svg.finish();
        assert!(out.contains(r#"width="300.0" height="200.0" viewBox="0 0 300.0 200.0""#), "{out}");
        assert!(out.contains("<title>Chapter 35 — multi-head latent attention: cache a latent</title>"));
        assert!(!out.contains(">Chapter 35 — multi-head latent attention</text>"), "too wide for one line");
        assert!(out.contains(">attention</text>") || out.contains("latent attention</text>"), "{out}");
        assert!(top > 41.0 && top < 80.0, "{top}");
        check_well_formed(&out).unwrap();
    }

    #[test]
    fn the_palette_repeats() {
        assert_eq!(color(0), color(PALETTE.len()));
        assert_ne!(color(0), color(1));
    }
}
