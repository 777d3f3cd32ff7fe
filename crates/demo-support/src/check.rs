//! What every chapter's figure test checks: the document is well formed, carries the chapter's
//! title, is the same bytes when drawn twice, and changes when the data it draws changes.

use thiserror::Error;

use crate::fmt::escape;
use crate::svg::THUMBNAIL_TEXT;
use crate::xml::{XmlError, check_well_formed};

/// Why a chapter's figure fails [`check_chapter_figure`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FigureCheckError {
    /// The document is not well-formed XML with an `<svg>` root.
    #[error("figure: {0}")]
    Xml(#[from] XmlError),
    /// The document has no `<title>` with the chapter's title.
    #[error("figure: no <title>{title}</title>")]
    MissingTitle {
        /// The expected title (escaped).
        title: String,
    },
    /// Drawing the same evidence twice gave different bytes.
    #[error("figure: two drawings of the same evidence differ")]
    NotDeterministic,
    /// A change of the evidence did not change the figure.
    #[error("figure: change {index} of the evidence leaves the figure unchanged")]
    Unchanged {
        /// The position of the change in the list given.
        index: usize,
    },
    /// A thumbnail's `width` is missing or outside 240‥300 px.
    #[error("thumbnail: width {width:?} is not between 240 and 300 px")]
    ThumbnailWidth {
        /// The `width` attribute of the root, as written.
        width: Option<String>,
    },
    /// A thumbnail holds text smaller than [`THUMBNAIL_TEXT`] (unreadable at its own size).
    #[error("thumbnail: a text of {size} px is smaller than the smallest readable size")]
    ThumbnailText {
        /// The `font-size` attribute, as written.
        size: String,
    },
}

/// The value of the first `name="…"` attribute in `document` (the root's, for a root attribute).
fn attribute<'a>(document: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = document.find(&key)? + key.len();
    document[start..].split('"').next()
}

/// Checks what a thumbnail adds to [`check_chapter_figure`]: its own width is 240‥300 px, and
/// every text is at least [`THUMBNAIL_TEXT`] pixels tall (its `viewBox` is its own size, so that
/// is the size it is read at).
///
/// ```
/// use demo_support::check::check_thumbnail;
/// use demo_support::svg::{Svg, TextStyle};
///
/// let (mut svg, top) = Svg::thumbnail(200.0, "Chapter 1 — a title: more");
/// svg.text(10.0, top + 20.0, TextStyle::label(), "readable");
/// assert!(check_thumbnail(&svg.finish()).is_ok());
/// let mut big = Svg::new(800.0, 200.0, "t");
/// assert!(check_thumbnail(&big.finish()).is_err());
/// ```
///
/// # Errors
/// [`FigureCheckError::ThumbnailWidth`] or [`FigureCheckError::ThumbnailText`].
pub fn check_thumbnail(document: &str) -> Result<(), FigureCheckError> {
    let width = attribute(document, "width");
    if !width.and_then(|w| w.parse::<f64>().ok()).is_some_and(|w| (240.0..=300.0).contains(&w)) {
        return Err(FigureCheckError::ThumbnailWidth { width: width.map(str::to_string) });
    }
    for piece in document.split(" font-size=\"").skip(1) {
        let size = piece.split('"').next().unwrap_or_default();
        if !size.parse::<f64>().is_ok_and(|s| s >= THUMBNAIL_TEXT) {
            return Err(FigureCheckError::ThumbnailText { size: size.to_string() });
        }
    }
    Ok(())
}

/// Draws `evidence` with `render` and checks the document: well formed, titled `title`, the same
/// bytes when drawn twice, and different after each of `changes` (each applied to a fresh copy).
///
/// ```
/// use demo_support::check::check_chapter_figure;
/// use demo_support::svg::Svg;
///
/// let render = |value: &f64| {
///     let mut svg = Svg::new(100.0, 50.0, "t");
///     svg.circle(*value, 10.0, 2.0, "black");
///     svg.finish()
/// };
/// let change: &dyn Fn(&mut f64) = &|v| *v += 1.0;
/// assert!(check_chapter_figure(&5.0, render, "t", &[change]).is_ok());
/// let no_change: &dyn Fn(&mut f64) = &|_| {};
/// assert!(check_chapter_figure(&5.0, render, "t", &[no_change]).is_err());
/// ```
///
/// # Errors
/// The first failed check, as a [`FigureCheckError`].
pub fn check_chapter_figure<E: Clone>(
    evidence: &E,
    render: impl Fn(&E) -> String,
    title: &str,
    changes: &[&dyn Fn(&mut E)],
) -> Result<(), FigureCheckError> {
    let document = render(evidence);
    check_well_formed(&document)?;
    let title = escape(title);
    if !document.contains(&format!("<title>{title}</title>")) {
        return Err(FigureCheckError::MissingTitle { title });
    }
    if render(evidence) != document {
        return Err(FigureCheckError::NotDeterministic);
    }
    for (index, change) in changes.iter().enumerate() {
        let mut changed = evidence.clone();
        change(&mut changed);
        if render(&changed) == document {
            return Err(FigureCheckError::Unchanged { index });
        }
    }
    Ok(())
}

