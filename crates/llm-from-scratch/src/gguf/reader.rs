//! [`Gguf`]: the layout of a GGUF file, read and checked in one pass over its bytes.
//!
//! ```text
//! magic        4 bytes "GGUF"
//! version      u32   2 or 3 (3 only adds big-endian files, which this reader refuses)
//! tensors      u64   how many tensor infos follow the metadata
//! keys         u64   how many metadata entries follow
//! metadata     keys × (key string, value type u32, value)            see value.rs
//! tensor info  tensors × (name string, rank u32, rank × u64 dimension, type u32, offset u64)
//! padding      to a multiple of general.alignment (default 32)
//! data         each tensor at data start + its offset (a multiple of the alignment)
//! ```
//!
//! Dimensions are listed fastest-varying first (ggml's `ne[0]`): a PyTorch weight `[out, in]` is
//! stored with dimensions `[in, out]`, as `out` rows of `in` values. A quantized row is a whole
//! number of blocks.
//!
//! Before anything is allocated for it, every count and length is held against the bytes left;
//! then every tensor's byte range is held against the file: inside the data section, aligned, and
//! overlapping no other tensor's. So the values of all tensors together are bounded by the file's
//! size (at most 8 per byte), and so is everything built from them.

use super::cursor::Cursor;
use super::value::{ValueType, read_value};
use super::{GgufError, Metadata, TensorType, dequantize_into};

/// The alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// The most dimensions a tensor has in ggml.
const MAX_RANK: u32 = 4;

/// One tensor of a GGUF file: where it is and how it is stored.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo<'a> {
    name: &'a str,
    dims: Vec<usize>,
    tensor_type: TensorType,
    /// The offset as stored, relative to the data section.
    offset: u64,
    /// Where its bytes start in the file.
    start: usize,
    size: usize,
    values: usize,
}

impl<'a> TensorInfo<'a> {
    /// Its name (`blk.0.attn_q.weight`).
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its dimensions, fastest-varying first (`[in, out]` for a weight applied as `x·Wᵀ`).
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// How its numbers are stored.
    pub fn tensor_type(&self) -> TensorType {
        self.tensor_type
    }

    /// The number of values (the product of the dimensions).
    pub fn values(&self) -> usize {
        self.values
    }

    /// Where its data starts, relative to the data section (as stored).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Its bytes: `start..start + size` in the file.
    pub fn byte_range(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.size
    }
}

/// A parsed GGUF file: its version, metadata and tensor infos, borrowing the file's bytes.
#[derive(Clone)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    version: u32,
    metadata: Metadata<'a>,
    tensors: Vec<TensorInfo<'a>>,
    /// Indices into `tensors`, sorted by name.
    by_name: Vec<usize>,
    alignment: usize,
}

