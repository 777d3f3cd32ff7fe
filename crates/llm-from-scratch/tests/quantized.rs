//! Weights kept in their quantized blocks: the product kernel against its plain twin on every
//! target this processor runs, and the quantized model against the `f64` decoder — the same bits.

use llm_from_scratch::gguf::{GgufError, GgufRope, QuantizedLlama, QuantizedMatrix, TensorType, load_gguf_llama};
use std::ops::ControlFlow;

use llm_from_scratch::kernels::{Target, with_target};
use llm_from_scratch::model::{Decoding, Generator, Overflow, Sampling};
use llm_from_scratch::nn::SplitMix64;

/// `rows` random rows of `cols` values of type `t`: random quants, scales of either sign between
/// 2⁻¹⁰ and 2 (f16), and for Q4_1 minima of either sign; for F32, values in [−2, 2).
fn random_rows(t: TensorType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    if t == TensorType::F32 {
        return (0..rows * cols).flat_map(|_| (rng.uniform(-2.0, 2.0) as f32).to_le_bytes()).collect();
    }
    let blocks = rows * cols / 32;
    let mut bytes = Vec::new();
    let half = |rng: &mut SplitMix64| {
        let exponent = 5 + rng.below(11) as u16; // 2⁻¹⁰ … 2⁰
        let h = (u16::from(rng.below(2) == 1) << 15) | (exponent << 10) | rng.below(1024) as u16;
        h.to_le_bytes()
    };
    for _ in 0..blocks {
        bytes.extend(half(&mut rng));
        let quants = match t {
            TensorType::Q4_1 => {
                bytes.extend(half(&mut rng));
                16
            }
            TensorType::Q4_0 => 16,
            _ => 32,
        };
        bytes.extend((0..quants).map(|_| rng.below(256) as u8));
    }
    bytes
}

#[test]
fn the_product_kernel_is_its_plain_twin_on_every_target() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for t in [TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1] {
        // rows after the last whole group of 16, not a multiple of the stored kernel's 8 lanes
        // either; inputs whose last sum is 32 or 64 wide (products of at least SMALL_PRODUCT);
        // long rows (4096 values)
        for (rows, cols) in [(45, 96), (300, 128), (61, 576), (20, 4096)] {
            let w = QuantizedMatrix::from_stored("w", t, &random_rows(t, rows, cols, 7), [rows, cols]).unwrap();
            let mut rng = SplitMix64::new(11);
            let x: Vec<f64> = (0..cols).map(|_| rng.uniform(-2.0, 2.0)).collect();
            let plain = w.row_times_plain(&x).unwrap();
            for target in Target::available() {
                let fast = pool.install(|| with_target(target, || w.row_times(&x)).unwrap().unwrap());
                let serial = with_target(target, || w.row_times(&x)).unwrap().unwrap();
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fast), bits(&plain), "{t:?} {rows}×{cols} on {target:?}");
                assert_eq!(bits(&serial), bits(&plain), "{t:?} {rows}×{cols} on {target:?}, one thread");
            }
        }
    }
}

