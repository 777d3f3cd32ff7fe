//! The online softmax: a softmax-weighted sum over keys that arrive one block at a time.
//!
//! ```text
//! state (m, ℓ, n):  m = max s_j,  ℓ = Σ e^{s_j − m},  n = Σ e^{s_j − m} v_j,   output = n / ℓ
//! merge:            M = max(m_a, m_b),  ℓ = ℓ_a e^{m_a−M} + ℓ_b e^{m_b−M}  (the same for n)
//! ```
//!
//! [`OnlineSoftmax`] is the state of one query row, as chapter 34 teaches it. The block forward
//! (module `reference`) runs the same step on many rows at once with [`RunningRow`]: a row's
//! maximum and normaliser, whose numerator sits in the output rows so that one matrix product
//! `n += P · V` updates every row of a block. Both rescale with [`rescale`].

use crate::attention::AttentionError;
use crate::tensor::exp::{exp, exp_shifted_sum};

/// The running state of a softmax-weighted sum over keys seen so far, for one query row.
///
/// `Σ_j e^{s_j} v_j / Σ_j e^{s_j}` is kept as `m = max s_j`, `ℓ = Σ e^{s_j − m}` and
/// `n = Σ e^{s_j − m} v_j`; [`OnlineSoftmax::merge`] combines two such states exactly.
///
/// A score of `+∞` takes all the weight (shared equally among the `+∞` scores), as in the
/// explicit softmax; a score of `−∞` takes none.
///
/// ```
/// use llm_from_scratch::attention::OnlineSoftmax;
/// // two blocks of one key each: scores 0 and ln 3, values [1] and [0] → weights 1/4, 3/4
/// let a = OnlineSoftmax::from_block(&[0.0], &[vec![1.0]])?;
/// let b = OnlineSoftmax::from_block(&[3f64.ln()], &[vec![0.0]])?;
/// let merged = a.merge(&b)?;
/// assert!((merged.output()[0] - 0.25).abs() < 1e-15);
/// // rows of different widths are refused, not truncated
/// assert!(OnlineSoftmax::from_block(&[0.0, 1.0], &[vec![1.0], vec![1.0, 2.0]]).is_err());
/// # Ok::<(), llm_from_scratch::attention::AttentionError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct OnlineSoftmax {
    /// Running maximum `m` (−∞ before any visible key).
    pub max: f64,
    /// Normaliser `ℓ = Σ e^{s_j − m}`.
    pub normaliser: f64,
    /// Numerator `n = Σ e^{s_j − m} v_j`.
    pub numerator: Vec<f64>,
}

impl OnlineSoftmax {
    /// The state of no key at all, for values of width `d`.
    pub fn empty(d: usize) -> Self {
        Self { max: f64::NEG_INFINITY, normaliser: 0.0, numerator: vec![0.0; d] }
    }

    /// The state of one block of scores and their value rows (one row per score, all of the
    /// first row's width `d`).
    ///
    /// # Errors
    /// [`AttentionError::OnlineSoftmaxShape`] if the counts differ or a row has another width.
    pub fn from_block(scores: &[f64], values: &[Vec<f64>]) -> Result<Self, AttentionError> {
        let shape_error = |what, expected, actual| AttentionError::OnlineSoftmaxShape { what, expected, actual };
        if scores.len() != values.len() {
            return Err(shape_error("value rows", scores.len(), values.len()));
        }
        let d = values.first().map_or(0, Vec::len);
        if let Some(row) = values.iter().find(|row| row.len() != d) {
            return Err(shape_error("value row width", d, row.len()));
        }
        let mut state = Self::empty(d);
        for (s, v) in scores.iter().zip(values) {
            state = state.merge(&Self { max: *s, normaliser: 1.0, numerator: v.clone() })?;
        }
        Ok(state)
    }

