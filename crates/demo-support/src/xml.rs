//! A small well-formedness check for the documents this crate writes, so that tests need no XML
//! library: one root element named `svg`, every tag closed in order, attributes quoted, text and
//! attribute values free of raw `<` and of `&` that does not start an entity.
//!
//! It is not a validating parser (no DTDs, no namespaces, no CDATA); it accepts the subset of XML
//! the figures use and rejects the mistakes a hand-written writer can make.

use thiserror::Error;

/// Why a document is not well formed; `at` is a byte offset into it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum XmlError {
    /// The document ended inside a tag, comment or entity, or with elements left open.
    #[error("xml: document ends early ({what})")]
    UnexpectedEnd {
        /// What was still open.
        what: String,
    },
    /// A closing tag that does not match the element it closes.
    #[error("xml: </{found}> at byte {at} closes <{expected}>")]
    MismatchedTag {
        /// The open element.
        expected: String,
        /// The closing tag's name.
        found: String,
        /// Where.
        at: usize,
    },
    /// A closing tag with nothing open, or a second root element.
    #[error("xml: unexpected <{tag}> at byte {at} outside the root element")]
    OutsideRoot {
        /// The tag.
        tag: String,
        /// Where.
        at: usize,
    },
    /// Text (not whitespace) outside the root element.
    #[error("xml: text at byte {at} outside the root element")]
    TextOutsideRoot {
        /// Where.
        at: usize,
    },
    /// A tag that cannot be read: no name, an unquoted attribute, a raw `<` in a value.
    #[error("xml: malformed tag at byte {at}: {why}")]
    MalformedTag {
        /// Where the tag starts.
        at: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// An `&` that does not start `&name;` or `&#…;`.
    #[error("xml: unescaped '&' at byte {at}")]
    BadEntity {
        /// Where.
        at: usize,
    },
    /// The root element is not `<svg>`, or there is none.
    #[error("xml: the root element is {found:?}, not svg")]
    RootNotSvg {
        /// The root's name (empty: no element at all).
        found: String,
    },
}

/// Checks that `document` is a well-formed XML document whose single root element is `<svg>`.
///
/// ```
/// use demo_support::xml::check_well_formed;
/// assert!(check_well_formed("<svg><text>a &amp; b</text></svg>").is_ok());
/// assert!(check_well_formed("<svg><text>a & b</text></svg>").is_err());
/// assert!(check_well_formed("<svg><g></svg>").is_err());
/// ```
///
/// # Errors
/// The first defect found, as an [`XmlError`].
pub fn check_well_formed(document: &str) -> Result<(), XmlError> {
    let bytes = document.as_bytes();
    let mut open: Vec<&str> = Vec::new();
    let mut root: Option<&str> = None;
    let mut closed_root = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => {
                let start = i;
                if document[i..].starts_with("<!--") {
                    i = skip_past(document, i, "-->", "comment")?;
                } else if document[i..].starts_with("<?") {
                    i = skip_past(document, i, "?>", "processing instruction")?;
                } else if document[i..].starts_with("</") {
                    let end = skip_past(document, i, ">", "closing tag")?;
                    let name = document[i + 2..end - 1].trim_end();
                    match open.pop() {
                        Some(expected) if expected == name => {}
                        Some(expected) => {
                            return Err(XmlError::MismatchedTag {
                                expected: expected.to_string(),
                                found: name.to_string(),
                                at: start,
                            });
                        }
                        None => return Err(XmlError::OutsideRoot { tag: format!("/{name}"), at: start }),
                    }
                    closed_root = open.is_empty();
                    i = end;
                } else {
                    let (name, end, self_closing) = read_tag(document, i)?;
                    if open.is_empty() {
                        if root.is_some() {
                            return Err(XmlError::OutsideRoot { tag: name.to_string(), at: start });
                        }
                        root = Some(name);
                    }
                    if self_closing {
                        closed_root = open.is_empty();
                    } else {
                        open.push(name);
                    }
                    i = end;
                }
            }
            b'&' => i = check_entity(document, i)?,
            c => {
                if open.is_empty() && !c.is_ascii_whitespace() {
                    return Err(XmlError::TextOutsideRoot { at: i });
                }
                i += 1;
            }
        }
    }
    if let Some(name) = open.last() {
        return Err(XmlError::UnexpectedEnd { what: format!("<{name}> is not closed") });
    }
    match root {
        Some("svg") if closed_root => Ok(()),
        found => Err(XmlError::RootNotSvg { found: found.unwrap_or_default().to_string() }),
    }
}

/// The index just past the first `end` at or after `from`.
fn skip_past(document: &str, from: usize, end: &str, what: &str) -> Result<usize, XmlError> {
    document[from..]
        .find(end)
        .map(|k| from + k + end.len())
        .ok_or_else(|| XmlError::UnexpectedEnd { what: what.to_string() })
}

