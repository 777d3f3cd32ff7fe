//! Hostile inputs for every public constructor and forward: each call either succeeds — with
//! finite results when its inputs were finite — or returns a typed error. A panic fails the test
//! (proptest catches it and shrinks the input); an abort or a hang would stop the suite.
//!
//! Non-finite policy (documented in the README): NaN and ±∞ in inputs or parameters are
//! *propagated*, never rejected and never hidden — except where the chapter defines an answer
//! (a softmax row that is all −∞ gives zeros; a row with +∞ shares its weight among the +∞ entries).

use llm_from_scratch::attention::{
    AttentionConfig, AttentionOptions, AttentionPath, GroupedQueryAttention, LatentAttention, LatentConfig,
    MultiHeadAttention, SlidingWindow, Visibility, grouped_attention, merge_heads, split_heads, tiled_attention,
};
use llm_from_scratch::nn::{Linear, QkvProjections, RmsNorm, RotaryEmbedding, SplitMix64};
use llm_from_scratch::{Mask, Tensor, TensorValue, concat, constant};
use proptest::prelude::*;

/// Sizes a hostile caller might pass: zero, small, and absurdly large.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..6, 1 => Just(usize::MAX), 1 => Just(usize::MAX / 2), 1 => Just(1usize << 40)]
}

/// Floats a hostile caller might pass.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -3.0f64..3.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(0.0),
        1 => Just(-1.0),
        1 => Just(1e300)
    ]
}

fn small_shape() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(0usize..4, 0..5)
}

/// Mostly well-formed `[B, T, 4]` inputs, sometimes anything.
fn sequence_shape() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![3 => (0usize..3, 0usize..7).prop_map(|(b, t)| vec![b, t, 4]), 1 => small_shape()]
}

/// Mostly coherent `(q [B,H,T_q,d], k [B,G,T_k,d])` pairs, sometimes anything.
fn qk_shapes() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop_oneof![
        3 => (1usize..3, 1usize..3, 1usize..3, 0usize..6, 0usize..6, 1usize..4)
            .prop_map(|(b, g, r, tq, tk, d)| (vec![b, g * r, tq, d], vec![b, g, tk, d])),
        1 => (small_shape(), small_shape())
    ]
}

fn filled(shape: &[usize], seed: u64) -> TensorValue {
    let n: usize = shape.iter().product();
    let mut rng = SplitMix64::new(seed);
    let values: Vec<f64> = (0..n).map(|_| rng.uniform(-2.0, 2.0)).collect();
    constant(shape, &values).unwrap()
}

