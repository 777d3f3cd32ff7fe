//! The kernels crate's strip kernel on every target this processor runs, against the block path
//! (1e-12) and against the portable target (bitwise), block by block and as a whole operation.

use super::operation::tests::assert_paths_agree;
use super::path::TiledPath;
use super::reference::BlockForward;
use super::shapes::{Dims, LaneInputs, block_size};
use crate::attention::{SlidingWindow, Visibility};
use crate::nn::SplitMix64;
use llm_kernels::Target;
use llm_kernels::bands::Band;
use llm_kernels::strips::{QueryBlock, StripKernel};

#[derive(Clone, Default)]
struct Case {
    t_q: usize,
    t_k: usize,
    d: usize,
    window: Option<SlidingWindow>,
    padding: bool,
    sink: Option<f64>,
}

fn case(t_q: usize, t_k: usize, d: usize) -> Case {
    Case { t_q, t_k, d, ..Case::default() }
}

/// Every query block of one lane through the block path and the strip kernel of each available
/// target: outputs and `log Σ eˢ` to 1e-12, and the targets bitwise equal to the portable one.
fn compare(c: &Case, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let mut random = |n: usize, scale: f64| (0..n).map(|_| rng.uniform(-scale, scale)).collect::<Vec<f64>>();
    let (q, k, v) = (random(c.t_q * c.d, 3.0), random(c.t_k * c.d, 3.0), random(c.t_k * c.d, 1.0));
    let dims = Dims { b: 1, h: 1, g: 1, t_q: c.t_q, t_k: c.t_k, d: c.d, block: block_size(c.t_k) };
    let vis = Visibility {
        query_offset: c.t_k - c.t_q,
        window: c.window,
        // key 0 hidden, so that the first query of a self-attention case sees nothing
        key_padding: c.padding.then(|| (0..c.t_k).map(|j| j % 5 == 0).collect()),
    };
    let mut scratch = Vec::new();
    for i0 in (0..c.t_q).step_by(dims.block) {
        let n = dims.block.min(c.t_q - i0);
        let (mut want, mut want_lse) = (vec![0.0; n * c.d], vec![0.0; n]);
        let lane = LaneInputs { q: &q, k: &k, v: &v, sink: c.sink, b: 0 };
        BlockForward { lane, dims, vis: &vis, i0 }.run(&mut want, &mut want_lse, &mut scratch).unwrap();
        let mut portable = None;
        for target in Target::available() {
            let (mut got, mut got_lse) = (vec![f64::NAN; n * c.d], vec![f64::NAN; n]);
            let task = QueryBlock {
                out: Band::whole(&mut got, c.d),
                lse: Some(&mut got_lse),
                q: &q,
                k: &k,
                v: &v,
                v_stride: c.d,
                sink: c.sink,
                dims,
                b: 0,
                i0,
                vis: vis.rule(),
            };
            StripKernel::new(target).forward_block(task);
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{target}: output {i} of block {i0}: {x} vs {y}");
            }
            for (i, (x, y)) in got_lse.iter().zip(&want_lse).enumerate() {
                let same = x == y || (x - y).abs() <= 1e-12 * (1.0 + y.abs());
                assert!(same, "{target}: log-sum-exp {i} of block {i0}: {x} vs {y}");
            }
            let bits = |x: &[f64]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let (got, got_lse) = (bits(&got), bits(&got_lse));
            let first = portable.get_or_insert_with(|| (got.clone(), got_lse.clone()));
            assert!(first.0 == got && first.1 == got_lse, "{target}: not bitwise the portable result");
        }
    }
}

#[test]
fn strips_equal_the_block_path_for_head_widths_around_the_register_tile() {
    // tiles of 6 columns and 6 keys: widths below, at and past a tile, and the benchmarks' 32 and 64
    for (seed, d) in [1, 2, 3, 5, 6, 7, 12, 13, 32, 64, 65, 128].into_iter().enumerate() {
        compare(&case(70, 70, d), seed as u64);
    }
}

#[test]
fn strips_equal_the_block_path_for_partial_strips_and_key_blocks() {
    // lengths that leave partial strips (32 queries), key blocks (60 keys) and query blocks
    for (seed, t) in [1, 2, 31, 32, 33, 59, 61, 97, 130].into_iter().enumerate() {
        compare(&case(t, t, 8), 100 + seed as u64);
    }
    // queries at the end of a longer stream (chunked prefill, decode)
    compare(&case(1, 75, 16), 120);
    compare(&case(40, 300, 16), 121);
    // long sequences: query blocks of 128
    compare(&case(150, 2100, 8), 122);
}

