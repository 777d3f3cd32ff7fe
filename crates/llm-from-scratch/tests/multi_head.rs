//! Multi-head attention as a whole: gradients, errors in their documented order, invariants,
//! and results that do not depend on the number of threads.

use llm_from_scratch::attention::{
    AttentionConfig, AttentionError, Branch, GroupedQueryAttention, MultiHeadAttention, Stage,
};
use llm_from_scratch::nn::{RopeError, SplitMix64};
use llm_from_scratch::{GradcheckConfig, Tensor, TensorAutodiffError, TensorValue, constant, gradcheck, parameter};
use proptest::prelude::*;

fn random(shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
}

fn layer_on(w: &[TensorValue], heads: usize) -> Result<MultiHeadAttention, AttentionError> {
    MultiHeadAttention::from_parameters(w[0].clone(), w[1].clone(), w[2].clone(), w[3].clone(), heads, 16, 10_000.0)
}

#[test]
fn gradcheck_whole_layer_random_weights() {
    let mut rng = SplitMix64::new(30);
    let (b, t, d, h) = (2, 3, 8, 2);
    let mut inputs = vec![("x", random(&[b, t, d], &mut rng))];
    for name in ["wq", "wk", "wv", "wo"] {
        inputs.push((name, random(&[d, d], &mut rng)));
    }
    let report =
        gradcheck(&inputs, &GradcheckConfig::default(), |v| -> Result<TensorValue, Box<dyn std::error::Error>> {
            Ok(layer_on(&v[1..], h)?.forward(&v[0], 2)?.output)
        })
        .unwrap();
    assert!(report.passed(), "{report:?}");
    assert_eq!(report.coordinates(), b * t * d + 4 * d * d);
}

#[test]
fn configuration_errors_in_documented_order() {
    let mut rng = SplitMix64::new(0);
    let mut new = |d, h, cap, base| MultiHeadAttention::new("a", d, h, cap, base, &mut rng).unwrap_err();
    // every rule broken at once: the first rule reports
    assert_eq!(new(0, 0, 0, -1.0), AttentionError::ZeroModelWidth);
    assert_eq!(new(4, 0, 0, -1.0), AttentionError::ZeroHeads);
    assert_eq!(new(6, 4, 0, -1.0), AttentionError::HeadsDoNotDivide { model_width: 6, heads: 4 });
    assert_eq!(new(6, 2, 0, -1.0), AttentionError::OddHeadWidth { head_width: 3, model_width: 6, heads: 2 });
    assert_eq!(new(4, 2, 0, -1.0), AttentionError::Rope(RopeError::ZeroCapacity));
    assert_eq!(new(4, 2, 4, -1.0), AttentionError::Rope(RopeError::InvalidBase { base: -1.0 }));
    assert_eq!(new(6, 4, 8, 1.0).to_string(), "attention config: model width 6 is not divisible by 4 heads");
    // a failed constructor leaves the generator untouched
    let mut rng = SplitMix64::new(5);
    assert!(MultiHeadAttention::new("a", 6, 4, 8, 1.0, &mut rng).is_err());
    assert_eq!(rng, SplitMix64::new(5));
    MultiHeadAttention::new("a", 4, 2, 8, 1.0, &mut rng).unwrap();
    assert_ne!(rng, SplitMix64::new(5));
}

#[test]
fn parameter_shape_errors_name_the_weight() {
    let w = |r, c| parameter(&[r, c], &vec![0.0; r * c]).unwrap();
    let err = MultiHeadAttention::from_parameters(w(4, 4), w(4, 4), w(4, 3), w(4, 4), 2, 8, 10.0).unwrap_err();
    assert_eq!(err.to_string(), "attention parameters: value weight has shape [4,3] but [4,4] was needed");
    let err = MultiHeadAttention::from_parameters(w(4, 4), w(4, 4), w(4, 4), w(2, 4), 2, 8, 10.0).unwrap_err();
    assert!(matches!(err, AttentionError::ParameterShape { name: "output weight", .. }));
}

