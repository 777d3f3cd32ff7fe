//! GPT-2's byte alphabet: each of the 256 byte values spelled as one printable character.
//!
//! Byte-level BPE works on bytes, so it can encode any text, but its vocabulary is stored as
//! strings. GPT-2 therefore gives every byte a character of its own that prints and is not
//! whitespace, and spells every token with those characters:
//!
//! ```text
//! byte                              character                 count
//! 0x21 ..= 0x7E  ('!' ..= '~')      the same code point         94
//! 0xA1 ..= 0xAC  ('¡' ..= '¬')      the same code point         12
//! 0xAE ..= 0xFF  ('®' ..= 'ÿ')      the same code point         82
//! the other 68, in increasing order U+0100, U+0101, …, U+0143   68
//!               0x00..=0x20, 0x7F..=0xA0, 0xAD
//! ```
//!
//! So a space (0x20, the 33rd of the others) is `Ġ` (U+0120), a newline (0x0A) is `Ċ` (U+010A),
//! and the token `Ġworld` is the six bytes ` world`. A character such as `é` (bytes C3 A9) is
//! spelled `Ã©`: a token is a byte string first, and only the decoder turns it back into text.
//!
//! ```
//! use llm_from_scratch::bpe::{byte_to_char, char_to_byte};
//! assert_eq!(byte_to_char(b' '), 'Ġ');
//! assert_eq!(byte_to_char(b'\n'), 'Ċ');
//! assert_eq!(byte_to_char(b'a'), 'a');
//! assert_eq!(char_to_byte('Ġ'), Some(b' '));
//! assert_eq!(char_to_byte(' '), None); // a real space spells nothing: it is not in the alphabet
//! ```

/// The first character given to the bytes that do not print (U+0100, `Ā`).
const FIRST_SHIFTED: u32 = 0x100;

/// Whether `byte` prints as itself: the three ranges of the table above.
fn prints_as_itself(byte: u8) -> bool {
    matches!(byte, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character that spells `byte` in a byte-level vocabulary.
pub fn byte_to_char(byte: u8) -> char {
    if prints_as_itself(byte) {
        return char::from(byte);
    }
    // the index of `byte` among the 68 bytes that do not print:
    // 0x00..=0x20 are the first 33, 0x7F..=0xA0 the next 34, 0xAD the last
    let index = match byte {
        0x00..=0x20 => u32::from(byte),
        0x7F..=0xA0 => 33 + u32::from(byte - 0x7F),
        _ => 67, // 0xAD, the soft hyphen
    };
    // at most U+0143: always a valid scalar value
    char::from_u32(FIRST_SHIFTED + index).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte that `character` spells, or `None` for a character outside the 256 of the alphabet.
pub fn char_to_byte(character: char) -> Option<u8> {
    let code = u32::from(character);
    if let Ok(byte) = u8::try_from(code) {
        return prints_as_itself(byte).then_some(byte);
    }
    // the inverse of the index above
    match code.checked_sub(FIRST_SHIFTED)? {
        index @ 0..=32 => u8::try_from(index).ok(),
        index @ 33..=66 => u8::try_from(index - 33).ok().map(|offset| 0x7F + offset),
        67 => Some(0xAD),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_has_its_own_character_and_comes_back() {
        let mut seen = std::collections::BTreeSet::new();
        for byte in 0..=255u8 {
            let character = byte_to_char(byte);
            assert!(seen.insert(character), "two bytes share {character:?}");
            assert_eq!(char_to_byte(character), Some(byte));
            assert!(!character.is_whitespace() && !character.is_control(), "{byte:#04x} -> {character:?}");
        }
        // the shifted ones fill U+0100..=U+0143 exactly
        assert_eq!(seen.iter().filter(|c| u32::from(**c) >= 0x100).count(), 68);
        assert_eq!(seen.last(), Some(&'\u{143}'));
    }

    #[test]
    fn hand_checked_spellings() {
        // 0x00 is the first byte that does not print -> U+0100; 0x7F is the 34th -> U+0121;
        // 0xA0 (no-break space) the 67th -> U+0142; 0xAD (soft hyphen) the 68th -> U+0143
        assert_eq!(byte_to_char(0x00), 'Ā');
        assert_eq!(byte_to_char(0x7F), '\u{121}');
        assert_eq!(byte_to_char(0xA0), 'ł');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        // é is C3 A9, both print as themselves
        let spelled: String = "é".bytes().map(byte_to_char).collect();
        assert_eq!(spelled, "Ã©");
    }

    #[test]
    fn characters_outside_the_alphabet_spell_nothing() {
        for character in [' ', '\n', '\u{7F}', '\u{AD}', '\u{144}', '€', '😀'] {
            assert_eq!(char_to_byte(character), None, "{character:?}");
        }
    }
}