#[test]
fn several_rows_take_the_matrix_product_on_the_dequantized_panel() {
    let (rows, cols) = (40, 64);
    let bytes = random_rows(TensorType::Q4_1, rows, cols, 3);
    let w = QuantizedMatrix::from_stored("w", TensorType::Q4_1, &bytes, [rows, cols]).unwrap();
    let mut rng = SplitMix64::new(5);
    let x: Vec<f64> = (0..3 * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let out = w.rows_times(&x).unwrap();
    for (row, got) in x.chunks(cols).zip(out.chunks(rows)) {
        let one = w.row_times_plain(row).unwrap();
        for (a, b) in got.iter().zip(&one) {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

/// A table's product of several rows (in stripes made `[in, out]` when held in blocks, as stored
/// when dequantized; made whole as stored): bitwise the product on its `f64` values read
/// transposed, as the decoder holds an embedding, on every target.
#[test]
fn a_tables_rows_are_the_product_on_its_transposed_values_bitwise() {
    use llm_from_scratch::kernels::gemm::{MatRef, StripeLayout, matmul, stripe_route};
    let cols = 64;
    for t in [TensorType::Q8_0, TensorType::Q4_1, TensorType::F32] {
        // the layout the stripes are made in: [in, out] from blocks, as stored when dequantized
        let layout = if t == TensorType::F32 { StripeLayout::OutputsByInputs } else { StripeLayout::InputsByOutputs };
        // 419 rows: stripes for 2 and 8 rows (the last 3 rows outside a whole group); 300 rows:
        // stripes of 96 for 2 rows laid [in, out], made whole as stored; 100 rows: made whole,
        // at 2 rows a product of at most 256 outputs (whose route depends on the layout), at 3 more
        for (rows, m) in [(419, 2), (419, 8), (300, 2), (100, 2), (100, 3)] {
            let in_stripes = stripe_route(m, cols, rows, layout).is_some();
            assert_eq!(in_stripes, rows > 100 && (rows, m, t) != (300, 2, TensorType::F32), "{t:?} {rows}, {m}");
            let table = QuantizedMatrix::from_stored("table", t, &random_rows(t, rows, cols, 13), [rows, cols])
                .unwrap()
                .into_table();
            let values: Vec<f64> = (0..rows).flat_map(|r| table.row(r).unwrap()).collect();
            let mut rng = SplitMix64::new(17);
            let x: Vec<f64> = (0..m * cols).map(|_| rng.uniform(-2.0, 2.0)).collect();
            for target in Target::available() {
                let (got, want) = with_target(target, || {
                    let (lhs, rhs) = (MatRef::row_major(&x, m, cols).unwrap(), MatRef::row_major(&values, rows, cols));
                    let mut want = vec![0.0; m * rows];
                    matmul(&mut want, lhs, rhs.unwrap().t(), false, true).unwrap();
                    (table.rows_times(&x).unwrap(), want)
                })
                .unwrap();
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{t:?}, {rows} rows, {m} rows of x, {target}");
            }
        }
    }
}

#[test]
fn bad_matrices_and_rows_are_typed_errors() {
    let data = |e: &GgufError| matches!(e, GgufError::TensorData { .. });
    // 2 rows of 64 Q4_1 values are 80 bytes
    assert!(data(&QuantizedMatrix::from_stored("w", TensorType::Q4_1, &[0; 79], [2, 64]).unwrap_err()));
    assert!(data(&QuantizedMatrix::from_stored("w", TensorType::Q4_1, &[0; 80], [2, 48]).unwrap_err()));
    assert!(data(&QuantizedMatrix::from_stored("w", TensorType::F32, &[0; 8], [usize::MAX, 2]).unwrap_err()));
    let err = QuantizedMatrix::from_stored("w", TensorType::Q5_K, &[0; 176], [1, 256]).unwrap_err();
    assert!(matches!(err, GgufError::UnsupportedTensorType { .. }), "{err}");
    let w = QuantizedMatrix::from_stored("w", TensorType::Q8_0, &[0; 68], [2, 32]).unwrap();
    assert!(data(&w.row_times(&[0.0; 31]).unwrap_err()));
    assert!(data(&w.rows_times(&[0.0; 33]).unwrap_err()));
    assert!(data(&w.row(2).unwrap_err()));
    // 32 769 rows times 65 536 outputs would pass 2³¹ values: refused before the output exists
    let (rows, cols) = (1 << 16, 32);
    let block: Vec<u8> = [0x00, 0x3c].into_iter().chain([1u8; 32]).collect();
    let tall = QuantizedMatrix::from_stored("tall", TensorType::Q8_0, &block.repeat(rows), [rows, cols]).unwrap();
    let err = tall.rows_times(&vec![0.5; 32_769 * cols]).unwrap_err();
    assert!(data(&err), "{err}");
}

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf");
const TINY_TIED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama-tied.gguf");

/// Prefill then decode one token at a time, with both models: every logit the same bits.
fn same_bits(path: &str, rope: GgufRope, prompt: &[usize], next: &[usize]) {
    let quantized = QuantizedLlama::load(path, rope).unwrap();
    let dense = load_gguf_llama(path, rope).unwrap();
    let (mut a, mut b) = (quantized.new_caches(1), dense.new_caches(1));
    let mut calls: Vec<&[usize]> = vec![prompt];
    calls.extend(next.chunks(1));
    for tokens in calls {
        let shape = [1, tokens.len()];
        let x = quantized.forward_cached(tokens, shape, &mut a).unwrap();
        let y = dense.forward_cached(tokens, shape, &mut b).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(x.as_slice()), bits(y.as_slice()), "{path} {rope:?}: after {tokens:?}");
    }
}

#[test]
fn the_quantized_model_computes_the_bits_of_the_f64_decoder() {
    for path in [TINY, TINY_TIED] {
        for rope in [GgufRope::AsStored, GgufRope::HuggingFace] {
            same_bits(path, rope, &[1, 5, 9, 2, 30], &[4, 7, 11]);
        }
    }
    // two sequences at once
    let quantized = QuantizedLlama::load(TINY, GgufRope::AsStored).unwrap();
    let dense = load_gguf_llama(TINY, GgufRope::AsStored).unwrap();
    let (mut a, mut b) = (quantized.new_caches(2), dense.new_caches(2));
    let x = quantized.forward_cached(&[1, 2, 3, 4], [2, 2], &mut a).unwrap();
    assert_eq!(x, dense.forward_cached(&[1, 2, 3, 4], [2, 2], &mut b).unwrap());
}

/// What a generator reads after a prompt, alone: each sequence's last logits, bitwise the full
/// pass's last rows, whatever route the head's product takes for those rows and for all of them
/// (a small model's head is a naive loop at a few rows and `gemm-f64` at more).
#[test]
fn the_last_logits_alone_are_the_full_passes_last_rows() {
    for path in [TINY, TINY_TIED] {
        let model = QuantizedLlama::load(path, GgufRope::AsStored).unwrap();
        for b in 1..=3 {
            for t in 1..=9 {
                let tokens: Vec<usize> = (0..b * t).map(|i| (i * 7 + 3) % 40).collect();
                let full = model.forward_cached(&tokens, [b, t], &mut model.new_caches(b)).unwrap();
                let last = model.forward_cached_last(&tokens, [b, t], &mut model.new_caches(b)).unwrap();
                let v = last.len() / b;
                assert_eq!(last.shape(), [b, 1, v]);
                for (sequence, row) in full.as_slice().chunks(t * v).zip(last.as_slice().chunks(v)) {
                    let bits = |x: &[f64]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&sequence[(t - 1) * v..]), bits(row), "{path}, [{b}, {t}]");
                }
            }
        }
    }
}

#[test]
fn one_model_serves_threads_and_pools_with_the_same_bits() {
    fn shared<T: Send + Sync>(_: &T) {}
    let model = QuantizedLlama::load(TINY, GgufRope::AsStored).unwrap();
    shared(&model);
    let logits = |model: &QuantizedLlama| {
        let mut caches = model.new_caches(1);
        let prompt = model.forward_cached(&[1, 5, 9, 2, 30], [1, 5], &mut caches).unwrap();
        (prompt, model.forward_cached(&[4], [1, 1], &mut caches).unwrap())
    };
    // from this thread, outside any pool: the pass moves onto a worker of the global pool
    let here = logits(&model);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..3).map(|_| s.spawn(|| logits(&model))).collect();
        for thread in threads {
            assert_eq!(thread.join().unwrap(), here);
        }
    });
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        assert_eq!(pool.install(|| logits(&model)), here, "{threads} threads");
    }
}

