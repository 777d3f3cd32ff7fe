//! [`CharTokenizer`]: one token per character, the simplest tokenizer that trains a real model.
//!
//! ```text
//! vocabulary = sorted distinct characters of the corpus     ['\n', ' ', ',', 'a', 'b', …]
//! encode     "ab"  → [3, 4]     (a character's id is its index in the vocabulary)
//! decode     [3, 4] → "ab"      decode(encode(s)) = s for every s over the vocabulary
//! ```
//!
//! The vocabulary is sorted by code point, so the ids depend only on *which* characters the
//! corpus holds, never on their order or frequency: two runs over the same text agree, and so do
//! a saved vocabulary and the one rebuilt from the text. A character the vocabulary lacks cannot
//! be encoded — it has no embedding row — so [`CharTokenizer::encode`] refuses it with
//! [`TokenizerError::UnknownCharacter`] (which character, at which character index) rather than
//! mapping it to a made-up id; an id past the vocabulary is refused by [`CharTokenizer::decode`]
//! with [`TokenizerError::UnknownId`].
//!
//! ```
//! use llm_from_scratch::model::{CharTokenizer, TokenizerError};
//! let tokenizer = CharTokenizer::from_text("ave, Caesar")?;
//! assert_eq!(tokenizer.vocabulary().iter().collect::<String>(), " ,Caersv");
//! let ids = tokenizer.encode("Caesar ave")?;
//! assert_eq!(tokenizer.decode(&ids)?, "Caesar ave");
//! assert_eq!(
//!     tokenizer.encode("salve"),
//!     Err(TokenizerError::UnknownCharacter { character: 'l', position: 2 })
//! );
//! # Ok::<(), TokenizerError>(())
//! ```

use thiserror::Error;

/// Errors of [`CharTokenizer`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenizerError {
    /// A vocabulary needs at least one character.
    #[error("tokenizer: the vocabulary is empty (the corpus has no characters)")]
    EmptyVocabulary,
    /// The text holds a character the vocabulary lacks.
    #[error("tokenizer: character {character:?} at index {position} is not in the vocabulary")]
    UnknownCharacter {
        /// The character.
        character: char,
        /// Its index in the text, counted in characters (not bytes).
        position: usize,
    },
    /// An id at or past the vocabulary size.
    #[error("tokenizer: id {id} at index {position} is outside the vocabulary of {vocab_size} characters")]
    UnknownId {
        /// The id given.
        id: usize,
        /// Its index in the list.
        position: usize,
        /// The vocabulary size.
        vocab_size: usize,
    },
}

/// A character-level tokenizer: the sorted distinct characters of a corpus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharTokenizer {
    chars: Vec<char>,
}

impl CharTokenizer {
    /// The vocabulary of `corpus`: its distinct characters, sorted.
    ///
    /// # Errors
    /// [`TokenizerError::EmptyVocabulary`] for an empty corpus.
    pub fn from_text(corpus: &str) -> Result<Self, TokenizerError> {
        Self::from_chars(corpus.chars())
    }

    /// A vocabulary of the given characters (sorted, duplicates dropped), e.g. one saved beside a
    /// checkpoint.
    ///
    /// # Errors
    /// [`TokenizerError::EmptyVocabulary`] when there is none.
    pub fn from_chars(chars: impl IntoIterator<Item = char>) -> Result<Self, TokenizerError> {
        let mut chars: Vec<char> = chars.into_iter().collect();
        chars.sort_unstable();
        chars.dedup();
        if chars.is_empty() {
            return Err(TokenizerError::EmptyVocabulary);
        }
        Ok(Self { chars })
    }

    /// The characters, id order.
    pub fn vocabulary(&self) -> &[char] {
        &self.chars
    }

    /// `V`: the number of ids.
    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The id of `character`, `None` if it is not in the vocabulary.
    pub fn id(&self, character: char) -> Option<usize> {
        self.chars.binary_search(&character).ok()
    }

    /// The ids of `text`, one per character.
    ///
    /// # Errors
    /// [`TokenizerError::UnknownCharacter`] for the first character outside the vocabulary.
    pub fn encode(&self, text: &str) -> Result<Vec<usize>, TokenizerError> {
        text.chars()
            .enumerate()
            .map(|(position, character)| {
                self.id(character).ok_or(TokenizerError::UnknownCharacter { character, position })
            })
            .collect()
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// [`TokenizerError::UnknownId`] for the first id at or past [`CharTokenizer::vocab_size`].
    pub fn decode(&self, ids: &[usize]) -> Result<String, TokenizerError> {
        ids.iter()
            .enumerate()
            .map(|(position, &id)| {
                self.chars.get(id).copied().ok_or(TokenizerError::UnknownId {
                    id,
                    position,
                    vocab_size: self.chars.len(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_vocabulary_is_sorted_and_independent_of_order() {
        let a = CharTokenizer::from_text("ba\nab c").unwrap();
        let b = CharTokenizer::from_text("c ba\nba").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.vocabulary(), ['\n', ' ', 'a', 'b', 'c']);
        assert_eq!((a.vocab_size(), a.id('c'), a.id('z')), (5, Some(4), None));
    }

    #[test]
    fn every_error_is_typed() {
        assert_eq!(CharTokenizer::from_text(""), Err(TokenizerError::EmptyVocabulary));
        assert_eq!(CharTokenizer::from_chars([]), Err(TokenizerError::EmptyVocabulary));
        let t = CharTokenizer::from_text("abc").unwrap();
        // positions count characters, not bytes
        let err = t.encode("aé€b").unwrap_err();
        assert_eq!(err, TokenizerError::UnknownCharacter { character: 'é', position: 1 });
        assert_eq!(err.to_string(), "tokenizer: character 'é' at index 1 is not in the vocabulary");
        let err = t.decode(&[0, 2, 3]).unwrap_err();
        assert_eq!(err.to_string(), "tokenizer: id 3 at index 2 is outside the vocabulary of 3 characters");
        assert_eq!(
            t.decode(&[usize::MAX]),
            Err(TokenizerError::UnknownId { id: usize::MAX, position: 0, vocab_size: 3 })
        );
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(text in "\\PC{0,64}", extra in "\\PC{1,8}") {
            let t = CharTokenizer::from_text(&format!("{text}{extra}")).unwrap();
            let ids = t.encode(&text).unwrap();
            prop_assert_eq!(ids.len(), text.chars().count());
            prop_assert!(ids.iter().all(|&id| id < t.vocab_size()));
            prop_assert_eq!(t.decode(&ids).unwrap(), text.clone());
            // and encode inverts decode on every id sequence
            let all: Vec<usize> = (0..t.vocab_size()).rev().collect();
            prop_assert_eq!(t.encode(&t.decode(&all).unwrap()).unwrap(), all);
        }
    }
}
