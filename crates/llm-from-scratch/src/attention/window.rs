//! Which keys a query may see: causality, a sliding window, and padding — always decided from
//! *absolute* positions, so the same rule holds in a full pass, in chunked prefill and in decode.
//!
//! Chapter 33 (`ch33-kv-cache`) teaches sliding windows with it; chapter 34's tiled kernels ask
//! [`Visibility`] which keys a query sees, and whether a whole block is hidden or open.

use crate::attention::AttentionError;
use crate::error::Shape;
use crate::tensor::Mask;

/// A sliding window: a query sees only the most recent keys.
///
/// Two conventions are in use and both are named here, because an off-by-one between them
/// silently changes a model:
///
/// | convention | query `i` sees key `j` when | keys visible | used by |
/// |---|---|---|---|
/// | [`SlidingWindow::Inclusive`]`(W)` | `0 ≤ i − j ≤ W` | `W + 1` (itself and `W` before) | the course |
/// | [`SlidingWindow::Exclusive`]`(W)` | `0 ≤ i − j < W` | `W` (itself and `W − 1` before) | Hugging Face / Mistral checkpoints (`sliding_window`) |
///
/// So a Mistral checkpoint with `sliding_window = 4096` is `Exclusive(4096)` — the same as
/// `Inclusive(4095)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingWindow {
    /// `0 ≤ i − j ≤ W`: `W + 1` visible keys.
    Inclusive(usize),
    /// `0 ≤ i − j < W`: `W` visible keys.
    Exclusive(usize),
}

impl SlidingWindow {
    /// How many keys (the query's own position included) a query can see at most.
    pub fn visible_keys(self) -> usize {
        match self {
            SlidingWindow::Inclusive(w) => w.saturating_add(1),
            SlidingWindow::Exclusive(w) => w,
        }
    }

    /// `true` when a query at `i` may see a key at `j ≤ i` under this window.
    pub fn sees(self, i: usize, j: usize) -> bool {
        j <= i && i - j < self.visible_keys()
    }

    /// Rejects a window through which no key passes (`Exclusive(0)`).
    ///
    /// # Errors
    /// [`AttentionError::InvalidWindow`].
    pub fn validate(self) -> Result<(), AttentionError> {
        if self.visible_keys() == 0 {
            return Err(AttentionError::InvalidWindow {
                window: format!("{self}"),
                reason: "0 ≤ i − j < 0 admits no key, not even the query itself",
            });
        }
        Ok(())
    }
}

impl std::fmt::Display for SlidingWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlidingWindow::Inclusive(w) => write!(f, "inclusive({w})"),
            SlidingWindow::Exclusive(w) => write!(f, "exclusive({w})"),
        }
    }
}

/// `true` when a query at absolute position `i` may see a key at `j`: not in the future, and
/// inside the window if there is one.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::{SlidingWindow, visible};
/// assert!(visible(5, 5, None) && visible(5, 0, None) && !visible(5, 6, None));
/// // Exclusive(3): the query and the 2 keys before it
/// let w = Some(SlidingWindow::Exclusive(3));
/// assert!(visible(5, 3, w) && !visible(5, 2, w));
/// ```
pub fn visible(i: usize, j: usize, window: Option<SlidingWindow>) -> bool {
    j <= i && window.is_none_or(|w| w.sees(i, j))
}

/// Which keys each query sees, decided from absolute positions.
#[derive(Clone, Debug, Default)]
pub struct Visibility {
    /// Stream position of query row 0 (key row `j` is at position `j`): `T_k − T_q` for chunked
    /// prefill and decode over keys `0..T_k`, 0 for self-attention.
    pub query_offset: usize,
    /// Sliding window, if any.
    pub window: Option<SlidingWindow>,
    /// `[B, T_k]`, `true` = padding key (never seen).
    pub key_padding: Option<Vec<bool>>,
}

impl Visibility {
    /// The same rule as plain data, as the kernels read it (a window as its number of keys).
    pub(crate) fn rule(&self) -> llm_kernels::visibility::Visibility<'_> {
        llm_kernels::visibility::Visibility {
            query_offset: self.query_offset,
            window_keys: self.window.map(SlidingWindow::visible_keys),
            key_padding: self.key_padding.as_deref(),
        }
    }

    /// `true` when query row `i` of batch row `b` sees key `j` (of `t_k`).
    pub(crate) fn sees(&self, b: usize, t_k: usize, i: usize, j: usize) -> bool {
        visible(self.query_offset + i, j, self.window) && !self.key_padding.as_ref().is_some_and(|p| p[b * t_k + j])
    }

    /// `true` when no query in rows `i0..i1` can see a key in `j0..j1` (causality and window only;
    /// an empty range: `true`).
    pub(crate) fn block_hidden(&self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        self.rule().block_hidden(i0, i1, j0, j1)
    }

    /// `true` when every query in `i0..i1` sees every key in `j0..j1` (no per-element test needed;
    /// an empty range: `true`).
    pub(crate) fn block_open(&self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        self.rule().block_open(i0, i1, j0, j1)
    }
}