#[test]
fn bad_calls_are_typed_errors_and_leave_the_caches_unchanged() {
    let model = QuantizedLlama::load(TINY, GgufRope::AsStored).unwrap();
    let mut caches = model.new_caches(1);
    let show = |r: Result<_, GgufError>| r.map(|_| ()).unwrap_err().to_string();
    assert!(show(model.forward_cached(&[1, 48], [1, 2], &mut caches)).contains("48"), "a token past V = 48");
    assert!(show(model.forward_cached(&[1, 2], [1, 3], &mut caches)).contains("shape"));
    assert!(show(model.forward_cached(&[], [1, 0], &mut caches)).contains("shape"));
    assert!(show(model.forward_cached(&[1], [1, 1], &mut caches[..1])).contains("cache"));
    let mut pair = model.new_caches(2);
    assert!(show(model.forward_cached(&[1], [1, 1], &mut pair)).contains("batch"));
    let capacity = model.config().max_positions;
    let long = vec![1; capacity + 1];
    assert!(model.forward_cached(&long, [1, capacity + 1], &mut caches).is_err());
    assert!(caches.iter().all(|c| c.next_position() == 0));
    let err = QuantizedLlama::load("/nonexistent/model.gguf", GgufRope::AsStored).unwrap_err();
    assert!(matches!(err, GgufError::Io { .. }), "{err}");
}

/// The tokens `model` generates after `[1, 2, 3]` with a seeded top-5 sampling.
fn tokens_of<M: Generator<Error: std::fmt::Debug>>(model: &M, decoding: Decoding) -> Vec<usize> {
    let (mut tokens, mut rng) = (Vec::new(), SplitMix64::new(3));
    let sampling = Sampling::TopK { temperature: 0.8, k: 5 };
    let emit = |t, _: &[f64]| {
        tokens.push(t);
        ControlFlow::Continue(())
    };
    model.generate_streaming(&[1, 2, 3], 12, sampling, decoding, Overflow::Slide, &mut rng, emit).unwrap();
    tokens
}

#[test]
fn the_quantized_model_generates_the_decoders_tokens() {
    let quantized = QuantizedLlama::load(TINY, GgufRope::AsStored).unwrap();
    let dense = load_gguf_llama(TINY, GgufRope::AsStored).unwrap();
    for decoding in [Decoding::KvCache, Decoding::Recompute] {
        let ours = tokens_of(&quantized, decoding);
        assert_eq!(ours, tokens_of(&dense, decoding), "{decoding:?}");
        assert_eq!(ours.len(), 12);
    }
    let err = quantized.generate_streaming(
        &[],
        1,
        Sampling::Greedy,
        Decoding::KvCache,
        Overflow::Slide,
        &mut SplitMix64::new(1),
        |_, _| ControlFlow::Continue(()),
    );
    assert!(matches!(err, Err(GgufError::Model(_))), "{err:?}");
}
