//! [`Cursor`]: little-endian numbers and strings read from the front of a byte slice, every read
//! checked against the bytes that are left.
//!
//! GGUF has three kinds of field: fixed-size little-endian numbers, strings (a `u64` byte length,
//! then UTF-8 bytes, no terminator), and counts of what follows. A length or a count is checked
//! against the rest of the file before anything is allocated, so a file cannot ask for more
//! memory than it occupies.

use super::GgufError;

/// A position in a byte slice that only moves forward.
#[derive(Clone, Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// The offset of the next byte.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// Bytes from the cursor to the end.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// The next `n` bytes; [`GgufError::Truncated`] naming `what` if there are fewer.
    pub(crate) fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let end = usize::try_from(n).ok().and_then(|n| self.at.checked_add(n)).filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(GgufError::Truncated {
                what: what.to_string(),
                offset: self.at,
                needed: n,
                len: self.bytes.len(),
            });
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let taken = self.take(N as u64, what)?;
        Ok(std::array::from_fn(|i| taken[i]))
    }

    /// A little-endian `u32`.
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: a `u64` byte length, then that many bytes of UTF-8. The length is checked
    /// against the rest of the file first; the string borrows the file's bytes (nothing is copied).
    pub(crate) fn string(&mut self, what: &str) -> Result<&'a str, GgufError> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| GgufError::NotUtf8 { what: what.to_string() })
    }

    /// A `u64` count of items that each take at least `min_size` bytes, refused if the rest of
    /// the file could not hold that many: the check that comes before any allocation.
    pub(crate) fn count(&mut self, min_size: u64, items: &'static str, what: &str) -> Result<usize, GgufError> {
        let count = self.u64(what)?;
        let remaining = self.remaining();
        let fits = count.checked_mul(min_size).is_some_and(|bytes| bytes <= remaining as u64);
        match usize::try_from(count) {
            Ok(count) if fits => Ok(count),
            _ => Err(GgufError::CountTooLarge { what: what.to_string(), count, items, remaining }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_refuses_what_is_not_there() {
        // u32 7, then the string "ab" (length 2 as u64)
        let bytes = [7, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'a', b'b'];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u32("a").unwrap(), 7);
        assert_eq!(c.string("b").unwrap(), "ab");
        assert_eq!(c.remaining(), 0);
        let err = c.u32("the next field").unwrap_err();
        assert_eq!(err.to_string(), "gguf: the next field needs 4 bytes at offset 14 but the file ends at 14");
        // a string of 2^64 − 1 bytes: refused before anything is allocated
        let mut c = Cursor::new(&[0xff; 12]);
        assert!(matches!(c.string("s"), Err(GgufError::Truncated { needed: u64::MAX, .. })));
        // 2^62 items of at least 4 bytes: the product overflows and is refused
        let mut c = Cursor::new(&[0, 0, 0, 0, 0, 0, 0, 0x40]);
        let err = c.count(4, "elements", "array").unwrap_err();
        assert!(matches!(err, GgufError::CountTooLarge { count: 0x4000_0000_0000_0000, remaining: 0, .. }));
        let mut c = Cursor::new(&[1, 0, 0, 0, 0, 0, 0, 0, 0xff]);
        assert!(matches!(c.string("bad"), Err(GgufError::NotUtf8 { .. })));
    }
}
