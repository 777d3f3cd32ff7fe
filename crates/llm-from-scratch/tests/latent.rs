//! Multi-head latent attention: the absorbed path equals the direct one, the latent cache equals
//! the full pass, and RoPE on the reconstructed key breaks absorption.

use llm_from_scratch::attention::{AttentionError, LatentAttention, LatentConfig, LatentKvCache};
use llm_from_scratch::nn::{RopeError, SplitMix64};
use llm_from_scratch::{GradcheckConfig, Tensor, TensorValue, constant, gradcheck};

fn config() -> LatentConfig {
    LatentConfig {
        model_width: 12,
        heads: 3,
        head_width: 4,
        latent_width: 5,
        rope_width: 2,
        max_positions: 16,
        rope_base: 100.0,
    }
}

fn random(shape: &[usize], rng: &mut SplitMix64) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()).unwrap()
}

fn close(a: &Tensor, b: &Tensor, tol: f64) -> bool {
    a.shape() == b.shape() && a.as_slice().iter().zip(b.as_slice()).all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

#[test]
fn absorbed_equals_direct() {
    let mut rng = SplitMix64::new(1);
    let layer = LatentAttention::new(config(), &mut rng).unwrap();
    let x = TensorValue::leaf(random(&[2, 6, 12], &mut rng), true);
    let (direct, absorbed) = (layer.forward(&x, 3).unwrap(), layer.forward_absorbed(&x, 3).unwrap());
    assert!(close(&absorbed.output.value().unwrap(), &direct.output.value().unwrap(), 1e-12));
    assert!(close(&absorbed.weights.value().unwrap(), &direct.weights.value().unwrap(), 1e-12));
    // and their gradients
    let up = random(&[2, 6, 12], &mut rng);
    let (gd, ga) = (direct.output.backward_with(&up).unwrap(), absorbed.output.backward_with(&up).unwrap());
    assert!(close(&ga.get_or_zeros(&x), &gd.get_or_zeros(&x), 1e-12));
    for p in layer.parameters().iter() {
        assert!(close(&ga.get_or_zeros(p.value()), &gd.get_or_zeros(p.value()), 1e-12), "{}", p.name());
    }
}

#[test]
fn latent_cache_decoding_equals_the_full_pass_and_stores_only_c_and_k_rope() {
    let mut rng = SplitMix64::new(2);
    let layer = LatentAttention::new(config(), &mut rng).unwrap();
    let x = random(&[2, 7, 12], &mut rng);
    let full = layer.forward(&constant(&[2, 7, 12], x.as_slice()).unwrap(), 0).unwrap().output.value().unwrap();
    for chunk in [1, 3, 7] {
        let (decoded, cache) = decode_in_chunks(&layer, &x, &[chunk]);
        assert!(close(&decoded, &full, 1e-12), "chunk {chunk}");
        assert_eq!(cache.len(), 7);
        assert_eq!(cache.stored_values(), 2 * 7 * (5 + 2), "C and k_R only");
    }
    assert_eq!(config().cached_per_token(), 7);
}

/// Feeds `x [B, T, d]` through a fresh cache in chunks of `schedule` (cycled until `T` tokens are
/// in) and stitches the outputs back into `[B, T, d]`; returns them and the cache.
fn decode_in_chunks(layer: &LatentAttention, x: &Tensor, schedule: &[usize]) -> (Tensor, LatentKvCache) {
    let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let mut cache = layer.new_cache(b);
    let mut rows = vec![Vec::new(); b];
    let mut start = 0;
    for &chunk in schedule.iter().cycle() {
        if start == t {
            break;
        }
        let len = chunk.min(t - start);
        let part = constant(x.shape(), x.as_slice()).unwrap().slice_axis(1, start, start + len).unwrap();
        let out = layer.forward_cached(&part, &mut cache).unwrap();
        for (bi, row) in rows.iter_mut().enumerate() {
            row.extend_from_slice(&out.as_slice()[bi * len * d..(bi + 1) * len * d]);
        }
        start += len;
    }
    (Tensor::new(&[b, t, d], rows.concat()).unwrap(), cache)
}

#[test]
fn a_long_decode_over_several_batch_rows_equals_both_full_passes() {
    // 3 sequences of 60 tokens: a prefill of 7, then one token at a time with a chunk of 3 now
    // and then. The cache is read in place and its products sum in another order than the full
    // pass's, so the outputs agree to rounding: 1e-12 relative (as chapter 35 checks).
    let config = LatentConfig { max_positions: 64, ..config() };
    let mut rng = SplitMix64::new(6);
    let layer = LatentAttention::new(config, &mut rng).unwrap();
    let x = random(&[3, 60, 12], &mut rng);
    let input = constant(&[3, 60, 12], x.as_slice()).unwrap();
    let absorbed = layer.forward_absorbed(&input, 0).unwrap().output.value().unwrap();
    let direct = layer.forward(&input, 0).unwrap().output.value().unwrap();
    let schedule = [7, 1, 1, 1, 3, 1, 1, 1, 1];
    let (decoded, cache) = decode_in_chunks(&layer, &x, &schedule);
    assert_eq!(cache.len(), 60);
    assert!(close(&decoded, &absorbed, 1e-12) && close(&decoded, &direct, 1e-12));
    // one row alone decodes as it does beside the others, bit for bit
    let row = Tensor::new(&[1, 60, 12], x.as_slice()[60 * 12..2 * 60 * 12].to_vec()).unwrap();
    let (alone, _) = decode_in_chunks(&layer, &row, &schedule);
    assert_eq!(alone.as_slice(), &decoded.as_slice()[60 * 12..2 * 60 * 12]);
}

#[test]
fn cached_decoding_is_bitwise_the_same_on_one_thread_and_on_several() {
    let mut rng = SplitMix64::new(7);
    // batch 1 (the kernels use the threads) and batch 3 (one task per row and token)
    for batch in [1, 3] {
        let x = random(&[batch, 40, 12], &mut rng);
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                // the layer is built inside: its weights live on the tape, which stays on one thread
                let config = LatentConfig { max_positions: 64, ..config() };
                let layer = LatentAttention::new(config, &mut SplitMix64::new(8)).unwrap();
                decode_in_chunks(&layer, &x, &[5, 1, 1, 2]).0
            })
        };
        let one = on(1);
        for threads in [2, 3] {
            assert_eq!(on(threads).as_slice(), one.as_slice(), "batch {batch}, {threads} threads");
        }
    }
}

