//! RoPE by hand, its invariants (norms, relative positions), both layouts and its errors.

use proptest::prelude::*;

use super::*;
use crate::autodiff::{GradcheckConfig, constant, gradcheck};
use crate::nn::SplitMix64;
use llm_kernels::target::{Target, with_target};

#[test]
fn configuration_errors_in_order() {
    assert_eq!(RotaryEmbedding::new(0, 0, -1.0).unwrap_err(), RopeError::ZeroHeadWidth);
    assert_eq!(RotaryEmbedding::new(3, 0, -1.0).unwrap_err(), RopeError::OddHeadWidth { head_width: 3 });
    assert_eq!(RotaryEmbedding::new(4, 0, -1.0).unwrap_err(), RopeError::ZeroCapacity);
    assert_eq!(RotaryEmbedding::new(4, 8, 0.0).unwrap_err(), RopeError::InvalidBase { base: 0.0 });
    assert!(RotaryEmbedding::new(4, 8, f64::NAN).is_err());
    assert_eq!(
        RotaryEmbedding::new(4, 8, f64::INFINITY).unwrap_err().to_string(),
        "rope: base must be finite and positive, got inf"
    );
}

#[test]
fn position_and_input_errors() {
    let rope = RotaryEmbedding::new(2, 4, 100.0).unwrap();
    let x = constant(&[3, 2], &[0.0; 6]).unwrap();
    assert_eq!(rope.rotate(&x, 2).unwrap_err(), RopeError::PositionOutOfRange { start: 2, end: 5, capacity: 4 });
    assert_eq!(rope.rotate(&x, usize::MAX).unwrap_err(), RopeError::PositionOverflow { offset: usize::MAX, tokens: 3 });
    assert!(matches!(rope.rotate(&constant(&[3, 4], &[0.0; 12]).unwrap(), 0), Err(RopeError::InputShape { .. })));
    assert!(matches!(rope.rotate(&constant(&[2], &[0.0; 2]).unwrap(), 0), Err(RopeError::InputShape { .. })));
    assert!(matches!(rope.rotate_at(&x, &[0, 1]), Err(RopeError::InputShape { .. })));
    assert!(matches!(rope.rotate_at(&x, &[0, 1, 4]), Err(RopeError::PositionOutOfRange { start: 4, .. })));
    x.release();
    assert!(matches!(rope.rotate(&x, 0), Err(RopeError::Tensor(TensorAutodiffError::Released { .. }))));
}

#[test]
fn split_halves_is_adjacent_pairs_after_permuting_coordinates() {
    // adjacent pairs (0,1),(2,3) on [a,b,c,d] equal split halves (0,2),(1,3) on [a,c,b,d]
    let adjacent = RotaryEmbedding::new(4, 8, 10.0).unwrap();
    let halves = adjacent.clone().with_layout(RopeLayout::SplitHalves);
    let x = [0.3, -1.2, 0.7, 2.0];
    let a = adjacent.rotate(&constant(&[1, 4], &x).unwrap(), 5).unwrap().value().unwrap();
    let h = halves.rotate(&constant(&[1, 4], &[x[0], x[2], x[1], x[3]]).unwrap(), 5).unwrap().value().unwrap();
    let (a, h) = (a.as_slice(), h.as_slice());
    for (i, j) in [(0, 0), (1, 2), (2, 1), (3, 3)] {
        assert!((a[i] - h[j]).abs() < 1e-15);
    }
}

#[test]
fn explicit_per_row_positions_match_offsets() {
    let rope = RotaryEmbedding::new(4, 16, 10.0).unwrap();
    let mut rng = SplitMix64::new(3);
    let values: Vec<f64> = (0..2 * 3 * 2 * 4).map(|_| rng.uniform(-1.0, 1.0)).collect();
    // [B=2, h=3, T=2, d=4]: row 0 at positions 0,1; row 1 at positions 5,6
    let x = constant(&[2, 3, 2, 4], &values).unwrap();
    let y = rope.rotate_at(&x, &[0, 1, 5, 6]).unwrap().value().unwrap();
    let row0 = rope.rotate(&x.slice_axis(0, 0, 1).unwrap(), 0).unwrap().value().unwrap();
    let row1 = rope.rotate(&x.slice_axis(0, 1, 2).unwrap(), 5).unwrap().value().unwrap();
    assert!(y.as_slice()[..24] == *row0.as_slice() && y.as_slice()[24..] == *row1.as_slice());
}

