//! Axes, line charts, grouped bar charts and legends.
//!
//! A chart is drawn into an [`Area`] of the document (the plot itself; tick labels and axis labels
//! go around it, about 60 px to the left and 45 px below). Values outside an axis' range are drawn
//! on its edge, and a value a log axis cannot show (zero, negative, not finite) on its lower edge:
//! drawing never fails.

use crate::fmt::fixed;
pub use crate::geom::{Area, text_width};
use crate::svg::{Anchor, LABEL_SIZE, Stroke, Svg, TextStyle, color};

/// Light grey of grid lines.
const GRID: &str = "#dddddd";
/// Dark grey of axes.
const AXIS: &str = "#444444";

/// One axis: its label, its range, linear or base-10 logarithmic, and its labelled ticks.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// What the axis measures, with its unit.
    pub label: String,
    /// The value at the axis' start.
    pub min: f64,
    /// The value at the axis' end.
    pub max: f64,
    /// Logarithmic (base 10) instead of linear.
    pub log: bool,
    /// `(value, label)` of every tick.
    pub ticks: Vec<(f64, String)>,
}

impl Axis {
    /// A linear axis from `min` to `max` with `intervals + 1` evenly spaced ticks labelled with
    /// `decimals` decimals.
    pub fn linear(label: &str, min: f64, max: f64, intervals: usize, decimals: usize) -> Self {
        let n = intervals.max(1);
        let ticks = (0..=n)
            .map(|i| {
                let value = min + (max - min) * i as f64 / n as f64;
                (value, fixed(value, decimals))
            })
            .collect();
        Axis { label: label.to_string(), min, max, log: false, ticks }
    }

    /// A base-10 logarithmic axis from `min` to `max` (both positive), ticked at every power of
    /// ten in between, labelled `1`, `10`, … up to a million and `1e7`, `1e8`, … beyond.
    pub fn log10(label: &str, min: f64, max: f64) -> Self {
        let (low, high) = (min.max(f64::MIN_POSITIVE).log10().ceil() as i32, max.max(min).log10().floor() as i32);
        let ticks = (low..=high)
            .map(|k| {
                let label = if (0..=6).contains(&k) { format!("{}", 10u64.pow(k as u32)) } else { format!("1e{k}") };
                (10f64.powi(k), label)
            })
            .collect();
        Axis { label: label.to_string(), min, max, log: true, ticks }
    }

    /// The same axis with these ticks instead.
    pub fn with_ticks(self, ticks: Vec<(f64, String)>) -> Self {
        Axis { ticks, ..self }
    }

    /// Where `value` lies along the axis: 0 at `min`, 1 at `max`, clamped to `[0, 1]`.
    pub fn fraction(&self, value: f64) -> f64 {
        let map = |v: f64| if self.log { v.max(f64::MIN_POSITIVE).log10() } else { v };
        let (low, high) = (map(self.min), map(self.max));
        let fraction = if high > low { (map(value) - low) / (high - low) } else { 0.5 };
        if fraction.is_finite() { fraction.clamp(0.0, 1.0) } else { 0.0 }
    }
}

/// Draws the left and bottom axes of `area` with grid lines, tick labels and axis labels; the
/// x ticks are placed by `x` (`None` for a bar chart, whose categories label themselves).
pub fn draw_axes(svg: &mut Svg, area: Area, x: Option<&Axis>, y: &Axis) {
    for (value, label) in &y.ticks {
        let py = area.bottom() - y.fraction(*value) * area.height;
        svg.line(area.x, py, area.right(), py, Stroke::solid(GRID, 1.0));
        svg.text(area.x - 6.0, py + 4.0, TextStyle::right().size(12.0), label);
    }
    if let Some(x) = x {
        for (value, label) in &x.ticks {
            let px = area.x + x.fraction(*value) * area.width;
            svg.line(px, area.bottom(), px, area.bottom() + 5.0, Stroke::solid(AXIS, 1.0));
            svg.text(px, area.bottom() + 19.0, TextStyle::centered().size(12.0), label);
        }
        svg.text(area.x + area.width / 2.0, area.bottom() + 40.0, TextStyle::centered(), &x.label);
    }
    svg.line(area.x, area.y, area.x, area.bottom(), Stroke::solid(AXIS, 1.5));
    svg.line(area.x, area.bottom(), area.right(), area.bottom(), Stroke::solid(AXIS, 1.5));
    let widest = y.ticks.iter().map(|(_, l)| text_width(l, 12.0)).fold(0.0, f64::max);
    svg.vertical_text(area.x - widest - 18.0, area.y + area.height / 2.0, TextStyle::centered(), &y.label);
}

/// How an entry of a legend is marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swatch {
    /// A short line, solid or dashed (a line series).
    Line {
        /// Dashed.
        dashed: bool,
    },
    /// A filled square (a bar series, a region).
    Square,
}

