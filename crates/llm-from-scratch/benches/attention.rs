//! Micro-benchmarks of the attention family (`cargo bench -p llm-from-scratch --bench attention`):
//! RoPE forward and backward, the causal attention kernel on its explicit and tiled paths, one
//! cached decode step, and one decode step of latent attention at two cache lengths.
//!
//! Throughput is in elements/s with one element = one floating-point operation (a multiply-add
//! counts 2, an exponential counts 1), so `Gelem/s` reads as GFLOP/s. Each benchmark's doc comment
//! gives its flops and bytes; the larger of flops / 220 GFLOP/s and bytes / bandwidth is its floor
//! (`docs/performance.md`). Inputs are uniform in [−1, 1) (never zeros), gradients flow to parameter leaves and
//! the backward takes one fixed upstream adjoint. Sizes and times are small so that a full run
//! takes well under a minute; the workload numbers of `docs/performance.md` live in `llm-bench`.
//!
//! Like `llm-bench`, the process first pins the C allocator's thresholds
//! ([`llm_from_scratch::allocator::keep_freed_memory`]); `LLM_BENCH_MALLOC=default` measures with
//! the allocator's defaults. Without the setting, whether a benchmark's buffers of a few MiB go
//! back to the system after each iteration (and fault in again in the next) depends on the order
//! of its allocations: RoPE's forward + backward, freeing two 2 MiB buffers a round, paid about
//! 1 000 page faults (4 MiB) every iteration and looked six times slower than the forward.

use std::cell::OnceCell;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Bencher, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use llm_from_scratch::attention::{
    AttentionConfig, GroupedQueryAttention, KvCache, LatentAttention, LatentConfig, LatentKvCache, Visibility,
    block_size, causal_scaled_dot_product_self_attention, tiled_attention,
};
use llm_from_scratch::kernels::{Target, with_target};
use llm_from_scratch::nn::{RotaryEmbedding, SplitMix64};
use llm_from_scratch::{Tensor, TensorValue, constant};

/// `[4, 8, 256, 32]`: 4 sequences × 8 heads, T = 256, d_h = 32.
const HEADS_SHAPE: [usize; 4] = [4, 8, 256, 32];
/// The same values as 32 lanes, `[B·H, T, d_h]`, for the explicit path.
const LANES_SHAPE: [usize; 3] = [32, 256, 32];

