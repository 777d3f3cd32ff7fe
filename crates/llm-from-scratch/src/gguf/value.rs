//! The values of GGUF metadata: typed key–value pairs (`general.architecture = "llama"`,
//! `llama.block_count = 30`, `tokenizer.ggml.tokens = [...]`) and how one is read.
//!
//! ```text
//! key          string (u64 length, UTF-8 bytes)
//! value type   u32    0 u8 · 1 i8 · 2 u16 · 3 i16 · 4 u32 · 5 i32 · 6 f32 · 7 bool · 8 string
//!                     9 array · 10 u64 · 11 i64 · 12 f64
//! value        the value; an array is: element type u32, count u64, the elements
//! ```
//!
//! Strings borrow the file's bytes. Arrays are stored typed (`Vec<i32>`, `Vec<&str>`), so an
//! array of a million `u8` takes a megabyte, as in the file — never a million enum values.

use super::GgufError;
use super::cursor::Cursor;

/// The type of a metadata value, as numbered in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// 0: `u8`.
    U8,
    /// 1: `i8`.
    I8,
    /// 2: `u16`.
    U16,
    /// 3: `i16`.
    I16,
    /// 4: `u32`.
    U32,
    /// 5: `i32`.
    I32,
    /// 6: `f32`.
    F32,
    /// 7: `bool` (one byte, 0 or 1).
    Bool,
    /// 8: string.
    String,
    /// 9: array.
    Array,
    /// 10: `u64`.
    U64,
    /// 11: `i64`.
    I64,
    /// 12: `f64`.
    F64,
}

impl ValueType {
    /// Every type, at the index of its id.
    const ALL: [ValueType; 13] = [
        Self::U8,
        Self::I8,
        Self::U16,
        Self::I16,
        Self::U32,
        Self::I32,
        Self::F32,
        Self::Bool,
        Self::String,
        Self::Array,
        Self::U64,
        Self::I64,
        Self::F64,
    ];

    /// The type numbered `id`, if GGUF defines one.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(id).ok()?).copied()
    }

    /// Its name in messages: `u32`, `string`, `array`.
    pub fn name(self) -> &'static str {
        ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"][self as usize]
    }

    /// The fewest bytes one value of this type takes in the file: its width, 8 for a string (the
    /// length of an empty one), 12 for an array (element type and count of an empty one).
    fn min_size(self) -> u64 {
        match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::U16 | Self::I16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 | Self::String => 8,
            Self::Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetadataValue<'a> {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// A string (borrowed from the file).
    String(&'a str),
    /// An array of one type.
    Array(MetadataArray<'a>),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

/// An array value: all its elements have one type (arrays of arrays are not read).
#[derive(Clone, Debug, PartialEq)]
pub enum MetadataArray<'a> {
    /// `u8` elements.
    U8(Vec<u8>),
    /// `i8` elements.
    I8(Vec<i8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `i16` elements.
    I16(Vec<i16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `i32` elements (`tokenizer.ggml.token_type`).
    I32(Vec<i32>),
    /// `f32` elements (`tokenizer.ggml.scores`).
    F32(Vec<f32>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// Strings (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
    String(Vec<&'a str>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f64` elements.
    F64(Vec<f64>),
}

impl MetadataValue<'_> {
    /// What the value is, for messages: `u32`, `string`, `an array of i32`.
    pub fn type_name(&self) -> String {
        match self {
            Self::Array(array) => format!("an array of {}", array.element_type().name()),
            scalar => scalar.value_type().name().to_string(),
        }
    }

    /// Its type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Self::U8(_) => ValueType::U8,
            Self::I8(_) => ValueType::I8,
            Self::U16(_) => ValueType::U16,
            Self::I16(_) => ValueType::I16,
            Self::U32(_) => ValueType::U32,
            Self::I32(_) => ValueType::I32,
            Self::F32(_) => ValueType::F32,
            Self::Bool(_) => ValueType::Bool,
            Self::String(_) => ValueType::String,
            Self::Array(_) => ValueType::Array,
            Self::U64(_) => ValueType::U64,
            Self::I64(_) => ValueType::I64,
            Self::F64(_) => ValueType::F64,
        }
    }

    /// An integer value of any width and sign, as `i128` (which holds them all); `None` otherwise.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Self::U8(v) => v.into(),
            Self::I8(v) => v.into(),
            Self::U16(v) => v.into(),
            Self::I16(v) => v.into(),
            Self::U32(v) => v.into(),
            Self::I32(v) => v.into(),
            Self::U64(v) => v.into(),
            Self::I64(v) => v.into(),
            _ => return None,
        })
    }
}