/// One line of a legend.
#[derive(Clone, Debug, PartialEq)]
pub struct LegendEntry {
    /// The series' name.
    pub name: String,
    /// CSS colour.
    pub color: String,
    /// Its mark.
    pub swatch: Swatch,
}

/// Where a chart puts its legend inside the plot area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corner {
    /// Top left.
    TopLeft,
    /// Top right.
    TopRight,
    /// Bottom left.
    BottomLeft,
    /// Bottom right.
    BottomRight,
}

/// The size `(width, height)` a legend of `entries` takes.
pub fn legend_size(entries: &[LegendEntry]) -> (f64, f64) {
    let widest = entries.iter().map(|e| text_width(&e.name, LABEL_SIZE)).fold(0.0, f64::max);
    (widest + 50.0, entries.len() as f64 * 20.0 + 10.0)
}

/// A boxed legend with its top left corner at `(x, y)`, one entry per line.
pub fn draw_legend(svg: &mut Svg, x: f64, y: f64, entries: &[LegendEntry]) {
    if entries.is_empty() {
        return;
    }
    let (width, height) = legend_size(entries);
    svg.rect(x, y, width, height, "white", Some(Stroke::solid("#999999", 1.0)));
    for (i, entry) in entries.iter().enumerate() {
        let cy = y + 15.0 + i as f64 * 20.0;
        match entry.swatch {
            Swatch::Line { dashed } => {
                svg.line(x + 8.0, cy, x + 36.0, cy, Stroke { color: &entry.color, width: 2.5, dashed })
            }
            Swatch::Square => {
                svg.rect(x + 14.0, cy - 7.0, 14.0, 14.0, &entry.color, Some(Stroke::solid("#777777", 0.5)))
            }
        }
        svg.text(x + 42.0, cy + 4.5, TextStyle::label(), &entry.name);
    }
}

/// A legend on one line without a box, its first swatch's left edge at `x` and its text's
/// baseline at `y`, text `size` pixels tall (a thumbnail's or a wide figure's legend); returns
/// the width it took.
pub fn draw_legend_row(svg: &mut Svg, x: f64, y: f64, entries: &[LegendEntry], size: f64) -> f64 {
    let mut left = x;
    for entry in entries {
        let cy = y - size * 0.35;
        match entry.swatch {
            Swatch::Line { dashed } => {
                svg.line(left, cy, left + 22.0, cy, Stroke { color: &entry.color, width: 2.5, dashed })
            }
            Swatch::Square => svg.rect(left + 4.0, cy - 7.0, 14.0, 14.0, &entry.color, None),
        }
        svg.text(left + 28.0, y, TextStyle::label().size(size), &entry.name);
        left += 28.0 + text_width(&entry.name, size) + 16.0;
    }
    left - x - 16.0
}

/// [`draw_legend`] in a corner of `area`, 8 px from its edges.
pub fn draw_legend_in(svg: &mut Svg, area: Area, corner: Corner, entries: &[LegendEntry]) {
    let (width, height) = legend_size(entries);
    let x = match corner {
        Corner::TopLeft | Corner::BottomLeft => area.x + 8.0,
        Corner::TopRight | Corner::BottomRight => area.right() - width - 8.0,
    };
    let y = match corner {
        Corner::TopLeft | Corner::TopRight => area.y + 8.0,
        Corner::BottomLeft | Corner::BottomRight => area.bottom() - height - 8.0,
    };
    draw_legend(svg, x, y, entries);
}

/// One line of a [`LineChart`].
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// Its colour.
    pub color: String,
    /// `(x, y)` points, drawn in this order.
    pub points: Vec<(f64, f64)>,
    /// Dashed instead of solid.
    pub dashed: bool,
    /// A dot on every point.
    pub markers: bool,
    /// A line through the points (off: dots only, for values that are not a trajectory).
    pub line: bool,
}

impl Series {
    /// A solid series with dots, in palette colour `color_index`.
    pub fn new(name: &str, color_index: usize, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.to_string(),
            color: color(color_index).to_string(),
            points,
            dashed: false,
            markers: true,
            line: true,
        }
    }

    /// The same series as dots without a line.
    pub fn dots(self) -> Self {
        Series { line: false, markers: true, ..self }
    }

    /// The same series dashed.
    pub fn dashed(self) -> Self {
        Series { dashed: true, ..self }
    }
}

/// Several series over shared axes, with a legend in a corner.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    /// The plot area.
    pub area: Area,
    /// The horizontal axis.
    pub x: Axis,
    /// The vertical axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
}

impl LineChart {
    /// Draws axes, lines and the legend (top right).
    pub fn draw(&self, svg: &mut Svg) {
        self.draw_with_legend(svg, Corner::TopRight);
    }