#[test]
fn rope_on_the_reconstructed_key_cannot_be_absorbed() {
    let mut rng = SplitMix64::new(3);
    let layer = LatentAttention::new(config(), &mut rng).unwrap();
    let x = constant(&[1, 5, 12], random(&[1, 5, 12], &mut rng).as_slice()).unwrap();
    let (direct, absorbed) = layer.rope_on_reconstructed_keys(&x, 2).unwrap();
    let gap = direct.max_abs_diff(&absorbed).unwrap();
    assert!(gap > 1e-3, "the rotation between q and C depends on the key's position: gap {gap}");
}

#[test]
fn gradcheck_latent_attention_both_paths() {
    let mut rng = SplitMix64::new(4);
    let layer = LatentAttention::new(config(), &mut rng).unwrap();
    let mut inputs = vec![("x", random(&[1, 4, 12], &mut rng))];
    let params: Vec<(String, Tensor)> =
        layer.parameters().iter().map(|p| (p.name().to_string(), p.value().value().unwrap())).collect();
    inputs.extend(params.iter().map(|(n, t)| (n.as_str(), t.clone())));
    for absorbed in [false, true] {
        let report = gradcheck(&inputs, &GradcheckConfig::default(), |v| -> Result<TensorValue, AttentionError> {
            let w = llm_from_scratch::attention::LatentWeights::from_ordered(&v[1..])?;
            let layer = LatentAttention::from_weights(config(), w)?;
            Ok(if absorbed { layer.forward_absorbed(&v[0], 1)? } else { layer.forward(&v[0], 1)? }.output)
        });
        let report = report.unwrap_or_else(|e| panic!("{e}"));
        assert!(report.passed(), "absorbed {absorbed}: {report:?}");
    }
}

#[test]
fn errors_are_typed() {
    let mut rng = SplitMix64::new(5);
    let odd = LatentConfig { rope_width: 3, ..config() };
    assert_eq!(LatentAttention::new(odd, &mut rng).unwrap_err(), AttentionError::OddRopeWidth { rope_width: 3 });
    let zero = LatentConfig { latent_width: 0, ..config() };
    assert_eq!(
        LatentAttention::new(zero, &mut rng).unwrap_err().to_string(),
        "attention config: latent width must be positive, got 0"
    );
    assert!(matches!(
        llm_from_scratch::attention::LatentWeights::from_ordered(&[]),
        Err(AttentionError::ParameterShape { name: "latent weight list", .. })
    ));
    let zero_heads = LatentConfig { heads: 0, ..config() };
    assert_eq!(LatentAttention::new(zero_heads, &mut rng).unwrap_err(), AttentionError::ZeroSize { what: "heads" });
    let no_rope = LatentConfig { rope_width: 0, ..config() };
    assert_eq!(LatentAttention::new(no_rope, &mut rng).unwrap_err(), AttentionError::Rope(RopeError::ZeroHeadWidth));
    let layer = LatentAttention::new(config(), &mut rng).unwrap();
    let mut w = layer.weights().clone();
    w.up_value = TensorValue::leaf(Tensor::zeros(&[5, 11]).unwrap(), true);
    assert!(matches!(
        LatentAttention::from_weights(config(), w),
        Err(AttentionError::ParameterShape { name: "up value weight", .. })
    ));
    let mut cache = layer.new_cache(1);
    let err = layer.forward_cached(&constant(&[2, 1, 12], &[0.0; 24]).unwrap(), &mut cache).unwrap_err();
    assert_eq!(err, AttentionError::CacheMismatch { what: "batch", expected: 2, actual: 1 });
    layer.forward_cached(&constant(&[1, 15, 12], &[0.1; 180]).unwrap(), &mut cache).unwrap();
    let err = layer.forward_cached(&constant(&[1, 2, 12], &[0.1; 24]).unwrap(), &mut cache).unwrap_err();
    assert_eq!(err.to_string(), "attention positions: 15..17 exceed capacity 16");
    assert_eq!(cache.len(), 15, "unchanged after the error");
    assert!(matches!(
        layer.forward(&constant(&[1, 0, 12], &[]).unwrap(), 0),
        Err(AttentionError::EmptySequence { .. })
    ));
}
