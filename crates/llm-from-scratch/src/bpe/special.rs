//! Special tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, …) are found in the text *before*
//! anything else, and each becomes its own id, whole.
//!
//! A chat prompt is text with markers in it: `<|im_start|>user\nHi<|im_end|>`. Left to the
//! pre-tokenizer, the marker would be cut into `<|`, `im`, `_start`, `|>` like any other text, and
//! the model, which saw it as one id in training, would not recognise it. So the text is first cut
//! at every occurrence of a special token's spelling; the stretches between them are tokenized as
//! usual, and never see the markers (Hugging Face does the same with its added tokens).
//!
//! Where two spellings could match, the one that starts first wins, and of those starting at the
//! same place the longest. Ordinary text that merely resembles a marker (`<|im_start`) stays text.
//!
//! ```text
//! "a<|im_end|>\nb"  ->  Text("a")  Special(2)  Text("\nb")
//! ```

/// A stretch of the text: ordinary text, or the id of a special token found whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text to pre-tokenize and merge.
    Text(&'a str),
    /// A special token, by id.
    Special(usize),
}

/// The special tokens' spellings, longest first, so the first one that matches is the longest.
#[derive(Debug, Clone, Default)]
pub struct SpecialMatcher {
    /// `(spelling, id)`, sorted by decreasing length, then by id (so the order is fixed).
    by_length: Vec<(String, usize)>,
}

impl SpecialMatcher {
    /// A matcher for these `(spelling, id)` pairs (none of them empty).
    pub fn new(mut specials: Vec<(String, usize)>) -> Self {
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        SpecialMatcher { by_length: specials }
    }

    /// The longest special token whose spelling starts `text`, as `(id, length in bytes)`.
    fn match_at(&self, text: &str) -> Option<(usize, usize)> {
        self.by_length.iter().find(|(spelling, _)| text.starts_with(spelling.as_str())).map(|(s, id)| (*id, s.len()))
    }

    /// Cuts `text` into ordinary stretches and special tokens, left to right.
    pub fn split<'a>(&self, text: &'a str) -> Vec<Segment<'a>> {
        let mut segments = Vec::new();
        if self.by_length.is_empty() {
            if !text.is_empty() {
                segments.push(Segment::Text(text));
            }
            return segments;
        }
        let mut text_start = 0;
        let mut at = 0;
        while at < text.len() {
            if let Some((id, length)) = self.match_at(&text[at..]) {
                if text_start < at {
                    segments.push(Segment::Text(&text[text_start..at]));
                }
                segments.push(Segment::Special(id));
                at += length;
                text_start = at;
            } else {
                // step to the next character boundary
                at += text[at..].chars().next().map_or(1, char::len_utf8);
            }
        }
        if text_start < text.len() {
            segments.push(Segment::Text(&text[text_start..]));
        }
        segments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_markers() -> SpecialMatcher {
        SpecialMatcher::new(vec![
            ("<|endoftext|>".to_string(), 0),
            ("<|im_start|>".to_string(), 1),
            ("<|im_end|>".to_string(), 2),
            ("<a>".to_string(), 3),
            ("<a><b>".to_string(), 4),
        ])
    }

    #[test]
    fn markers_are_cut_out_whole() {
        use Segment::{Special, Text};
        let matcher = chat_markers();
        assert_eq!(
            matcher.split("<|im_start|>user\nHi<|im_end|>\n"),
            [Special(1), Text("user\nHi"), Special(2), Text("\n")]
        );
        assert_eq!(matcher.split("<|im_start|><|im_end|>"), [Special(1), Special(2)]);
        assert_eq!(matcher.split("a<|endoftext|>b"), [Text("a"), Special(0), Text("b")]);
    }

    #[test]
    fn leftmost_then_longest() {
        use Segment::{Special, Text};
        let matcher = chat_markers();
        // at the same start the longer spelling wins
        assert_eq!(matcher.split("<a><b>!"), [Special(4), Text("!")]);
        assert_eq!(matcher.split("<a><c>"), [Special(3), Text("<c>")]);
        // a partial marker is text
        assert_eq!(matcher.split("<|im_start and <|im_end"), [Text("<|im_start and <|im_end")]);
    }

    #[test]
    fn text_without_markers_is_one_segment() {
        assert_eq!(chat_markers().split("héllo 😀"), [Segment::Text("héllo 😀")]);
        assert_eq!(chat_markers().split(""), []);
        assert_eq!(SpecialMatcher::default().split("<|im_end|>"), [Segment::Text("<|im_end|>")]);
    }
}
