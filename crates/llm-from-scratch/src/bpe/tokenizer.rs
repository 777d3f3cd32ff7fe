//! [`BpeTokenizer`]: a vocabulary and its merges, checked once, and the path from text to ids and back.
//!
//! ```text
//! encode:  text ─ special tokens found whole ─ pre_tokenize each stretch ─ bytes of each piece
//!               ─ one token per byte ─ merge by rank ─ ids
//! decode:  ids ─ bytes of each token (byte alphabet read back; a special token's own text) ─ UTF-8
//! ```

use std::collections::HashMap;

use super::bytes::{byte_to_char, char_to_byte};
use super::error::BpeError;
use super::merge::{Merge, MergeTable, merge_by_rank};
use super::pretokenize::pre_tokenize;
use super::special::{Segment, SpecialMatcher};

/// The most tokens, and the most merges, a tokenizer accepts: 2^24 (16,777,216). The largest
/// vocabularies in use hold about 2^18; a list longer than this is a corrupt file.
pub const MAX_VOCABULARY: usize = 1 << 24;

/// GGUF's token types (`tokenizer.ggml.token_type`): 1 normal, 2 unknown, 3 control, 4 user-defined,
/// 5 unused, 6 byte. Control and user-defined tokens are the ones matched whole in text.
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// The ids to match whole in text, from a GGUF file's token types: the control tokens
/// (`<|im_start|>`, …) and the user-defined ones, in increasing order.
///
/// # Errors
/// [`BpeError::UnknownTokenType`] for a type outside 1..=6.
pub fn special_ids_from_token_types(token_types: &[i32]) -> Result<Vec<usize>, BpeError> {
    let mut special = Vec::new();
    for (id, &value) in token_types.iter().enumerate() {
        match value {
            CONTROL | USER_DEFINED => special.push(id),
            1..=6 => {}
            _ => return Err(BpeError::UnknownTokenType { id, value }),
        }
    }
    Ok(special)
}

/// A byte-level BPE tokenizer (GPT-2's scheme, with SmolLM2's pre-tokenizer).
#[derive(Debug, Clone)]
pub struct BpeTokenizer {
    /// Each id's spelling, as the vocabulary writes it (`Ġworld`).
    tokens: Vec<String>,
    /// Each id's bytes (` world`); for a special token, its spelling's UTF-8 bytes.
    token_bytes: Vec<Vec<u8>>,
    /// Spelling -> id.
    ids: HashMap<String, usize>,
    /// The id of the one-byte token of each byte value, if the vocabulary has it.
    byte_ids: [Option<usize>; 256],
    /// `(left, right)` -> rank and result.
    merges: MergeTable,
    /// Whether each id is special (matched whole, decoded as its own text).
    special: Vec<bool>,
    matcher: SpecialMatcher,
}