fn finite(v: &TensorValue) -> bool {
    v.value().map(|t| t.all_finite()).unwrap_or(true)
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn tensors_and_leaves_reject_bad_lengths_and_huge_shapes(shape in proptest::collection::vec(size(), 0..4), len in 0usize..8) {
        let _ = Tensor::new(&shape, vec![0.5; len]);
        let _ = Tensor::zeros(&shape);
        let _ = constant(&shape, &vec![0.5; len]);
        let _ = Mask::new(&shape, vec![false; len]);
    }

    #[test]
    fn binary_ops_on_random_shapes(a in small_shape(), b in small_shape(), seed in any::<u64>()) {
        let (x, y) = (filled(&a, seed), filled(&b, seed ^ 1));
        for v in [x.add(&y), x.sub(&y), x.mul(&y), x.matmul(&y), concat(&[&x, &y], 0), concat(&[&x, &y], 7)].into_iter().flatten() {
            prop_assert!(finite(&v));
        }
    }

    #[test]
    fn unary_and_shape_ops_on_random_arguments(a in small_shape(), to in small_shape(), i in 0usize..6, j in 0usize..6, p in float(), seed in any::<u64>()) {
        let x = filled(&a, seed);
        let results = [
            x.reshape(&to),
            x.transpose(i, j),
            x.permute(&[i, j]),
            x.slice_axis(i, j, i + j),
            x.softmax_last_axis(),
            x.exp(),
            x.silu(),
            x.scale(2.0),
            x.sum(),
            x.dropout(p, &mut SplitMix64::new(seed)),
            x.masked_fill(&Mask::causal(i, j, 0).unwrap(), f64::NEG_INFINITY).and_then(|m| m.softmax_last_axis()),
            x.masked_softmax_last_axis(&Mask::causal(i, j, 0).unwrap()),
            x.rms_norm(&filled(&to, seed), p),
        ];
        for v in results.into_iter().flatten() {
            prop_assert!(finite(&v), "{:?}", v);
        }
        let _ = x.log();
        let _ = split_heads(&x, i).and_then(|s| merge_heads(&s));
    }

    #[test]
    fn backward_from_random_outputs(a in small_shape(), seed in any::<u64>()) {
        let x = TensorValue::leaf(filled(&a, seed).value().unwrap(), true);
        let y = x.mul(&x).and_then(|y| y.softmax_last_axis());
        if let Ok(y) = y {
            let _ = y.backward();
            let _ = y.backward_with(&Tensor::zeros(y.shape()).unwrap());
            let _ = y.backward_with(&Tensor::zeros(&[7]).unwrap());
            x.release();
            let _ = y.backward_with(&Tensor::zeros(y.shape()).unwrap());
        }
    }

    #[test]
    fn layers_from_hostile_configurations(d in size(), h in size(), g in size(), dh in size(), cap in size(), base in float(), p in float(), w in size(), seed in any::<u64>()) {
        let mut rng = SplitMix64::new(seed);
        let _ = Linear::new("l", d, h, true, &mut rng);
        let _ = QkvProjections::with_widths("q", d, h, g, true, &mut rng);
        let _ = RmsNorm::new("n", d, p);
        let _ = RotaryEmbedding::new(dh, cap, base);
        let _ = MultiHeadAttention::new("m", d, h, cap, base, &mut rng);
        let mut config = AttentionConfig::new(d, h, g, dh).with_rope(cap, base).with_dropout(p, 0.0);
        config.window = Some(if seed % 2 == 0 { SlidingWindow::Inclusive(w) } else { SlidingWindow::Exclusive(w) });
        let _ = GroupedQueryAttention::new("g", config, &mut rng);
        let latent = LatentConfig { model_width: d, heads: h, head_width: dh, latent_width: g, rope_width: w, max_positions: cap, rope_base: base };
        let _ = LatentAttention::new(latent, &mut rng);
    }

    #[test]
    fn attention_forwards_on_hostile_inputs(
        shape in sequence_shape(), offset in prop_oneof![0usize..8, Just(usize::MAX), Just(usize::MAX - 2)],
        positions in proptest::collection::vec(prop_oneof![0usize..10, Just(usize::MAX)], 0..8),
        padding in proptest::collection::vec(any::<bool>(), 0..12), release in any::<bool>(), tiled in any::<bool>(),
        value in float(), seed in any::<u64>()
    ) {
        let mut rng = SplitMix64::new(seed);
        let mha = MultiHeadAttention::new("m", 4, 2, 8, 100.0, &mut rng).unwrap();
        let kernel = if tiled { AttentionPath::Tiled } else { AttentionPath::Explicit };
        let config = AttentionConfig::new(4, 2, 1, 2).with_rope(8, 100.0).with_path(kernel).with_sinks(tiled);
        let gqa = GroupedQueryAttention::new("g", config, &mut rng).unwrap();
        let n: usize = shape.iter().product();
        // 1e300 overflows f64 in q·kᵀ: finite in, finite out holds up to products within range
        let input_finite = value.abs() < 1e100;
        let x = constant(&shape, &vec![value; n]).unwrap();
        if release {
            x.release();
        }
        if let Ok(out) = mha.forward(&x, offset) {
            prop_assert!(!input_finite || finite(&out.output));
        }
        let rows = shape.first().copied().unwrap_or(0);
        let mask = Mask::new(&[rows, padding.len() / rows.max(1)], padding[..rows * (padding.len() / rows.max(1))].to_vec()).unwrap();
        let options = AttentionOptions { position_offset: offset, positions: Some(&positions), key_padding: Some(&mask), ..AttentionOptions::default() };
        if let Ok(out) = gqa.forward_with(&x, options) {
            prop_assert!(!input_finite || finite(&out.output));
        }
        let mut cache = gqa.new_cache(rows);
        for _ in 0..3 {
            if let Ok(out) = gqa.forward_cached(&x, &mut cache) {
                prop_assert!(!input_finite || out.all_finite());
            }
        }
        let other = GroupedQueryAttention::new("o", AttentionConfig::new(4, 2, 2, 2).with_rope(8, 100.0), &mut rng).unwrap();
        prop_assert!(other.forward_cached(&x, &mut cache).is_err());
    }

    #[test]
    fn attention_kernels_on_random_shapes((q, k) in qk_shapes(), offset in 0usize..5, window in proptest::option::of(0usize..4), pad in proptest::collection::vec(any::<bool>(), 0..10), sinks in any::<bool>(), seed in any::<u64>()) {
        let (qv, kv) = (filled(&q, seed), filled(&k, seed ^ 3));
        let sink = filled(&[q.get(1).copied().unwrap_or(0)], seed);
        let vis = Visibility { query_offset: offset, window: window.map(SlidingWindow::Inclusive), key_padding: (!pad.is_empty()).then_some(pad) };
        let sinks = sinks.then_some(&sink);
        for o in [tiled_attention(&qv, &kv, &kv, sinks, &vis), grouped_attention(&qv, &kv, &kv, sinks, &vis).map(|o| o.output().clone())].into_iter().flatten() {
            prop_assert!(finite(&o));
        }
    }
}

