//! The tiled (flash-style) kernel against the explicit path: outputs and every gradient agree to
//! 1e-12 relative across causal, window, grouped, padding and offset cases, on every kernel
//! target this processor runs (`dispatch`), and the targets agree with each other bitwise.

use llm_from_scratch::attention::{
    AttentionConfig, AttentionError, AttentionPath, GroupedQueryAttention, LONG_BLOCK, LONG_SEQUENCE, OnlineSoftmax,
    SHORT_BLOCK, SlidingWindow, Visibility, block_size, grouped_attention, tiled_attention,
};
use llm_from_scratch::kernels::{Target, with_target};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::{GradcheckConfig, Tensor, TensorValue, gradcheck};

fn random(shape: &[usize], rng: &mut SplitMix64, scale: f64) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| rng.uniform(-scale, scale)).collect()).unwrap()
}

fn assert_close(name: &str, a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape(), "{name}");
    for (i, (x, y)) in a.as_slice().iter().zip(b.as_slice()).enumerate() {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{name}[{i}]: tiled {x} vs explicit {y}");
    }
}

struct Case {
    b: usize,
    h: usize,
    g: usize,
    t_q: usize,
    t_k: usize,
    d: usize,
    sinks: bool,
    vis: Visibility,
}

/// Runs both paths with the same inputs and upstream adjoint, the tiled one on every available
/// target; compares outputs and gradients.
fn compare(case: &Case, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let q = TensorValue::leaf(random(&[case.b, case.h, case.t_q, case.d], &mut rng, 2.0), true);
    let k = TensorValue::leaf(random(&[case.b, case.g, case.t_k, case.d], &mut rng, 2.0), true);
    let v = TensorValue::leaf(random(&[case.b, case.g, case.t_k, case.d], &mut rng, 1.0), true);
    let s = case.sinks.then(|| TensorValue::leaf(random(&[case.h], &mut rng, 1.0), true));
    let upstream = random(&[case.b, case.h, case.t_q, case.d], &mut rng, 1.0);
    let explicit = grouped_attention(&q, &k, &v, s.as_ref(), &case.vis).unwrap().output().clone();
    let ge = explicit.backward_with(&upstream).unwrap();
    let mut leaves = vec![("q", &q), ("k", &k), ("v", &v)];
    if let Some(s) = &s {
        leaves.push(("sinks", s));
    }
    let mut first: Option<Vec<Vec<u64>>> = None;
    for target in Target::available() {
        let (tiled, gt) = with_target(target, || {
            let tiled = tiled_attention(&q, &k, &v, s.as_ref(), &case.vis).unwrap();
            let gt = tiled.backward_with(&upstream).unwrap();
            (tiled.value().unwrap(), gt)
        })
        .unwrap();
        assert_close(&format!("{target} output"), &tiled, &explicit.value().unwrap());
        let mut all = vec![tiled];
        for (name, leaf) in &leaves {
            let grad = gt.get_or_zeros(leaf);
            assert_close(&format!("{target} d{name}"), &grad, &ge.get_or_zeros(leaf));
            all.push(grad);
        }
        let bits: Vec<Vec<u64>> = all.iter().map(|t| t.as_slice().iter().map(|x| x.to_bits()).collect()).collect();
        assert!(first.get_or_insert_with(|| bits.clone()) == &bits, "{target}: not bitwise the portable result");
    }
}

fn case(b: usize, h: usize, g: usize, t_q: usize, t_k: usize, d: usize) -> Case {
    Case { b, h, g, t_q, t_k, d, sinks: false, vis: Visibility { query_offset: t_k - t_q, ..Visibility::default() } }
}

#[test]
fn causal_across_several_blocks_with_t_not_a_multiple_of_the_block() {
    compare(&case(2, 4, 2, 300, 300, 8), 1);
}

#[test]
fn the_fused_one_pass_backward_with_many_kv_lanes() {
    // B·G = 8 lanes selects the fused backward; window, padding and sinks all at once
    let mut c = case(2, 8, 4, 150, 150, 4);
    c.sinks = true;
    c.vis.window = Some(SlidingWindow::Exclusive(70));
    c.vis.key_padding = Some((0..300).map(|i| i % 37 == 0).collect());
    compare(&c, 13);
    compare(&case(8, 2, 1, 130, 130, 4), 14);
}

