//! [`StreamDecoder`]: text to print while a model generates, one id at a time.
//!
//! A token is bytes, not characters: `é` (C3 A9) may come as two tokens, `Ã` then `©`, and an
//! emoji as up to four. Printing each token's bytes as they come would print a broken character
//! (U+FFFD) between the two halves. So the decoder keeps the bytes of an unfinished character and
//! prints it only once its last byte has arrived:
//!
//! ```text
//! push(Ã)  pending C3      prints ""     (a two-byte character has begun)
//! push(©)  pending C3 A9   prints "é"    (complete)
//! ```
//!
//! Bytes that can never become a character (a stray continuation byte, a lead byte followed by
//! text) print as U+FFFD, one per invalid sequence, as `String::from_utf8_lossy` does; [`StreamDecoder::finish`]
//! prints an unfinished character left at the end the same way. So the pieces printed, joined,
//! are exactly [`crate::bpe::BpeTokenizer::decode`] of all the ids.

use super::error::BpeError;
use super::tokenizer::BpeTokenizer;

/// Decodes ids one at a time, holding back the bytes of a character that is not complete yet.
#[derive(Debug, Clone)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a BpeTokenizer,
    /// Bytes received but not printed: at most the first three bytes of one character.
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder with nothing pending.
    pub fn new(tokenizer: &'a BpeTokenizer) -> Self {
        StreamDecoder { tokenizer, pending: Vec::new() }
    }

    /// Adds the bytes of `id` and returns the text they complete (possibly empty).
    ///
    /// # Errors
    /// [`BpeError::UnknownId`] for an id outside the vocabulary; nothing changes then.
    pub fn push(&mut self, id: usize) -> Result<String, BpeError> {
        let vocab_size = self.tokenizer.vocab_size();
        let bytes =
            self.tokenizer.token_bytes(id).map_err(|_| BpeError::UnknownId { op: "stream decode", id, vocab_size })?;
        self.pending.extend_from_slice(bytes);
        let mut text = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(valid) => {
                    text.push_str(valid);
                    start = self.pending.len();
                    break;
                }
                Err(error) => {
                    let valid_end = start + error.valid_up_to();
                    // the prefix up to `valid_up_to` was just checked to be UTF-8
                    text.push_str(&String::from_utf8_lossy(&self.pending[start..valid_end]));
                    match error.error_len() {
                        // a sequence that no later byte can repair: one replacement character
                        Some(length) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            start = valid_end + length;
                        }
                        // the bytes end inside a character: keep them for the next id
                        None => {
                            start = valid_end;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        Ok(text)
    }

    /// The bytes held back, waiting for the rest of their character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: an unfinished character left over prints as U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpe::{byte_to_char, spell_bytes};
    use proptest::prelude::*;

    /// Every byte as a token of its own, plus `é`'s two bytes merged and one special token.
    fn all_bytes() -> BpeTokenizer {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        tokens.push(spell_bytes("é".as_bytes())); // 256
        tokens.push("<|end|>".to_string()); // 257
        BpeTokenizer::new(tokens, &["Ã ©".to_string()], &[257]).unwrap()
    }

    #[test]
    fn a_character_prints_once_complete() {
        let tokenizer = all_bytes();
        let mut stream = StreamDecoder::new(&tokenizer);
        // 😀 is F0 9F 98 80: nothing until the fourth byte
        for byte in [0xF0, 0x9F, 0x98] {
            assert_eq!(stream.push(byte).unwrap(), "");
        }
        assert_eq!(stream.pending(), [0xF0, 0x9F, 0x98]);
        assert_eq!(stream.push(0x80).unwrap(), "😀");
        assert_eq!(stream.push(256).unwrap(), "é");
        assert_eq!(stream.push(usize::from(b'!')).unwrap(), "!");
        assert_eq!(stream.push(257).unwrap(), "<|end|>");
        assert_eq!(stream.finish(), "");
    }

    #[test]
    fn broken_bytes_print_as_replacement_characters() {
        let tokenizer = all_bytes();
        let mut stream = StreamDecoder::new(&tokenizer);
        // a stray continuation byte can never be repaired
        assert_eq!(stream.push(0xA9).unwrap(), "\u{FFFD}");
        // a lead byte followed by an ASCII letter: one U+FFFD, then the letter
        assert_eq!(stream.push(0xC3).unwrap(), "");
        assert_eq!(stream.push(usize::from(b'x')).unwrap(), "\u{FFFD}x");
        // an unfinished character at the end
        assert_eq!(stream.push(0xE2).unwrap(), "");
        assert_eq!(stream.finish(), "\u{FFFD}");
    }

    #[test]
    fn an_unknown_id_is_refused_and_changes_nothing() {
        let tokenizer = all_bytes();
        let mut stream = StreamDecoder::new(&tokenizer);
        assert_eq!(stream.push(0xC3).unwrap(), "");
        assert_eq!(stream.push(258), Err(BpeError::UnknownId { op: "stream decode", id: 258, vocab_size: 258 }));
        assert_eq!(stream.push(0xA9).unwrap(), "é");
    }

    proptest! {
        #[test]
        fn the_pieces_join_to_the_whole_decode(ids in prop::collection::vec(0usize..258, 0..48)) {
            let tokenizer = all_bytes();
            let mut stream = StreamDecoder::new(&tokenizer);
            let mut printed = String::new();
            for &id in &ids {
                printed.push_str(&stream.push(id).unwrap());
                prop_assert!(stream.pending().len() < 4);
            }
            printed.push_str(&stream.finish());
            prop_assert_eq!(printed, tokenizer.decode(&ids).unwrap());
        }
    }
}