/// Reads an opening tag at `at`: `(name, index past it, self-closing)`.
fn read_tag(document: &str, at: usize) -> Result<(&str, usize, bool), XmlError> {
    let bytes = document.as_bytes();
    let is_name = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b':' | b'.');
    let mut i = at + 1;
    while i < bytes.len() && is_name(bytes[i]) {
        i += 1;
    }
    if i == at + 1 {
        return Err(XmlError::MalformedTag { at, why: "no element name" });
    }
    let name = &document[at + 1..i];
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        match bytes.get(i) {
            None => return Err(XmlError::UnexpectedEnd { what: format!("tag <{name}") }),
            Some(b'>') => return Ok((name, i + 1, false)),
            Some(b'/') if bytes.get(i + 1) == Some(&b'>') => return Ok((name, i + 2, true)),
            Some(&c) if is_name(c) => {
                let attr_start = i;
                while i < bytes.len() && is_name(bytes[i]) {
                    i += 1;
                }
                if attr_start == i || bytes.get(i) != Some(&b'=') {
                    return Err(XmlError::MalformedTag { at, why: "attribute without =" });
                }
                let quote = match bytes.get(i + 1) {
                    Some(&q @ (b'"' | b'\'')) => q,
                    _ => return Err(XmlError::MalformedTag { at, why: "unquoted attribute value" }),
                };
                i += 2;
                while i < bytes.len() && bytes[i] != quote {
                    match bytes[i] {
                        b'<' => return Err(XmlError::MalformedTag { at, why: "raw < in an attribute value" }),
                        b'&' => i = check_entity(document, i)?,
                        _ => i += 1,
                    }
                }
                if i >= bytes.len() {
                    return Err(XmlError::UnexpectedEnd { what: format!("attribute of <{name}>") });
                }
                i += 1;
                if bytes.get(i).is_some_and(|c| is_name(*c)) {
                    return Err(XmlError::MalformedTag { at, why: "no space between attributes" });
                }
            }
            Some(_) => return Err(XmlError::MalformedTag { at, why: "unexpected character in a tag" }),
        }
    }
}

/// Checks the entity starting with the `&` at `at`; returns the index past its `;`.
fn check_entity(document: &str, at: usize) -> Result<usize, XmlError> {
    let rest = &document[at + 1..];
    let end = rest.find(';').filter(|&k| k <= 10).ok_or(XmlError::BadEntity { at })?;
    let body = &rest[..end];
    let valid = matches!(body, "amp" | "lt" | "gt" | "quot" | "apos")
        || body.strip_prefix("#x").is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
        || body.strip_prefix('#').is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
    if valid { Ok(at + 1 + end + 1) } else { Err(XmlError::BadEntity { at }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_the_figures_write() {
        let doc = "<?xml version=\"1.0\"?>\n<!-- a figure -->\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
                   width='10'>\n<title>a &lt; b &#8730; &#x221a;</title>\n<rect x=\"0\" y=\"0\"/>\n\
                   <text x=\"1\">√d_h → &quot;P&quot;</text>\n</svg>\n";
        assert_eq!(check_well_formed(doc), Ok(()));
    }

    #[test]
    fn rejects_each_kind_of_defect() {
        type Expect = fn(&XmlError) -> bool;
        let cases: [(&str, Expect); 11] = [
            ("<svg><g></svg>", |e| matches!(e, XmlError::MismatchedTag { .. })),
            ("<svg><g>", |e| matches!(e, XmlError::UnexpectedEnd { .. })),
            ("<svg></svg></g>", |e| matches!(e, XmlError::OutsideRoot { .. })),
            ("<svg/><svg/>", |e| matches!(e, XmlError::OutsideRoot { .. })),
            ("<svg></svg>x", |e| matches!(e, XmlError::TextOutsideRoot { .. })),
            ("<svg><text>a & b</text></svg>", |e| matches!(e, XmlError::BadEntity { .. })),
            ("<svg><rect x=1/></svg>", |e| matches!(e, XmlError::MalformedTag { .. })),
            ("<svg><rect x=\"a<b\"/></svg>", |e| matches!(e, XmlError::MalformedTag { .. })),
            ("<svg><rect x=\"1\"y=\"2\"/></svg>", |e| matches!(e, XmlError::MalformedTag { .. })),
            ("<html></html>", |e| matches!(e, XmlError::RootNotSvg { .. })),
            ("", |e| matches!(e, XmlError::RootNotSvg { .. })),
        ];
        for (doc, expected) in cases {
            let error = check_well_formed(doc).expect_err(doc);
            assert!(expected(&error), "{doc}: {error}");
        }
    }

    #[test]
    fn errors_say_where() {
        let error = check_well_formed("<svg><a></b></svg>").unwrap_err();
        assert_eq!(error.to_string(), "xml: </b> at byte 8 closes <a>");
    }
}