#[test]
fn long_sequences_take_larger_blocks_and_still_equal_the_explicit_path() {
    assert_eq!((block_size(1), block_size(LONG_SEQUENCE - 1)), (SHORT_BLOCK, SHORT_BLOCK));
    assert_eq!((block_size(LONG_SEQUENCE), block_size(100_000)), (LONG_BLOCK, LONG_BLOCK));
    // the last 130 queries over 2088 keys: blocks of 128, two query blocks, 17 key blocks
    compare(&case(1, 2, 1, 130, LONG_SEQUENCE + 40, 4), 15);
}

#[test]
fn head_widths_of_one_three_sixty_four_and_one_twenty_eight() {
    // d_h = 1 and 3: less than a register; 64 and 128: the widths of real models
    for (seed, d) in [1, 3, 64, 128].into_iter().enumerate() {
        compare(&case(1, 2, 1, 70, 70, d), 20 + seed as u64);
    }
    let mut c = case(2, 4, 2, 97, 97, 64);
    c.sinks = true;
    c.vis.window = Some(SlidingWindow::Exclusive(40));
    compare(&c, 30);
}

#[test]
fn a_single_token() {
    compare(&case(1, 2, 1, 1, 1, 4), 2);
}

#[test]
fn both_window_conventions() {
    for window in [SlidingWindow::Inclusive(37), SlidingWindow::Exclusive(130), SlidingWindow::Inclusive(0)] {
        let mut c = case(1, 2, 2, 290, 290, 6);
        c.vis.window = Some(window);
        compare(&c, 3);
    }
}

#[test]
fn multi_query_with_sinks() {
    let mut c = case(2, 4, 1, 140, 140, 4);
    c.sinks = true;
    compare(&c, 4);
}

#[test]
fn key_padding_including_fully_masked_rows() {
    let mut c = case(2, 2, 1, 150, 150, 4);
    // row 0: the first 20 keys are padding (so its first 20 queries see nothing); row 1: none
    c.vis.key_padding = Some((0..300).map(|i| i < 20).collect());
    compare(&c, 5);
    c.sinks = true;
    compare(&c, 6);
}

#[test]
fn query_offset_for_chunked_prefill_and_decode() {
    compare(&case(1, 4, 2, 50, 300, 8), 7); // a chunk of 50 new tokens after 250 cached
    let mut decode = case(1, 4, 2, 1, 260, 8); // one token at position 259
    decode.vis.window = Some(SlidingWindow::Exclusive(128));
    compare(&decode, 8);
}

#[test]
fn gradcheck_tiled_kernel_with_sinks_window_and_padding() {
    let mut rng = SplitMix64::new(9);
    let inputs = vec![
        ("q", random(&[2, 2, 5, 4], &mut rng, 1.0)),
        ("k", random(&[2, 1, 5, 4], &mut rng, 1.0)),
        ("v", random(&[2, 1, 5, 4], &mut rng, 1.0)),
        ("sinks", random(&[2], &mut rng, 1.0)),
    ];
    let vis = Visibility {
        query_offset: 0,
        window: Some(SlidingWindow::Inclusive(2)),
        key_padding: Some(vec![true, false, false, false, false, false, false, false, false, false]),
    };
    // on every kernel target: the gradients each target's backward computes, against central
    // differences of that target's forward
    for target in Target::available() {
        let report = with_target(target, || {
            gradcheck(&inputs, &GradcheckConfig::default(), |v| -> Result<TensorValue, Box<dyn std::error::Error>> {
                Ok(tiled_attention(&v[0], &v[1], &v[2], Some(&v[3]), &vis)?)
            })
        })
        .unwrap()
        .unwrap();
        assert!(report.passed(), "{target}: {report:?}");
    }
}

#[test]
fn gradcheck_tiled_kernel_with_many_kv_lanes() {
    // B·G = 8 kv lanes: the backward runs one task per kv lane (dQ, dK and dV together)
    let mut rng = SplitMix64::new(10);
    let inputs = vec![
        ("q", random(&[8, 2, 5, 3], &mut rng, 1.0)),
        ("k", random(&[8, 1, 5, 3], &mut rng, 1.0)),
        ("v", random(&[8, 1, 5, 3], &mut rng, 1.0)),
    ];
    let report =
        gradcheck(&inputs, &GradcheckConfig::default(), |v| -> Result<TensorValue, Box<dyn std::error::Error>> {
            Ok(tiled_attention(&v[0], &v[1], &v[2], None, &Visibility::default())?)
        })
        .unwrap();
    assert!(report.passed(), "{report:?}");
}

