//! What every binary of the workspace shares: plain SVG figures written by hand, and the
//! command-line manners of [`cli`] (`--help`, `--version`, `--figure PATH`, `--kernels TARGET`,
//! `--threads N`, and output that never panics on a closed pipe or a full disk).
//!
//! The figures are deterministic: the same evidence gives the same bytes on every run and every
//! machine, because every number is written with a fixed number of decimals ([`fmt::fixed`]) and
//! nothing depends on hashing, time or the environment. Text is XML-escaped ([`fmt::escape`]), and
//! [`xml::check_well_formed`] lets each demo's tests check the document it drew
//! ([`check::check_chapter_figure`] runs every check a chapter's figure must pass).
//!
//! ```
//! use demo_support::chart::{Area, Axis, LineChart, Series};
//! use demo_support::svg::Svg;
//!
//! let mut svg = Svg::new(800.0, 400.0, "Loss & accuracy");
//! LineChart {
//!     area: Area { x: 80.0, y: 60.0, width: 600.0, height: 280.0 },
//!     x: Axis::linear("step", 0.0, 10.0, 5, 0),
//!     y: Axis::linear("loss", 0.0, 2.0, 4, 1),
//!     series: vec![Series::new("train", 0, vec![(0.0, 2.0), (10.0, 0.5)])],
//! }
//! .draw(&mut svg);
//! let document = svg.finish();
//! assert!(document.contains("Loss &amp; accuracy"));
//! demo_support::xml::check_well_formed(&document).unwrap();
//! ```

#![warn(missing_docs)]

pub mod book;
pub mod chart;
pub mod check;
pub mod cli;
pub mod evidence;
pub mod fmt;
pub mod geom;
pub mod heat;
pub mod report;
pub mod svg;
pub mod xml;
