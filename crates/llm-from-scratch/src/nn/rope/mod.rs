//! Rotary position embedding (RoPE).
//!
//! Chapter 29 (`ch29-rotary-position-embedding`) teaches it; every attention layer uses it.
//!
//! Each head vector is cut into coordinate pairs; pair `i` of the token at absolute position `p`
//! is rotated by the angle `p · θ_i` with `θ_i = base^(−2i/d_h)`:
//!
//! ```text
//! (x, y) ↦ (x·cos(pθ_i) − y·sin(pθ_i),  x·sin(pθ_i) + y·cos(pθ_i))
//! ```
//!
//! Rotations compose by adding angles, so after rotating a query at position `m` and a key at
//! position `n`, their dot product depends only on `m − n`: attention sees relative positions.
//! Rotations keep lengths, so norms are unchanged.
//!
//! Two pairings are in use:
//! - [`RopeLayout::AdjacentPairs`]: `(0,1), (2,3), …` — the original paper and the course.
//! - [`RopeLayout::SplitHalves`]: `(i, i + d_h/2)` — the "rotate half" convention of Hugging Face
//!   checkpoints. Choosing it lets such weights be used without permuting their rows.
//!
//! Cost: one pass over the input, 6 flops per pair (4 multiplies, 2 additions), reading the angles
//! from tables. The backward is the same pass over the upstream adjoint with the opposite angle
//! (a rotation's inverse is its transpose), so it costs what the forward costs.

use thiserror::Error;

use crate::autodiff::TensorValue;
use crate::error::{Shape, TensorAutodiffError};
use crate::tensor::Tensor;
use llm_kernels::rope::{PairLayout, RotationRows, RowRotation};
use llm_kernels::rows::{RowTasks, build_rows};

/// The most values one cosine (or sine) table holds: positions `0..TABLE_VALUES / (d_h/2)` are
/// looked up, later ones computed when used — with the same expression, so the results are the
/// same bits. The tables are built on first use, so a configuration (or a checkpoint's) with a
/// huge `max_positions` costs nothing until it runs, and at most 2 × 2 MiB then.
pub const TABLE_VALUES: usize = 1 << 18;

/// Rows rotated per parallel task.
const ROWS_PER_TASK: usize = 256;
/// Below this many values a rotation runs on one thread.
const PARALLEL_VALUES: usize = 1 << 16;

/// Which coordinates form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(2i, 2i+1)`.
    AdjacentPairs,
    /// Pairs `(i, i + d_h/2)`.
    SplitHalves,
}

/// Errors of rotary embedding: configuration, positions and inputs.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RopeError {
    /// Head width 0: nothing to rotate.
    #[error("rope: head width must be positive, got 0")]
    ZeroHeadWidth,
    /// Coordinates come in pairs.
    #[error("rope: head width must be even to form coordinate pairs, got {head_width}")]
    OddHeadWidth {
        /// The width given.
        head_width: usize,
    },
    /// No position can be encoded.
    #[error("rope: capacity (max positions) must be positive, got 0")]
    ZeroCapacity,
    /// The frequency base must be finite and positive (θ_i = base^(−2i/d_h)).
    #[error("rope: base must be finite and positive, got {base}")]
    InvalidBase {
        /// The base given.
        base: f64,
    },
    /// `offset + tokens` does not fit in `usize`.
    #[error("rope: position interval starting at {offset} with {tokens} tokens overflows")]
    PositionOverflow {
        /// First position.
        offset: usize,
        /// Number of tokens.
        tokens: usize,
    },
    /// Some position is at or past the capacity.
    #[error("rope: positions {start}..{end} exceed capacity {capacity}")]
    PositionOutOfRange {
        /// First position of the interval.
        start: usize,
        /// One past the last position.
        end: usize,
        /// `max_positions`.
        capacity: usize,
    },
    /// The input is not `[..., T, d_h]`, or explicit positions do not match it.
    #[error("rope: input {shape} does not fit ({reason})")]
    InputShape {
        /// The input's shape.
        shape: Shape,
        /// What was required.
        reason: String,
    },
    /// A tensor operation failed (e.g. a released input).
    #[error("rope: {0}")]
    Tensor(#[from] TensorAutodiffError),
}