#[test]
fn online_softmax_merges_blocks_exactly() {
    // scores [1, 2 | 3] with values [1,0], [0,1] | [1,1]: merged in two blocks or at once
    let vals = [vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 1.0]];
    let whole = OnlineSoftmax::from_block(&[1.0, 2.0, 3.0], &vals).unwrap();
    let merged = OnlineSoftmax::from_block(&[1.0, 2.0], &vals[..2])
        .unwrap()
        .merge(&OnlineSoftmax::from_block(&[3.0], &vals[2..]).unwrap())
        .unwrap();
    let z = 1f64.exp() + 2f64.exp() + 3f64.exp();
    let want = [(1f64.exp() + 3f64.exp()) / z, (2f64.exp() + 3f64.exp()) / z];
    for state in [whole, merged.clone()] {
        for (got, want) in state.output().iter().zip(want) {
            assert!((got - want).abs() < 1e-15);
        }
    }
    assert_eq!(merged.max, 3.0);
    assert_eq!(OnlineSoftmax::empty(2).merge(&OnlineSoftmax::empty(2)).unwrap().output(), vec![0.0, 0.0]);
}

#[test]
fn online_softmax_refuses_ragged_rows_and_shares_infinite_scores() {
    // ragged rows and a count mismatch were silently truncated by zip before
    let ragged = OnlineSoftmax::from_block(&[0.0, 1.0], &[vec![1.0, 2.0], vec![3.0]]).unwrap_err();
    assert_eq!(ragged.to_string(), "online softmax: value row width: 1 where 2 was expected");
    let short = OnlineSoftmax::from_block(&[0.0, 1.0], &[vec![1.0]]).unwrap_err();
    assert!(matches!(short, AttentionError::OnlineSoftmaxShape { what: "value rows", expected: 2, actual: 1 }));
    let wide = OnlineSoftmax::empty(2).merge(&OnlineSoftmax::empty(3)).unwrap_err();
    assert!(matches!(wide, AttentionError::OnlineSoftmaxShape { what: "merged state width", .. }));
    // +∞ takes all the weight, shared among the +∞ scores; was [NaN] before
    let inf = OnlineSoftmax::from_block(&[f64::INFINITY], &[vec![2.0]]).unwrap();
    assert_eq!(inf.output(), vec![2.0]);
    let state = OnlineSoftmax::from_block(
        &[1.0, f64::INFINITY, 5.0, f64::INFINITY],
        &[vec![100.0], vec![2.0], vec![-50.0], vec![4.0]],
    )
    .unwrap();
    assert_eq!(state.output(), vec![3.0]);
}

#[test]
fn a_large_sink_absorbs_the_mass_without_adding_to_the_output() {
    let mut rng = SplitMix64::new(10);
    let q = TensorValue::leaf(random(&[1, 1, 3, 4], &mut rng, 1.0), false);
    let k = TensorValue::leaf(random(&[1, 1, 3, 4], &mut rng, 1.0), false);
    let v = TensorValue::leaf(random(&[1, 1, 3, 4], &mut rng, 1.0), false);
    let sink = TensorValue::leaf(Tensor::new(&[1], vec![40.0]).unwrap(), false);
    let out = tiled_attention(&q, &k, &v, Some(&sink), &Visibility::default()).unwrap().value().unwrap();
    assert!(out.as_slice().iter().all(|x| x.abs() < 1e-15));
    let explicit = grouped_attention(&q, &k, &v, Some(&sink), &Visibility::default()).unwrap();
    let weights = explicit.weights().value().unwrap();
    assert!(weights.as_slice().iter().all(|&w| w < 1e-15), "the real keys keep almost nothing");
}

