//! The pre-tokenizer: where text may be cut before any merge happens.
//!
//! BPE never merges across a cut, so the cuts decide what a token can be: ` world` (with its space)
//! is one piece, `world.` is two. SmolLM2's tokenizer (its `tokenizer.json`: a `Digits` step with
//! `individual_digits`, then `ByteLevel` with GPT-2's pattern; llama.cpp's `pre = smollm` does the
//! same) cuts in two steps:
//!
//! 1. **digits**: every number character (`\p{N}`: `0`–`9`, but also `²`, `½`, `٣`, `Ⅻ`) is a piece
//!    of its own; the text between them goes on to step 2. So `2024` is four pieces, and SmolLM2's
//!    vocabulary has no token of two digits.
//! 2. **GPT-2's pattern**, on each stretch between digits, the first of these that matches at the
//!    current position, each as long as it can be:
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d     an English contraction (lowercase, ASCII apostrophe)
//!  ?\p{L}+                    letters, with at most one space before them
//!  ?\p{N}+                    numbers, likewise (after step 1, a single one)
//!  ?[^\s\p{L}\p{N}]+          anything else (punctuation, symbols, marks, emoji), likewise
//! \s+(?!\S)                   spaces not followed by a non-space: all but the last of a run
//!                             that meets a word, or the whole run at the end of the stretch
//! \s+                         a lone whitespace character before a non-space (a tab, a newline)
//! ```
//!
//! The last two rows are the subtle ones: in `a   b` the run of three spaces gives `  ` and leaves
//! one space for ` b`, because a word takes one space in front of it; in `a\t\tb` it gives `\t` then
//! `\t`, since only a plain space (U+0020) joins a word. Classes: `\p{L}` is general category Letter
//! (not Rust's `is_alphabetic`, which also takes combining vowel signs and `Ⓐ`), `\p{N}` is Number
//! (`char::is_numeric`), `\s` is White_Space (`char::is_whitespace`).
//!
//! ```
//! use llm_from_scratch::bpe::pre_tokenize;
//! assert_eq!(pre_tokenize("I'm 42!"), ["I", "'m", " ", "4", "2", "!"]);
//! assert_eq!(pre_tokenize("a   b\n\nc"), ["a", "  ", " b", "\n", "\n", "c"]);
//! ```

use unicode_general_category::{GeneralCategory, get_general_category};

/// `\p{L}`: general category Lu, Ll, Lt, Lm or Lo.
fn is_letter(character: char) -> bool {
    matches!(
        get_general_category(character),
        GeneralCategory::UppercaseLetter
            | GeneralCategory::LowercaseLetter
            | GeneralCategory::TitlecaseLetter
            | GeneralCategory::ModifierLetter
            | GeneralCategory::OtherLetter
    )
}

/// `\p{N}`: general category Nd, Nl or No, which is what `char::is_numeric` tests.
fn is_number(character: char) -> bool {
    character.is_numeric()
}

/// `\s`: the White_Space property.
fn is_space(character: char) -> bool {
    character.is_whitespace()
}

/// `[^\s\p{L}\p{N}]`: everything else.
fn is_other(character: char) -> bool {
    !is_space(character) && !is_letter(character) && !is_number(character)
}

/// Cuts `text` into SmolLM2's pieces: each number character alone, GPT-2's pattern between them.
/// The pieces are consecutive slices of `text`: joined, they give `text` back.
pub fn pre_tokenize(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut stretch_start = 0;
    for (at, character) in text.char_indices() {
        if is_number(character) {
            gpt2_split(&text[stretch_start..at], &mut pieces);
            let end = at + character.len_utf8();
            pieces.push(&text[at..end]);
            stretch_start = end;
        }
    }
    gpt2_split(&text[stretch_start..], &mut pieces);
    pieces
}

/// Cuts `stretch` with GPT-2's pattern, appending the pieces. Its end counts as the end of the text.
pub fn gpt2_split<'a>(stretch: &'a str, pieces: &mut Vec<&'a str>) {
    let mut rest = stretch;
    while !rest.is_empty() {
        let length = gpt2_piece_length(rest);
        debug_assert!(length > 0 && rest.is_char_boundary(length));
        pieces.push(&rest[..length]);
        rest = &rest[length..];
    }
}

/// The length in bytes of the piece GPT-2's pattern matches at the start of `rest` (not empty).
fn gpt2_piece_length(rest: &str) -> usize {
    // 's|'t|'re|'ve|'m|'ll|'d
    if let Some(after) = rest.strip_prefix('\'') {
        for suffix in ["s", "t", "re", "ve", "m", "ll", "d"] {
            if after.starts_with(suffix) {
                return 1 + suffix.len();
            }
        }
    }
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class
    let space = usize::from(rest.starts_with(' '));
    if let Some(first) = rest[space..].chars().next() {
        for class in [is_letter as fn(char) -> bool, is_number, is_other] {
            if class(first) {
                return space + run_length(&rest[space..], class);
            }
        }
    }
    // \s+(?!\S) | \s+ : what is left starts with whitespace (or is a lone space at the end)
    let run = run_length(rest, is_space);
    if run == rest.len() {
        return run; // the run reaches the end: nothing non-space follows
    }
    // a non-space follows: give back the run's last character, unless it is the only one
    let last = rest[..run].chars().next_back().map_or(0, char::len_utf8);
    if run > last { run - last } else { run }
}