/// Rotation tables for the first positions of one head width (see [`TABLE_VALUES`]).
#[derive(Debug)]
struct Tables {
    /// Positions covered: `0..positions`.
    positions: usize,
    /// `cos(p·θ_i)` at `[p, i]`, `positions × d_h/2`.
    cos: Vec<f64>,
    /// `sin(p·θ_i)` at `[p, i]`.
    sin: Vec<f64>,
}

/// Rotation by position for heads of one width, positions `0..max_positions` (angles looked up in
/// tables of at most [`TABLE_VALUES`] values, built on first use, or computed past them).
///
/// # Shapes
/// [`RotaryEmbedding::rotate`]: `x [..., T, d_h] → [..., T, d_h]`, token `t` rotated at absolute
/// position `offset + t`; [`RotaryEmbedding::rotate_at`] takes one position per token.
///
/// # Errors
/// [`RotaryEmbedding::new`] refuses a zero or odd head width, zero capacity and a base that is not
/// finite and positive ([`RopeError`]); the rotations refuse a last axis other than `d_h` and
/// positions past the capacity ([`RopeError::InputShape`], [`RopeError::PositionOutOfRange`]).
///
/// # Example
/// ```
/// use llm_from_scratch::{constant, nn::RotaryEmbedding};
/// let rope = RotaryEmbedding::new(4, 16, 10_000.0)?;
/// let q = constant(&[1, 4], &[0.3, -0.2, 0.5, 0.1])?;
/// let k = constant(&[1, 4], &[0.1, 0.4, -0.3, 0.2])?;
/// // q at position m and k at position n: the score depends only on m − n
/// let score = |m: usize, n: usize| -> Result<f64, Box<dyn std::error::Error>> {
///     let (q, k) = (rope.rotate(&q, m)?.value()?, rope.rotate(&k, n)?.value()?);
///     Ok(q.as_slice().iter().zip(k.as_slice()).map(|(a, b)| a * b).sum())
/// };
/// assert!((score(5, 3)? - score(9, 7)?).abs() < 1e-12);
/// assert!(rope.rotate(&q, 16).is_err()); // the capacity is positions 0..16
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    head_width: usize,
    max_positions: usize,
    base: f64,
    layout: RopeLayout,
    /// `θ_i = base^(−2i/d_h)`, one per pair.
    thetas: std::sync::Arc<Vec<f64>>,
    /// Built on first use, shared by clones.
    tables: std::sync::Arc<std::sync::OnceLock<Tables>>,
}

/// `(cos(p·θ_i), sin(p·θ_i))`: the one expression both the tables and later positions use.
fn angle(p: usize, theta: f64) -> (f64, f64) {
    let angle = p as f64 * theta;
    (angle.cos(), angle.sin())
}

/// The rotation of one coordinate pair by the angle whose cosine and sine are `c` and `s`:
/// `(x_a, x_b) ↦ (x_a·c − x_b·s, x_a·s + x_b·c)`.
///
/// The plain twin of the row loop ([`llm_kernels::rope`]), which turns every pair of a row
/// this way, compiled for the processor's vector instructions; the tests hold the two to the same
/// bits.
#[cfg_attr(not(test), expect(dead_code, reason = "the twin the tests hold the row loop to"))]
fn rotate_pair((xa, xb): (f64, f64), c: f64, s: f64) -> (f64, f64) {
    (xa * c - xb * s, xa * s + xb * c)
}

