//! Heat maps: a matrix as a grid of shaded, labelled cells, and the colour scale that reads it.

use crate::fmt::fixed;
use crate::geom::text_width;
use crate::svg::{Stroke, Svg, TextStyle};

/// Fill of a hidden (masked) cell.
pub const MASKED: &str = "#d9d9d9";
/// The colour of the largest value of a sequential map.
pub const SEQUENTIAL: (u8, u8, u8) = (0x08, 0x45, 0x94);
/// The colours of the negative and positive ends of a diverging map.
pub const DIVERGING: [(u8, u8, u8); 2] = [(0x21, 0x66, 0xac), (0xb2, 0x18, 0x2b)];

/// Steps of a drawn colour scale.
const SCALE_STEPS: usize = 20;

/// How values become colours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shading {
    /// White at `min`, dark blue at `max` (probabilities, sizes).
    Sequential {
        /// The value drawn white.
        min: f64,
        /// The value drawn darkest.
        max: f64,
    },
    /// White at 0, blue down to `−limit`, red up to `+limit` (signed values).
    Diverging {
        /// The magnitude drawn darkest.
        limit: f64,
    },
}

impl Shading {
    /// The range `(low, high)` the shading covers.
    pub fn range(self) -> (f64, f64) {
        match self {
            Shading::Sequential { min, max } => (min, max),
            Shading::Diverging { limit } => (-limit, limit),
        }
    }

    /// `(colour, intensity in [0, 1])` of `value`.
    fn intensity(self, value: f64) -> ((u8, u8, u8), f64) {
        let ratio = |num: f64, den: f64| if den > 0.0 && num.is_finite() { (num / den).clamp(0.0, 1.0) } else { 0.0 };
        match self {
            Shading::Sequential { min, max } => (SEQUENTIAL, ratio(value - min, max - min)),
            Shading::Diverging { limit } => {
                let side = if value < 0.0 { DIVERGING[0] } else { DIVERGING[1] };
                (side, ratio(value.abs(), limit))
            }
        }
    }

    /// The fill of `value`, as `#rrggbb`.
    ///
    /// ```
    /// use demo_support::heat::Shading;
    /// let s = Shading::Sequential { min: 0.0, max: 1.0 };
    /// assert_eq!(s.fill(0.0), "#ffffff");
    /// assert_eq!(s.fill(1.0), "#084594");
    /// ```
    pub fn fill(self, value: f64) -> String {
        let ((r, g, b), t) = self.intensity(value);
        let mix = |c: u8| (255.0 + (f64::from(c) - 255.0) * t).round() as u8;
        format!("#{:02x}{:02x}{:02x}", mix(r), mix(g), mix(b))
    }

    /// Black or white, whichever reads on [`Shading::fill`] of `value`.
    pub fn ink(self, value: f64) -> &'static str {
        if self.intensity(value).1 > 0.55 { "white" } else { "#111111" }
    }
}

/// A matrix drawn as a grid: a title above, column labels over the grid, row labels to its left,
/// every cell shaded and labelled with its value; `None` cells are hidden (masked).
#[derive(Clone, Debug, PartialEq)]
pub struct HeatMap {
    /// Left edge of the whole map (row labels included).
    pub x: f64,
    /// Top edge of the whole map (title included).
    pub y: f64,
    /// Width of a cell.
    pub cell_width: f64,
    /// Height of a cell.
    pub cell_height: f64,
    /// The line above the grid.
    pub title: String,
    /// One label per row (e.g. `q0`).
    pub row_labels: Vec<String>,
    /// One label per column (e.g. `k0`).
    pub col_labels: Vec<String>,
    /// The values, row by row; `None` is a hidden cell.
    pub cells: Vec<Vec<Option<f64>>>,
    /// How values become colours.
    pub shading: Shading,
    /// Decimals of the cell labels.
    pub decimals: usize,
    /// The label of a hidden cell (e.g. `−∞` for a score, `masked` for a weight).
    pub masked_label: String,
    /// Write each cell's value in it (off for maps too dense to read them; the shading remains).
    pub cell_labels: bool,
}

