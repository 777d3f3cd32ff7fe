//! [`BpeError`]: everything that can be wrong with a vocabulary, its merges, or an id to decode.
//!
//! Encoding cannot fail: byte-level BPE has a spelling for every byte, and a byte whose token the
//! vocabulary lacks is dropped (see [`crate::bpe::BpeTokenizer::missing_bytes`]). What can fail is
//! building the tokenizer from a model file's lists, and decoding an id that is not in them.

use thiserror::Error;

/// Errors of [`crate::bpe::BpeTokenizer`] and [`crate::bpe::StreamDecoder`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BpeError {
    /// A tokenizer needs at least one token.
    #[error("bpe vocabulary: the token list is empty")]
    EmptyVocabulary,
    /// More tokens or merges than [`crate::bpe::MAX_VOCABULARY`] allows.
    #[error("bpe {what}: {count} entries, more than the {max} a vocabulary may hold")]
    TooLarge {
        /// `"vocabulary"` or `"merges"`.
        what: &'static str,
        /// How many were given.
        count: usize,
        /// The ceiling.
        max: usize,
    },
    /// A token spelled as the empty string can never be produced nor matched.
    #[error("bpe vocabulary: token {id} is the empty string")]
    EmptyToken {
        /// Its id.
        id: usize,
    },
    /// Two ids share one spelling, so the spelling could not name a single id.
    #[error("bpe vocabulary: token {token:?} appears twice, as id {first} and as id {second}")]
    DuplicateToken {
        /// The spelling.
        token: String,
        /// The first id with it.
        first: usize,
        /// The later id with it.
        second: usize,
    },
    /// An ordinary token holds a character outside the 256 of the byte alphabet, so it spells no bytes.
    #[error("bpe vocabulary: token {id} ({token:?}) holds {character:?}, which is not one of the 256 byte characters")]
    NotByteLevel {
        /// Its id.
        id: usize,
        /// Its spelling.
        token: String,
        /// The first character outside the alphabet.
        character: char,
    },
    /// A merge is not two non-empty tokens separated by one space.
    #[error("bpe merges: merge {rank} ({merge:?}) is not two tokens separated by one space")]
    MalformedMerge {
        /// Its rank (index in the list).
        rank: usize,
        /// The merge as given.
        merge: String,
    },
    /// A merge names a token (one of its two parts, or the token they make) that is not in the vocabulary.
    #[error("bpe merges: merge {rank} ({merge:?}) needs token {token:?}, which is not in the vocabulary")]
    MergeUnknownToken {
        /// Its rank.
        rank: usize,
        /// The merge as given.
        merge: String,
        /// The spelling that is missing.
        token: String,
    },
    /// The same pair is listed twice, so it would have two ranks.
    #[error("bpe merges: merge {rank} ({merge:?}) repeats merge {first}")]
    DuplicateMerge {
        /// The rank of the repetition.
        rank: usize,
        /// The merge as given.
        merge: String,
        /// The rank of its first occurrence.
        first: usize,
    },
    /// An id at or past the vocabulary size.
    #[error("bpe {op}: id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownId {
        /// The stage that failed.
        op: &'static str,
        /// The id given.
        id: usize,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// A token type that is none of GGUF's six (1 normal … 6 byte).
    #[error("bpe token types: token {id} has type {value}, not one of 1 (normal) to 6 (byte)")]
    UnknownTokenType {
        /// The id of the token.
        id: usize,
        /// The type given.
        value: i32,
    },
}
