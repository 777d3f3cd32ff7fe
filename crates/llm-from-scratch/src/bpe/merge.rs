//! The merge loop: a piece starts as one token per byte, and the adjacent pair with the best rank
//! is merged, again and again, until no adjacent pair has a rank.
//!
//! The merges list is the history of training: merge 0 (`Ġ t` in SmolLM2) was the most frequent
//! pair of the training text, merge 1 the next, and so on. Encoding replays that history on one
//! piece: at every step, of all adjacent pairs the one that was merged *earliest* in training is
//! merged now (the leftmost, if the same pair occurs twice). For ` the` with merges `Ġ t` (0),
//! `h e` (3) and `Ġt he` (8):
//!
//! ```text
//! Ġ  t  h  e      pairs: (Ġ,t) rank 0, (t,h) none, (h,e) rank 3   -> merge (Ġ,t)
//! Ġt  h  e        pairs: (Ġt,h) none, (h,e) rank 3                 -> merge (h,e)
//! Ġt  he          pairs: (Ġt,he) rank 8                            -> merge
//! Ġthe            one token, no pair left
//! ```
//!
//! Two versions live here. [`merge_by_rank_naive`] is that loop word for word: it scans every pair at every
//! step, O(n²) for a piece of n bytes, fine for a word. [`merge_by_rank`] gives the same result in
//! O(n log n): the candidate pairs wait in a priority queue ordered by (rank, position), and a merge
//! only creates the two new pairs it touches. A piece can be long (a page of Chinese has no spaces
//! and is one piece), so encoding uses [`merge_by_rank`]; a test checks that both always agree.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// What the merges list says about a pair of adjacent tokens: its rank and the token it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Merge {
    /// Its index in the merges list: lower merges first.
    pub rank: usize,
    /// The id of the token the pair becomes.
    pub merged: usize,
}

/// The merges, looked up by the pair `(left id, right id)`.
pub type MergeTable = HashMap<(usize, usize), Merge>;

/// Merges `ids` (one piece) by rank, the explicit way: find the best pair, merge it, repeat.
pub fn merge_by_rank_naive(ids: &[usize], merges: &MergeTable) -> Vec<usize> {
    let mut ids = ids.to_vec();
    loop {
        // the adjacent pair with the lowest rank; the leftmost one on a tie (strict `<`)
        let mut best: Option<(usize, Merge)> = None;
        for position in 0..ids.len().saturating_sub(1) {
            if let Some(&merge) = merges.get(&(ids[position], ids[position + 1]))
                && best.is_none_or(|(_, current)| merge.rank < current.rank)
            {
                best = Some((position, merge));
            }
        }
        let Some((position, merge)) = best else {
            return ids;
        };
        ids[position] = merge.merged;
        ids.remove(position + 1);
    }
}