/// The test every chapter's figure module declares: draws the chapter's evidence and runs
/// [`check_chapter_figure`] with the given changes of the evidence.
///
/// ```text
/// #[cfg(test)]
/// mod tests {
///     use super::*;
///     demo_support::chapter_figure_test!(crate::learner_evidence(), render_svg, TITLE, [
///         |e: &mut Evidence| e.top_weight_unscaled = 0.5,
///     ]);
/// }
/// ```
#[macro_export]
macro_rules! chapter_figure_test {
    ($evidence:expr, $render:expr, $title:expr, [$($change:expr),* $(,)?]) => {
        /// Well formed, titled, deterministic, and changed by each change of the data it draws.
        #[test]
        fn the_figure_is_well_formed_titled_deterministic_and_follows_the_data()
        -> Result<(), Box<dyn std::error::Error>> {
            let evidence = $evidence?;
            $crate::check::check_chapter_figure(&evidence, $render, $title, &[$(&$change),*])?;
            Ok(())
        }
    };
}

/// The test every chapter's thumbnail declares: [`check_chapter_figure`] and [`check_thumbnail`]
/// on the chapter's evidence drawn by its `render_thumbnail`.
///
/// ```text
/// demo_support::chapter_thumbnail_test!(crate::learner_evidence(), render_thumbnail, TITLE, [
///     |e: &mut Evidence| e.weights = e.unscaled_weights.clone(),
/// ]);
/// ```
#[macro_export]
macro_rules! chapter_thumbnail_test {
    ($evidence:expr, $render:expr, $title:expr, [$($change:expr),* $(,)?]) => {
        /// Well formed, titled, deterministic, changed by the data it draws, and small but readable.
        #[test]
        fn the_thumbnail_is_well_formed_deterministic_small_and_readable()
        -> Result<(), Box<dyn std::error::Error>> {
            let evidence = $evidence?;
            $crate::check::check_chapter_figure(&evidence, $render, $title, &[$(&$change),*])?;
            $crate::check::check_thumbnail(&$render(&evidence))?;
            Ok(())
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(value: &String) -> String {
        format!("<svg><title>{}</title><text>{value}</text></svg>", escape("A & B"))
    }

    #[test]
    fn each_check_can_fail() {
        let evidence = "x".to_string();
        assert_eq!(check_chapter_figure(&evidence, render, "A & B", &[&|v: &mut String| v.push('y')]), Ok(()));
        assert_eq!(
            check_chapter_figure(&evidence, render, "C", &[]),
            Err(FigureCheckError::MissingTitle { title: "C".into() })
        );
        assert!(matches!(check_chapter_figure(&"<".to_string(), render, "A & B", &[]), Err(FigureCheckError::Xml(_))));
        let unchanged: &dyn Fn(&mut String) = &|_| {};
        assert_eq!(
            check_chapter_figure(&evidence, render, "A & B", &[&|v: &mut String| v.push('z'), unchanged]),
            Err(FigureCheckError::Unchanged { index: 1 })
        );
        let counter = std::cell::Cell::new(0);
        let flaky = |_: &String| {
            counter.set(counter.get() + 1);
            format!("<svg><title>t</title><g>{}</g></svg>", counter.get())
        };
        assert_eq!(check_chapter_figure(&evidence, flaky, "t", &[]), Err(FigureCheckError::NotDeterministic));
    }

    #[test]
    fn a_thumbnail_must_be_narrow_and_its_text_large() {
        let doc = |width: &str, size: &str| {
            format!(r#"<svg xmlns="x" width="{width}" height="9"><text font-size="{size}">a</text></svg>"#)
        };
        assert_eq!(check_thumbnail(&doc("300.0", "13.0")), Ok(()));
        assert_eq!(
            check_thumbnail(&doc("800.0", "13.0")),
            Err(FigureCheckError::ThumbnailWidth { width: Some("800.0".into()) })
        );
        assert_eq!(check_thumbnail(&doc("280", "12.0")), Err(FigureCheckError::ThumbnailText { size: "12.0".into() }));
    }
}