impl BpeTokenizer {
    /// A tokenizer from a vocabulary (`tokens[id]` is the spelling of `id`), its merges (each
    /// `"left right"`, best first) and the ids of its special tokens.
    ///
    /// An ordinary token must be spelled in the byte alphabet ([`crate::bpe::byte_to_char`]); a
    /// special token may be any non-empty text. Repeated ids in `special` count once.
    ///
    /// # Errors
    /// [`BpeError::EmptyVocabulary`]; [`BpeError::TooLarge`] past [`MAX_VOCABULARY`] tokens or merges
    /// (checked before anything is allocated); [`BpeError::EmptyToken`]; [`BpeError::DuplicateToken`];
    /// [`BpeError::UnknownId`] for a special id outside the vocabulary; [`BpeError::NotByteLevel`];
    /// [`BpeError::MalformedMerge`], [`BpeError::MergeUnknownToken`], [`BpeError::DuplicateMerge`].
    pub fn new(tokens: Vec<String>, merges: &[String], special: &[usize]) -> Result<Self, BpeError> {
        let vocab_size = tokens.len();
        if vocab_size == 0 {
            return Err(BpeError::EmptyVocabulary);
        }
        check_sizes(vocab_size, merges.len())?;
        let mut is_special = vec![false; vocab_size];
        for &id in special {
            *is_special.get_mut(id).ok_or(BpeError::UnknownId { op: "vocabulary special ids", id, vocab_size })? = true;
        }

        let mut ids = HashMap::with_capacity(vocab_size);
        let mut token_bytes = Vec::with_capacity(vocab_size);
        let mut byte_ids = [None; 256];
        for (id, token) in tokens.iter().enumerate() {
            if token.is_empty() {
                return Err(BpeError::EmptyToken { id });
            }
            if let Some(first) = ids.insert(token.clone(), id) {
                return Err(BpeError::DuplicateToken { token: token.clone(), first, second: id });
            }
            let bytes = if is_special[id] { token.as_bytes().to_vec() } else { spelled_bytes(id, token)? };
            // an ordinary token of one byte is where encoding starts for that byte
            if !is_special[id]
                && let [byte] = bytes.as_slice()
            {
                byte_ids[usize::from(*byte)] = Some(id);
            }
            token_bytes.push(bytes);
        }

        let mut table = MergeTable::with_capacity(merges.len());
        for (rank, line) in merges.iter().enumerate() {
            let (left, right) = match line.split_once(' ') {
                Some((left, right)) if !left.is_empty() && !right.is_empty() && !right.contains(' ') => (left, right),
                _ => return Err(BpeError::MalformedMerge { rank, merge: line.clone() }),
            };
            let id_of = |spelling: &str| {
                ids.get(spelling).copied().ok_or_else(|| BpeError::MergeUnknownToken {
                    rank,
                    merge: line.clone(),
                    token: spelling.to_string(),
                })
            };
            let pair = (id_of(left)?, id_of(right)?);
            let merged = id_of(&format!("{left}{right}"))?;
            if let Some(first) = table.insert(pair, Merge { rank, merged }) {
                return Err(BpeError::DuplicateMerge { rank, merge: line.clone(), first: first.rank });
            }
        }

        let specials = (0..vocab_size).filter(|&id| is_special[id]).map(|id| (tokens[id].clone(), id)).collect();
        Ok(BpeTokenizer {
            tokens,
            token_bytes,
            ids,
            byte_ids,
            merges: table,
            special: is_special,
            matcher: SpecialMatcher::new(specials),
        })
    }

    /// The number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The spelling of `id` in the vocabulary (`"Ġworld"` for the bytes ` world`).
    ///
    /// # Errors
    /// [`BpeError::UnknownId`] for an id outside the vocabulary.
    pub fn token_text(&self, id: usize) -> Result<&str, BpeError> {
        self.tokens.get(id).map(String::as_str).ok_or_else(|| self.unknown("token_text", id))
    }

    /// The bytes that `id` stands for (` world` for `Ġworld`; a special token's own text).
    ///
    /// # Errors
    /// [`BpeError::UnknownId`] for an id outside the vocabulary.
    pub fn token_bytes(&self, id: usize) -> Result<&[u8], BpeError> {
        self.token_bytes.get(id).map(Vec::as_slice).ok_or_else(|| self.unknown("token_bytes", id))
    }

    /// The id of a spelling (`"Ġworld"`, `"<|im_end|>"`), if the vocabulary has it.
    pub fn id_of(&self, spelling: &str) -> Option<usize> {
        self.ids.get(spelling).copied()
    }

    /// Whether `id` is a special token (false outside the vocabulary).
    pub fn is_special(&self, id: usize) -> bool {
        self.special.get(id).copied().unwrap_or(false)
    }

    /// The byte values that have no one-byte token, in increasing order. [`Self::encode`] drops such
    /// a byte, as Hugging Face's BPE does when there is no unknown token: SmolLM2's vocabulary lacks
    /// 21 of the 256: six control characters (U+0004, U+0006, U+0013, U+0014, U+0016, U+001D), the
    /// bytes that never occur in UTF-8 (C0, C1, F5..=FF), and F1, F2, which begin only characters
    /// of the unassigned planes 4 to 11.
    pub fn missing_bytes(&self) -> Vec<u8> {
        (0..=255u8).filter(|&byte| self.byte_ids[usize::from(byte)].is_none()).collect()
    }

