//! Which keys a query sees, as plain data: causality, a sliding window of a number of keys, and
//! padding, decided from absolute positions. The teaching crate's `attention::Visibility` and
//! `SlidingWindow` (with its two conventions) are the checked forms a caller builds; the kernels
//! read this one.

/// Which keys each query sees, from absolute positions: key row `j` is at position `j`, query row
/// `i` at `query_offset + i`. The teaching crate's `attention::Visibility` is the checked form.
#[derive(Clone, Copy, Debug, Default)]
pub struct Visibility<'a> {
    /// Position of query row 0.
    pub query_offset: usize,
    /// With a sliding window, how many keys a query sees at most (itself included; ≥ 1).
    pub window_keys: Option<usize>,
    /// `[B, T_k]`, `true` = padding key (never seen).
    pub key_padding: Option<&'a [bool]>,
}

/// `true` when a query at absolute position `i` sees a key at `j`: not in the future, and inside
/// a window of `window_keys` keys if there is one.
#[inline]
pub fn visible(i: usize, j: usize, window_keys: Option<usize>) -> bool {
    j <= i && window_keys.is_none_or(|w| i - j < w)
}

impl Visibility<'_> {
    /// `true` when query row `i` of batch row `b` sees key `j` (of `t_k`). Positions past
    /// `usize::MAX` stay at it.
    ///
    /// # Panics
    /// With padding, if `b · t_k + j` is not an index of it (as indexing the slice would).
    #[inline]
    pub fn sees(&self, b: usize, t_k: usize, i: usize, j: usize) -> bool {
        visible(self.query_offset.saturating_add(i), j, self.window_keys)
            && !self.key_padding.is_some_and(|p| p[b * t_k + j])
    }

    /// `true` when no query in rows `i0..i1` can see a key in `j0..j1` (causality and window only;
    /// an empty range of either: `true`).
    pub fn block_hidden(&self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        if i1 <= i0 || j1 <= j0 {
            return true;
        }
        let (first_q, last_q) = (self.query_offset.saturating_add(i0), self.query_offset.saturating_add(i1 - 1));
        let future = j0 > last_q;
        let too_old = self.window_keys.is_some_and(|w| (j1 - 1).saturating_add(w) <= first_q);
        future || too_old
    }

    /// `true` when every query in `i0..i1` sees every key in `j0..j1` (no per-element test needed;
    /// an empty range of either: `true`).
    pub fn block_open(&self, i0: usize, i1: usize, j0: usize, j1: usize) -> bool {
        if i1 <= i0 || j1 <= j0 {
            return true;
        }
        let (first_q, last_q) = (self.query_offset.saturating_add(i0), self.query_offset.saturating_add(i1 - 1));
        let causal_ok = j1 - 1 <= first_q;
        let window_ok = self.window_keys.is_none_or(|w| last_q.saturating_sub(j0) < w);
        causal_ok && window_ok && self.key_padding.is_none()
    }
}