impl MetadataArray<'_> {
    /// The type of its elements.
    pub fn element_type(&self) -> ValueType {
        match self {
            Self::U8(_) => ValueType::U8,
            Self::I8(_) => ValueType::I8,
            Self::U16(_) => ValueType::U16,
            Self::I16(_) => ValueType::I16,
            Self::U32(_) => ValueType::U32,
            Self::I32(_) => ValueType::I32,
            Self::F32(_) => ValueType::F32,
            Self::Bool(_) => ValueType::Bool,
            Self::String(_) => ValueType::String,
            Self::U64(_) => ValueType::U64,
            Self::I64(_) => ValueType::I64,
            Self::F64(_) => ValueType::F64,
        }
    }
}

/// Reads one value of type `ty` for `key`.
pub(crate) fn read_value<'a>(c: &mut Cursor<'a>, ty: ValueType, key: &str) -> Result<MetadataValue<'a>, GgufError> {
    let what = format!("metadata {key}");
    Ok(match ty {
        ValueType::U8 => MetadataValue::U8(u8::from_le_bytes(c.array(&what)?)),
        ValueType::I8 => MetadataValue::I8(i8::from_le_bytes(c.array(&what)?)),
        ValueType::U16 => MetadataValue::U16(u16::from_le_bytes(c.array(&what)?)),
        ValueType::I16 => MetadataValue::I16(i16::from_le_bytes(c.array(&what)?)),
        ValueType::U32 => MetadataValue::U32(u32::from_le_bytes(c.array(&what)?)),
        ValueType::I32 => MetadataValue::I32(i32::from_le_bytes(c.array(&what)?)),
        ValueType::F32 => MetadataValue::F32(f32::from_le_bytes(c.array(&what)?)),
        ValueType::Bool => MetadataValue::Bool(read_bool(c, &what, key)?),
        ValueType::String => MetadataValue::String(c.string(&what)?),
        ValueType::Array => MetadataValue::Array(read_array(c, key)?),
        ValueType::U64 => MetadataValue::U64(u64::from_le_bytes(c.array(&what)?)),
        ValueType::I64 => MetadataValue::I64(i64::from_le_bytes(c.array(&what)?)),
        ValueType::F64 => MetadataValue::F64(f64::from_le_bytes(c.array(&what)?)),
    })
}

/// A bool is one byte, 0 or 1.
fn read_bool(c: &mut Cursor<'_>, what: &str, key: &str) -> Result<bool, GgufError> {
    match c.array::<1>(what)? {
        [0] => Ok(false),
        [1] => Ok(true),
        [b] => Err(GgufError::InvalidValue { key: key.to_string(), value: b.to_string(), reason: "a bool is 0 or 1" }),
    }
}

/// An array: element type, count (checked against the rest of the file), elements.
fn read_array<'a>(c: &mut Cursor<'a>, key: &str) -> Result<MetadataArray<'a>, GgufError> {
    let what = format!("metadata {key}");
    let type_id = c.u32(&what)?;
    let refused = |reason| GgufError::ValueType { key: key.to_string(), type_id, reason };
    let element = ValueType::from_id(type_id).ok_or_else(|| refused("which GGUF does not define"))?;
    if element == ValueType::Array {
        return Err(refused("an array of arrays is not read"));
    }
    let count = c.count(element.min_size(), "elements", &what)?;
    /// `count` elements read by `one`; `count` was checked against the file's length.
    fn many<'a, T>(
        c: &mut Cursor<'a>,
        count: usize,
        mut one: impl FnMut(&mut Cursor<'a>) -> Result<T, GgufError>,
    ) -> Result<Vec<T>, GgufError> {
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            values.push(one(c)?);
        }
        Ok(values)
    }
    let w = what.as_str();
    Ok(match element {
        ValueType::U8 => MetadataArray::U8(many(c, count, |c| c.array(w).map(u8::from_le_bytes))?),
        ValueType::I8 => MetadataArray::I8(many(c, count, |c| c.array(w).map(i8::from_le_bytes))?),
        ValueType::U16 => MetadataArray::U16(many(c, count, |c| c.array(w).map(u16::from_le_bytes))?),
        ValueType::I16 => MetadataArray::I16(many(c, count, |c| c.array(w).map(i16::from_le_bytes))?),
        ValueType::U32 => MetadataArray::U32(many(c, count, |c| c.array(w).map(u32::from_le_bytes))?),
        ValueType::I32 => MetadataArray::I32(many(c, count, |c| c.array(w).map(i32::from_le_bytes))?),
        ValueType::F32 => MetadataArray::F32(many(c, count, |c| c.array(w).map(f32::from_le_bytes))?),
        ValueType::Bool => MetadataArray::Bool(many(c, count, |c| read_bool(c, w, key))?),
        ValueType::String => MetadataArray::String(many(c, count, |c| c.string(w))?),
        ValueType::U64 => MetadataArray::U64(many(c, count, |c| c.array(w).map(u64::from_le_bytes))?),
        ValueType::I64 => MetadataArray::I64(many(c, count, |c| c.array(w).map(i64::from_le_bytes))?),
        ValueType::F64 => MetadataArray::F64(many(c, count, |c| c.array(w).map(f64::from_le_bytes))?),
        ValueType::Array => return Err(refused("an array of arrays is not read")),
    })
}