#[test]
fn input_errors_in_documented_order_before_touching_the_tape() {
    let mut rng = SplitMix64::new(1);
    let mha = MultiHeadAttention::new("a", 4, 2, 6, 100.0, &mut rng).unwrap();
    let x = |shape: &[usize]| constant(shape, &vec![0.5; shape.iter().product()]).unwrap();
    assert!(matches!(mha.forward(&x(&[3, 4]), usize::MAX), Err(AttentionError::InputRank { .. })));
    assert!(matches!(mha.forward(&x(&[1, 0, 5]), usize::MAX), Err(AttentionError::InputWidth { expected: 4, .. })));
    assert!(matches!(mha.forward(&x(&[1, 0, 4]), usize::MAX), Err(AttentionError::EmptySequence { .. })));
    assert_eq!(
        mha.forward(&x(&[1, 3, 4]), usize::MAX - 1).unwrap_err(),
        AttentionError::PositionOverflow { offset: usize::MAX - 1, tokens: 3 }
    );
    assert_eq!(mha.forward(&x(&[1, 3, 4]), 4).unwrap_err().to_string(), "attention positions: 4..7 exceed capacity 6");
    // a released input with a bad interval still reports the interval
    let released = x(&[1, 3, 4]);
    released.release();
    assert!(matches!(
        mha.forward(&released, 5),
        Err(AttentionError::PositionOutOfRange { start: 5, end: 8, capacity: 6 })
    ));
    let err = mha.forward(&released, 0).unwrap_err();
    assert!(
        matches!(err, AttentionError::Stage { stage: Stage::Projection, source: TensorAutodiffError::Released { .. } }),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("attention qkv projection: matmul: the value made by constant was released"),
        "{err}"
    );
    // an empty batch is fine: nothing to attend, nothing computed
    assert_eq!(mha.forward(&x(&[0, 3, 4]), 0).unwrap().output.shape(), &[0, 3, 4]);
}

#[test]
fn new_draws_the_grouped_layers_weights_and_the_conversion_shares_its_leaves() {
    // chapter 30's layer stands alone, yet draws what chapter 32's layer draws with G = H
    let mha = MultiHeadAttention::new("a", 8, 2, 16, 100.0, &mut SplitMix64::new(3)).unwrap();
    let config = AttentionConfig::multi_head(8, 2).with_rope(16, 100.0);
    let gqa = GroupedQueryAttention::new("a", config.clone(), &mut SplitMix64::new(3)).unwrap();
    let (ours, theirs) = (mha.parameters(), gqa.parameters());
    assert_eq!(ours.len(), 4);
    for (a, b) in ours.iter().zip(theirs.iter()) {
        assert_eq!(a.name(), b.name());
        assert!(a.value().value().unwrap().bitwise_eq(&b.value().value().unwrap()), "{}", a.name());
    }
    assert_eq!(mha.parameter_count(), 4 * 8 * 8);
    // the conversion holds the same leaves under the same names: one update reaches both
    let grouped = mha.to_grouped().unwrap();
    assert_eq!(grouped.config(), &config);
    for (a, b) in ours.iter().zip(grouped.parameters().iter()) {
        assert_eq!((a.name(), a.value().id()), (b.name(), b.value().id()));
    }
}

#[test]
fn stage_names_say_where_and_which_branch() {
    assert_eq!(Stage::SplitHeads(Some(Branch::Key)).to_string(), "split heads (key)");
    assert_eq!(Stage::Rotary(Branch::Query).to_string(), "rotary embedding (query)");
    assert_eq!(Stage::OutputProjection.to_string(), "output projection");
}