#[test]
fn strips_equal_the_block_path_with_windows_padding_and_sinks() {
    let mut c = case(140, 140, 9);
    c.window = Some(SlidingWindow::Exclusive(37));
    compare(&c, 200);
    c.window = Some(SlidingWindow::Inclusive(64));
    compare(&c, 201);
    // the first query sees only the padded key 0: its row is zeros with log-sum-exp −∞
    let mut c = case(70, 70, 7);
    c.padding = true;
    compare(&c, 202);
    c.sink = Some(0.7);
    compare(&c, 203);
    c.window = Some(SlidingWindow::Exclusive(3));
    c.sink = Some(-40.0);
    compare(&c, 204);
    // a window over a long stream, the last queries only (chunked prefill, decode): the key
    // blocks older than every window are skipped
    let mut c = case(3, 400, 8);
    c.window = Some(SlidingWindow::Exclusive(50));
    compare(&c, 205);
    c.t_q = 1;
    compare(&c, 206);
}

/// The whole operation on the strip kernel of each available target and on block products:
/// outputs and gradients to 1e-12.
fn compare_op(shape: [usize; 6], vis: &Visibility, sinks: bool, seed: u64) {
    for target in Target::available() {
        let strips = TiledPath::Strips(StripKernel::new(target));
        assert_paths_agree((strips, TiledPath::Blocks), shape, vis, sinks, seed);
    }
}

#[test]
fn the_strip_backward_equals_the_block_backward_in_one_pass_and_in_two() {
    let causal = |t_q: usize, t_k: usize| Visibility { query_offset: t_k - t_q, ..Visibility::default() };
    // 8 kv lanes or more: one pass per kv lane, with groups of 1 and 2 query heads
    compare_op([2, 4, 4, 70, 70, 32], &causal(70, 70), false, 300);
    compare_op([4, 4, 2, 33, 33, 7], &causal(33, 33), true, 301);
    compare_op([8, 1, 1, 61, 130, 65], &causal(61, 130), false, 302);
    // fewer: two passes
    compare_op([1, 2, 1, 97, 97, 64], &causal(97, 97), true, 303);
    compare_op([1, 3, 3, 130, 130, 13], &causal(130, 130), false, 304);
    compare_op([1, 2, 2, 1, 40, 6], &causal(1, 40), false, 305);
    // windows and padding (a query whose only key is padded: zero gradients)
    let mut vis = causal(70, 70);
    vis.window = Some(SlidingWindow::Exclusive(23));
    compare_op([2, 4, 4, 70, 70, 5], &vis, true, 306);
    compare_op([1, 2, 1, 70, 70, 5], &vis, false, 307);
    vis.window = None;
    vis.key_padding = Some((0..140).map(|j| j % 5 == 0).collect());
    compare_op([2, 4, 4, 70, 70, 12], &vis, true, 308);
    compare_op([2, 2, 2, 70, 70, 12], &vis, false, 309);
}

#[test]
fn a_sink_keeps_the_row_of_a_query_that_sees_no_key() {
    let kernel = StripKernel::new(llm_kernels::active());
    let (q, k, v) = (vec![1.0; 3], vec![2.0; 3], vec![5.0; 3]);
    let dims = Dims { b: 1, h: 1, g: 1, t_q: 1, t_k: 1, d: 3, block: block_size(1) };
    let vis = Visibility { key_padding: Some(vec![true]), ..Visibility::default() };
    let (mut out, mut lse) = (vec![f64::NAN; 3], vec![f64::NAN]);
    let task = QueryBlock {
        out: Band::whole(&mut out, 3),
        lse: Some(&mut lse),
        q: &q,
        k: &k,
        v: &v,
        v_stride: 3,
        sink: Some(0.25),
        dims,
        b: 0,
        i0: 0,
        vis: vis.rule(),
    };
    kernel.forward_block(task);
    // all the mass goes to the sink, whose value vector is zero
    assert_eq!(out, [0.0; 3]);
    assert_eq!(lse, [0.25]);
}
