//! Edits of a GGUF file's bytes at the place of a metadata key or a tensor info, for the tests
//! that feed the reader broken files (`tests/gguf.rs`, `tests/hostile.rs`).
//!
//! A key or a tensor name is found as its length-prefixed string (8-byte little-endian length,
//! then the bytes), which occurs once in the fixtures.
#![allow(dead_code)] // each test file uses some of these

use std::path::PathBuf;

/// The bytes of a fixture in `tests/fixtures/gguf/`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The untied tiny LLaMA (two layers, all eight tensor types).
pub fn tiny() -> Vec<u8> {
    fixture("tiny-llama.gguf")
}

/// The offset just past the length-prefixed string `s`.
pub fn after_string(bytes: &[u8], s: &str) -> usize {
    let mut needle = (s.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(s.as_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle).unwrap_or_else(|| panic!("{s} not found"));
    at + needle.len()
}

/// The offset of the value of metadata `key` (after its type).
pub fn value_at(bytes: &[u8], key: &str) -> usize {
    after_string(bytes, key) + 4
}

/// Overwrites bytes at `at`.
pub fn put(bytes: &mut [u8], at: usize, new: &[u8]) {
    bytes[at..at + new.len()].copy_from_slice(new);
}

/// Overwrites bytes `skip` bytes into the value of `key` (a string's text starts 8 bytes in).
pub fn put_in_value(bytes: &mut [u8], key: &str, skip: usize, new: &[u8]) {
    let at = value_at(bytes, key) + skip;
    put(bytes, at, new);
}

/// Sets the value type of `key` to `type_id`.
pub fn set_value_type(bytes: &mut [u8], key: &str, type_id: u32) {
    let at = after_string(bytes, key);
    put(bytes, at, &type_id.to_le_bytes());
}

/// Sets the `u32` value of `key`.
pub fn set_u32(bytes: &mut [u8], key: &str, value: u32) {
    let at = value_at(bytes, key);
    put(bytes, at, &value.to_le_bytes());
}

/// Sets the element count of the array `key` (after its element type).
pub fn set_array_len(bytes: &mut [u8], key: &str, len: u64) {
    let at = value_at(bytes, key) + 4;
    put(bytes, at, &len.to_le_bytes());
}

/// Where the tensor info of `name` is, past its name: `(rank offset, rank)`.
fn info(bytes: &[u8], name: &str) -> (usize, usize) {
    let at = after_string(bytes, name);
    (at, u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize)
}

/// Sets the rank of tensor `name` (the dimensions are not moved).
pub fn set_rank(bytes: &mut [u8], name: &str, rank: u32) {
    let (at, _) = info(bytes, name);
    put(bytes, at, &rank.to_le_bytes());
}

/// Sets dimension `axis` of tensor `name`.
pub fn set_dim(bytes: &mut [u8], name: &str, axis: usize, value: u64) {
    let (at, _) = info(bytes, name);
    put(bytes, at + 4 + 8 * axis, &value.to_le_bytes());
}

/// Sets the type id of tensor `name`.
pub fn set_type(bytes: &mut [u8], name: &str, type_id: u32) {
    let (at, rank) = info(bytes, name);
    put(bytes, at + 4 + 8 * rank, &type_id.to_le_bytes());
}

/// The data offset of tensor `name` (relative to the data section).
pub fn offset(bytes: &[u8], name: &str) -> u64 {
    let (at, rank) = info(bytes, name);
    let at = at + 8 + 8 * rank;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Sets the data offset of tensor `name`.
pub fn set_offset(bytes: &mut [u8], name: &str, value: u64) {
    let (at, rank) = info(bytes, name);
    put(bytes, at + 8 + 8 * rank, &value.to_le_bytes());
}

/// Replaces every occurrence of the length-prefixed string `old` by `new` of the same length.
pub fn rename(bytes: &mut [u8], old: &str, new: &str) {
    assert_eq!(old.len(), new.len());
    let at = after_string(bytes, old) - old.len();
    put(bytes, at, new.as_bytes());
}
