//! What every chapter's figure test checks: the document is well formed, carries the chapter's
//! title, is the same bytes when drawn twice, and changes when the data it draws changes.

use thiserror::Error;

use crate::fmt::escape;
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
}