/// `values` cut into rows of `columns`, every cell visible (`Some`).
///
/// ```
/// assert_eq!(demo_support::heat::grid(&[1.0, 2.0, 3.0, 4.0], 2), vec![vec![Some(1.0), Some(2.0)], vec![Some(3.0), Some(4.0)]]);
/// ```
pub fn grid(values: &[f64], columns: usize) -> Vec<Vec<Option<f64>>> {
    values.chunks(columns.max(1)).map(|row| row.iter().copied().map(Some).collect()).collect()
}

/// `prefix0, prefix1, …`: `n` row or column labels.
///
/// ```
/// assert_eq!(demo_support::heat::labels("k", 2), ["k0", "k1"]);
/// ```
pub fn labels(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

impl HeatMap {
    /// A map of probabilities at `(x, y)`: `values` in rows of `columns`, rows labelled `q0, q1, …`,
    /// columns `k0, k1, …`, 60 × 40 cells shaded from 0 (white) to 1, two decimals, hidden cells
    /// labelled `masked`. Change any field with struct update syntax.
    pub fn probabilities(x: f64, y: f64, title: &str, values: &[f64], columns: usize) -> Self {
        let cells = grid(values, columns);
        HeatMap {
            x,
            y,
            cell_width: 60.0,
            cell_height: 40.0,
            title: title.to_string(),
            row_labels: labels("q", cells.len()),
            col_labels: labels("k", columns),
            cells,
            shading: Shading::Sequential { min: 0.0, max: 1.0 },
            decimals: 2,
            masked_label: "masked".to_string(),
            cell_labels: true,
        }
    }

    /// Width of the row labels' column.
    fn label_width(&self) -> f64 {
        self.label_width_at(12.0)
    }

    /// Width of the row labels' column when they are `size` pixels tall.
    fn label_width_at(&self, size: f64) -> f64 {
        self.row_labels.iter().map(|l| text_width(l, size)).fold(0.0, f64::max) + 10.0
    }

    /// The left edge of the grid.
    pub fn grid_x(&self) -> f64 {
        self.x + self.label_width()
    }

    /// The top edge of the grid.
    pub fn grid_y(&self) -> f64 {
        self.y + 40.0
    }

    /// The width of the whole map.
    pub fn width(&self) -> f64 {
        let columns = self.cells.iter().map(Vec::len).max().unwrap_or(0);
        self.label_width() + columns as f64 * self.cell_width
    }

    /// The height of the whole map.
    pub fn height(&self) -> f64 {
        40.0 + self.cells.len() as f64 * self.cell_height
    }

    /// Draws the map.
    pub fn draw(&self, svg: &mut Svg) {
        let col_size = (self.cell_width * 0.6).clamp(8.0, 12.0);
        let cell_size = (self.cell_height * 0.4).clamp(9.0, 13.0);
        self.draw_sized(svg, TextSizes { title: 14.0, columns: col_size, rows: 12.0, cells: cell_size });
    }

    /// The left edge of the grid when [`HeatMap::draw_with_text`] draws it with `size`.
    pub fn grid_x_with_text(&self, size: f64) -> f64 {
        self.x + self.label_width_at(size)
    }

    /// Draws the map with every text `size` pixels tall (the title one pixel more): for a
    /// thumbnail, whose text must stay readable when the whole figure is small. The grid starts at
    /// [`HeatMap::grid_x_with_text`] and [`HeatMap::grid_y`].
    pub fn draw_with_text(&self, svg: &mut Svg, size: f64) {
        self.draw_sized(svg, TextSizes { title: size + 1.0, columns: size, rows: size, cells: size });
    }

    fn draw_sized(&self, svg: &mut Svg, sizes: TextSizes) {
        let (gx, gy) = (self.x + self.label_width_at(sizes.rows), self.grid_y());
        svg.text(self.x, self.y + 14.0, TextStyle::heading(sizes.title), &self.title);
        for (j, label) in self.col_labels.iter().enumerate() {
            let style = TextStyle::centered().size(sizes.columns);
            svg.text(gx + (j as f64 + 0.5) * self.cell_width, gy - 8.0, style, label);
        }
        let size = sizes.cells;
        for (i, row) in self.cells.iter().enumerate() {
            let cy = gy + i as f64 * self.cell_height;
            if let Some(label) = self.row_labels.get(i) {
                let style = TextStyle::right().size(sizes.rows);
                svg.text(gx - 6.0, cy + self.cell_height / 2.0 + sizes.rows / 3.0, style, label);
            }
            for (j, cell) in row.iter().enumerate() {
                let cx = gx + j as f64 * self.cell_width;
                let (fill, ink, label) = match cell {
                    Some(v) => (self.shading.fill(*v), self.shading.ink(*v), fixed(*v, self.decimals)),
                    None => (MASKED.to_string(), "#555555", self.masked_label.clone()),
                };
                svg.rect(cx, cy, self.cell_width, self.cell_height, &fill, Some(Stroke::solid("#ffffff", 1.0)));
                if !self.cell_labels {
                    continue;
                }
                let style = TextStyle::centered().size(size).color(ink);
                svg.text(cx + self.cell_width / 2.0, cy + self.cell_height / 2.0 + size * 0.35, style, &label);
            }
        }
    }
}

/// The font sizes of a heat map's texts.
#[derive(Clone, Copy, Debug)]
struct TextSizes {
    title: f64,
    columns: f64,
    rows: f64,
    cells: f64,
}

/// A vertical colour scale `height` pixels tall at `(x, y)` for `shading`, its low end at the
/// bottom, labelled at both ends and in the middle with `decimals` decimals, `label` above it.
pub fn draw_colour_scale(svg: &mut Svg, x: f64, y: f64, height: f64, shading: Shading, decimals: usize, label: &str) {
    draw_colour_scale_with_text(svg, x, y, height, shading, decimals, label, 12.0);
}

/// [`draw_colour_scale`] with its labels `size` pixels tall (for a thumbnail).
#[allow(clippy::too_many_arguments)]
pub fn draw_colour_scale_with_text(
    svg: &mut Svg,
    x: f64,
    y: f64,
    height: f64,
    shading: Shading,
    decimals: usize,
    label: &str,
    size: f64,
) {
    let (low, high) = shading.range();
    let step = height / SCALE_STEPS as f64;
    for s in 0..SCALE_STEPS {
        // the step's middle value, top step = high
        let value = high - (high - low) * (s as f64 + 0.5) / SCALE_STEPS as f64;
        svg.rect(x, y + s as f64 * step, 16.0, step + 0.5, &shading.fill(value), None);
    }
    svg.rect(x, y, 16.0, height, "none", Some(Stroke::solid("#777777", 1.0)));
    for (value, py) in [(high, y), ((low + high) / 2.0, y + height / 2.0), (low, y + height)] {
        svg.text(x + 22.0, py + size / 3.0, TextStyle::label().size(size), &fixed(value, decimals));
    }
    svg.text(x, y - 10.0, TextStyle::label().size(size), label);
}

/// The shaded strip of a horizontal key: `steps` cells from `shading`'s low end to its high end,
/// `width` pixels long and 12 tall at `(x, y)`, outlined.
fn draw_strip(svg: &mut Svg, (x, y): (f64, f64), width: f64, shading: Shading, steps: usize) {
    let (low, high) = shading.range();
    let step = width / steps as f64;
    for s in 0..steps {
        let value = low + (high - low) * (s as f64 + 0.5) / steps as f64;
        svg.rect(x + s as f64 * step, y, step + 0.5, 12.0, &shading.fill(value), None);
    }
    svg.rect(x, y, width, 12.0, "none", Some(Stroke::solid("#777777", 1.0)));
}

/// A horizontal colour key `width` pixels long at `(x, y)`, 12 steps, its two ends labelled on
/// the same line (`0.00 ▭ 1.00 weight`): the key of a thumbnail, where the vertical scale's labels
/// would be too small at 300 px.
pub fn draw_inline_key(svg: &mut Svg, (x, y): (f64, f64), width: f64, shading: Shading, decimals: usize, label: &str) {
    let (low, high) = shading.range();
    draw_strip(svg, (x, y), width, shading, 12);
    svg.text(x - 6.0, y + 11.0, TextStyle::right(), &fixed(low, decimals));
    svg.text(x + width + 6.0, y + 11.0, TextStyle::label(), &format!("{} {label}", fixed(high, decimals)));
}

/// A horizontal colour scale `width` pixels wide and 12 tall at `(x, y)` for `shading`, its low
/// end at the left, labelled below at both ends and in the middle with `decimals` decimals and
/// `size`-pixel text, `label` to its left (right-aligned): a key that fits under a heat map.
#[allow(clippy::too_many_arguments)]
pub fn draw_colour_bar(
    svg: &mut Svg,
    x: f64,
    y: f64,
    width: f64,
    shading: Shading,
    decimals: usize,
    label: &str,
    size: f64,
) {
    let (low, high) = shading.range();
    draw_strip(svg, (x, y), width, shading, SCALE_STEPS);
    let below = y + 12.0 + size + 2.0;
    svg.text(x, below, TextStyle::centered().size(size), &fixed(low, decimals));
    svg.text(x + width / 2.0, below, TextStyle::centered().size(size), &fixed((low + high) / 2.0, decimals));
    svg.text(x + width, below, TextStyle::centered().size(size), &fixed(high, decimals));
    if !label.is_empty() {
        svg.text(x - 8.0, y + 10.0, TextStyle::right().size(size), label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml::check_well_formed;

    fn map() -> HeatMap {
        HeatMap {
            x: 20.0,
            y: 50.0,
            cell_width: 60.0,
            cell_height: 40.0,
            title: "weights P".into(),
            row_labels: vec!["q0".into(), "q1".into()],
            col_labels: vec!["k0".into(), "k1".into()],
            cells: vec![vec![Some(1.0), None], vec![Some(0.25), Some(0.75)]],
            shading: Shading::Sequential { min: 0.0, max: 1.0 },
            decimals: 2,
            masked_label: "masked".into(),
            cell_labels: true,
        }
    }

    #[test]
    fn cells_are_shaded_labelled_and_masked() {
        let mut svg = Svg::new(400.0, 200.0, "t");
        let m = map();
        m.draw(&mut svg);
        let out = svg.finish();
        check_well_formed(&out).unwrap();
        assert!(out.contains(">0.25</text>") && out.contains(">0.75</text>") && out.contains(">masked</text>"));
        assert!(out.contains(&format!("fill=\"{MASKED}\"")));
        assert!(out.contains("fill=\"#084594\""), "the largest value is darkest");
        assert_eq!(m.height(), 120.0);
        assert!(m.width() > 120.0);
    }

    #[test]
    fn cells_can_go_unlabelled() {
        let mut svg = Svg::new(400.0, 200.0, "t");
        HeatMap { cell_labels: false, ..map() }.draw(&mut svg);
        let out = svg.finish();
        assert!(!out.contains(">0.25</text>") && !out.contains(">masked</text>"));
        assert!(out.contains(">q1</text>"), "row labels stay");
    }

    #[test]
    fn diverging_shading_is_white_at_zero_and_picks_a_side() {
        let s = Shading::Diverging { limit: 2.0 };
        assert_eq!(s.fill(0.0), "#ffffff");
        assert_eq!(s.fill(-2.0), "#2166ac");
        assert_eq!(s.fill(5.0), "#b2182b", "beyond the limit is clamped");
        assert_eq!(s.ink(0.1), "#111111");
        assert_eq!(s.ink(-1.9), "white");
        assert_eq!(Shading::Sequential { min: 1.0, max: 1.0 }.fill(1.0), "#ffffff", "an empty range stays white");
    }

    #[test]
    fn the_colour_bar_runs_from_low_to_high() {
        let mut svg = Svg::new(300.0, 100.0, "t");
        draw_colour_bar(&mut svg, 50.0, 20.0, 200.0, Shading::Sequential { min: 0.0, max: 1.0 }, 2, "weight", 12.0);
        let out = svg.finish();
        check_well_formed(&out).unwrap();
        assert!(out.contains(r##"<rect x="50.0" y="20.0" width="10.5" height="12.0" fill="#f9fafc"/>"##), "{out}");
        for label in [">0.00<", ">0.50<", ">1.00<", ">weight<"] {
            assert!(out.contains(label), "{label} in {out}");
        }
    }

    #[test]
    fn the_colour_scale_names_its_ends() {
        let mut svg = Svg::new(200.0, 300.0, "t");
        draw_colour_scale(&mut svg, 10.0, 40.0, 200.0, Shading::Diverging { limit: 1.5 }, 1, "value");
        let out = svg.finish();
        check_well_formed(&out).unwrap();
        for label in [">1.5<", ">0.0<", ">-1.5<", ">value<"] {
            assert!(out.contains(label), "{label} in {out}");
        }
    }
}