    /// The ids of `text`: special tokens matched whole, the rest pre-tokenized and merged by rank.
    /// Bytes listed by [`Self::missing_bytes`] are dropped.
    pub fn encode(&self, text: &str) -> Vec<usize> {
        let mut ids = Vec::new();
        self.encode_text(text, &mut ids);
        ids
    }

    /// The ids of any bytes, UTF-8 or not. The valid UTF-8 stretches are encoded as [`Self::encode`]
    /// does; each maximal run of bytes that are not UTF-8 is a piece of its own, merged by rank like
    /// any other (special tokens and the pre-tokenizer's cuts never reach across it). For valid UTF-8
    /// this is exactly [`Self::encode`], and decoding gives the bytes back (but for missing bytes).
    pub fn encode_bytes(&self, bytes: &[u8]) -> Vec<usize> {
        let mut ids = Vec::new();
        let mut invalid_run: Vec<u8> = Vec::new();
        for chunk in bytes.utf8_chunks() {
            if !chunk.valid().is_empty() {
                self.merge_piece(&invalid_run, &mut ids);
                invalid_run.clear();
                self.encode_text(chunk.valid(), &mut ids);
            }
            invalid_run.extend_from_slice(chunk.invalid());
        }
        self.merge_piece(&invalid_run, &mut ids);
        ids
    }

    /// The bytes of `ids`, concatenated.
    ///
    /// # Errors
    /// [`BpeError::UnknownId`] for an id outside the vocabulary.
    pub fn decode_bytes(&self, ids: &[usize]) -> Result<Vec<u8>, BpeError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_bytes.get(id).ok_or_else(|| self.unknown("decode", id))?);
        }
        Ok(bytes)
    }

    /// The text of `ids`. Bytes that do not form UTF-8 (ids cut inside a character) become U+FFFD,
    /// as `String::from_utf8_lossy` and Hugging Face's decoder do.
    ///
    /// # Errors
    /// [`BpeError::UnknownId`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[usize]) -> Result<String, BpeError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// Appends the ids of valid text: special tokens, and the pieces of the stretches between them.
    fn encode_text(&self, text: &str, ids: &mut Vec<usize>) {
        for segment in self.matcher.split(text) {
            match segment {
                Segment::Special(id) => ids.push(id),
                Segment::Text(stretch) => {
                    for piece in pre_tokenize(stretch) {
                        self.merge_piece(piece.as_bytes(), ids);
                    }
                }
            }
        }
    }

    /// Appends the ids of one piece: one token per byte (missing bytes dropped), merged by rank.
    fn merge_piece(&self, piece: &[u8], ids: &mut Vec<usize>) {
        let byte_tokens: Vec<usize> = piece.iter().filter_map(|&byte| self.byte_ids[usize::from(byte)]).collect();
        ids.extend(merge_by_rank(&byte_tokens, &self.merges));
    }

    fn unknown(&self, op: &'static str, id: usize) -> BpeError {
        BpeError::UnknownId { op, id, vocab_size: self.tokens.len() }
    }
}

/// Refuses more than [`MAX_VOCABULARY`] tokens or merges, before the tables are built.
fn check_sizes(tokens: usize, merges: usize) -> Result<(), BpeError> {
    for (what, count) in [("vocabulary", tokens), ("merges", merges)] {
        if count > MAX_VOCABULARY {
            return Err(BpeError::TooLarge { what, count, max: MAX_VOCABULARY });
        }
    }
    Ok(())
}

/// The bytes an ordinary token spells, one per character of the byte alphabet.
fn spelled_bytes(id: usize, token: &str) -> Result<Vec<u8>, BpeError> {
    token
        .chars()
        .map(|character| {
            char_to_byte(character).ok_or_else(|| BpeError::NotByteLevel { id, token: token.to_string(), character })
        })
        .collect()
}