    /// Draws axes, lines and the legend in `corner` (no legend for a single unnamed series).
    pub fn draw_with_legend(&self, svg: &mut Svg, corner: Corner) {
        self.draw_without_legend(svg);
        draw_legend_in(svg, self.area, corner, &self.legend());
    }

    /// The legend's entries (named series only), for a legend drawn elsewhere with [`draw_legend`].
    pub fn legend(&self) -> Vec<LegendEntry> {
        self.series
            .iter()
            .filter(|s| !s.name.is_empty())
            .map(|s| {
                let swatch = if s.line { Swatch::Line { dashed: s.dashed } } else { Swatch::Square };
                LegendEntry { name: s.name.clone(), color: s.color.clone(), swatch }
            })
            .collect()
    }

    /// Draws axes and lines, but no legend.
    pub fn draw_without_legend(&self, svg: &mut Svg) {
        let area = self.area;
        draw_axes(svg, area, Some(&self.x), &self.y);
        for s in &self.series {
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| {
                    (area.x + self.x.fraction(x) * area.width, area.bottom() - self.y.fraction(y) * area.height)
                })
                .collect();
            if s.line {
                svg.polyline(&points, Stroke { color: &s.color, width: 2.5, dashed: s.dashed });
            }
            if s.markers {
                let radius = if s.line { 3.5 } else { 5.0 };
                for &(px, py) in &points {
                    svg.circle(px, py, radius, &s.color);
                }
            }
        }
    }
}

/// One colour of a [`BarChart`]: a value per category.
#[derive(Clone, Debug, PartialEq)]
pub struct BarSeries {
    /// Its name in the legend.
    pub name: String,
    /// Its colour.
    pub color: String,
    /// One value per category.
    pub values: Vec<f64>,
    /// The text written above each bar (empty: none).
    pub labels: Vec<String>,
}

impl BarSeries {
    /// A series in palette colour `color_index` whose bars are labelled with `labels`.
    pub fn new(name: &str, color_index: usize, values: Vec<f64>, labels: Vec<String>) -> Self {
        BarSeries { name: name.to_string(), color: color(color_index).to_string(), values, labels }
    }
}

/// Grouped bars: one group per category, one bar per series inside each group.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    /// The plot area.
    pub area: Area,
    /// The groups' names, left to right.
    pub categories: Vec<String>,
    /// What the categories are (written below them).
    pub x_label: String,
    /// The value axis.
    pub y: Axis,
    /// The bars.
    pub series: Vec<BarSeries>,
}

impl BarChart {
    /// Draws axes, bars (from 0, or from the axis' edge nearest to 0), their labels, the category
    /// names and the legend in `corner`.
    pub fn draw(&self, svg: &mut Svg, corner: Corner) {
        self.draw_without_legend(svg);
        draw_legend_in(svg, self.area, corner, &self.legend());
    }

    /// The legend's entries, for a legend drawn elsewhere with [`draw_legend`].
    pub fn legend(&self) -> Vec<LegendEntry> {
        self.series
            .iter()
            .map(|s| LegendEntry { name: s.name.clone(), color: s.color.clone(), swatch: Swatch::Square })
            .collect()
    }

