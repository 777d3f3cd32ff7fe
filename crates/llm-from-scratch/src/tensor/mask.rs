//! [`Mask`]: a boolean tensor saying which entries an operation blanks out.

use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::dense::element_count;

/// A row-major boolean tensor; `true` marks an entry to be *masked* (filled, hidden).
///
/// A mask broadcasts like a tensor: a `[T,T]` causal mask applies to every lane of `[B,h,T,T]`.
///
/// # Shapes
/// Any shape that broadcasts to the value it masks; [`Mask::causal`] is `[T_q, T_k]`.
///
/// # Errors
/// [`Mask::new`]: [`TensorAutodiffError::LengthMismatch`] if the flags do not fill the shape.
///
/// # Example
/// ```
/// use llm_from_scratch::Mask;
/// // three queries over three keys: query i hides keys j > i
/// let causal = Mask::causal(3, 3, 0)?;
/// assert_eq!(causal.as_slice(), &[false, true, true, false, false, true, false, false, false]);
/// // decode: one query at position 2 over keys 0..3 sees all of them
/// assert_eq!(Mask::causal(1, 3, 2)?.as_slice(), &[false, false, false]);
/// assert!(Mask::new(&[2, 2], vec![true; 3]).is_err());
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mask {
    shape: Vec<usize>,
    masked: Vec<bool>,
}

impl Mask {
    /// A mask of `shape` from row-major flags (`true` = masked).
    ///
    /// # Errors
    /// [`TensorAutodiffError::LengthMismatch`] if the flags do not fill the shape.
    pub fn new(shape: &[usize], masked: Vec<bool>) -> Result<Self> {
        let expected = element_count("mask", shape)?;
        if expected != masked.len() {
            return Err(TensorAutodiffError::LengthMismatch {
                op: "mask",
                shape: Shape::from(shape),
                expected,
                actual: masked.len(),
            });
        }
        Ok(Self { shape: shape.to_vec(), masked })
    }

    /// The causal mask `[t_q, t_k]` for queries at absolute positions `offset..offset+t_q` and keys
    /// at `0..t_k`: key `j` is masked for query `i` when it lies in the future, `j > offset + i`.
    ///
    /// ```
    /// use llm_from_scratch::Mask;
    /// let mask = Mask::causal(2, 3, 0)?; // query 0 sees key 0; query 1 sees keys 0 and 1
    /// assert_eq!(mask.as_slice(), &[false, true, true, false, false, true]);
    /// assert!(Mask::causal(1 << 20, 1 << 20, 0).is_err()); // 2⁴⁰ flags: refused, not allocated
    /// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
    /// ```
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeOverflow`] if `t_q · t_k` overflows or exceeds
    /// [`crate::tensor::MAX_ELEMENTS`] — checked before anything is allocated.
    pub fn causal(t_q: usize, t_k: usize, offset: usize) -> Result<Self> {
        element_count("causal mask", &[t_q, t_k])?;
        let masked = (0..t_q).flat_map(|i| (0..t_k).map(move |j| j > offset.saturating_add(i))).collect();
        Ok(Self { shape: vec![t_q, t_k], masked })
    }

    /// The same mask with one more, never-masked column on the last axis (for a sink logit).
    ///
    /// # Errors
    /// [`TensorAutodiffError::RankMismatch`] for a rank-0 mask.
    pub fn with_open_column(&self) -> Result<Self> {
        let Some(&width) = self.shape.last() else {
            return Err(TensorAutodiffError::RankMismatch {
                op: "mask",
                expected: "at least 1".into(),
                shape: Shape::from(self.shape()),
            });
        };
        let mut masked = Vec::with_capacity(self.masked.len() + self.masked.len() / width.max(1));
        if width == 0 {
            masked.resize(self.shape[..self.shape.len() - 1].iter().product(), false);
        } else {
            for row in self.masked.chunks(width) {
                masked.extend_from_slice(row);
                masked.push(false);
            }
        }
        let mut shape = self.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last += 1;
        }
        Ok(Self { shape, masked })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The flags in row-major order (`true` = masked).
    pub fn as_slice(&self) -> &[bool] {
        &self.masked
    }
}