/// The length in bytes of the longest prefix of `text` whose characters all belong to `class`.
fn run_length(text: &str, class: fn(char) -> bool) -> usize {
    text.char_indices().find(|&(_, character)| !class(character)).map_or(text.len(), |(at, _)| at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contractions_are_lowercase_and_come_first() {
        assert_eq!(pre_tokenize("don't"), ["don", "'t"]);
        assert_eq!(pre_tokenize("they'll we've I'd you're"), ["they", "'ll", " we", "'ve", " I", "'d", " you", "'re"]);
        // uppercase is no contraction: the apostrophe is punctuation, the letters a word
        assert_eq!(pre_tokenize("DON'T"), ["DON", "'", "T"]);
        // no word boundary is asked for: 'sup is 's + up; a space before it makes it punctuation
        assert_eq!(pre_tokenize("'sup"), ["'s", "up"]);
        assert_eq!(pre_tokenize("x 's"), ["x", " '", "s"]);
        // two apostrophes: the run of punctuation is taken first, greedily
        assert_eq!(pre_tokenize("''s"), ["''", "s"]);
    }

    #[test]
    fn whitespace_runs_leave_one_space_to_the_next_word() {
        assert_eq!(pre_tokenize("a b"), ["a", " b"]);
        assert_eq!(pre_tokenize("a    b"), ["a", "   ", " b"]);
        // at the end (of the text or of a stretch before a digit) the whole run stays together
        assert_eq!(pre_tokenize("a   "), ["a", "   "]);
        assert_eq!(pre_tokenize("x  1"), ["x", "  ", "1"]);
        // only U+0020 joins a word: a tab or newline before a word stands alone
        assert_eq!(pre_tokenize("a\tb"), ["a", "\t", "b"]);
        assert_eq!(pre_tokenize("a\n\n b"), ["a", "\n\n", " b"]);
        assert_eq!(pre_tokenize("a \n b"), ["a", " \n", " b"]);
        assert_eq!(pre_tokenize("  "), ["  "]);
        assert_eq!(pre_tokenize(" "), [" "]);
        assert_eq!(pre_tokenize(""), Vec::<&str>::new());
        // a space before punctuation joins it; before another space it does not
        assert_eq!(pre_tokenize("a ,b"), ["a", " ,", "b"]);
    }

    #[test]
    fn every_number_character_is_a_piece_of_its_own() {
        assert_eq!(pre_tokenize("abc123def"), ["abc", "1", "2", "3", "def"]);
        assert_eq!(pre_tokenize("a 12"), ["a", " ", "1", "2"]);
        // superscript two (No), Roman numeral twelve (Nl), Arabic-Indic three (Nd)
        assert_eq!(pre_tokenize("x² Ⅻ٣"), ["x", "²", " ", "Ⅻ", "٣"]);
    }

    #[test]
    fn letters_are_the_letter_category_not_is_alphabetic() {
        // e + combining acute (Mn): the mark is "other", so it is cut from the letter
        assert_eq!(pre_tokenize("e\u{301}t"), ["e", "\u{301}", "t"]);
        // Ⓐ is So (yet is_alphabetic); ǅ is Lt, ʰ is Lm, ª is Lo
        assert!('Ⓐ'.is_alphabetic() && !is_letter('Ⓐ'));
        assert_eq!(pre_tokenize("aⒶb ǅʰª"), ["a", "Ⓐ", "b", " ǅʰª"]);
        // Devanagari vowel signs are marks too: "नमस्ते" is न म (letters) then ् ... cut by class
        assert_eq!(pre_tokenize("नमस्ते"), ["नमस", "्", "त", "े"]);
        assert_eq!(pre_tokenize("你好，世界"), ["你好", "，", "世界"]);
    }

    #[test]
    fn whitespace_is_the_white_space_property() {
        // no-break space and ideographic space are whitespace; zero-width space (Cf) is not
        assert_eq!(pre_tokenize("a\u{a0}b"), ["a", "\u{a0}", "b"]);
        assert_eq!(pre_tokenize("a\u{3000}\u{3000}b"), ["a", "\u{3000}", "\u{3000}", "b"]);
        assert_eq!(pre_tokenize("a\u{200b}b"), ["a", "\u{200b}", "b"]);
    }

    #[test]
    fn pieces_join_back_to_the_text() {
        let text = "fn main() {\n    let x = 10_000; // ok?\n}\n\n\t'tis  ünïcödé 😀👍🏽 ²³";
        assert_eq!(pre_tokenize(text).concat(), text);
    }
}
