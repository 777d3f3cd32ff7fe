//! Which of the three equal computations runs a tiled call: the kernels crate's strip kernel, block
//! matrix products, or one query row at a time.

use llm_kernels::strips::StripKernel;

/// The path of a tiled call: the strip kernel (every call of the library), block products (the
/// reference the strip kernel is tested against) or the plain twin (module `plain`), which also
/// runs the lanes whose operands are not all finite. Tests compare the three.
#[derive(Clone, Copy, Debug)]
pub(super) enum TiledPath {
    /// The kernels crate's strip kernel, for one target.
    Strips(StripKernel),
    /// Block matrix products (modules `reference` and `backward`).
    #[cfg_attr(not(test), expect(dead_code, reason = "only tests run a whole call on block products"))]
    Blocks,
    /// One query row at a time (module `plain`).
    #[cfg_attr(not(test), expect(dead_code, reason = "only tests run a whole call on the plain twin"))]
    Plain,
}