impl RotaryEmbedding {
    /// Tables for heads of width `head_width`, positions `0..max_positions`, frequency `base`
    /// (10 000 in most models), adjacent-pair layout.
    ///
    /// ```
    /// use llm_from_scratch::{constant, nn::RotaryEmbedding};
    /// // d_h = 2 has one pair with θ₀ = 1: position 1 rotates [1, 0] by one radian.
    /// let rope = RotaryEmbedding::new(2, 4, 100.0)?;
    /// let x = constant(&[2, 2], &[1.0, 0.0, 1.0, 0.0])?;
    /// let y = rope.rotate(&x, 0)?.value()?;
    /// assert_eq!(&y.as_slice()[..2], &[1.0, 0.0]);
    /// assert!((y.as_slice()[2] - 1f64.cos()).abs() < 1e-15 && (y.as_slice()[3] - 1f64.sin()).abs() < 1e-15);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The errors of [`RotaryEmbedding::check_settings`].
    pub fn new(head_width: usize, max_positions: usize, base: f64) -> Result<Self, RopeError> {
        Self::check_settings(head_width, max_positions, base)?;
        let pairs = head_width / 2;
        crate::tensor::dense::element_count("rope frequencies", &[pairs])?;
        let thetas: Vec<f64> = (0..pairs).map(|i| base.powf(-2.0 * i as f64 / head_width as f64)).collect();
        Ok(Self {
            head_width,
            max_positions,
            base,
            layout: RopeLayout::AdjacentPairs,
            thetas: thetas.into(),
            tables: Default::default(),
        })
    }

    /// The head-width rule every attention layer applies: positive, and even (RoPE rotates pairs).
    ///
    /// # Errors
    /// [`RopeError::ZeroHeadWidth`], then [`RopeError::OddHeadWidth`].
    pub fn check_head_width(head_width: usize) -> Result<(), RopeError> {
        match head_width {
            0 => Err(RopeError::ZeroHeadWidth),
            w if !w.is_multiple_of(2) => Err(RopeError::OddHeadWidth { head_width }),
            _ => Ok(()),
        }
    }

    /// Checks the settings of [`RotaryEmbedding::new`] without allocating anything.
    ///
    /// # Errors
    /// [`RopeError::ZeroHeadWidth`], [`RopeError::OddHeadWidth`], [`RopeError::ZeroCapacity`],
    /// [`RopeError::InvalidBase`] — checked in that order.
    pub fn check_settings(head_width: usize, max_positions: usize, base: f64) -> Result<(), RopeError> {
        Self::check_head_width(head_width)?;
        if max_positions == 0 {
            return Err(RopeError::ZeroCapacity);
        }
        if !(base.is_finite() && base > 0.0) {
            return Err(RopeError::InvalidBase { base });
        }
        Ok(())
    }

    /// The tables of the first positions, built on first use (at most [`TABLE_VALUES`] each).
    fn tables(&self) -> &Tables {
        self.tables.get_or_init(|| {
            let pairs = self.thetas.len();
            let positions = self.max_positions.min(TABLE_VALUES / pairs.max(1));
            let (mut cos, mut sin) = (Vec::with_capacity(positions * pairs), Vec::with_capacity(positions * pairs));
            for p in 0..positions {
                for &theta in self.thetas.iter() {
                    let (c, s) = angle(p, theta);
                    cos.push(c);
                    sin.push(s);
                }
            }
            Tables { positions, cos, sin }
        })
    }

    /// The same tables with another pairing.
    pub fn with_layout(mut self, layout: RopeLayout) -> Self {
        self.layout = layout;
        self
    }

    /// `d_h`.
    pub fn head_width(&self) -> usize {
        self.head_width
    }

    /// Number of positions the tables cover.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The frequency base.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// The pairing in use.
    pub fn layout(&self) -> RopeLayout {
        self.layout
    }

    /// Checks that positions `offset..offset+tokens` exist (with overflow detection).
    ///
    /// # Errors
    /// [`RopeError::PositionOverflow`] or [`RopeError::PositionOutOfRange`].
    pub fn check_interval(&self, offset: usize, tokens: usize) -> Result<(), RopeError> {
        let end = offset.checked_add(tokens).ok_or(RopeError::PositionOverflow { offset, tokens })?;
        if end > self.max_positions {
            return Err(RopeError::PositionOutOfRange { start: offset, end, capacity: self.max_positions });
        }
        Ok(())
    }

