//! [`RowWalk`]: which input row and which position each output row of a rotation takes, counted
//! without a division per row.
//!
//! A rotation writes its output row by row. Output row `r` reads some input row (itself, or with
//! the heads split, a row of the token layout) and rotates it at the position of its token. Both
//! are sums of strides: write `r` as three nested counters `[outer, middle, inner]` (the inner one
//! fastest), and each index is `Σ counter · stride`. A task's rows are consecutive, so after the
//! first row (three divisions) each next row is one step of an odometer: the inner counter goes
//! up, and when it reaches its extent it returns to 0 and carries into the next.
//!
//! | rotation | counters (extents) | input row strides | position strides |
//! |---|---|---|---|
//! | rows `[L, M, T, d_h]` in place | `L, M, T` | `M·T, T, 1` | `0, 0, 1` (or `T, 0, 1` per batch row) |
//! | split into heads: `(b, h, t)` from token row `(b, t, h)` | `B, n, T` | `T·n, 1, n` | `0, 0, 1` (or `T, 0, 1`) |
//! | its backward: `(b, t, h)` from heads row `(b, h, t)` | `B, T, n` | `n·T, 1, T` | `0, 1, 0` (or `T, 1, 0`) |

/// Three nested counters over the output rows and the strides that turn them into an input row
/// and an index into the positions (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(super) struct RowWalk {
    /// Extents of the counters, outer first (each ≥ 1 where there are rows).
    pub(super) extents: [usize; 3],
    /// Input row per step of each counter.
    pub(super) source: [usize; 3],
    /// Position index per step of each counter.
    pub(super) position: [usize; 3],
}

/// Where a walk stands: the counters of output row `row`, its input row and its position index.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cursor {
    pub(super) row: usize,
    pub(super) source: usize,
    pub(super) position: usize,
    counters: [usize; 3],
}

impl RowWalk {
    /// The cursor at output row `r` (three divisions, once per task).
    pub(super) fn at(&self, r: usize) -> Cursor {
        let [_, m, n] = self.extents;
        let counters = [r / (m * n), r / n % m, r % n];
        let dot = |strides: [usize; 3]| counters.iter().zip(strides).map(|(c, s)| c * s).sum();
        Cursor { row: r, source: dot(self.source), position: dot(self.position), counters }
    }

    /// Where output row `r` stands, from `cursor` when it is at `r` (a task's rows are
    /// consecutive), else computed ([`RowWalk::at`], a task's first row); `cursor` is left at the
    /// next row.
    pub(super) fn step(&self, cursor: &mut Option<Cursor>, r: usize) -> Cursor {
        let at = match *cursor {
            Some(c) if c.row == r => c,
            _ => self.at(r),
        };
        let mut next = at;
        self.advance(&mut next);
        *cursor = Some(next);
        at
    }

    /// Moves `cursor` to the next output row: the inner counter steps, carrying outwards.
    fn advance(&self, cursor: &mut Cursor) {
        cursor.row += 1;
        for axis in (0..3).rev() {
            cursor.counters[axis] += 1;
            cursor.source += self.source[axis];
            cursor.position += self.position[axis];
            if cursor.counters[axis] < self.extents[axis] || axis == 0 {
                return;
            }
            // back to 0 on this axis, then one step on the next
            cursor.counters[axis] = 0;
            cursor.source -= self.extents[axis] * self.source[axis];
            cursor.position -= self.extents[axis] * self.position[axis];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every start row, walked to the end, gives the same indices as computing them afresh.
    #[test]
    fn stepping_agrees_with_dividing_at_every_row() {
        let walks = [
            RowWalk { extents: [2, 3, 5], source: [15, 5, 1], position: [5, 0, 1] },
            RowWalk { extents: [2, 4, 3], source: [12, 1, 4], position: [0, 0, 1] },
            RowWalk { extents: [3, 5, 2], source: [10, 1, 5], position: [5, 1, 0] },
            RowWalk { extents: [1, 1, 7], source: [7, 7, 1], position: [0, 0, 1] },
        ];
        for walk in walks {
            let rows = walk.extents.iter().product::<usize>();
            for start in 0..rows {
                let mut cursor = walk.at(start);
                for r in start..rows {
                    let fresh = walk.at(r);
                    assert_eq!((cursor.row, cursor.source, cursor.position), (r, fresh.source, fresh.position));
                    walk.advance(&mut cursor);
                }
            }
        }
    }
}