    /// Combines two states: with `M = max(m_a, m_b)`, `ℓ = ℓ_a e^{m_a−M} + ℓ_b e^{m_b−M}` and the
    /// same for the numerators.
    ///
    /// # Errors
    /// [`AttentionError::OnlineSoftmaxShape`] if the two numerators have different widths.
    pub fn merge(&self, other: &Self) -> Result<Self, AttentionError> {
        if self.numerator.len() != other.numerator.len() {
            return Err(AttentionError::OnlineSoftmaxShape {
                what: "merged state width",
                expected: self.numerator.len(),
                actual: other.numerator.len(),
            });
        }
        let max = self.max.max(other.max);
        if max == f64::NEG_INFINITY {
            return Ok(self.clone());
        }
        let (a, b) = (rescale(self.max, max), rescale(other.max, max));
        // a term scaled by 0 takes no part (it may hold ±∞ or NaN that a product by 0 would spread)
        let term = |x: f64, scale: f64| if scale == 0.0 { 0.0 } else { x * scale };
        Ok(Self {
            max,
            normaliser: term(self.normaliser, a) + term(other.normaliser, b),
            numerator: self.numerator.iter().zip(&other.numerator).map(|(&x, &y)| term(x, a) + term(y, b)).collect(),
        })
    }

    /// The weighted average `n / ℓ` (zeros when no key was visible).
    pub fn output(&self) -> Vec<f64> {
        if self.normaliser == 0.0 {
            return vec![0.0; self.numerator.len()];
        }
        self.numerator.iter().map(|x| x / self.normaliser).collect()
    }
}

/// `e^{m − M}`, with an empty state (`m = −∞`) contributing 0; exactly 1 when the maximum did not
/// move (most blocks after the first few), without evaluating the exponential.
///
/// A maximum of `+∞` keeps only the states whose maximum is `+∞` (factor 1), so a `+∞` score
/// takes all the weight instead of turning the state into `e^{∞−∞}` = NaN.
pub(super) fn rescale(m: f64, max: f64) -> f64 {
    if m == max {
        1.0
    } else if m == f64::NEG_INFINITY || max == f64::INFINITY {
        0.0
    } else {
        exp(m - max)
    }
}

/// The maximum `m` and normaliser `ℓ` of one query row in the block forward; its numerator `n`
/// is the row of the output that [`RunningRow::absorb`]'s caller rescales and adds to.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunningRow {
    max: f64,
    normaliser: f64,
}

impl RunningRow {
    /// The state before any key: empty, or with a sink logit `s` (a key of weight `e^s` and a
    /// zero value vector, so it adds to `ℓ` and not to `n`).
    pub(super) fn start(sink: Option<f64>) -> Self {
        match sink {
            Some(s) => Self { max: s, normaliser: 1.0 },
            None => Self { max: f64::NEG_INFINITY, normaliser: 0.0 },
        }
    }

    /// Merges one block of scores into the state, as [`OnlineSoftmax::merge`] with the block's
    /// own state taken at the new maximum `M = max(m, max_j s_j)`: the scores become the weights
    /// `e^{s_j − M}` in place (hidden keys, `−∞`, give 0) and `ℓ ← ℓ e^{m−M} + Σ_j e^{s_j − M}`.
    ///
    /// Returns the factor `e^{m−M}` by which the row's numerator must be rescaled before the
    /// block's weighted values are added, or `None` while the row has seen no key (its weights
    /// are then all 0).
    #[inline]
    pub(super) fn absorb(&mut self, scores: &mut [f64]) -> Option<f64> {
        let max = self.max.max(row_max(scores));
        if max == f64::NEG_INFINITY {
            scores.fill(0.0);
            return None;
        }
        let alpha = rescale(self.max, max);
        let total = exp_shifted_sum(scores, max);
        self.normaliser = self.normaliser * alpha + total;
        self.max = max;
        Some(alpha)
    }

    /// Turns the numerator into the output `n / ℓ` (zeros when no key was visible, as in the
    /// explicit path) and returns the row's `log Σ eˢ = m + ln ℓ` (−∞ then).
    #[inline]
    pub(super) fn finish(&self, numerator: &mut [f64]) -> f64 {
        if self.normaliser == 0.0 {
            numerator.fill(0.0);
            return f64::NEG_INFINITY;
        }
        numerator.iter_mut().for_each(|o| *o /= self.normaliser);
        self.max + self.normaliser.ln()
    }
}

/// The largest value of a row (−∞ for an empty or all-hidden row), over eight interleaved lanes
/// so that it vectorises. NaN never wins a comparison; it still poisons the exponentials after.
fn row_max(row: &[f64]) -> f64 {
    let mut lanes = [f64::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            *m = if x > *m { x } else { *m };
        }
    }
    let tail = chunks.remainder().iter().fold(f64::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    lanes.iter().fold(tail, |m, &x| if x > m { x } else { m })
}
