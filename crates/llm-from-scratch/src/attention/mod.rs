//! The attention family.
