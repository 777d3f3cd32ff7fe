//! Micro-benchmarks of the kernels the tape is built on (`cargo bench -p llm-from-scratch`).
//!
//! Throughput is in elements/s: for the products an element is one floating-point operation (a
//! multiply-add counts 2), so `Gelem/s` reads as GFLOP/s; for softmax it is one tensor value; the
//! quantized product and the tied head report bytes of weights read. The
//! workload numbers of `docs/performance.md`
//! live in `llm-bench`; these track single kernels. Sizes and times are small so that a full run
//! takes about half a minute.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::tensor::matmul::{self as kernels, MatRef};
use llm_from_scratch::{Tensor, TensorValue, parameter};

/// `len` values uniform in [−1, 1) (never zeros, so no kernel can skip work).
fn random_values(len: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

fn random_tensor(shape: &[usize], seed: u64) -> Tensor {
    let len = shape.iter().product();
    Tensor::new(shape, random_values(len, seed)).expect("values fill the shape")
}

fn random_parameter(shape: &[usize], seed: u64) -> TensorValue {
    let len = shape.iter().product();
    parameter(shape, &random_values(len, seed)).expect("values fill the shape")
}

/// `n×n · n×n`: the fast kernel (all threads) against the naive reference loop.
/// 2n³ flops: 0.52 MFLOP at 64, 33.5 MFLOP at 256.
fn matrix_product(c: &mut Criterion) {
    let mut group = c.benchmark_group("matrix_product");
    group.sampling_mode(SamplingMode::Flat);
    for n in [64usize, 256] {
        let a = random_values(n * n, 1);
        let b = random_values(n * n, 2);
        let mut out = vec![0.0; n * n];
        let av = MatRef::row_major(&a, n, n).expect("a fits");
        let bv = MatRef::row_major(&b, n, n).expect("b fits");
        group.throughput(Throughput::Elements(2 * (n * n * n) as u64));
        group.bench_function(BenchmarkId::new("fast", n), |bench| {
            bench.iter(|| {
                kernels::matmul(&mut out, black_box(av), black_box(bv), false, true).expect("shapes chain");
                black_box(&out);
            });
        });
        group.bench_function(BenchmarkId::new("naive", n), |bench| {
            bench.iter(|| {
                kernels::matmul_naive(&mut out, black_box(av), black_box(bv), false).expect("shapes chain");
                black_box(&out);
            });
        });
    }
    group.finish();
}

/// A weight gradient `xᵀ·dy` (`x`, `dy`: 1024 × 256; 134 MFLOP), the shape `splits_rows` halves:
/// the left side is a transposed view and the output small against the inner dimension.
fn weight_gradient(c: &mut Criterion) {
    let mut group = c.benchmark_group("weight_gradient");
    group.sampling_mode(SamplingMode::Flat);
    let (rows, width) = (1024usize, 256usize);
    let x = random_values(rows * width, 3);
    let dy = random_values(rows * width, 4);
    let mut out = vec![0.0; width * width];
    let xt = MatRef::row_major(&x, rows, width).expect("x fits").t();
    let dyv = MatRef::row_major(&dy, rows, width).expect("dy fits");
    group.throughput(Throughput::Elements(2 * (rows * width * width) as u64));
    group.bench_function(BenchmarkId::new("fast", "256x1024x256"), |bench| {
        bench.iter(|| {
            kernels::matmul(&mut out, black_box(xt), black_box(dyv), false, true).expect("shapes chain");
            black_box(&out);
        });
    });
    group.finish();
}

/// Softmax over the last axis of [32,256,256] (2 097 152 values, 16 MiB): the forward alone, and
/// forward + backward with one upstream adjoint. Memory-bound: the forward reads 16 MiB and writes
/// 16 MiB; the backward reads y and dy and writes dx, 48 MiB more.
fn softmax(c: &mut Criterion) {
    let shape = [32, 256, 256];
    let x = random_parameter(&shape, 3);
    let upstream = random_tensor(&shape, 4);
    let mut group = c.benchmark_group("softmax_last_axis");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(shape.iter().product::<usize>() as u64));
    group.bench_function("forward/32x256x256", |bench| {
        bench.iter(|| black_box(&x).softmax_last_axis().expect("rank ≥ 1"));
    });
    group.bench_function("forward_backward/32x256x256", |bench| {
        bench.iter(|| {
            let y = black_box(&x).softmax_last_axis().expect("rank ≥ 1");
            y.backward_with(black_box(&upstream)).expect("upstream has the output's shape")
        });
    });
    group.finish();
}

/// Batched matrix product on the tape, [4,8,256,32] · [4,8,32,256] → [4,8,256,256] (the score
/// product of 4 sequences × 8 heads, T=256, d_h=32): 32 lanes of 2·256·256·32 flops = 134 MFLOP
/// forward; the backward sends dA = dC·Bᵀ and dB = Aᵀ·dC, twice that, so 403 MFLOP in total.
fn matmul_op(c: &mut Criterion) {
    let a = random_parameter(&[4, 8, 256, 32], 5);
    let b = random_parameter(&[4, 8, 32, 256], 6);
    let upstream = random_tensor(&[4, 8, 256, 256], 7);
    let forward_flops = 2 * 32 * 256 * 256 * 32;
    let mut group = c.benchmark_group("matmul_op");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(forward_flops));
    group.bench_function("forward/4x8x256x32·4x8x32x256", |bench| {
        bench.iter(|| black_box(&a).matmul(black_box(&b)).expect("shapes chain"));
    });
    group.throughput(Throughput::Elements(3 * forward_flops));
    group.bench_function("forward_backward/4x8x256x32·4x8x32x256", |bench| {
        bench.iter(|| {
            let out = black_box(&a).matmul(black_box(&b)).expect("shapes chain");
            out.backward_with(black_box(&upstream)).expect("upstream has the output's shape")
        });
    });
    group.finish();
}