#[test]
fn the_row_loop_of_every_target_turns_each_pair_as_rotate_pair_does() {
    // two positions past the tables' reach are not needed: the row loop reads the angles given.
    // Widths: one pair (no whole block of four), a block and a pair past it, two whole blocks
    let mut rng = SplitMix64::new(5);
    let positions = [0, 1, 7, 300];
    for (d, layout) in
        [2, 10, 16].into_iter().flat_map(|d| [(d, RopeLayout::AdjacentPairs), (d, RopeLayout::SplitHalves)])
    {
        let x: Vec<f64> = (0..positions.len() * d).map(|_| rng.uniform(-3.0, 3.0)).collect();
        let rope = RotaryEmbedding::new(d, 512, 10_000.0).unwrap().with_layout(layout);
        let pair = |i: usize| match layout {
            RopeLayout::AdjacentPairs => (2 * i, 2 * i + 1),
            RopeLayout::SplitHalves => (i, i + d / 2),
        };
        for sign in [1.0, -1.0] {
            // by hand: every pair of every row turned by `rotate_pair`
            let mut want = x.clone();
            for (row, &p) in want.chunks_mut(d).zip(&positions) {
                for (i, &theta) in rope.thetas.iter().enumerate() {
                    let (c, s) = angle(p, theta);
                    let (a, b) = pair(i);
                    (row[a], row[b]) = rotate_pair((row[a], row[b]), c, sign * s);
                }
            }
            let input = Tensor::new(&[positions.len(), d], x.clone()).unwrap();
            for target in Target::available() {
                let got = with_target(target, || rope.apply(&input, &positions, sign)).unwrap();
                for (g, w) in got.as_slice().iter().zip(&want) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{target} {layout:?} d {d} sign {sign}: {g} vs {w}");
                }
            }
        }
    }
}