/// The spelling of `bytes` in the byte alphabet: what a vocabulary writes for them (` world` -> `Ġworld`).
pub fn spell_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|&byte| byte_to_char(byte)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| item.to_string()).collect()
    }

    /// Ids 0..=255 spell the bytes 0..=255; 256 = `ÿþ` (bytes FF FE), 257 = `!!`, 258 = `<|end|>`.
    fn all_bytes() -> BpeTokenizer {
        let mut tokens: Vec<String> = (0..=255u8).map(|byte| byte_to_char(byte).to_string()).collect();
        tokens.extend(strings(&["ÿþ", "!!", "<|end|>"]));
        BpeTokenizer::new(tokens, &strings(&["ÿ þ", "! !"]), &[258]).unwrap()
    }

    #[test]
    fn special_tokens_are_matched_whole_and_decode_to_their_text() {
        let tokenizer = all_bytes();
        // "a" (97), <|end|>, then the piece " b": two one-byte tokens, as no merge joins them
        assert_eq!(tokenizer.encode("a<|end|> b"), [97, 258, 32, 98]);
        assert_eq!(tokenizer.decode(&[97, 258, 32, 98]).unwrap(), "a<|end|> b");
        assert!(tokenizer.is_special(258) && !tokenizer.is_special(97) && !tokenizer.is_special(999));
        assert_eq!(tokenizer.id_of("<|end|>"), Some(258));
        assert_eq!(tokenizer.id_of("Ġ"), Some(32));
        assert_eq!(tokenizer.id_of(" "), None);
        assert_eq!(tokenizer.token_bytes(32).unwrap(), b" ");
        assert_eq!(tokenizer.token_text(32).unwrap(), "Ġ");
    }

    #[test]
    fn a_missing_byte_is_dropped_and_its_neighbours_may_merge() {
        // without a token for 0x04, "!\u{4}!" is the piece "!!" (all punctuation): one token,
        // as Hugging Face gives for SmolLM2 (where 0x04 is missing too)
        let mut tokens: Vec<String> = (0..=255u8).filter(|&b| b != 4).map(|b| byte_to_char(b).to_string()).collect();
        tokens.push("!!".to_string());
        let tokenizer = BpeTokenizer::new(tokens, &strings(&["! !"]), &[]).unwrap();
        assert_eq!(tokenizer.missing_bytes(), [4]);
        assert_eq!(tokenizer.encode("!\u{4}!"), [255]);
        assert_eq!(tokenizer.decode(&[255]).unwrap(), "!!");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_pieces_of_their_own() {
        let tokenizer = all_bytes();
        // FF FE is one run, merged by the rank of "ÿ þ"; the letters around it stay apart
        assert_eq!(tokenizer.encode_bytes(b"a\xff\xfeb"), [97, 256, 98]);
        // a run is cut from the text around it even where a merge could join them ("! !")
        assert_eq!(tokenizer.encode_bytes(b"!\xff!"), [33, 255, 33]);
        // a lone lead byte, then valid text: the lead byte is the run
        assert_eq!(tokenizer.encode_bytes(b"\xe2!!"), [0xE2, 257]);
        assert_eq!(tokenizer.encode_bytes(b""), Vec::<usize>::new());
        // decoding a run that is not UTF-8 gives U+FFFD, or the bytes themselves
        assert_eq!(tokenizer.decode(&[256]).unwrap(), "\u{FFFD}\u{FFFD}");
        assert_eq!(tokenizer.decode_bytes(&[97, 256, 98]).unwrap(), b"a\xff\xfeb");
    }

    proptest! {
        #[test]
        fn any_bytes_come_back(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let tokenizer = all_bytes();
            prop_assert_eq!(tokenizer.decode_bytes(&tokenizer.encode_bytes(&bytes)).unwrap(), bytes);
        }

        #[test]
        fn encode_bytes_of_text_is_encode(text in "\\PC{0,24}") {
            let tokenizer = all_bytes();
            prop_assert_eq!(tokenizer.encode_bytes(text.as_bytes()), tokenizer.encode(&text));
        }
    }

    #[test]
    fn token_types_pick_control_and_user_defined_tokens() {
        assert_eq!(special_ids_from_token_types(&[3, 1, 1, 4, 6, 2, 5, 3]), Ok(vec![0, 3, 7]));
        assert_eq!(special_ids_from_token_types(&[1, 7]), Err(BpeError::UnknownTokenType { id: 1, value: 7 }));
        assert_eq!(special_ids_from_token_types(&[0]), Err(BpeError::UnknownTokenType { id: 0, value: 0 }));
    }

    #[test]
    fn every_vocabulary_error() {
        let build = |tokens: &[&str], merges: &[&str], special: &[usize]| {
            BpeTokenizer::new(strings(tokens), &strings(merges), special).map(|_| ())
        };
        assert_eq!(build(&[], &[], &[]), Err(BpeError::EmptyVocabulary));
        assert_eq!(
            check_sizes(MAX_VOCABULARY + 1, 0),
            Err(BpeError::TooLarge { what: "vocabulary", count: MAX_VOCABULARY + 1, max: MAX_VOCABULARY })
        );
        assert_eq!(
            check_sizes(1, MAX_VOCABULARY + 1),
            Err(BpeError::TooLarge { what: "merges", count: MAX_VOCABULARY + 1, max: MAX_VOCABULARY })
        );
        assert_eq!(check_sizes(MAX_VOCABULARY, MAX_VOCABULARY), Ok(()));
        assert_eq!(build(&["a", ""], &[], &[]), Err(BpeError::EmptyToken { id: 1 }));
        assert_eq!(
            build(&["a", "b", "a"], &[], &[]),
            Err(BpeError::DuplicateToken { token: "a".into(), first: 0, second: 2 })
        );
        assert_eq!(
            build(&["a", "b"], &[], &[2]),
            Err(BpeError::UnknownId { op: "vocabulary special ids", id: 2, vocab_size: 2 })
        );
        // a real space is not in the byte alphabet; as a special token it may be anything
        assert_eq!(
            build(&["a", "a b"], &[], &[]),
            Err(BpeError::NotByteLevel { id: 1, token: "a b".into(), character: ' ' })
        );
        assert_eq!(build(&["a", "a b"], &[], &[1]), Ok(()));
        for bad in ["ab", " a", "a ", "a  b", "a b c", ""] {
            assert_eq!(
                build(&["a", "b", "ab"], &[bad], &[]),
                Err(BpeError::MalformedMerge { rank: 0, merge: bad.into() }),
                "{bad:?}"
            );
        }
        assert_eq!(
            build(&["a", "b", "ab"], &["a b", "a c"], &[]),
            Err(BpeError::MergeUnknownToken { rank: 1, merge: "a c".into(), token: "c".into() })
        );
        assert_eq!(
            build(&["a", "b"], &["a b"], &[]),
            Err(BpeError::MergeUnknownToken { rank: 0, merge: "a b".into(), token: "ab".into() })
        );
        assert_eq!(
            build(&["a", "b", "ab"], &["a b", "a b"], &[]),
            Err(BpeError::DuplicateMerge { rank: 1, merge: "a b".into(), first: 0 })
        );
    }

    #[test]
    fn unknown_ids_are_refused_by_every_lookup() {
        let tokenizer = all_bytes();
        let unknown = |op| BpeError::UnknownId { op, id: 259, vocab_size: 259 };
        assert_eq!(tokenizer.decode(&[97, 259]), Err(unknown("decode")));
        assert_eq!(tokenizer.decode_bytes(&[259]), Err(unknown("decode")));
        assert_eq!(tokenizer.token_text(259), Err(unknown("token_text")));
        assert_eq!(tokenizer.token_bytes(259), Err(unknown("token_bytes")));
    }

    #[test]
    fn messages_name_the_stage_and_the_values() {
        let error = BpeError::MergeUnknownToken { rank: 7, merge: "a c".into(), token: "c".into() };
        assert_eq!(
            error.to_string(),
            "bpe merges: merge 7 (\"a c\") needs token \"c\", which is not in the vocabulary"
        );
        let error = BpeError::UnknownId { op: "decode", id: 9, vocab_size: 3 };
        assert_eq!(error.to_string(), "bpe decode: id 9 is outside the vocabulary of 3 tokens");
    }
}