/// Merges `ids` (one piece) by rank with a priority queue: the same result as [`merge_by_rank_naive`].
///
/// The tokens form a linked list (`next`/`previous` by original position, so positions keep their
/// left-to-right order after merges). The queue holds candidate pairs as `(rank, left position)`,
/// smallest first. A candidate can go stale: its left token was merged away, or its right
/// neighbour changed; it is then skipped when it comes out.
pub fn merge_by_rank(ids: &[usize], merges: &MergeTable) -> Vec<usize> {
    let n = ids.len();
    if n < 2 {
        return ids.to_vec();
    }
    let mut tokens = ids.to_vec();
    let mut alive = vec![true; n];
    // neighbours by position; `n` (past the end) and `None` mean "no neighbour"
    let mut next: Vec<usize> = (1..=n).collect();
    let mut previous: Vec<Option<usize>> = (0..n).map(|p| p.checked_sub(1)).collect();

    let mut queue = BinaryHeap::new();
    let candidate = |left: usize, right: usize, tokens: &[usize]| {
        merges.get(&(tokens[left], tokens[right])).map(|merge| Reverse((merge.rank, left, merge.merged)))
    };
    for left in 0..n - 1 {
        queue.extend(candidate(left, left + 1, &tokens));
    }

    while let Some(Reverse((rank, left, merged))) = queue.pop() {
        let right = next[left];
        // stale: the left token is gone, has no right neighbour, or the pair is no longer this one
        if !alive[left] || right >= n {
            continue;
        }
        match merges.get(&(tokens[left], tokens[right])) {
            Some(merge) if merge.rank == rank && merge.merged == merged => {}
            _ => continue,
        }
        // merge: the left token becomes the merged one, the right one leaves the list
        tokens[left] = merged;
        alive[right] = false;
        next[left] = next[right];
        if next[right] < n {
            previous[next[right]] = Some(left);
        }
        // the two pairs that now touch the merged token
        if let Some(before) = previous[left] {
            queue.extend(candidate(before, left, &tokens));
        }
        if next[left] < n {
            queue.extend(candidate(left, next[left], &tokens));
        }
    }
    (0..n).filter(|&position| alive[position]).map(|position| tokens[position]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Tokens 0..=3 are `Ġ t h e`; 4 = `Ġt`, 5 = `he`, 6 = `Ġthe`; merges as in the module doc.
    fn the_table() -> MergeTable {
        let mut table = MergeTable::new();
        table.insert((0, 1), Merge { rank: 0, merged: 4 });
        table.insert((2, 3), Merge { rank: 3, merged: 5 });
        table.insert((4, 5), Merge { rank: 8, merged: 6 });
        table
    }

    #[test]
    fn the_module_example() {
        assert_eq!(merge_by_rank_naive(&[0, 1, 2, 3], &the_table()), [6]);
        assert_eq!(merge_by_rank(&[0, 1, 2, 3], &the_table()), [6]);
        // "Ġth" stops at Ġt h: no rank for (Ġt, h)
        assert_eq!(merge_by_rank(&[0, 1, 2], &the_table()), [4, 2]);
        assert_eq!(merge_by_rank(&[], &the_table()), Vec::<usize>::new());
        assert_eq!(merge_by_rank(&[3], &the_table()), [3]);
    }

    #[test]
    fn rank_not_position_decides() {
        // a b c with (b,c) rank 0 -> bc, and (a,b) rank 1 never applies: a bc
        let mut table = MergeTable::new();
        table.insert((0, 1), Merge { rank: 1, merged: 3 });
        table.insert((1, 2), Merge { rank: 0, merged: 4 });
        assert_eq!(merge_by_rank(&[0, 1, 2], &table), [0, 4]);
        assert_eq!(merge_by_rank_naive(&[0, 1, 2], &table), [0, 4]);
    }

    #[test]
    fn a_run_of_one_byte_pairs_from_the_left() {
        // a a a with (a,a) -> aa: the leftmost pair first, so aa a; then (aa,a) has no rank
        let mut table = MergeTable::new();
        table.insert((0, 0), Merge { rank: 0, merged: 1 });
        assert_eq!(merge_by_rank(&[0, 0, 0], &table), [1, 0]);
        assert_eq!(merge_by_rank(&[0, 0, 0, 0], &table), [1, 1]);
        // with (aa,aa) -> aaaa as well, eight a's become two aaaa
        table.insert((1, 1), Merge { rank: 1, merged: 2 });
        assert_eq!(merge_by_rank(&[0; 8], &table), [2, 2]);
        assert_eq!(merge_by_rank_naive(&[0; 8], &table), [2, 2]);
    }

    proptest! {
        // random tables over 6 base tokens; every merge makes a new id, as training does
        #[test]
        fn the_queue_agrees_with_the_naive_loop(
            pairs in prop::collection::vec((0usize..12, 0usize..12), 0..24),
            ids in prop::collection::vec(0usize..6, 0..40),
        ) {
            let mut table = MergeTable::new();
            for (rank, &(left, right)) in pairs.iter().enumerate() {
                table.entry((left, right)).or_insert(Merge { rank, merged: 6 + rank % 6 });
            }
            prop_assert_eq!(merge_by_rank(&ids, &table), merge_by_rank_naive(&ids, &table));
        }
    }
}