/// The mask (`true` = hidden) of queries at `query_positions` over keys at `key_positions`.
///
/// Positions are given per batch row (`rows` rows of `T_q` and `T_k`); `key_padding`
/// (`rows × T_k`, `true` = padding) hides padded keys. The result has shape `[T_q, T_k]` for one
/// row, `[B, 1, 1, T_q, T_k]` for several — broadcasting over the `[B, G, H/G, T_q, T_k]` scores
/// of grouped attention.
///
/// # Shapes
/// Positions `rows × T_q` and `rows × T_k`, padding `rows × T_k` → `[T_q, T_k]` for `rows = 1`,
/// `[B, 1, 1, T_q, T_k]` for `rows = B > 1`.
///
/// # Errors
/// [`AttentionError::PaddingShape`] if `rows` is 0 or does not divide both position lists, or the
/// padding is not `rows × T_k`; [`AttentionError::Tensor`] if the mask would be too large.
///
/// # Example
/// ```
/// use llm_from_scratch::attention::attention_mask;
/// // decode: one query at position 3 over keys 0..=3, the first of which is padding
/// let mask = attention_mask(&[3], &[0, 1, 2, 3], 1, Some(&[true, false, false, false]), None)?;
/// assert_eq!((mask.shape(), mask.as_slice()), (&[1usize, 4][..], &[true, false, false, false][..]));
/// assert!(attention_mask(&[3], &[0, 1], 1, Some(&[false]), None).is_err()); // padding of 1 for 2 keys
/// # Ok::<(), llm_from_scratch::attention::AttentionError>(())
/// ```
pub fn attention_mask(
    query_positions: &[usize],
    key_positions: &[usize],
    rows: usize,
    key_padding: Option<&[bool]>,
    window: Option<SlidingWindow>,
) -> Result<Mask, AttentionError> {
    let fits = rows > 0
        && query_positions.len().is_multiple_of(rows)
        && key_positions.len().is_multiple_of(rows)
        && key_padding.is_none_or(|p| p.len() == key_positions.len());
    if !fits {
        return Err(AttentionError::PaddingShape {
            what: "positions or key padding",
            expected: Shape(vec![rows, key_positions.len() / rows.max(1)]),
            actual: Shape(vec![query_positions.len(), key_positions.len(), key_padding.map_or(0, <[bool]>::len)]),
        });
    }
    let (t_q, t_k) = (query_positions.len() / rows, key_positions.len() / rows);
    let shape = if rows == 1 { vec![t_q, t_k] } else { vec![rows, 1, 1, t_q, t_k] };
    crate::tensor::dense::element_count("attention mask", &shape)?;
    let mut hidden = Vec::with_capacity(rows * t_q * t_k);
    for b in 0..rows {
        for &i in &query_positions[b * t_q..(b + 1) * t_q] {
            for (s, &j) in key_positions[b * t_k..(b + 1) * t_k].iter().enumerate() {
                let padded = key_padding.is_some_and(|p| p[b * t_k + s]);
                hidden.push(padded || !visible(i, j, window));
            }
        }
    }
    Ok(Mask::new(&shape, hidden)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_conventions_differ_by_one_key() {
        // query 5 with W = 2: inclusive sees 3,4,5; exclusive sees 4,5
        let seen = |w: SlidingWindow| (0..=7).filter(|&j| visible(5, j, Some(w))).collect::<Vec<_>>();
        assert_eq!(seen(SlidingWindow::Inclusive(2)), vec![3, 4, 5]);
        assert_eq!(seen(SlidingWindow::Exclusive(2)), vec![4, 5]);
        assert_eq!(SlidingWindow::Exclusive(4096).visible_keys(), SlidingWindow::Inclusive(4095).visible_keys());
        assert!(SlidingWindow::Inclusive(0).validate().is_ok());
        let err = SlidingWindow::Exclusive(0).validate().unwrap_err();
        assert!(err.to_string().starts_with("attention config: window exclusive(0) is meaningless"), "{err}");
    }

    #[test]
    fn masks_come_from_absolute_positions() {
        // a decode step: one query at position 6 over cached keys 4,5 and itself, window inclusive(1)
        let m = attention_mask(&[6], &[4, 5, 6], 1, None, Some(SlidingWindow::Inclusive(1))).unwrap();
        assert_eq!((m.shape(), m.as_slice()), (&[1usize, 3][..], &[true, false, false][..]));
        // two rows, the second left-padded by one token
        let m = attention_mask(&[0, 1, 0, 0], &[0, 1, 0, 0], 2, Some(&[false, false, true, false]), None).unwrap();
        assert!(attention_mask(&[0, 1], &[0, 1], 2, Some(&[false]), None).is_err());
        assert!(attention_mask(&[0], &[0], 0, None, None).is_err());
        assert_eq!(m.shape(), &[2, 1, 1, 2, 2]);
        assert_eq!(m.as_slice(), &[false, true, false, false, true, false, true, false]);
    }
}