    /// Rotates `x [..., T, d_h]` with token `t` at absolute position `position_offset + t`.
    ///
    /// # Errors
    /// [`RopeError::InputShape`] if `x` is not `[..., T, d_h]`; the interval errors of
    /// [`RotaryEmbedding::check_interval`]; [`RopeError::Tensor`] for a released input.
    pub fn rotate(&self, x: &TensorValue, position_offset: usize) -> Result<TensorValue, RopeError> {
        let tokens = self.check_input(x)?;
        self.check_interval(position_offset, tokens)?;
        let positions: Vec<usize> = (position_offset..position_offset + tokens).collect();
        self.rotate_unchecked(x, positions)
    }

    /// Rotates `x [..., T, d_h]` with explicit positions: either `T` of them (shared by every
    /// leading index) or `x.shape()[0] · T` (one row of `T` per index of the first axis, e.g. per
    /// batch row when left padding shifts each sequence differently).
    ///
    /// # Errors
    /// [`RopeError::InputShape`] if the count fits neither form; [`RopeError::PositionOutOfRange`]
    /// for a position at or past capacity; [`RopeError::Tensor`] for a released input.
    pub fn rotate_at(&self, x: &TensorValue, positions: &[usize]) -> Result<TensorValue, RopeError> {
        self.check_input(x)?;
        self.check_positions(x.shape(), positions)?;
        self.rotate_unchecked(x, positions.to_vec())
    }

    /// Checks `positions` for rows `[..., T, d_h]` of `shape`: `T` of them, or one row of `T` per
    /// index of axis 0 (which needs an axis besides `[T, d_h]`), each within the tables.
    fn check_positions(&self, shape: &[usize], positions: &[usize]) -> Result<(), RopeError> {
        let tokens = shape[shape.len() - 2];
        let rows = if shape.len() >= 3 { shape[0] } else { 1 };
        if positions.len() != tokens && positions.len() != rows.saturating_mul(tokens) {
            return Err(RopeError::InputShape {
                shape: Shape::from(shape),
                reason: format!("{} positions given; need {tokens} or {}", positions.len(), rows * tokens),
            });
        }
        if let Some(&bad) = positions.iter().find(|&&p| p >= self.max_positions) {
            return Err(RopeError::PositionOutOfRange {
                start: bad,
                end: bad.saturating_add(1),
                capacity: self.max_positions,
            });
        }
        Ok(())
    }

    /// `T` for an input `[..., T, d_h]`.
    fn check_input(&self, x: &TensorValue) -> Result<usize, RopeError> {
        let shape = x.shape();
        if shape.len() < 2 || shape[shape.len() - 1] != self.head_width {
            return Err(RopeError::InputShape {
                shape: Shape::from(shape),
                reason: format!("expected [..., T, {}]", self.head_width),
            });
        }
        Ok(shape[shape.len() - 2])
    }

    /// Rotates every row by `sign ·` its angle (sign −1 is the inverse rotation, the backward).
    ///
    /// Rows are independent, so blocks of [`ROWS_PER_TASK`] rows run in parallel; each value is
    /// computed the same way whatever the thread count. Each output row is written once, from
    /// its input row, into storage that was never filled (no pass of zeros, no copy of the input),
    /// by the kernels crate's row loop ([`RowRotation`]).
    fn apply(&self, x: &Tensor, positions: &[usize], sign: f64) -> Tensor {
        // rows [L, M, T] of `x`: L the first axis (whose index picks a row of positions, when
        // each has its own), M every axis between it and the tokens
        let shape = x.shape();
        let rank = shape.len();
        let tokens = shape[rank - 2];
        let lanes: usize = shape[1..rank.saturating_sub(2).max(1)].iter().product::<usize>().max(1);
        let outer = if rank >= 3 { shape[0] } else { 1 };
        let per_row = if positions.len() > tokens { tokens } else { 0 };
        let walk =
            RowWalk { extents: [outer, lanes, tokens], source: [lanes * tokens, tokens, 1], position: [per_row, 0, 1] };
        self.apply_rows(x.as_slice(), shape.to_vec(), walk, positions, sign)
    }

