//! One rule for the kernel target: a forced target holds in every worker thread of every kernel.
//!
//! Each fast operation runs inside `with_target` on a pool of two threads, and the kernels
//! crate's record says which targets ran meanwhile: exactly the forced one. The record is
//! process-wide, so this file is a test binary of its own with a single test.

use llm_from_scratch::attention::{AttentionConfig, GroupedQueryAttention, Visibility, tiled_attention};
use llm_from_scratch::gguf::{GgufRope, QuantizedLlama, QuantizedMatrix, TensorType};
use llm_from_scratch::kernels::target::recorded;
use llm_from_scratch::kernels::{Target, with_target};
use llm_from_scratch::nn::{RotaryEmbedding, SplitMix64};
use llm_from_scratch::{Mask, Tensor, TensorValue, constant, parameter};

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

fn leaf(shape: &[usize], seed: u64) -> TensorValue {
    parameter(shape, &values(shape.iter().product(), seed)).unwrap()
}

/// One fast operation, run for its effect on the record.
type Operation = Box<dyn Fn() + Send + Sync>;

/// The operations, each large enough to run on both threads.
fn operations() -> Vec<(&'static str, Operation)> {
    vec![
        (
            "a matrix product and its backward",
            Box::new(|| {
                let (a, b) = (leaf(&[4, 96, 80], 1), leaf(&[80, 70], 2));
                let y = a.matmul(&b).unwrap();
                y.backward_with(&Tensor::new(&[4, 96, 70], values(4 * 96 * 70, 3)).unwrap()).unwrap();
            }),
        ),
        (
            "a batch of products, one per lane, and their adjoints",
            Box::new(|| {
                let (a, b) = (leaf(&[2, 3, 64, 40], 20), leaf(&[2, 3, 40, 48], 21));
                let y = a.matmul(&b).unwrap();
                y.backward_with(&Tensor::new(&[2, 3, 64, 48], values(6 * 64 * 48, 22)).unwrap()).unwrap();
            }),
        ),
        (
            "one row times a matrix",
            Box::new(|| {
                let (a, b) = (
                    constant(&[1, 512], &values(512, 4)).unwrap(),
                    constant(&[512, 300], &values(153_600, 5)).unwrap(),
                );
                a.matmul(&b).unwrap();
            }),
        ),
        (
            "the softmax of many rows",
            Box::new(|| {
                leaf(&[64, 64, 64], 6).softmax_last_axis().unwrap();
            }),
        ),
        (
            "attention's masked products and their adjoints (hidden entries checked and cleared)",
            Box::new(|| {
                let causal = Mask::causal(64, 64, 0).unwrap();
                let (q, kt, v) = (leaf(&[16, 64, 16], 25), leaf(&[16, 16, 64], 26), leaf(&[16, 64, 16], 27));
                let weights = q.matmul_scores(&kt, &causal).unwrap().masked_softmax_last_axis(&causal).unwrap();
                let out = weights.matmul_visible(&v, &causal).unwrap();
                out.backward_with(&Tensor::new(&[16, 64, 16], values(16 * 64 * 16, 28)).unwrap()).unwrap();
            }),
        ),
        (
            "a causal softmax of many rows and its adjoint",
            Box::new(|| {
                let x = leaf(&[16, 64, 64], 23);
                let y = x.masked_softmax_last_axis(&Mask::causal(64, 64, 0).unwrap()).unwrap();
                y.backward_with(&Tensor::new(&[16, 64, 64], values(16 * 64 * 64, 24)).unwrap()).unwrap();
            }),
        ),
        (
            "SiLU over many values, with its slope for the backward",
            Box::new(|| {
                leaf(&[64, 1024], 17).silu().unwrap();
            }),
        ),
        (
            "a quantized model's prompt (its gated values in tasks on both threads)",
            Box::new(|| {
                let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf");
                let model = QuantizedLlama::load(path, GgufRope::AsStored).unwrap();
                let tokens: Vec<usize> = (0..12).map(|i| i * 5 % 48).collect();
                model.forward_cached(&tokens, [1, 12], &mut model.new_caches(1)).unwrap();
            }),
        ),
        (
            "RoPE over many rows",
            Box::new(|| {
                let rope = RotaryEmbedding::new(16, 4096, 10_000.0).unwrap();
                rope.rotate(&leaf(&[8, 1024, 16], 7), 0).unwrap();
            }),
        ),
        (
            "tiled attention and its backward",
            Box::new(|| {
                let (q, k, v) = (leaf(&[2, 4, 150, 16], 8), leaf(&[2, 2, 150, 16], 9), leaf(&[2, 2, 150, 16], 10));
                let out = tiled_attention(&q, &k, &v, None, &Visibility::default()).unwrap();
                out.backward_with(&Tensor::new(&[2, 4, 150, 16], values(2 * 4 * 150 * 16, 11)).unwrap()).unwrap();
            }),
        ),
        (
            "decoding over a KV cache",
            Box::new(|| {
                let config = AttentionConfig::new(32, 4, 2, 8).with_rope(256, 10_000.0);
                let layer = GroupedQueryAttention::new("a", config, &mut SplitMix64::new(12)).unwrap();
                let mut cache = layer.new_cache(2);
                layer.forward_cached(&constant(&[2, 100, 32], &values(6400, 13)).unwrap(), &mut cache).unwrap();
                layer.forward_cached(&constant(&[2, 1, 32], &values(64, 14)).unwrap(), &mut cache).unwrap();
            }),
        ),
        (
            "one row times weights kept in quantized blocks",
            Box::new(|| {
                // 600 rows of 64 Q8_0 values: a scale of 1/64 (f16 0x2400), then the quants
                let block: Vec<u8> = [0x00, 0x24].into_iter().chain((0..32).map(|i| (i * 5) as u8)).collect();
                let bytes = block.repeat(600 * 2);
                let w = QuantizedMatrix::from_stored("w", TensorType::Q8_0, &bytes, [600, 64]).unwrap();
                w.row_times(&values(64, 15)).unwrap();
            }),
        ),
        (
            "several rows times weights kept in quantized blocks (a prefill, stripe by stripe)",
            Box::new(|| {
                let block: Vec<u8> = [0x00, 0x24].into_iter().chain((0..32).map(|i| (i * 7) as u8)).collect();
                let bytes = block.repeat(600 * 2);
                let w = QuantizedMatrix::from_stored("w", TensorType::Q8_0, &bytes, [600, 64]).unwrap();
                w.rows_times(&values(8 * 64, 16)).unwrap();
            }),
        ),
    ]
}

#[test]
fn a_forced_target_holds_in_the_worker_threads_of_every_kernel() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for target in Target::available() {
        for (name, operation) in operations() {
            let ((), ran) = pool.install(|| recorded(|| with_target(target, &operation).unwrap()));
            assert_eq!(ran, [target], "{name} forced to {target}");
            // `Target::within` sets the calling thread's target alone: each kernel must hand it
            // to the pool's workers (its own threads carry none)
            let ((), ran) = pool.install(|| recorded(|| target.within(&operation)));
            assert_eq!(ran, [target], "{name} within {target}");
        }
    }
}
