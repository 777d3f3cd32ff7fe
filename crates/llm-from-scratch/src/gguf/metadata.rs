//! [`Metadata`]: the key–value table of a GGUF file, in file order, with lookup by key and typed
//! getters for what a loader and a tokenizer read.
//!
//! Each getter returns the value or a typed error: [`GgufError::MissingKey`] when the key is not
//! there, [`GgufError::WrongType`] when it holds another type, [`GgufError::InvalidValue`] when
//! an integer does not fit. Integer getters accept any integer type (writers differ: llama.cpp
//! writes `u32` counts, others `i32` or `u64`); float getters accept `f32` (widened exactly) and
//! `f64`.

use super::GgufError;
use super::value::{MetadataArray, MetadataValue};

/// The metadata of a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata<'a> {
    /// `(key, value)` in file order.
    entries: Vec<(&'a str, MetadataValue<'a>)>,
    /// Indices into `entries`, sorted by key: lookup by binary search.
    by_key: Vec<usize>,
}

impl<'a> Metadata<'a> {
    /// The table of `entries` (file order kept).
    ///
    /// # Errors
    /// [`GgufError::DuplicateKey`] naming the first key, in sorted order, that appears twice.
    pub(crate) fn new(entries: Vec<(&'a str, MetadataValue<'a>)>) -> Result<Self, GgufError> {
        let mut by_key: Vec<usize> = (0..entries.len()).collect();
        by_key.sort_by_key(|&i| entries[i].0);
        if let Some(pair) = by_key.windows(2).find(|pair| entries[pair[0]].0 == entries[pair[1]].0) {
            return Err(GgufError::DuplicateKey { key: entries[pair[0]].0.to_string() });
        }
        Ok(Self { entries, by_key })
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no key at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(key, value)` in the order of the file.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &MetadataValue<'a>)> {
        self.entries.iter().map(|(k, v)| (*k, v))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue<'a>> {
        let found = self.by_key.binary_search_by(|&i| self.entries[i].0.cmp(key)).ok()?;
        Some(&self.entries[self.by_key[found]].1)
    }

    /// The value of `key`, or [`GgufError::MissingKey`].
    fn require(&self, key: &str) -> Result<&MetadataValue<'a>, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey { key: key.to_string() })
    }

    fn wrong(key: &str, expected: &'static str, found: &MetadataValue<'_>) -> GgufError {
        GgufError::WrongType { key: key.to_string(), expected, found: found.type_name() }
    }

    /// The string `key` (`general.architecture`).
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`].
    pub fn string(&self, key: &str) -> Result<&'a str, GgufError> {
        match self.require(key)? {
            MetadataValue::String(s) => Ok(s),
            other => Err(Self::wrong(key, "a string", other)),
        }
    }

    /// The integer `key` (of any integer type) as a count or an index: `≥ 0` and within `usize`.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`], [`GgufError::InvalidValue`] for a
    /// negative value or one past `usize`.
    pub fn count(&self, key: &str) -> Result<usize, GgufError> {
        self.integer_as(key, "a count must be ≥ 0 and fit in usize")
    }

    /// The integer `key` (of any integer type) as `i64`.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`], [`GgufError::InvalidValue`] for a
    /// `u64` past `i64::MAX`.
    pub fn integer(&self, key: &str) -> Result<i64, GgufError> {
        self.integer_as(key, "does not fit in i64")
    }

    /// The integer `key` converted to `T`; `reason` says why it may not fit.
    fn integer_as<T: TryFrom<i128>>(&self, key: &str, reason: &'static str) -> Result<T, GgufError> {
        let value = self.require(key)?;
        let n = value.as_integer().ok_or_else(|| Self::wrong(key, "an integer", value))?;
        T::try_from(n).map_err(|_| GgufError::InvalidValue { key: key.to_string(), value: n.to_string(), reason })
    }

    /// The float `key`: an `f32` widened to `f64` exactly (`1e-5` stored as `f32` reads back as
    /// `9.999999747378752e-6`), or an `f64`.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`].
    pub fn float(&self, key: &str) -> Result<f64, GgufError> {
        match *self.require(key)? {
            MetadataValue::F32(v) => Ok(f64::from(v)),
            MetadataValue::F64(v) => Ok(v),
            ref other => Err(Self::wrong(key, "a float", other)),
        }
    }

    /// The bool `key`.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`].
    pub fn bool(&self, key: &str) -> Result<bool, GgufError> {
        match *self.require(key)? {
            MetadataValue::Bool(v) => Ok(v),
            ref other => Err(Self::wrong(key, "a bool", other)),
        }
    }

    /// The array of strings `key` (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`].
    pub fn string_array(&self, key: &str) -> Result<&[&'a str], GgufError> {
        match self.require(key)? {
            MetadataValue::Array(MetadataArray::String(v)) => Ok(v),
            other => Err(Self::wrong(key, "an array of string", other)),
        }
    }

    /// The array of `i32` `key` (`tokenizer.ggml.token_type`).
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`].
    pub fn i32_array(&self, key: &str) -> Result<&[i32], GgufError> {
        match self.require(key)? {
            MetadataValue::Array(MetadataArray::I32(v)) => Ok(v),
            other => Err(Self::wrong(key, "an array of i32", other)),
        }
    }

    /// The array of `f32` `key` (`tokenizer.ggml.scores`).
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::WrongType`].
    pub fn f32_array(&self, key: &str) -> Result<&[f32], GgufError> {
        match self.require(key)? {
            MetadataValue::Array(MetadataArray::F32(v)) => Ok(v),
            other => Err(Self::wrong(key, "an array of f32", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Metadata<'static> {
        Metadata::new(vec![
            ("b.count", MetadataValue::U32(30)),
            ("a.name", MetadataValue::String("llama")),
            ("c.eps", MetadataValue::F32(1e-5)),
            ("d.negative", MetadataValue::I32(-1)),
            ("e.tokens", MetadataValue::Array(MetadataArray::String(vec!["<s>", "a"]))),
            ("f.types", MetadataValue::Array(MetadataArray::I32(vec![3, 1]))),
        ])
        .unwrap()
    }

    #[test]
    fn getters_return_the_value_or_name_the_key() {
        let m = table();
        assert_eq!(m.iter().next().unwrap().0, "b.count", "file order is kept");
        assert_eq!((m.count("b.count").unwrap(), m.integer("d.negative").unwrap()), (30, -1));
        assert_eq!((m.string("a.name").unwrap(), m.float("c.eps").unwrap()), ("llama", f64::from(1e-5f32)));
        assert_eq!(
            (m.string_array("e.tokens").unwrap(), m.i32_array("f.types").unwrap()),
            (&["<s>", "a"][..], &[3, 1][..])
        );
        assert_eq!(m.count("x").unwrap_err().to_string(), "gguf metadata: x is missing");
        assert_eq!(m.string("b.count").unwrap_err().to_string(), "gguf metadata: b.count is u32, not a string");
        let err = m.f32_array("e.tokens").unwrap_err();
        assert_eq!(err.to_string(), "gguf metadata: e.tokens is an array of string, not an array of f32");
        let err = m.count("d.negative").unwrap_err();
        assert!(matches!(err, GgufError::InvalidValue { ref key, .. } if key == "d.negative"), "{err}");
        assert!(matches!(m.bool("c.eps"), Err(GgufError::WrongType { .. })));
    }

    #[test]
    fn a_key_twice_is_refused() {
        let err =
            Metadata::new(vec![("k", MetadataValue::U8(1)), ("j", MetadataValue::U8(2)), ("k", MetadataValue::U8(3))])
                .unwrap_err();
        assert_eq!(err, GgufError::DuplicateKey { key: "k".to_string() });
    }
}