#[test]
fn the_parallel_path_equals_rotating_each_lane_alone_on_every_target() {
    // [B=2, H=3, T=2050, d=8] = 98 400 values: rotated in parallel blocks of 256 rows, the
    // last one partial; each lane [T, d] alone (16 400 values) takes the one-thread path,
    // per-row positions included. Both equal the rotation written out value by value, on every
    // kernel target this processor runs.
    let (b, h, t, d) = (2, 3, 2050, 8);
    let mut rng = SplitMix64::new(21);
    let values: Vec<f64> = (0..b * h * t * d).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let positions: Vec<usize> = (0..b * t).map(|i| (i * 7) % 4096).collect();
    for layout in [RopeLayout::AdjacentPairs, RopeLayout::SplitHalves] {
        let rope = RotaryEmbedding::new(d, 4096, 10_000.0).unwrap().with_layout(layout);
        let x = Tensor::new(&[b, h, t, d], values.clone()).unwrap();
        assert!(x.len() >= PARALLEL_VALUES && t * d < PARALLEL_VALUES);
        for (sign, target) in [1.0, -1.0].into_iter().flat_map(|s| Target::available().into_iter().map(move |t| (s, t)))
        {
            let whole = with_target(target, || rope.apply(&x, &positions, sign)).unwrap();
            for (lane, got) in whole.as_slice().chunks(t * d).enumerate() {
                let alone = Tensor::new(&[t, d], values[lane * t * d..(lane + 1) * t * d].to_vec()).unwrap();
                let row = &positions[(lane / h) * t..(lane / h + 1) * t];
                let want = rope.apply(&alone, row, sign);
                assert!(got.iter().zip(want.as_slice()).all(|(g, w)| g.to_bits() == w.to_bits()), "{layout:?}");
                // pair (a, b) of row r at position p: (x_a·c − x_b·s, x_a·s + x_b·c)
                for (r, (out, input)) in got.chunks(d).zip(alone.as_slice().chunks(d)).enumerate() {
                    let p = row[r];
                    for i in 0..d / 2 {
                        let (a, bb) = match layout {
                            RopeLayout::AdjacentPairs => (2 * i, 2 * i + 1),
                            RopeLayout::SplitHalves => (i, i + d / 2),
                        };
                        let (c, s) = angle(p, rope.thetas[i]);
                        let s = sign * s;
                        assert_eq!(out[a].to_bits(), (input[a] * c - input[bb] * s).to_bits(), "{layout:?}");
                        assert_eq!(out[bb].to_bits(), (input[a] * s + input[bb] * c).to_bits(), "{layout:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn gradcheck_rope_both_layouts_with_offset_on_every_target() {
    let mut rng = SplitMix64::new(11);
    let x = Tensor::new(&[2, 3, 6], (0..36).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap();
    for (layout, target) in [RopeLayout::AdjacentPairs, RopeLayout::SplitHalves]
        .into_iter()
        .flat_map(|l| Target::available().into_iter().map(move |t| (l, t)))
    {
        let rope = RotaryEmbedding::new(6, 10, 10_000.0).unwrap().with_layout(layout);
        // the forward and its backward rotation both run on `target` (they capture it at entry)
        let r = with_target(target, || {
            gradcheck(&[("x", x.clone())], &GradcheckConfig::default(), |v| {
                rope.rotate(&v[0], 4).map_err(|e| match e {
                    RopeError::Tensor(t) => t,
                    other => panic!("{other}"),
                })
            })
        })
        .unwrap()
        .unwrap();
        assert!(r.passed(), "{layout:?} on {target:?}: {r:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn keeps_norms_and_dot_products_depend_only_on_relative_position(
        seed in any::<u64>(), m in 0usize..40, n in 0usize..40, shift in 0usize..20, halves in any::<bool>()
    ) {
        let layout = if halves { RopeLayout::SplitHalves } else { RopeLayout::AdjacentPairs };
        let rope = RotaryEmbedding::new(8, 64, 10_000.0).unwrap().with_layout(layout);
        let mut rng = SplitMix64::new(seed);
        let q: Vec<f64> = (0..8).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let k: Vec<f64> = (0..8).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let rot = |v: &[f64], p: usize| rope.rotate(&constant(&[1, 8], v).unwrap(), p).unwrap().value().unwrap().into_vec();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let rq = rot(&q, m);
        prop_assert!((dot(&rq, &rq) - dot(&q, &q)).abs() <= 1e-12);
        let before = dot(&rot(&q, m), &rot(&k, n));
        let after = dot(&rot(&q, m + shift), &rot(&k, n + shift));
        prop_assert!((before - after).abs() <= 1e-12, "{} vs {}", before, after);
    }
}

/// The row loop fetches ahead only where a walk's inner counter steps over rows apart for longer
/// than it looks ahead: splitting heads of a long sequence, not merging them back (its inner
/// counter is the heads), not rows read in order, not a sequence shorter than the look-ahead.
#[test]
fn only_the_split_of_a_long_sequence_fetches_ahead() {
    use super::{RowWalk, Rows};
    use llm_kernels::rope::{AHEAD, RotationRows};
    let rope = RotaryEmbedding::new(4, 64, 10_000.0).unwrap();
    let fetches = |walk: RowWalk| {
        let rows = Rows {
            rope: &rope,
            tables: rope.tables(),
            x: &[],
            walk,
            positions: &[],
            cursor: None,
            far: (Vec::new(), Vec::new()),
        };
        rows.fetch_ahead()
    };
    let (b, heads, long, short) = (2, 8, AHEAD + 1, AHEAD);
    let split = |t: usize| RowWalk { extents: [b, heads, t], source: [t * heads, 1, heads], position: [0, 0, 1] };
    let merge = RowWalk { extents: [b, long, heads], source: [heads * long, 1, long], position: [0, 1, 0] };
    let in_order = RowWalk { extents: [b, heads, long], source: [heads * long, long, 1], position: [0, 0, 1] };
    assert!(fetches(split(long)));
    assert!(!fetches(split(short)));
    assert!(!fetches(merge));
    assert!(!fetches(in_order));
}