impl<'a> Gguf<'a> {
    /// Reads and checks the layout of the GGUF file `bytes` (nothing is dequantized).
    ///
    /// # Errors
    /// [`GgufError::Magic`], [`GgufError::Version`], [`GgufError::Truncated`],
    /// [`GgufError::CountTooLarge`], [`GgufError::NotUtf8`], [`GgufError::ValueType`],
    /// [`GgufError::DuplicateKey`], [`GgufError::InvalidValue`] (an alignment that is not a power
    /// of two), [`GgufError::UnknownTensorType`], [`GgufError::TensorDims`],
    /// [`GgufError::TensorData`], [`GgufError::DuplicateTensor`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let mut c = Cursor::new(bytes);
        let magic = c.take(4, "magic").map_err(|_| GgufError::Magic { found: bytes.to_vec() })?;
        if magic != b"GGUF" {
            return Err(GgufError::Magic { found: magic.to_vec() });
        }
        let version = c.u32("version")?;
        if !(version == 2 || version == 3) {
            return Err(GgufError::Version { version });
        }
        let tensor_count = c.u64("header tensor count")?;
        // the smallest entry: an empty key (8), a type (4) and a one-byte value
        let keys = c.count(13, "metadata entries", "header metadata count")?;
        let mut entries = Vec::with_capacity(keys);
        for index in 0..keys {
            let key = c.string(&format!("metadata key {index}"))?;
            let type_id = c.u32(&format!("metadata {key} type"))?;
            let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::ValueType {
                key: key.to_string(),
                type_id,
                reason: "which GGUF does not define",
            })?;
            entries.push((key, read_value(&mut c, ty, key)?));
        }
        let metadata = Metadata::new(entries)?;
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(_) => metadata.count("general.alignment").and_then(|a| {
                a.is_power_of_two().then_some(a).ok_or_else(|| GgufError::InvalidValue {
                    key: "general.alignment".to_string(),
                    value: a.to_string(),
                    reason: "must be a power of two",
                })
            })?,
        };
        let tensors = read_tensor_infos(&mut c, tensor_count)?;
        // the data section starts at the next multiple of the alignment
        let data_start = c.position().div_ceil(alignment).saturating_mul(alignment);
        let tensors = tensors
            .into_iter()
            .map(|raw| raw.locate(bytes.len(), data_start, alignment))
            .collect::<Result<Vec<_>, _>>();
        let (tensors, by_name) = check_tensors(tensors?)?;
        Ok(Self { bytes, version, metadata, tensors, by_name, alignment })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of the tensor data (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata<'a> {
        &self.metadata
    }

    /// Every tensor, in the order of the file's tensor infos.
    pub fn tensors(&self) -> &[TensorInfo<'a>] {
        &self.tensors
    }

    /// The tensor named `name`.
    ///
    /// # Errors
    /// [`GgufError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo<'a>, GgufError> {
        let found = self.by_name.binary_search_by(|&i| self.tensors[i].name.cmp(name));
        found.map(|i| &self.tensors[self.by_name[i]]).map_err(|_| GgufError::MissingTensor { name: name.to_string() })
    }

    /// The stored bytes of the tensor `name`.
    ///
    /// # Errors
    /// [`GgufError::MissingTensor`].
    pub fn tensor_bytes(&self, name: &str) -> Result<&'a [u8], GgufError> {
        let range = self.tensor(name)?.byte_range();
        // every range was checked against the file in `parse`
        Ok(self.bytes.get(range).unwrap_or_default())
    }

    /// Every value of the tensor `name` as `f64`, in the file's order (fastest-varying dimension
    /// first: for dimensions `[in, out]`, `out` rows of `in` values).
    ///
    /// # Errors
    /// [`GgufError::MissingTensor`]; [`GgufError::UnsupportedTensorType`] (checked before the
    /// values are allocated).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f64>, GgufError> {
        let info = self.tensor(name)?;
        if !info.tensor_type.dequantizable() {
            return Err(GgufError::UnsupportedTensorType {
                tensor: name.to_string(),
                type_name: info.tensor_type.name(),
            });
        }
        let mut values = vec![0.0; info.values];
        dequantize_into(name, info.tensor_type, self.tensor_bytes(name)?, &mut values)?;
        Ok(values)
    }
}

impl std::fmt::Debug for Gguf<'_> {
    /// The layout without the bytes (a model's would fill the screen).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("len", &self.bytes.len())
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// A tensor info as read, before its data is located.
struct RawTensorInfo<'a> {
    name: &'a str,
    dims: Vec<u64>,
    tensor_type: TensorType,
    offset: u64,
}

/// `count` tensor infos.
fn read_tensor_infos<'a>(c: &mut Cursor<'a>, count: u64) -> Result<Vec<RawTensorInfo<'a>>, GgufError> {
    // the count was read before the metadata: check it against what is left now. The smallest
    // info: an empty name (8), rank (4), one dimension (8), type (4), offset (8).
    let remaining = c.remaining();
    let fits = count.checked_mul(32).is_some_and(|bytes| bytes <= remaining as u64);
    let count = match usize::try_from(count) {
        Ok(n) if fits => n,
        _ => {
            let what = "header tensor count".to_string();
            return Err(GgufError::CountTooLarge { what, count, items: "tensor infos", remaining });
        }
    };
    let mut infos = Vec::with_capacity(count);
    for index in 0..count {
        let name = c.string(&format!("tensor info {index} name"))?;
        let what = format!("tensor info {name}");
        let rank = c.u32(&what)?;
        if rank == 0 || rank > MAX_RANK {
            return Err(GgufError::TensorDims {
                tensor: name.to_string(),
                dims: Vec::new(),
                reason: format!("cannot be read: rank {rank} is not 1 to {MAX_RANK}"),
            });
        }
        let dims = (0..rank).map(|_| c.u64(&what)).collect::<Result<Vec<_>, _>>()?;
        let type_id = c.u32(&what)?;
        let tensor_type = TensorType::from_id(type_id)
            .ok_or_else(|| GgufError::UnknownTensorType { tensor: name.to_string(), type_id })?;
        let offset = c.u64(&what)?;
        infos.push(RawTensorInfo { name, dims, tensor_type, offset });
    }
    Ok(infos)
}

