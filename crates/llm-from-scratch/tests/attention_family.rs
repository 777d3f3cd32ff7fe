//! The attention family against itself: grouped = multi-head = multi-query where they must agree,
//! cached decoding = the full masked pass, windows and padding from absolute positions.

use llm_from_scratch::attention::{
    AttentionConfig, AttentionError, AttentionOptions, AttentionPath, GroupedQueryAttention, LatentAttention,
    LatentConfig, MultiHeadAttention, SlidingWindow, generate_with_cache, scaled_dot_product_attention,
};
use llm_from_scratch::nn::{RopeError, RopeLayout, RotaryEmbedding, SplitMix64};
use llm_from_scratch::{GradcheckConfig, Mask, Tensor, TensorValue, constant, gradcheck};
use proptest::prelude::*;

type AnyError = Box<dyn std::error::Error>;

fn random(shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
}

fn input(shape: &[usize], rng: &mut SplitMix64) -> TensorValue {
    TensorValue::leaf(random(shape, rng), false)
}

fn close(a: &Tensor, b: &Tensor, tol: f64) -> bool {
    a.shape() == b.shape() && a.as_slice().iter().zip(b.as_slice()).all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

#[test]
fn grouped_with_g_equal_h_is_multi_head_attention() {
    let mut rng = SplitMix64::new(1);
    let mha = MultiHeadAttention::new("a", 16, 4, 32, 10_000.0, &mut rng).unwrap();
    let x = input(&[2, 5, 16], &mut rng);
    let explicit = mha.forward(&x, 3).unwrap();
    let grouped = mha.to_grouped().unwrap().forward(&x, 3).unwrap();
    for (a, b) in [(&explicit.output, &grouped.output), (&explicit.weights, grouped.weights.as_ref().unwrap())] {
        assert!(close(&a.value().unwrap(), &b.value().unwrap(), 1e-12));
    }
}

#[test]
fn grouped_with_one_kv_head_is_multi_query_attention_bitwise() {
    let mut rng = SplitMix64::new(2);
    let layer =
        GroupedQueryAttention::new("a", AttentionConfig::new(12, 4, 1, 6).with_rope(16, 100.0), &mut rng).unwrap();
    let x = input(&[2, 5, 12], &mut rng);
    let trace = layer.forward(&x, 0).unwrap();
    // multi-query by plain broadcasting: q [B,H,T,d_h] against k, v [B,1,T,d_h]
    let mqa = scaled_dot_product_attention(
        &trace.rotated_query_heads,
        &trace.rotated_key_heads,
        trace.value_heads.as_ref().unwrap(),
        Some(&Mask::causal(5, 5, 0).unwrap()),
    )
    .unwrap();
    assert_eq!(trace.rotated_key_heads.shape(), &[2, 1, 5, 6], "one key/value head is stored, not H");
    assert_eq!(trace.key_heads.as_ref().map(TensorValue::shape), Some(&[2, 1, 5, 6][..]), "kept on the explicit path");
    assert!(trace.head_outputs.as_ref().unwrap().value().unwrap().bitwise_eq(&mqa.output().value().unwrap()));
    assert!(trace.weights.as_ref().unwrap().value().unwrap().bitwise_eq(&mqa.weights().value().unwrap()));
}

/// The tiled path splits and rotates queries and keys in one pass: the rotated heads, the output
/// and the input's gradient are bitwise the explicit path's two steps, and the trace has no
/// heads before RoPE.
#[test]
fn the_tiled_path_rotates_the_same_heads_in_one_pass() {
    let mut rng = SplitMix64::new(4);
    let config = AttentionConfig::new(16, 4, 2, 4).with_rope(16, 100.0);
    let explicit = GroupedQueryAttention::new("a", config.clone(), &mut rng).unwrap();
    let tiled =
        GroupedQueryAttention::new("a", config.with_path(AttentionPath::Tiled), &mut SplitMix64::new(4)).unwrap();
    let x = TensorValue::leaf(random(&[2, 5, 16], &mut rng), true);
    let (a, b) = (explicit.forward(&x, 3).unwrap(), tiled.forward(&x, 3).unwrap());
    let bits = |t: &TensorValue| t.value().unwrap();
    assert!(bits(&a.rotated_query_heads).bitwise_eq(&bits(&b.rotated_query_heads)));
    assert!(bits(&a.rotated_key_heads).bitwise_eq(&bits(&b.rotated_key_heads)));
    assert!(a.query_heads.is_some() && a.key_heads.is_some());
    assert!(b.query_heads.is_none() && b.key_heads.is_none());
    // the gradient reaching x through the one-pass rotation: the same as through the two steps
    let rotated = |trace: &llm_from_scratch::attention::AttentionTrace| {
        trace.rotated_query_heads.mul(&trace.rotated_query_heads)?.sum()?.add(&trace.rotated_key_heads.sum()?)
    };
    let (ga, gb) = (rotated(&a).unwrap().backward().unwrap(), rotated(&b).unwrap().backward().unwrap());
    assert!(ga.get(&x).unwrap().bitwise_eq(gb.get(&x).unwrap()));
}

#[test]
fn query_heads_read_kv_heads_in_repeat_interleave_order() {
    // H = 4, G = 2: heads 0,1 read kv head 0 and heads 2,3 read kv head 1 (not 0,1,0,1)
    let mut rng = SplitMix64::new(3);
    let layer = GroupedQueryAttention::new("a", AttentionConfig::new(8, 4, 2, 2).with_rope(8, 10.0), &mut rng).unwrap();
    let trace = layer.forward(&input(&[1, 4, 8], &mut rng), 0).unwrap();
    let (q, k, v) = (&trace.rotated_query_heads, &trace.rotated_key_heads, trace.value_heads.as_ref().unwrap());
    let head = |t: &TensorValue, i: usize| t.slice_axis(1, i, i + 1).unwrap();
    for h in 0..4 {
        let kv = h / 2;
        let want = scaled_dot_product_attention(
            &head(q, h),
            &head(k, kv),
            &head(v, kv),
            Some(&Mask::causal(4, 4, 0).unwrap()),
        )
        .unwrap()
        .output()
        .value()
        .unwrap();
        let got = head(trace.head_outputs.as_ref().unwrap(), h).value().unwrap();
        assert!(got.bitwise_eq(&want), "head {h} must read kv head {kv}");
        let tiled = scaled_dot_product_attention(
            &head(q, h),
            &head(k, h % 2),
            &head(v, h % 2),
            Some(&Mask::causal(4, 4, 0).unwrap()),
        )
        .unwrap()
        .output()
        .value()
        .unwrap();
        assert_eq!(got.bitwise_eq(&tiled), h % 2 == kv, "the tiled order differs for heads 1 and 2");
    }
}

fn decode_in_chunks(layer: &GroupedQueryAttention, x: &Tensor, chunks: &[usize]) -> Tensor {
    let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let mut cache = layer.new_cache(b);
    let mut rows = vec![Vec::new(); b];
    let mut start = 0;
    for &len in chunks.iter().cycle() {
        if start == t {
            break;
        }
        let len = len.min(t - start);
        let chunk = constant(&[b, t, d], x.as_slice()).unwrap().slice_axis(1, start, start + len).unwrap();
        let out = layer.forward_cached(&chunk, &mut cache).unwrap();
        for (bi, row) in rows.iter_mut().enumerate() {
            row.extend_from_slice(&out.as_slice()[bi * len * d..(bi + 1) * len * d]);
        }
        start += len;
        let kept = cache.len();
        assert_eq!(cache.key_shape()[1], layer.config().kv_heads, "the cache holds G heads");
        if let Some(w) = layer.config().window {
            assert!(kept < w.visible_keys().max(1), "the cache keeps only what a future query can see");
        }
        assert_eq!(cache.next_position(), start, "the absolute position is carried separately");
    }
    Tensor::new(x.shape(), rows.concat()).unwrap()
}

#[test]
fn token_by_token_and_chunked_prefill_equal_the_full_pass() {
    let mut rng = SplitMix64::new(4);
    for window in [None, Some(SlidingWindow::Inclusive(2)), Some(SlidingWindow::Exclusive(3))] {
        // sinks too when windowed: the cached path must add them to every softmax
        let mut config =
            AttentionConfig::new(12, 4, 2, 4).with_rope(32, 10_000.0).with_bias(true).with_sinks(window.is_some());
        config.window = window;
        let layer = GroupedQueryAttention::new("a", config, &mut rng).unwrap();
        let x = random(&[2, 7, 12], &mut rng);
        let full = layer.forward(&constant(x.shape(), x.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
        for chunks in [vec![1], vec![2], vec![3], vec![7], vec![3, 1, 2]] {
            let cached = decode_in_chunks(&layer, &x, &chunks);
            assert!(close(&cached, &full, 1e-12), "window {window:?}, chunks {chunks:?}");
        }
    }
}

#[test]
fn decoding_wide_heads_over_a_wrapped_ring_equals_the_full_pass() {
    // head width 12: scores take eight values at a time plus a tail of four; keys are scored four
    // at a time plus a remainder; with an exclusive window of 6 the ring wraps, so the cached keys
    // come in two stretches before this call's own
    let mut rng = SplitMix64::new(9);
    for window in [None, Some(SlidingWindow::Exclusive(6))] {
        let mut config = AttentionConfig::new(24, 2, 1, 12).with_rope(40, 10_000.0);
        config.window = window;
        let layer = GroupedQueryAttention::new("w", config, &mut rng).unwrap();
        let x = random(&[1, 23, 24], &mut rng);
        let full = layer.forward(&constant(x.shape(), x.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
        for chunks in [vec![1], vec![5, 2], vec![9]] {
            assert!(
                close(&decode_in_chunks(&layer, &x, &chunks), &full, 1e-12),
                "window {window:?}, chunks {chunks:?}"
            );
        }
    }
}

#[test]
fn decoding_over_a_long_cache_with_query_heads_grouped_equals_the_full_pass() {
    // head width 64 and 255 cached positions and more: each kv lane's keys and values reach the
    // bytes from which a step of one or several tokens attends a kv head's query heads in one task
    // (`GROUPED_LANE_BYTES`, held to this by an assertion beside it); on two threads three kv
    // lanes (one batch row) split the last one between two tasks, four (two batch rows) do not,
    // and one lane is split; sinks everywhere, and a window whose ring (255 slots) wraps
    let mut rng = SplitMix64::new(10);
    for (batch, kv_heads, query_heads, window) in
        [(1, 3, 6, None), (2, 2, 6, Some(SlidingWindow::Exclusive(256))), (1, 1, 3, None), (3, 1, 2, None)]
    {
        let mut config = AttentionConfig::new(48, query_heads, kv_heads, 64).with_rope(300, 10_000.0).with_sinks(true);
        config.window = window;
        let layer = GroupedQueryAttention::new("long", config, &mut rng).unwrap();
        let x = random(&[batch, 260, 48], &mut rng);
        let full = layer.forward(&constant(x.shape(), x.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
        for chunks in [&[255, 1, 1, 1, 1, 1][..], &[255, 2, 3][..]] {
            let cached = decode_in_chunks(&layer, &x, chunks);
            assert!(close(&cached, &full, 1e-12), "{batch} rows, {kv_heads} kv heads, {window:?}, {chunks:?}");
        }
    }
}

#[test]
fn window_cache_holds_the_last_positions_in_order() {
    let mut rng = SplitMix64::new(5);
    let config = AttentionConfig::new(8, 2, 1, 4).with_rope(32, 100.0).with_window(SlidingWindow::Inclusive(3));
    let layer = GroupedQueryAttention::new("a", config, &mut rng).unwrap();
    let mut cache = layer.new_cache(1);
    layer.forward_cached(&input(&[1, 6, 8], &mut rng), &mut cache).unwrap();
    layer.forward_cached(&input(&[1, 1, 8], &mut rng), &mut cache).unwrap();
    assert_eq!(cache.positions(), vec![4, 5, 6], "inclusive(3): a query at 7 sees 4..=7");
    assert_eq!(cache.key_shape(), [1, 1, 3, 4]);
    assert_eq!(cache.next_position(), 7);
    cache.reset();
    assert!(cache.is_empty() && cache.next_position() == 0);
}

#[test]
fn cache_errors_are_typed() {
    let mut rng = SplitMix64::new(6);
    let layer =
        GroupedQueryAttention::new("a", AttentionConfig::new(8, 2, 1, 4).with_rope(4, 100.0), &mut rng).unwrap();
    let other =
        GroupedQueryAttention::new("b", AttentionConfig::new(8, 2, 2, 4).with_rope(4, 100.0), &mut rng).unwrap();
    let mut cache = layer.new_cache(1);
    let err = other.forward_cached(&input(&[1, 1, 8], &mut rng), &mut cache).unwrap_err();
    assert_eq!(err, AttentionError::CacheMismatch { what: "key/value heads", expected: 2, actual: 1 });
    let err = layer.forward_cached(&input(&[2, 1, 8], &mut rng), &mut cache).unwrap_err();
    assert_eq!(err, AttentionError::CacheMismatch { what: "batch", expected: 2, actual: 1 });
    let wide = GroupedQueryAttention::new("c", AttentionConfig::new(8, 2, 1, 6).with_rope(4, 100.0), &mut rng).unwrap();
    assert!(matches!(
        wide.forward_cached(&input(&[1, 1, 8], &mut rng), &mut cache),
        Err(AttentionError::CacheMismatch { what: "head width", .. })
    ));
    layer.forward_cached(&input(&[1, 3, 8], &mut rng), &mut cache).unwrap();
    let err = layer.forward_cached(&input(&[1, 2, 8], &mut rng), &mut cache).unwrap_err();
    assert_eq!(err.to_string(), "attention positions: 3..5 exceed capacity 4");
    assert_eq!(cache.next_position(), 3, "a rejected call leaves the cache unchanged");
}

#[test]
fn generation_resets_and_recomputes_the_window_when_text_outgrows_capacity() {
    let mut rng = SplitMix64::new(7);
    let window = SlidingWindow::Inclusive(2);
    let config = AttentionConfig::new(8, 2, 1, 4).with_rope(6, 100.0).with_window(window);
    let layer = GroupedQueryAttention::new("a", config, &mut rng).unwrap();
    let prompt = random(&[1, 3, 8], &mut rng);
    let next = |row: &[f64]| row.iter().map(|v| (v * 3.0).sin()).collect::<Vec<_>>();
    let produced = generate_with_cache(&layer, &prompt, 8, window.visible_keys(), next).unwrap();
    assert_eq!(produced.len(), 8);
    // reference: the window makes each output depend only on the last 3 inputs, whatever their
    // absolute positions, so recompute each step from scratch at positions 0..3
    let mut history: Vec<Vec<f64>> = prompt.as_slice().chunks(8).map(<[f64]>::to_vec).collect();
    let mut last =
        layer.forward(&constant(&[1, 3, 8], prompt.as_slice()).unwrap(), 0).unwrap().output.value().unwrap().as_slice()
            [16..]
            .to_vec();
    for got in &produced {
        history.push(next(&last));
        let tail = history[history.len() - 3..].concat();
        let out = layer.forward(&constant(&[1, 3, 8], &tail).unwrap(), 0).unwrap().output.value().unwrap();
        last = out.as_slice()[16..].to_vec();
        assert!(got.iter().zip(&last).all(|(a, b)| (a - b).abs() <= 1e-12));
    }
    assert!(generate_with_cache(&layer, &prompt, 1, 0, next).is_err());
}

#[test]
fn padded_rows_match_the_unpadded_sequence_and_fully_masked_rows_are_zero() {
    let mut rng = SplitMix64::new(8);
    let layer =
        GroupedQueryAttention::new("a", AttentionConfig::new(8, 4, 2, 2).with_rope(16, 100.0), &mut rng).unwrap();
    let real = random(&[1, 3, 8], &mut rng);
    let alone = layer.forward(&constant(&[1, 3, 8], real.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
    // row 0: two padding tokens then the three real ones; row 1: five real tokens
    let pad = random(&[1, 2, 8], &mut rng);
    let other = random(&[1, 5, 8], &mut rng);
    let x = constant(&[2, 5, 8], &[pad.as_slice(), real.as_slice(), other.as_slice()].concat()).unwrap();
    let padding = Mask::new(&[2, 5], [[true, true, false, false, false], [false; 5]].concat()).unwrap();
    let positions = [0, 0, 0, 1, 2, 0, 1, 2, 3, 4];
    let options =
        AttentionOptions { positions: Some(&positions), key_padding: Some(&padding), ..AttentionOptions::default() };
    let out = layer.forward_with(&x, options).unwrap().output.value().unwrap();
    let padded_real = Tensor::new(&[1, 3, 8], out.as_slice()[16..40].to_vec()).unwrap();
    assert!(close(&padded_real, &alone, 1e-12));
    let row1 = layer.forward(&constant(&[1, 5, 8], other.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
    assert!(close(&Tensor::new(&[1, 5, 8], out.as_slice()[40..].to_vec()).unwrap(), &row1, 1e-12));
    // padding tokens see no real key before them: their weights are all zero, never NaN
    let options =
        AttentionOptions { positions: Some(&positions), key_padding: Some(&padding), ..AttentionOptions::default() };
    let trace = layer.forward_with(&x, options).unwrap();
    let w = trace.weights.as_ref().unwrap().value().unwrap();
    assert!(w.all_finite() && out.all_finite());
    assert!(w.as_slice()[..5].iter().all(|&p| p == 0.0), "first padding query of head 0 attends to nothing");
}

#[test]
fn every_layer_applies_ropes_one_head_width_rule_under_its_own_error() {
    let mut rng = SplitMix64::new(8);
    // RoPE states the rule: a head width is positive and even
    assert_eq!(RotaryEmbedding::check_head_width(4), Ok(()));
    assert_eq!(RotaryEmbedding::check_head_width(0), Err(RopeError::ZeroHeadWidth));
    assert_eq!(RotaryEmbedding::check_head_width(3), Err(RopeError::OddHeadWidth { head_width: 3 }));
    assert_eq!(RotaryEmbedding::new(3, 8, 10.0).unwrap_err(), RopeError::OddHeadWidth { head_width: 3 });
    // the layers report it with their own sizes
    let odd = AttentionError::OddHeadWidth { head_width: 3, model_width: 6, heads: 2 };
    assert_eq!(MultiHeadAttention::new("m", 6, 2, 8, 10.0, &mut rng).unwrap_err(), odd);
    assert_eq!(AttentionConfig::new(6, 2, 2, 3).validate(), Err(odd));
    assert_eq!(AttentionConfig::new(6, 2, 2, 0).validate(), Err(AttentionError::Rope(RopeError::ZeroHeadWidth)));
    let latent = |rope_width| {
        let config = LatentConfig {
            model_width: 12,
            heads: 3,
            head_width: 4,
            latent_width: 5,
            rope_width,
            max_positions: 16,
            rope_base: 100.0,
        };
        LatentAttention::new(config, &mut SplitMix64::new(0)).map(|_| ())
    };
    assert_eq!(latent(3), Err(AttentionError::OddRopeWidth { rope_width: 3 }));
    assert_eq!(latent(0), Err(AttentionError::Rope(RopeError::ZeroHeadWidth)));
    assert_eq!(latent(2), Ok(()));
}

#[test]
fn configuration_and_input_errors_are_typed() {
    let mut rng = SplitMix64::new(9);
    let mut new = |c: AttentionConfig| GroupedQueryAttention::new("a", c, &mut rng).map(|_| ()).unwrap_err();
    assert_eq!(
        new(AttentionConfig::new(8, 6, 4, 2)),
        AttentionError::GroupsDoNotDivide { query_heads: 6, kv_heads: 4 }
    );
    assert_eq!(new(AttentionConfig::new(8, 0, 1, 2)), AttentionError::ZeroHeads);
    assert_eq!(new(AttentionConfig::new(8, 2, 0, 2)), AttentionError::ZeroKvHeads);
    assert_eq!(new(AttentionConfig::new(0, 2, 1, 2)), AttentionError::ZeroModelWidth);
    assert!(matches!(new(AttentionConfig::new(8, 2, 1, 0)), AttentionError::Rope(_)));
    assert!(matches!(new(AttentionConfig::new(8, 2, 1, 3)), AttentionError::OddHeadWidth { head_width: 3, .. }));
    assert!(matches!(
        new(AttentionConfig::new(8, 2, 1, 2).with_window(SlidingWindow::Exclusive(0))),
        AttentionError::InvalidWindow { .. }
    ));
    assert_eq!(
        new(AttentionConfig::new(8, 2, 1, 2).with_dropout(1.0, 0.0)).to_string(),
        "attention config: attention dropout p = 1 must satisfy 0 ≤ p < 1"
    );
    assert!(matches!(
        new(AttentionConfig::new(8, 2, 1, 2).with_dropout(0.0, f64::NAN)),
        AttentionError::InvalidDropout { which: "output", .. }
    ));
    let layer = GroupedQueryAttention::new("a", AttentionConfig::new(8, 2, 1, 2).with_rope(8, 10.0), &mut rng).unwrap();
    let x = input(&[2, 3, 8], &mut rng);
    let bad = Mask::new(&[2, 2], vec![false; 4]).unwrap();
    let err = layer
        .forward_with(&x, AttentionOptions { key_padding: Some(&bad), ..AttentionOptions::default() })
        .unwrap_err();
    assert_eq!(err.to_string(), "attention input: key padding has shape [2,2] but [2,3] was needed");
    let err = layer
        .forward_with(&x, AttentionOptions { positions: Some(&[0, 1]), ..AttentionOptions::default() })
        .unwrap_err();
    assert!(matches!(err, AttentionError::PaddingShape { what: "positions", .. }));
    let err = layer
        .forward_with(&x, AttentionOptions { positions: Some(&[0, 1, 8]), ..AttentionOptions::default() })
        .unwrap_err();
    assert!(matches!(err, AttentionError::PositionOutOfRange { start: 8, .. }));
}

#[test]
fn dropout_only_in_training_and_p_zero_draws_nothing() {
    let mut rng = SplitMix64::new(10);
    let layer = GroupedQueryAttention::new("a", AttentionConfig::new(8, 2, 1, 4).with_rope(8, 10.0), &mut rng).unwrap();
    let x = input(&[1, 4, 8], &mut rng);
    let eval = layer.forward(&x, 0).unwrap().output.value().unwrap();
    let mut train_rng = SplitMix64::new(11);
    let no_drop = layer
        .forward_with(&x, AttentionOptions { training: Some(&mut train_rng), ..AttentionOptions::default() })
        .unwrap();
    assert!(no_drop.output.value().unwrap().bitwise_eq(&eval));
    assert_eq!(train_rng, SplitMix64::new(11), "p = 0 draws nothing");
    let dropping = GroupedQueryAttention::from_parts(
        "a",
        layer.config().clone().with_dropout(0.5, 0.25),
        layer.qkv().clone(),
        layer.output_projection().clone(),
    )
    .unwrap();
    assert!(dropping.forward(&x, 0).unwrap().output.value().unwrap().bitwise_eq(&eval), "evaluation ignores dropout");
    let trained = dropping
        .forward_with(&x, AttentionOptions { training: Some(&mut train_rng), ..AttentionOptions::default() })
        .unwrap();
    assert!(!trained.output.value().unwrap().bitwise_eq(&eval));
}

fn gradcheck_layer(config: AttentionConfig, options: impl Fn() -> (Vec<usize>, Option<Mask>, Option<u64>)) {
    let mut rng = SplitMix64::new(12);
    let layer = GroupedQueryAttention::new("a", config.clone(), &mut rng).unwrap();
    let (b, t) = (2, 4);
    let mut inputs = vec![("x", random(&[b, t, config.model_width], &mut rng))];
    let params: Vec<(String, Tensor)> =
        layer.parameters().iter().map(|p| (p.name().to_string(), p.value().value().unwrap())).collect();
    inputs.extend(params.iter().map(|(n, v)| (n.as_str(), v.clone())));
    let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| -> Result<TensorValue, AnyError> {
        let qkv = llm_from_scratch::nn::QkvProjections::from_parameters(
            "a",
            [v[1].clone(), v[2].clone(), v[3].clone()],
            config.bias.then(|| [v[4].clone(), v[5].clone(), v[6].clone()]),
        )?;
        // parameters() lists Q, K, V weights, their biases, then W_O and its bias
        let o = if config.bias { 7 } else { 4 };
        let output = llm_from_scratch::nn::Linear::from_parameters(v[o].clone(), config.bias.then(|| v[8].clone()))?;
        let layer = GroupedQueryAttention::from_parts("a", config.clone(), qkv, output)?;
        let (positions, padding, seed) = options();
        let mut drop_rng = seed.map(SplitMix64::new);
        let options = AttentionOptions {
            positions: (!positions.is_empty()).then_some(positions.as_slice()),
            key_padding: padding.as_ref(),
            training: drop_rng.as_mut(),
            ..AttentionOptions::default()
        };
        Ok(layer.forward_with(&v[0], options)?.output)
    })
    .unwrap();
    assert!(report.passed(), "{config:?}: {report:?}");
}

#[test]
fn gradcheck_gqa_mqa_window_padding_bias_dropout() {
    let none = || (Vec::new(), None, None);
    gradcheck_layer(AttentionConfig::new(6, 4, 2, 2).with_rope(8, 10.0), none);
    gradcheck_layer(AttentionConfig::new(6, 2, 1, 4).with_rope(8, 10.0).with_bias(true), none);
    gradcheck_layer(AttentionConfig::new(6, 2, 2, 2).with_rope(8, 10.0).with_window(SlidingWindow::Exclusive(2)), none);
    gradcheck_layer(
        AttentionConfig::new(6, 2, 1, 2).with_rope(8, 10.0).with_rope_layout(RopeLayout::SplitHalves),
        || {
            let padding = Mask::new(&[2, 4], vec![true, false, false, false, false, false, false, false]).unwrap();
            (vec![0, 0, 1, 2, 0, 1, 2, 3], Some(padding), None)
        },
    );
    // evaluation mode ignores dropout; a fixed seed makes a training mask reproducible
    gradcheck_layer(AttentionConfig::new(6, 2, 1, 2).with_rope(8, 10.0).with_dropout(0.3, 0.2), none);
    gradcheck_layer(AttentionConfig::new(6, 2, 1, 2).with_rope(8, 10.0).with_dropout(0.3, 0.2), || {
        (Vec::new(), None, Some(5))
    });
}

#[test]
fn parameter_counts_and_cache_sizes_of_known_models() {
    let count = |c: AttentionConfig| c.parameter_count();
    assert_eq!(count(AttentionConfig::multi_head(768, 12).with_bias(true)), 2_362_368); // GPT-1
    assert_eq!(count(AttentionConfig::multi_head(4096, 32)), 67_108_864); // LLaMA-7B
    assert_eq!(count(AttentionConfig::new(4096, 32, 8, 128)), 41_943_040); // Mistral-7B
    assert_eq!(count(AttentionConfig::new(2048, 8, 1, 256)), 9_437_184); // Gemma-2B
    assert_eq!(count(AttentionConfig::new(3072, 16, 16, 256)), 50_331_648); // Gemma-7B
    assert_eq!(count(AttentionConfig::new(256, 8, 8, 32).with_bias(true)), 263_168);
    const MIB: u128 = 1 << 20;
    assert_eq!(AttentionConfig::multi_head(4096, 32).kv_cache_bytes(32, 4096, 1, 2), 2048 * MIB);
    assert_eq!(AttentionConfig::new(4096, 32, 8, 128).kv_cache_bytes(32, 4096, 1, 2), 512 * MIB);
    assert_eq!(AttentionConfig::new(2048, 8, 1, 256).kv_cache_bytes(18, 4096, 1, 2), 72 * MIB);
    assert_eq!(AttentionConfig::new(2048, 8, 8, 256).kv_cache_bytes(18, 4096, 1, 2), 576 * MIB);
    assert_eq!(AttentionConfig::new(3072, 16, 16, 256).kv_cache_bytes(28, 4096, 1, 2), 1792 * MIB);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn cached_decoding_equals_the_full_pass_for_random_shapes(
        g in 1usize..3, group in 1usize..3, half in 1usize..3, t in 1usize..7,
        window in proptest::option::of((0usize..4, any::<bool>())), chunk in 1usize..4, seed in any::<u64>()
    ) {
        let h = g * group;
        let mut config = AttentionConfig::new(6, h, g, 2 * half).with_rope(16, 100.0);
        config.window = match window {
            Some((w, true)) => Some(SlidingWindow::Inclusive(w)),
            Some((w, false)) => Some(SlidingWindow::Exclusive(w + 1)),
            None => None,
        };
        let mut rng = SplitMix64::new(seed);
        let layer = GroupedQueryAttention::new("a", config, &mut rng).unwrap();
        let x = random(&[2, t, 6], &mut rng);
        let full = layer.forward(&constant(x.shape(), x.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
        let cached = decode_in_chunks(&layer, &x, &[chunk]);
        prop_assert!(close(&cached, &full, 1e-12));
    }

    #[test]
    fn grouped_equals_multi_head_and_multi_query_for_random_shapes(
        heads in prop_oneof![Just(1usize), Just(2), Just(3), Just(6)], t in 1usize..7, offset in 0usize..5,
        mqa_heads in 1usize..5, half in 1usize..3, seed in any::<u64>()
    ) {
        let mut rng = SplitMix64::new(seed);
        // G = H with d_h = 12/H is multi-head attention with the same weights
        let mha = MultiHeadAttention::new("m", 12, heads, 16, 100.0, &mut rng);
        if let Ok(mha) = mha {
            let x = input(&[2, t, 12], &mut rng);
            let (a, b) = (mha.forward(&x, offset).unwrap(), mha.to_grouped().unwrap().forward(&x, offset).unwrap());
            prop_assert!(close(&b.output.value().unwrap(), &a.output.value().unwrap(), 1e-12));
        }
        // G = 1 is multi-query attention: one key/value head broadcast over all query heads, bitwise
        let config = AttentionConfig::new(6, mqa_heads, 1, 2 * half).with_rope(16, 100.0);
        let layer = GroupedQueryAttention::new("q", config, &mut rng).unwrap();
        let trace = layer.forward(&input(&[2, t, 6], &mut rng), offset).unwrap();
        let mqa = scaled_dot_product_attention(
            &trace.rotated_query_heads,
            &trace.rotated_key_heads,
            trace.value_heads.as_ref().unwrap(),
            Some(&Mask::causal(t, t, 0).unwrap()),
        )
        .unwrap();
        prop_assert!(trace.head_outputs.as_ref().unwrap().value().unwrap().bitwise_eq(&mqa.output().value().unwrap()));
    }
}