proptest! {
    #[test]
    fn small_layers_and_latent_attention_on_hostile_inputs(
        shape in sequence_shape(), offset in prop_oneof![0usize..8, Just(usize::MAX)], value in float(),
        positions in proptest::collection::vec(0usize..12, 0..6), release in any::<bool>(), seed in any::<u64>()
    ) {
        let mut rng = SplitMix64::new(seed);
        let n: usize = shape.iter().product();
        let x = constant(&shape, &vec![value; n]).unwrap();
        if release {
            x.release();
        }
        let finite_in = value.abs() < 1e100;
        let linear = Linear::new("l", 4, 3, true, &mut rng).unwrap();
        let qkv = QkvProjections::with_widths("q", 4, 4, 2, true, &mut rng).unwrap();
        let norm = RmsNorm::new("n", 4, 1e-6).unwrap();
        let rope = RotaryEmbedding::new(4, 8, 100.0).unwrap();
        for out in [linear.forward(&x).ok(), qkv.forward(&x).ok().map(|o| o.key().clone()), norm.forward(&x).ok()].into_iter().flatten() {
            prop_assert!(!finite_in || finite(&out));
        }
        for out in [rope.rotate(&x, offset).ok(), rope.rotate_at(&x, &positions).ok()].into_iter().flatten() {
            prop_assert!(!finite_in || finite(&out));
        }
        let config = LatentConfig { model_width: 4, heads: 2, head_width: 2, latent_width: 3, rope_width: 2, max_positions: 8, rope_base: 100.0 };
        let mla = LatentAttention::new(config, &mut rng).unwrap();
        if let Ok(out) = mla.forward(&x, offset) {
            prop_assert!(!finite_in || finite(&out.output));
        }
        let mut cache = mla.new_cache(shape.first().copied().unwrap_or(0));
        for _ in 0..3 {
            if let Ok(out) = mla.forward_cached(&x, &mut cache) {
                prop_assert!(!finite_in || out.all_finite());
            }
        }
    }
}

