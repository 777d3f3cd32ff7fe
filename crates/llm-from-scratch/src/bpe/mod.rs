//! A byte-level BPE tokenizer, the kind GPT-2 introduced and SmolLM2 uses: text becomes bytes,
//! bytes become tokens by replaying the merges learned in training, tokens become text again.
//!
//! One idea per file, in the order the text goes through them:
//!
//! - [`special`] — special tokens (`<|im_start|>`) found whole before anything else;
//! - [`pretokenize`] — where the text may be cut (digits alone, then GPT-2's pattern);
//! - [`bytes`] — the 256 characters that spell the bytes in the vocabulary (` ` is `Ġ`);
//! - [`merge`] — the merge loop, best rank first;
//! - [`tokenizer`] — [`BpeTokenizer`], a checked vocabulary with `encode` and `decode`;
//! - [`stream`] — [`StreamDecoder`], printing generated text without breaking a character;
//! - [`error`] — [`BpeError`].
//!
//! A vocabulary of eight tokens and three merges. ` abc` ends as `Ġab c`, not `Ġ abc`: the merge
//! `Ġ ab` (rank 1) comes before `ab c` (rank 2), and once `Ġab` exists there is no `Ġab c`.
//!
//! ```
//! use llm_from_scratch::bpe::{BpeError, BpeTokenizer, StreamDecoder};
//! let tokens = ["<|end|>", "a", "b", "c", "Ġ", "ab", "Ġab", "abc"].map(String::from).to_vec();
//! let merges = ["a b", "Ġ ab", "ab c"].map(String::from);
//! let tokenizer = BpeTokenizer::new(tokens, &merges, &[0])?;
//!
//! let ids = tokenizer.encode("ab abc<|end|>");
//! assert_eq!(ids, [5, 6, 3, 0]); // ab | Ġab c | <|end|>
//! assert_eq!(tokenizer.token_text(6)?, "Ġab");
//! assert_eq!(tokenizer.decode(&ids)?, "ab abc<|end|>");
//!
//! // a byte without a token of its own is dropped (Hugging Face's rule without an unknown token)
//! assert_eq!(tokenizer.encode("abx"), [5]);
//! assert_eq!(tokenizer.missing_bytes().len(), 256 - 4);
//!
//! // generated ids, printed as they come
//! let mut stream = StreamDecoder::new(&tokenizer);
//! let printed: Vec<String> = ids.iter().map(|&id| stream.push(id)).collect::<Result<_, _>>()?;
//! assert_eq!(printed, ["ab", " ab", "c", "<|end|>"]);
//! assert_eq!(tokenizer.decode(&[8]), Err(BpeError::UnknownId { op: "decode", id: 8, vocab_size: 8 }));
//! # Ok::<(), BpeError>(())
//! ```

pub mod bytes;
pub mod error;
pub mod merge;
pub mod pretokenize;
pub mod special;
pub mod stream;
pub mod tokenizer;

pub use bytes::{byte_to_char, char_to_byte};
pub use error::BpeError;
pub use merge::{Merge, MergeTable, merge_by_rank, merge_by_rank_naive};
pub use pretokenize::{gpt2_split, pre_tokenize};
pub use special::{Segment, SpecialMatcher};
pub use stream::StreamDecoder;
pub use tokenizer::{BpeTokenizer, MAX_VOCABULARY, special_ids_from_token_types, spell_bytes};