#[test]
fn errors_are_typed() {
    let z = |shape: &[usize]| TensorValue::leaf(Tensor::zeros(shape).unwrap(), false);
    let vis = Visibility::default();
    let err = tiled_attention(&z(&[1, 3, 2, 4]), &z(&[1, 2, 2, 4]), &z(&[1, 2, 2, 4]), None, &vis).unwrap_err();
    assert!(matches!(err, AttentionError::QkvShapes { .. }), "H must be a multiple of G");
    let err =
        tiled_attention(&z(&[1, 2, 2, 4]), &z(&[1, 1, 2, 4]), &z(&[1, 1, 2, 4]), Some(&z(&[3])), &vis).unwrap_err();
    assert!(matches!(err, AttentionError::ParameterShape { name: "sink logits", .. }));
    let bad = Visibility { key_padding: Some(vec![false; 3]), ..Visibility::default() };
    let err = tiled_attention(&z(&[1, 2, 2, 4]), &z(&[1, 1, 2, 4]), &z(&[1, 1, 2, 4]), None, &bad).unwrap_err();
    assert!(matches!(err, AttentionError::PaddingShape { .. }));
    let mut rng = SplitMix64::new(0);
    let config = AttentionConfig::new(8, 2, 1, 4).with_path(AttentionPath::Tiled).with_dropout(0.1, 0.0);
    let err = GroupedQueryAttention::new("a", config, &mut rng).unwrap_err();
    assert!(err.to_string().contains("attention dropout with the tiled kernel is not supported"), "{err}");
    assert!(matches!(err, AttentionError::Unsupported { .. }));
}

#[test]
fn the_layer_with_the_tiled_kernel_equals_the_explicit_layer() {
    let mut rng = SplitMix64::new(11);
    let config = AttentionConfig::new(16, 4, 2, 4)
        .with_rope(400, 10_000.0)
        .with_sinks(true)
        .with_window(SlidingWindow::Exclusive(100));
    let explicit = GroupedQueryAttention::new("a", config.clone(), &mut rng).unwrap();
    let tiled = GroupedQueryAttention::from_parts(
        "a",
        config.with_path(AttentionPath::Tiled),
        explicit.qkv().clone(),
        explicit.output_projection().clone(),
    )
    .unwrap()
    .with_sink_logits(explicit.sink_logits().unwrap().clone())
    .unwrap();
    let x = TensorValue::leaf(random(&[2, 260, 16], &mut rng, 1.0), true);
    let upstream = random(&[2, 260, 16], &mut rng, 1.0);
    let (a, b) = (explicit.forward(&x, 0).unwrap(), tiled.forward(&x, 0).unwrap());
    assert!(b.weights.is_none() && b.scores.is_none(), "the tiled kernel never forms the weights");
    assert_close("output", &b.output.value().unwrap(), &a.output.value().unwrap());
    let (ga, gb) = (a.output.backward_with(&upstream).unwrap(), b.output.backward_with(&upstream).unwrap());
    assert_close("input", &gb.get_or_zeros(&x), &ga.get_or_zeros(&x));
    for p in explicit.parameters().iter() {
        assert_close(p.name(), &gb.get_or_zeros(p.value()), &ga.get_or_zeros(p.value()));
    }
}

#[test]
fn tiled_results_do_not_depend_on_the_thread_count() {
    let run = |threads| {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
            let mut rng = SplitMix64::new(12);
            // B·G = 8: the fused one-pass backward
            let q = TensorValue::leaf(random(&[4, 4, 300, 8], &mut rng, 1.0), true);
            let k = TensorValue::leaf(random(&[4, 2, 300, 8], &mut rng, 1.0), true);
            let v = TensorValue::leaf(random(&[4, 2, 300, 8], &mut rng, 1.0), true);
            let out = tiled_attention(&q, &k, &v, None, &Visibility::default()).unwrap();
            let g = out.backward_with(&random(&[4, 4, 300, 8], &mut rng, 1.0)).unwrap();
            (out.value().unwrap(), g.get_or_zeros(&q), g.get_or_zeros(&k), g.get_or_zeros(&v))
        })
    };
    let (a, b) = (run(1), run(2));
    assert!(a.0.bitwise_eq(&b.0) && a.1.bitwise_eq(&b.1) && a.2.bitwise_eq(&b.2) && a.3.bitwise_eq(&b.3));
    // the two-pass backward (fewer than 8 kv lanes)
    let two_pass = |threads| {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
            let mut rng = SplitMix64::new(15);
            let q = TensorValue::leaf(random(&[1, 4, 300, 8], &mut rng, 1.0), true);
            let k = TensorValue::leaf(random(&[1, 2, 300, 8], &mut rng, 1.0), true);
            let out = tiled_attention(&q, &k, &k, None, &Visibility::default()).unwrap();
            let g = out.backward_with(&random(&[1, 4, 300, 8], &mut rng, 1.0)).unwrap();
            (g.get_or_zeros(&q), g.get_or_zeros(&k))
        })
    };
    let (a, b) = (two_pass(1), two_pass(2));
    assert!(a.0.bitwise_eq(&b.0) && a.1.bitwise_eq(&b.1));
}