/// Bugs the suite found, kept as plain regression tests.
#[test]
fn regressions_found_by_the_suite() {
    // 1. an empty axis beside a huge one overflowed `shape.iter().product()` in debug builds
    assert!(Tensor::zeros(&[0, usize::MAX, 2]).is_err());
    assert!(Tensor::zeros(&[usize::MAX]).is_err(), "capacity overflow used to panic");
    assert_eq!(Tensor::zeros(&[0, 5]).unwrap().len(), 0);
    // 2. key padding of the wrong length indexed past its end in the explicit grouped path
    let q = filled(&[1, 2, 2, 2], 1);
    let k = filled(&[1, 1, 2, 2], 2);
    let vis = Visibility { key_padding: Some(vec![false, true, false]), ..Visibility::default() };
    assert!(grouped_attention(&q, &k, &k, None, &vis).is_err());
    // 3. explicit positions with an offset near usize::MAX overflowed offset + T (the offset is
    //    unused when positions are given)
    let mut rng = SplitMix64::new(0);
    let layer =
        GroupedQueryAttention::new("g", AttentionConfig::new(4, 2, 1, 2).with_rope(8, 100.0), &mut rng).unwrap();
    let options =
        AttentionOptions { position_offset: usize::MAX, positions: Some(&[0, 1]), ..AttentionOptions::default() };
    assert!(layer.forward_with(&filled(&[1, 2, 4], 3), options).is_ok());
    // 4. layer sizes beyond memory are refused before drawing, leaving the generator alone
    let before = rng.clone();
    assert!(Linear::new("l", 1 << 20, 1 << 20, false, &mut rng).is_err());
    assert!(RotaryEmbedding::new(usize::MAX - 1, 8, 10.0).is_err());
    assert_eq!(rng, before);
    // RoPE's tables are sized by ROPE_TABLE_VALUES, not by the capacity: a capacity of usize::MAX
    // costs nothing, and a position far past the tables rotates with the same expression
    let rope = RotaryEmbedding::new(2, usize::MAX, 10.0).unwrap();
    let x = constant(&[2, 2], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let far = rope.rotate_at(&x, &[1 << 40, 3]).unwrap().value().unwrap();
    let angle = (1u64 << 40) as f64;
    assert_eq!(far.as_slice()[..2], [angle.cos(), angle.sin()]);
    assert_eq!(far.as_slice()[2..], [3f64.cos(), 3f64.sin()]);
}

#[test]
fn extreme_logits_and_single_visible_keys_stay_finite() {
    // logits of ±1e6: the row maximum is subtracted before exponentiating
    let x = constant(&[2, 3], &[1e6, -1e6, 0.0, -1e6, -1e6, -1e6]).unwrap();
    let y = x.softmax_last_axis().unwrap().value().unwrap();
    assert_eq!(&y.as_slice()[..3], &[1.0, 0.0, 0.0]);
    assert!(y.all_finite());
    // equal scores give exactly uniform weights
    let third = y.as_slice()[3];
    assert_eq!(&y.as_slice()[3..], &[third; 3]);
    assert!((third - 1.0 / 3.0).abs() < 1e-16);
    // a query whose only visible key is itself (first token, causal) puts weight exactly 1 on it
    let q = constant(&[1, 2, 2], &[1e6, 1e6, -1e6, 1e6]).unwrap();
    let out = llm_from_scratch::attention::causal_scaled_dot_product_self_attention(&q, &q, &q).unwrap();
    assert_eq!(out.weights().value().unwrap().as_slice()[..2], [1.0, 0.0]);
    assert!(out.output().value().unwrap().all_finite());
}

#[test]
fn non_finite_inputs_are_propagated_not_hidden() {
    let x = constant(&[1, 3], &[f64::NAN, 0.0, 1.0]).unwrap();
    assert!(x.softmax_last_axis().unwrap().value().unwrap().as_slice().iter().all(|v| v.is_nan()));
    let y = constant(&[1, 2], &[f64::INFINITY, 1.0]).unwrap().softmax_last_axis().unwrap();
    assert_eq!(y.value().unwrap().as_slice(), &[1.0, 0.0], "a defined answer exists for +∞");
    let mut rng = SplitMix64::new(0);
    let mha = MultiHeadAttention::new("m", 4, 2, 8, 100.0, &mut rng).unwrap();
    let out = mha.forward(&constant(&[1, 2, 4], &[f64::NAN, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]).unwrap(), 0).unwrap();
    assert!(out.output.value().unwrap().as_slice().iter().any(|v| v.is_nan()), "NaN reaches the output");
    assert!(!llm_from_scratch::Tape::of(&out.output).all_finite(), "and the tape check reports it");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn decoder_from_hostile_configurations_and_tokens(
        vocab in prop_oneof![4 => 2usize..6, 1 => 0usize..2, 1 => Just(usize::MAX)],
        width in prop_oneof![4 => Just(4usize), 2 => Just(8usize), 1 => 0usize..9, 1 => Just(1usize << 40)],
        layers in prop_oneof![4 => 1usize..3, 1 => Just(0usize)], heads in prop_oneof![4 => 1usize..3, 1 => 0usize..4],
        capacity in prop_oneof![4 => 4usize..10, 1 => 0usize..4],
        tokens in proptest::collection::vec(prop_oneof![8 => 0usize..6, 1 => Just(usize::MAX)], 0..10),
        rows in 0usize..3, steps in 0usize..6, seed in any::<u64>()
    ) {
        use llm_from_scratch::model::{Decoder, DecoderConfig, Decoding, Sampling, TokenBatch};
        let mut rng = SplitMix64::new(seed);
        let config = DecoderConfig::new(vocab, width, layers, heads).with_rope(capacity, 100.0);
        let Ok(model) = Decoder::new(config, &mut rng) else {
            return Ok(());
        };
        let t = tokens.len() / rows.max(1);
        if let Ok(logits) = model.forward(&tokens[..rows * t], [rows, t]) {
            prop_assert!(finite(&logits));
        }
        let sequences: Vec<Vec<usize>> = tokens.chunks(t.max(1)).take(rows).map(<[usize]>::to_vec).collect();
        if let Ok(batch) = TokenBatch::next_token(&sequences, 1)
            && let Ok(loss) = model.loss(&batch)
        {
            prop_assert!(finite(&loss));
            prop_assert!(loss.backward().is_ok());
        }
        for decoding in [Decoding::KvCache, Decoding::Recompute] {
            let _ = model.generate(&tokens, steps, Sampling::Greedy, decoding, &mut rng);
        }
    }
}

/// Defects a code review found, kept as regression tests.
#[test]
fn regressions_found_by_review() {
    use llm_from_scratch::attention::SlidingWindow;
    use llm_from_scratch::tensor::matmul::{MatRef, matmul};
    let mut rng = SplitMix64::new(1);
    // 1. zero-stride views whose m·n overflows must not pass for an empty destination
    let one = [0.0];
    let (a, b) = (MatRef::new(&one, 1 << 32, 1, 0, 0).unwrap(), MatRef::new(&one, 1, 1 << 32, 0, 0).unwrap());
    assert!(matmul(&mut [], a, b, false, true).is_err());
    // 2. broadcast and product outputs beyond the size limit are typed errors, not aborts
    let tall = TensorValue::leaf(Tensor::zeros(&[1 << 24, 1]).unwrap(), false);
    let wide = TensorValue::leaf(Tensor::zeros(&[1 << 24]).unwrap(), false);
    assert!(matches!(tall.add(&wide), Err(llm_from_scratch::TensorAutodiffError::ShapeOverflow { .. })));
    let row = TensorValue::leaf(Tensor::zeros(&[1, 1 << 24]).unwrap(), false);
    assert!(tall.matmul(&row).is_err());
    // 3. a window wider than any sequence: tiled = explicit, no overflow; offsets that overflow are errors
    let q = filled(&[1, 2, 130, 4], 2);
    let k = filled(&[1, 1, 130, 4], 3);
    let vis = Visibility { window: Some(SlidingWindow::Inclusive(usize::MAX)), ..Visibility::default() };
    let t = tiled_attention(&q, &k, &k, None, &vis).unwrap().value().unwrap();
    let e = grouped_attention(&q, &k, &k, None, &vis).unwrap().output().value().unwrap();
    assert!(t.max_abs_diff(&e).unwrap() < 1e-12);
    let far = Visibility { query_offset: usize::MAX, ..Visibility::default() };
    assert!(tiled_attention(&q, &k, &k, None, &far).is_err());
    assert!(grouped_attention(&q, &k, &k, None, &far).is_err());
    let no_width = filled(&[1, 1, 2, 0], 4);
    assert!(tiled_attention(&no_width, &no_width, &no_width, None, &Visibility::default()).is_err());
    // 4. a window far wider than the capacity keeps the cache at the capacity
    let config = AttentionConfig::new(4, 2, 1, 2).with_rope(8, 100.0).with_window(SlidingWindow::Exclusive(1 << 40));
    let layer = GroupedQueryAttention::new("g", config, &mut rng).unwrap();
    let mut cache = layer.new_cache(1);
    assert!(layer.forward_cached(&filled(&[1, 3, 4], 5), &mut cache).is_ok());
    // 5. rms_norm's backward on an empty last axis
    let x = TensorValue::leaf(Tensor::zeros(&[2, 0]).unwrap(), true);
    let gain = TensorValue::leaf(Tensor::zeros(&[0]).unwrap(), true);
    assert!(x.rms_norm(&gain, 1e-6).unwrap().sum().unwrap().backward().is_ok());
    // 6. per-row RoPE positions need an axis besides [T, d_h]
    let rope = RotaryEmbedding::new(2, 8, 10.0).unwrap();
    assert!(rope.rotate_at(&filled(&[3, 2], 6), &[0; 9]).is_err());
    // 7. the same leaf as two weights would be updated twice: rejected
    let w = TensorValue::leaf(Tensor::zeros(&[4, 4]).unwrap(), true);
    let other = |s| TensorValue::leaf(filled(&[4, 4], s).value().unwrap(), true);
    assert!(MultiHeadAttention::from_parameters(w.clone(), w, other(7), other(8), 2, 8, 10.0).is_err());
    // 8. huge but finite gradients have a finite global norm; an empty range draws nothing
    let big = [Tensor::new(&[2], vec![3e200, 4e200]).unwrap()];
    assert!((llm_from_scratch::model::global_norm(&big) - 5e200).abs() < 1e186);
    let before = rng.clone();
    assert_eq!(rng.below(0), 0);
    assert_eq!(rng, before);
}