#[test]
fn heads_do_not_mix_before_the_output_projection() {
    let mut rng = SplitMix64::new(4);
    let mha = MultiHeadAttention::new("a", 8, 2, 8, 10_000.0, &mut rng).unwrap();
    let base = random(&[1, 4, 8], &mut rng);
    let out = mha.forward(&constant(&[1, 4, 8], base.as_slice()).unwrap(), 0).unwrap();
    // change only what head 1 reads from V: columns 4..8 of V = x·W_V[:, 4..8]; perturb W_V's head-1 columns
    let mut wv = mha.qkv_weights()[2].value().unwrap();
    for r in 0..8 {
        for c in 4..8 {
            wv.as_mut_slice()[r * 8 + c] += 0.5;
        }
    }
    let w = mha.qkv_weights();
    let other = MultiHeadAttention::from_parameters(
        w[0].clone(),
        w[1].clone(),
        TensorValue::leaf(wv, true),
        mha.output_weight().clone(),
        2,
        8,
        10_000.0,
    )
    .unwrap();
    let out2 = other.forward(&constant(&[1, 4, 8], base.as_slice()).unwrap(), 0).unwrap();
    let (a, b) = (out.head_outputs.value().unwrap(), out2.head_outputs.value().unwrap());
    assert_eq!(&a.as_slice()[..8], &b.as_slice()[..8], "head 0 unchanged");
    assert_ne!(&a.as_slice()[8..], &b.as_slice()[8..], "head 1 changed");
}

fn forward_backward(seed: u64) -> (Tensor, Vec<Tensor>) {
    let mut rng = SplitMix64::new(seed);
    let mha = MultiHeadAttention::new("a", 64, 4, 128, 10_000.0, &mut rng).unwrap();
    let x = TensorValue::leaf(random(&[2, 96, 64], &mut rng), true);
    let out = mha.forward(&x, 7).unwrap().output;
    let grads = out.backward_with(&random(&[2, 96, 64], &mut rng)).unwrap();
    let mut g = vec![grads.get_or_zeros(&x)];
    g.extend(mha.parameters().iter().map(|p| grads.get_or_zeros(p.value())));
    (out.value().unwrap(), g)
}

#[test]
fn results_are_bitwise_identical_for_one_and_two_threads_and_on_replay() {
    let run =
        |threads| rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| forward_backward(9));
    let (o1, g1) = run(1);
    let (o2, g2) = run(2);
    let (o3, g3) = run(2);
    assert!(o1.bitwise_eq(&o2) && o2.bitwise_eq(&o3));
    for ((a, b), c) in g1.iter().zip(&g2).zip(&g3) {
        assert!(a.bitwise_eq(b) && b.bitwise_eq(c));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn a_later_token_never_changes_earlier_outputs(t in 2usize..6, which in 1usize..6, seed in any::<u64>(), offset in 0usize..4) {
        let which = which % t;
        let mut rng = SplitMix64::new(seed);
        let mha = MultiHeadAttention::new("a", 8, 2, 16, 10_000.0, &mut rng).unwrap();
        let base = random(&[1, t, 8], &mut rng);
        let mut changed = base.clone();
        for c in 0..8 {
            changed.as_mut_slice()[which * 8 + c] += 1.0;
        }
        let run = |x: &Tensor| mha.forward(&constant(&[1, t, 8], x.as_slice()).unwrap(), offset).unwrap().output.value().unwrap();
        let (a, b) = (run(&base), run(&changed));
        for i in 0..which * 8 {
            prop_assert_eq!(a.as_slice()[i].to_bits(), b.as_slice()[i].to_bits());
        }
    }

    #[test]
    fn a_common_position_shift_keeps_the_weights(seed in any::<u64>(), shift in 1usize..10) {
        let mut rng = SplitMix64::new(seed);
        let mha = MultiHeadAttention::new("a", 8, 2, 16, 100.0, &mut rng).unwrap();
        let x = constant(&[2, 4, 8], random(&[2, 4, 8], &mut rng).as_slice()).unwrap();
        let a = mha.forward(&x, 0).unwrap().weights.value().unwrap();
        let b = mha.forward(&x, shift).unwrap().weights.value().unwrap();
        prop_assert!(a.max_abs_diff(&b).unwrap() <= 1e-12);
    }
}