    /// Draws axes, bars, their labels and the category names, but no legend.
    pub fn draw_without_legend(&self, svg: &mut Svg) {
        let area = self.area;
        draw_axes(svg, area, None, &self.y);
        let groups = self.categories.len().max(1) as f64;
        let group_width = area.width / groups;
        let bar_width = group_width * 0.8 / self.series.len().max(1) as f64;
        // bars start at 0 (or at the axis' edge nearest to it): negative values hang down
        let baseline = area.bottom() - self.y.fraction(0.0) * area.height;
        for (c, category) in self.categories.iter().enumerate() {
            let left = area.x + c as f64 * group_width + group_width * 0.1;
            svg.text(left + group_width * 0.4, area.bottom() + 19.0, TextStyle::centered().size(12.0), category);
            for (s, series) in self.series.iter().enumerate() {
                let Some(&value) = series.values.get(c) else { continue };
                let end = area.bottom() - self.y.fraction(value) * area.height;
                let (top, bottom) = (end.min(baseline), end.max(baseline));
                let x = left + s as f64 * bar_width;
                svg.rect(x + 1.0, top, bar_width - 2.0, bottom - top, &series.color, None);
                if let Some(label) = series.labels.get(c).filter(|l| !l.is_empty()) {
                    let style = TextStyle { size: 11.0, anchor: Anchor::Middle, ..TextStyle::label() };
                    // above a bar that rises from the baseline, below one that hangs from it
                    let y = if end <= baseline { end - 4.0 } else { end + 13.0 };
                    svg.text(x + bar_width / 2.0, y, style, label);
                }
            }
        }
        svg.text(area.x + area.width / 2.0, area.bottom() + 40.0, TextStyle::centered(), &self.x_label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml::check_well_formed;

    const AREA: Area = Area { x: 100.0, y: 50.0, width: 600.0, height: 300.0 };

    #[test]
    fn a_linear_axis_ticks_evenly_and_clamps() {
        let axis = Axis::linear("x", 0.0, 2.0, 4, 1);
        let labels: Vec<&str> = axis.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0.0", "0.5", "1.0", "1.5", "2.0"]);
        assert_eq!(axis.fraction(0.5), 0.25);
        assert_eq!(axis.fraction(9.0), 1.0);
        assert_eq!(axis.fraction(f64::NAN), 0.0);
    }

    #[test]
    fn a_log_axis_ticks_powers_of_ten() {
        let axis = Axis::log10("bytes", 100.0, 1e8);
        let labels: Vec<&str> = axis.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["100", "1000", "10000", "100000", "1000000", "1e7", "1e8"]);
        assert!((axis.fraction(1e4) - 2.0 / 6.0).abs() < 1e-12);
        assert_eq!(axis.fraction(0.0), 0.0, "zero sits on the lower edge");
    }

    #[test]
    fn a_line_chart_draws_each_series_and_its_legend() {
        let mut svg = Svg::new(800.0, 420.0, "chart");
        LineChart {
            area: AREA,
            x: Axis::linear("step", 0.0, 4.0, 4, 0),
            y: Axis::linear("loss", 0.0, 1.0, 2, 1),
            series: vec![
                Series::new("a", 0, vec![(0.0, 1.0), (4.0, 0.0)]),
                Series::new("b", 1, vec![(0.0, 0.5), (4.0, 0.5)]).dashed(),
            ],
        }
        .draw(&mut svg);
        let out = svg.finish();
        check_well_formed(&out).unwrap();
        // (0, 1) is the top left corner of the area, (4, 0) its bottom right
        assert!(out.contains(r#"points="100.0,50.0 700.0,350.0""#), "{out}");
        assert_eq!(out.matches("<polyline").count(), 2);
        assert!(out.contains(">a</text>") && out.contains(">b</text>") && out.contains(">loss</text>"));
    }

    #[test]
    fn a_legend_row_lays_its_entries_side_by_side() {
        let mut svg = Svg::new(400.0, 100.0, "t");
        let entry = |name: &str, swatch| LegendEntry { name: name.into(), color: "#000000".into(), swatch };
        let width = draw_legend_row(
            &mut svg,
            10.0,
            50.0,
            &[entry("ab", Swatch::Square), entry("cd", Swatch::Line { dashed: true })],
            10.0,
        );
        let out = svg.finish();
        assert!(out.contains(r#"<text x="38.0" y="50.0" font-size="10.0""#), "{out}");
        assert!(out.contains(r#"<text x="94.0" y="50.0""#), "the second entry follows the first: {out}");
        assert_eq!(width, 96.0);
    }

    #[test]
    fn a_bar_chart_groups_bars_and_labels_them() {
        let mut svg = Svg::new(800.0, 420.0, "bars");
        BarChart {
            area: AREA,
            categories: vec!["MHA".into(), "GQA".into()],
            x_label: "layout".into(),
            y: Axis::linear("bytes", 0.0, 10.0, 2, 0),
            series: vec![
                BarSeries::new("params", 0, vec![10.0, 5.0], vec!["10".into(), "5".into()]),
                BarSeries::new("cache", 1, vec![8.0, 2.0], vec![]),
            ],
        }
        .draw(&mut svg, Corner::TopRight);
        let out = svg.finish();
        check_well_formed(&out).unwrap();
        // group width 300, bar width 120: the first bar spans 130..250 and reaches the top
        assert!(out.contains(r##"<rect x="131.0" y="50.0" width="118.0" height="300.0" fill="#0072b2"/>"##), "{out}");
        assert!(out.contains(">MHA</text>") && out.contains(">layout</text>") && out.contains(">10</text>"));
    }

    #[test]
    fn negative_bars_hang_from_zero() {
        let mut svg = Svg::new(800.0, 420.0, "bars");
        BarChart {
            area: AREA,
            categories: vec!["up".into(), "down".into()],
            x_label: String::new(),
            y: Axis::linear("dot", -1.0, 1.0, 2, 0),
            series: vec![BarSeries::new("dot", 0, vec![1.0, -0.5], vec![])],
        }
        .draw(&mut svg, Corner::TopRight);
        let out = svg.finish();
        // zero is the middle of the area (y = 200); 1 reaches the top, −0.5 goes 75 px down
        assert!(out.contains(r#"y="50.0" width="238.0" height="150.0""#), "{out}");
        assert!(out.contains(r#"y="200.0" width="238.0" height="75.0""#), "{out}");
    }
}