/// A tensor of `shape` with values uniform in [−1, 1).
fn random_tensor(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let values = (0..shape.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    Tensor::new(shape, values).expect("values fill the shape")
}

/// A leaf that receives a gradient.
fn random_parameter(shape: &[usize], seed: u64) -> TensorValue {
    TensorValue::leaf(random_tensor(shape, seed), true)
}

/// RoPE on `[4,8,256,32]` at positions 0..256: 131 072 pairs × 6 flops (4 mul, 2 add) = 0.79 MFLOP
/// per pass; memory-bound: 2 MiB read and 2 MiB written per pass (+ 32 KiB of tables). The backward
/// is the same rotation by the opposite angle over the upstream adjoint, so its floor is the
/// forward's; `backward` times the sweep alone, from a graph whose forward ran in the untimed setup.
fn rope(c: &mut Criterion) {
    let rope = RotaryEmbedding::new(HEADS_SHAPE[3], HEADS_SHAPE[2], 10_000.0).expect("valid rope");
    let x = random_parameter(&HEADS_SHAPE, 1);
    let upstream = random_tensor(&HEADS_SHAPE, 2);
    let flops = 6 * (HEADS_SHAPE.iter().product::<usize>() / 2) as u64;
    let mut group = c.benchmark_group("rope");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(flops));
    group.bench_function("forward/4x8x256x32", |bench| {
        bench.iter(|| rope.rotate(black_box(&x), 0).expect("positions fit"));
    });
    group.bench_function("backward/4x8x256x32", |bench| {
        bench.iter_batched(
            || rope.rotate(&x, 0).expect("positions fit"),
            |y| {
                let gradients = y.backward_with(black_box(&upstream)).expect("upstream has the output's shape");
                (gradients, y) // dropped outside the timed region
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

/// Causal attention on the explicit path, `[32,256,32]` lanes: every score is materialised (no
/// causal skipping). Forward: Q·Kᵀ and P·V, 2 × 32·2·256²·32 = 268 MFLOP, plus a softmax over
/// 2.1 M scores (16 MiB per score-sized tensor); the backward doubles each product (537 MFLOP), so
/// 805 MFLOP in total.
fn explicit_causal(c: &mut Criterion) {
    let (q, k, v) =
        (random_parameter(&LANES_SHAPE, 3), random_parameter(&LANES_SHAPE, 4), random_parameter(&LANES_SHAPE, 5));
    let upstream = random_tensor(&LANES_SHAPE, 6);
    let product_flops = 2 * 32 * 256 * 256 * 32;
    let mut group = c.benchmark_group("causal_attention_explicit");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(2 * product_flops));
    group.bench_function("forward/32x256x32", |bench| {
        bench.iter(|| {
            causal_scaled_dot_product_self_attention(black_box(&q), black_box(&k), black_box(&v)).expect("shapes fit")
        });
    });
    group.throughput(Throughput::Elements(6 * product_flops));
    group.bench_function("forward_backward/32x256x32", |bench| {
        bench.iter(|| {
            let out = causal_scaled_dot_product_self_attention(black_box(&q), black_box(&k), black_box(&v))
                .expect("shapes fit");
            out.output().backward_with(black_box(&upstream)).expect("upstream has the output's shape")
        });
    });
    group.finish();
}

/// Causal attention on the tiled path, q, k, v `[4,8,256,32]`: blocks of `block_size(256)` = 64
/// rows, 10 of the 16 blocks per lane visible, each product 2·64²·32 = 0.26 MFLOP. Forward: 2
/// products per block = 168 MFLOP (+ 1.3 M exponentials); the fused backward recomputes P and runs
/// 5 products per block = 419 MFLOP, so 587 MFLOP in total; O(T) memory beyond the 2 MiB inputs.
fn tiled_causal(c: &mut Criterion) {
    let (q, k, v) =
        (random_parameter(&HEADS_SHAPE, 7), random_parameter(&HEADS_SHAPE, 8), random_parameter(&HEADS_SHAPE, 9));
    let upstream = random_tensor(&HEADS_SHAPE, 10);
    let visibility = Visibility::default();
    // lanes × the visible blocks of the causal triangle × one product's flops
    let [batch, heads, t, d_h] = HEADS_SHAPE;
    let (b, blocks) = (block_size(t), t.div_ceil(block_size(t)));
    let block_flops = (batch * heads * blocks * (blocks + 1) / 2 * 2 * b * b * d_h) as u64;
    let mut group = c.benchmark_group("causal_attention_tiled");
    group.sampling_mode(SamplingMode::Flat);
    // every kernel target this processor runs (the widest is what a plain call picks); the
    // portable one only where it is the widest: on x86-64 its fused multiply-adds are library calls
    let widest = Target::widest();
    for target in Target::available().into_iter().filter(|&t| t != Target::Portable || t == widest) {
        group.throughput(Throughput::Elements(2 * block_flops));
        group.bench_function(format!("forward/{target}/4x8x256x32"), |bench| {
            bench.iter(|| {
                with_target(target, || tiled_attention(black_box(&q), black_box(&k), black_box(&v), None, &visibility))
                    .expect("the target was listed as available")
                    .expect("shapes fit")
            });
        });
        group.throughput(Throughput::Elements(7 * block_flops));
        group.bench_function(format!("forward_backward/{target}/4x8x256x32"), |bench| {
            bench.iter(|| {
                with_target(target, || {
                    let out = tiled_attention(black_box(&q), black_box(&k), black_box(&v), None, &visibility)
                        .expect("shapes fit");
                    out.backward_with(black_box(&upstream)).expect("upstream has the output's shape")
                })
                .expect("the target was listed as available")
            });
        });
    }
    group.finish();
}

/// Times `step` on a clone of `prefilled` made in the untimed setup; the clone and the step's
/// output are dropped outside the timed region.
fn time_step<C: Clone, O>(bench: &mut Bencher<'_>, prefilled: &C, step: impl Fn(&mut C) -> O) {
    bench.iter_batched(
        || prefilled.clone(),
        |mut cache| {
            let out = step(&mut cache);
            (out, cache)
        },
        BatchSize::LargeInput,
    );
}

/// One decode step of MHA d = 512, H = 8 (d_h = 64), RoPE over 2048 positions, against 2047 cached
/// positions: Q/K/V projections 3·2·512² = 1.57 MFLOP, attention 8·2048·64·4 = 4.19 MFLOP, output
/// projection 0.52 MFLOP, so 6.3 MFLOP; memory-bound: 16.8 MB of cache and 8.4 MB of weights read.
/// The prefilled cache is cloned in the untimed setup (capacity kept, so the append never copies).
fn decode_step(c: &mut Criterion) {
    let config = AttentionConfig::multi_head(512, 8).with_rope(2048, 10_000.0);
    let layer = GroupedQueryAttention::new("decode", config, &mut SplitMix64::new(11)).expect("valid config");
    let token = random_tensor(&[1, 1, 512], 12);
    let token = constant(token.shape(), token.as_slice()).expect("values fill the shape");
    let flops = 3 * 2 * 512 * 512 + 8 * 2048 * 64 * 4 + 2 * 512 * 512;
    // prefilled once, and only when this benchmark is selected
    let prefilled: OnceCell<KvCache> = OnceCell::new();
    let mut group = c.benchmark_group("decode_step");
    group.throughput(Throughput::Elements(flops));
    group.bench_function("mha512x8/cache2047", |bench| {
        let prefilled = prefilled.get_or_init(|| {
            let prompt = random_tensor(&[1, 2047, 512], 13);
            let prompt = constant(prompt.shape(), prompt.as_slice()).expect("values fill the shape");
            let mut cache = layer.new_cache(1);
            layer.forward_cached(&prompt, &mut cache).expect("prompt fits the positions");
            cache
        });
        time_step(bench, prefilled, |cache| {
            layer.forward_cached(black_box(&token), cache).expect("position 2047 fits")
        });
    });
    group.finish();
}

/// One decode step of latent attention, d = 512, H = 8, d_h = 64, d_c = 256, d_r = 32, batch 1,
/// RoPE over 4096 positions, against 255 and 2047 cached tokens. Per step, whatever the cache
/// length: the token's projections (`W_Q`, `W_QR`, `W_DKV`, `W_KR`: 2·512·(512 + 256 + 256 + 32) =
/// 1.08 MFLOP), its queries through `A_hᵀ`, its weighted latents through `B_h` and the output
/// projection (2·8·64·(256 + 256 + 512) = 1.05 MFLOP): 8.1 MiB of weights read. Per cached token:
/// scores and weighted latents of 8 heads, 8·2·(256 + 32 + 256) = 8.7 kFLOP (2.2 MFLOP at 256
/// tokens, 18 MFLOP at 2048), reading its `d_c + d_r` = 288 values (0.56 MiB of cache at 256 tokens,
/// 4.5 MiB at 2048) — the only part that grows with the cache.
/// The prefilled cache is cloned in the untimed setup (capacity kept, so the append never copies).
fn latent_decode(c: &mut Criterion) {
    let config = LatentConfig {
        model_width: 512,
        heads: 8,
        head_width: 64,
        latent_width: 256,
        rope_width: 32,
        max_positions: 4096,
        rope_base: 10_000.0,
    };
    let layer = LatentAttention::new(config, &mut SplitMix64::new(14)).expect("valid config");
    let token = random_tensor(&[1, 1, 512], 15);
    let token = constant(token.shape(), token.as_slice()).expect("values fill the shape");
    let mut group = c.benchmark_group("latent_decode");
    for cached in [255, 2047] {
        // prefilled once, and only when this benchmark is selected
        let prefilled: OnceCell<LatentKvCache> = OnceCell::new();
        group.bench_function(format!("mla512x8_c256_r32/cache{cached}"), |bench| {
            let prefilled = prefilled.get_or_init(|| {
                let prompt = random_tensor(&[1, cached, 512], 16);
                let mut cache = layer.new_cache(1);
                // in chunks of 256 tokens, so the prefill's scores stay small
                for start in (0..cached).step_by(256) {
                    let end = cached.min(start + 256);
                    let chunk = constant(&[1, end - start, 512], &prompt.as_slice()[start * 512..end * 512])
                        .expect("values fill the shape");
                    layer.forward_cached(&chunk, &mut cache).expect("the prompt fits the positions");
                }
                cache
            });
            time_step(bench, prefilled, |cache| {
                layer.forward_cached(black_box(&token), cache).expect("the position fits")
            });
        });
    }
    group.finish();
}

/// The benchmarks' settings, after pinning the allocator's thresholds (see the module docs).
fn config() -> Criterion {
    if std::env::var_os("LLM_BENCH_MALLOC").is_none_or(|v| v != "default") {
        llm_from_scratch::kernels::allocator::keep_freed_memory();
    }
    Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = rope, explicit_causal, tiled_causal, decode_step, latent_decode
}
criterion_main!(benches);