impl<'a> RawTensorInfo<'a> {
    /// The tensor's values and bytes, its range held against the file of `len` bytes whose data
    /// section starts at `data_start`.
    fn locate(self, len: usize, data_start: usize, alignment: usize) -> Result<TensorInfo<'a>, GgufError> {
        let dims_error =
            |reason: String| GgufError::TensorDims { tensor: self.name.to_string(), dims: self.dims.clone(), reason };
        let values = self.dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        let values = values.ok_or_else(|| dims_error("have a product past 2^64".to_string()))?;
        let (per_block, block_bytes) = (self.tensor_type.block_values(), self.tensor_type.block_bytes());
        if !self.dims[0].is_multiple_of(per_block) {
            return Err(dims_error(format!(
                "cannot be {}: a row of {} values is not a whole number of blocks of {per_block}",
                self.tensor_type.name(),
                self.dims[0]
            )));
        }
        // values / per_block blocks of block_bytes: at most 4 bytes per value, no overflow in u128
        let size = u128::from(values / per_block) * u128::from(block_bytes);
        let data_error = |reason: String| GgufError::TensorData {
            tensor: self.name.to_string(),
            offset: self.offset,
            size: u64::try_from(size).unwrap_or(u64::MAX),
            reason,
        };
        if !self.offset.is_multiple_of(alignment as u64) {
            return Err(data_error(format!("is not a multiple of the alignment {alignment}")));
        }
        let start = data_start as u128 + u128::from(self.offset);
        if start + size > len as u128 {
            return Err(data_error(format!("ends past the end of the file ({len} bytes, data from {data_start})")));
        }
        // within the file: every number below fits in usize
        let (start, size, values) = (start as usize, size as usize, values as usize);
        let dims = self.dims.iter().map(|&d| d as usize).collect();
        Ok(TensorInfo {
            name: self.name,
            dims,
            tensor_type: self.tensor_type,
            offset: self.offset,
            start,
            size,
            values,
        })
    }
}

/// Refuses a name used twice and data ranges that overlap; returns the tensors and their indices
/// sorted by name.
fn check_tensors(tensors: Vec<TensorInfo<'_>>) -> Result<(Vec<TensorInfo<'_>>, Vec<usize>), GgufError> {
    let mut by_name: Vec<usize> = (0..tensors.len()).collect();
    by_name.sort_by_key(|&i| tensors[i].name);
    if let Some(pair) = by_name.windows(2).find(|p| tensors[p[0]].name == tensors[p[1]].name) {
        return Err(GgufError::DuplicateTensor { name: tensors[pair[0]].name.to_string() });
    }
    let mut by_start: Vec<usize> = (0..tensors.len()).collect();
    by_start.sort_by_key(|&i| tensors[i].start);
    // the tensor whose data reaches furthest so far, and where it ends
    let mut reach: Option<(&TensorInfo<'_>, usize)> = None;
    for &i in &by_start {
        let t = &tensors[i];
        if let Some((before, end)) = reach.filter(|&(_, end)| t.size > 0 && t.start < end) {
            return Err(GgufError::TensorData {
                tensor: t.name.to_string(),
                offset: t.offset,
                size: t.size as u64,
                reason: format!("overlaps the data of tensor {} (which ends at file offset {end})", before.name),
            });
        }
        if reach.is_none_or(|(_, end)| t.start + t.size > end) {
            reach = Some((t, t.start + t.size));
        }
    }
    Ok((tensors, by_name))
}