    /// A tensor of `shape` (as many values as `x`) whose row `r` is the input row that `walk`
    /// gives it, rotated by `sign ·` the angles of `positions[i]`, `i` the walk's position index
    /// of the row: [`RotaryEmbedding::apply`], and with the rows permuted,
    /// [`RotaryEmbedding::rotate_heads`].
    fn apply_rows(&self, x: &[f64], shape: Vec<usize>, walk: RowWalk, positions: &[usize], sign: f64) -> Tensor {
        let d = self.head_width; // even and ≥ 2 (checked by `new`); callers check the last axis is d
        let tables = self.tables();
        let tasks = RowTasks { rows_per_task: ROWS_PER_TASK, parallel: x.len() >= PARALLEL_VALUES };
        // the row loop compiled for the target in force (no fused operations: the same bits on
        // every target)
        let rotation = RowRotation::new(llm_kernels::active());
        let layout = match self.layout {
            RopeLayout::AdjacentPairs => PairLayout::Adjacent,
            RopeLayout::SplitHalves => PairLayout::Apart,
        };
        // per task: the rows it reads (where the walk stands, and the angles of a position past
        // the tables, computed when needed)
        let task_rows = || Rows { rope: self, tables, x, walk, positions, cursor: None, far: (Vec::new(), Vec::new()) };
        let out =
            build_rows((x.len(), d), tasks, task_rows, |rows, block| rotation.rotate_rows(layout, rows, block, sign));
        Tensor::from_parts(shape, out)
    }

    /// `cos(p·θ_i)` and `sin(p·θ_i)` of every pair `i`: looked up in the tables, or computed into
    /// `far` for a position past them (with the same expression, so the same bits).
    fn angles<'t>(&self, tables: &'t Tables, p: usize, far: &'t mut (Vec<f64>, Vec<f64>)) -> (&'t [f64], &'t [f64]) {
        let half = self.head_width / 2;
        if p < tables.positions {
            return (&tables.cos[p * half..(p + 1) * half], &tables.sin[p * half..(p + 1) * half]);
        }
        *far = self.thetas.iter().map(|&theta| angle(p, theta)).unzip();
        (&far.0, &far.1)
    }

    fn rotate_unchecked(&self, x: &TensorValue, positions: Vec<usize>) -> Result<TensorValue, RopeError> {
        let out = self.apply(&x.read("rope")?, &positions, 1.0);
        let tables = self.clone();
        Ok(TensorValue::record("rope", vec![x.clone()], out, move |ctx| {
            // forward: y = R(pθ)·x per pair  =>  dx = R(pθ)ᵀ·dy = R(−pθ)·dy
            Ok(vec![Some(tables.apply(ctx.grad(), &positions, -1.0))])
        }))
    }
}

mod heads;
#[cfg(test)]
mod tests;
mod walk;

use walk::{Cursor, RowWalk};

/// The rows one task of [`RotaryEmbedding::apply_rows`] rotates: for output row `r`, the input row
/// and the angles of the position that `walk` gives it.
struct Rows<'a> {
    rope: &'a RotaryEmbedding,
    tables: &'a Tables,
    x: &'a [f64],
    walk: RowWalk,
    positions: &'a [usize],
    /// Where the walk stands: at the task's next row, once its first row is known.
    cursor: Option<Cursor>,
    /// The angles of a position past the tables.
    far: (Vec<f64>, Vec<f64>),
}

impl RotationRows for Rows<'_> {
    fn fetch_ahead(&self) -> bool {
        // the inner counter steps over rows apart, and runs longer than the loop looks ahead
        self.walk.source[2] > 1 && self.walk.extents[2] > llm_kernels::rope::AHEAD
    }

    fn row(&mut self, r: usize) -> (&[f64], &[f64], &[f64]) {
        let at = self.walk.step(&mut self.cursor, r);
        let d = self.rope.head_width;
        let (cos, sin) = self.rope.angles(self.tables, self.positions[at.position], &mut self.far);
        (cos, sin, &self.x[at.source * d..(at.source + 1) * d])
    }
}