/// One token's product with a `Q4_1` matrix in the grouped layout (`x · Wᵀ`, 576 inputs, the
/// width of SmolLM2-135M), on one thread, from a matrix that stays in the second-level cache (1 536
/// rows, 0.55 MB: a feed-forward weight of that model) and from one larger than the last-level
/// cache (131 072 rows, 47 MB). Throughput in bytes of weights read: where the two rates are the
/// same, the kernel's arithmetic bounds it, not memory (`docs/performance.md`).
///
/// Then on every thread of the pool, as a token runs them: all of that model's 4-bit weights in
/// one matrix (184 320 rows: 106.2 M weights, 79.6 MB) and its 8-bit head (`Q8_0`, 49 152 rows:
/// 28.3 M weights), the time a token's kernels take with nothing else — the bound of decoding at
/// 0.7 of the streaming rate ("What stops the unmet targets").
fn quantized_row(c: &mut Criterion) {
    use llm_from_scratch::kernels::quant::{BlockFormat, QuantRows, row_times_quantized};
    let mut group = c.benchmark_group("quantized_row");
    group.sampling_mode(SamplingMode::Flat);
    let cols = 576;
    let x = random_values(cols, 8);
    let one_thread =
        [(BlockFormat::Q4_1, 1536, "q4_1_one_thread", 9), (BlockFormat::Q4_1, 131_072, "q4_1_one_thread", 9)];
    let every_thread =
        [(BlockFormat::Q4_1, 184_320, "q4_1_every_thread", 12), (BlockFormat::Q8_0, 49_152, "q8_0_every_thread", 12)];
    for (parallel, cases) in [(false, one_thread), (true, every_thread)] {
        for (format, rows, name, seed) in cases {
            let bytes = model_like_blocks(format, rows, cols, seed);
            let w = QuantRows::grouped(format, &bytes, rows, cols).expect("whole blocks");
            let mut out = vec![0.0; rows];
            // one thread: bytes of weights read a second; every thread: weights a second
            group.throughput(if parallel {
                Throughput::Elements((rows * cols) as u64)
            } else {
                Throughput::Bytes(bytes.len() as u64)
            });
            group.bench_function(BenchmarkId::new(name, rows), |bench| {
                bench.iter(|| {
                    row_times_quantized(black_box(&x), &w, &mut out, parallel).expect("shapes match");
                    black_box(&out);
                });
            });
        }
    }
    group.finish();
}

/// `rows × cols` weights of `format` in random blocks of a model's kind, grouped as a model's
/// matrices are: a scale near 2⁻⁸ and, for `Q4_1`, a minimum of −4 to −8 scales (the AVX-512
/// kernel makes such values in `f64`; far-apart halves take its `f32` path).
fn model_like_blocks(
    format: llm_from_scratch::kernels::quant::BlockFormat,
    rows: usize,
    cols: usize,
    seed: u64,
) -> Vec<u8> {
    use llm_from_scratch::kernels::quant::{BlockFormat, group_rows};
    let mut rng = SplitMix64::new(seed);
    let block = format.block_bytes();
    let mut bytes: Vec<u8> = (0..rows * cols / 32 * block).map(|_| (rng.next_u64() >> 56) as u8).collect();
    for b in bytes.chunks_exact_mut(block) {
        let d = 0x1c00 | (u16::from_le_bytes([b[0], b[1]]) & 0x3ff);
        b[..2].copy_from_slice(&d.to_le_bytes());
        if format == BlockFormat::Q4_1 {
            b[2..4].copy_from_slice(&((d + (2 << 10)) | 0x8000).to_le_bytes());
        }
    }
    group_rows(format, &mut bytes, rows, cols).expect("whole blocks");
    bytes
}

/// One row times the transpose of a stored row-major matrix, on one thread: a tied LM head
/// `h · Eᵀ` reading the embedding table `E [V, d]` as stored (here V = 8192, d = 576: 37.7 MB of
/// weights, more than the last-level cache of the benchmark machines; the one-row paths of
/// `gemm` sum in their own order, so this shape has its own kernel).
fn row_times_transposed(c: &mut Criterion) {
    let mut group = c.benchmark_group("row_times_transposed");
    group.sampling_mode(SamplingMode::Flat);
    let (vocabulary, width) = (8192, 576);
    let table = random_values(vocabulary * width, 10);
    let h = random_values(width, 11);
    let mut out = vec![0.0; vocabulary];
    let row = MatRef::row_major(&h, 1, width).expect("the row fits");
    let transposed = MatRef::row_major(&table, vocabulary, width).expect("the table fits").t();
    group.throughput(Throughput::Bytes((table.len() * 8) as u64));
    group.bench_function(BenchmarkId::new("tied_head_one_thread", vocabulary), |bench| {
        bench.iter(|| {
            kernels::matmul(&mut out, black_box(row), black_box(transposed), false, false).expect("shapes chain");
            black_box(&out);
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = matrix_product, weight_gradient, softmax, matmul_op, quantized_row, row_times_transposed
}
criterion_main!(benches);
