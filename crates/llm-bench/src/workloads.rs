//! The workloads of `docs/performance.md`, one function each.
//!
//! Each function's doc comment counts the floating-point work and the bytes that must move, and
//! the floor they imply on the reference machine: the larger of `flops / 220 GFLOP/s` (the f64
//! matrix-product ceiling on 2 cores; a loop of independent AVX-512 FMAs reaches 228 on this
//! machine, 114 on one core) and `bytes / bandwidth`. Bandwidth measured on the benchmark machine
//! (2026-11-30, reading 64-value rows as the caches and weights are stored): 25–28 GB/s from memory
//! on 2 cores at best (18 GB/s reading many separately allocated 2 MiB lanes; 9–15 on one core),
//! 51 GB/s from L3 (27 on one core). A multiply-add counts as 2 flops; "MB" and "GB" are decimal,
//! "MiB" binary.

use llm_from_scratch::attention::{
    AttentionConfig, AttentionError, AttentionPath, GroupedQueryAttention, Visibility,
    causal_scaled_dot_product_self_attention, tiled_attention,
};
use llm_from_scratch::model::{
    AdamWConfig, Decoder, DecoderConfig, LrSchedule, ModelError, TokenBatch, Trainer, TrainingConfig,
};
use llm_from_scratch::nn::SplitMix64;
use llm_from_scratch::tensor::matmul::{self as kernels, MatRef};
use llm_from_scratch::{Tensor, TensorValue};

use std::path::Path;

use crate::measure::{Measurement, Runs, alternating_medians_ms, median_ms, resident_growth};
use crate::real;

/// The workloads, by the name the command line uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 1024×1024 · 1024×1024 f64 product
    Gemm,
    /// multi-head attention layer, forward and backward (B=4, T=256, d=256, H=8)
    MhaTrain,
    /// one new token against a KV cache of 2047 positions, against recomputing all 2048
    Decode,
    /// causal attention kernel alone, B=1, H=8, T=4096, d_h=64: explicit and tiled
    LongCausal,
    /// one optimiser step of chapter 36's tiny decoder
    TrainStep,
    /// one optimiser step of chapter 37's character model
    TrainText,
    /// SmolLM2-135M from its GGUF file (--model): the logits of a 256-token prompt
    RealPrefill,
    /// SmolLM2-135M from its GGUF file (--model): one token against a cache of 256
    RealDecode,
    /// a read-only pass over a buffer the size of what real-decode reads
    Stream,
}

/// What a workload reports.
#[derive(Debug)]
pub enum Outcome {
    /// One line per variant.
    Measured(Vec<Measurement>),
    /// Not measured, and why (one line).
    Skipped(String),
}

const NAMES: [(Workload, &str); 9] = [
    (Workload::Gemm, "gemm"),
    (Workload::MhaTrain, "mha-train"),
    (Workload::Decode, "decode"),
    (Workload::LongCausal, "long-causal"),
    (Workload::TrainStep, "train-step"),
    (Workload::TrainText, "train-text"),
    (Workload::RealPrefill, "real-prefill"),
    (Workload::RealDecode, "real-decode"),
    (Workload::Stream, "stream"),
];

impl Workload {
    /// The command-line name, also the first word of every output line.
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(w, _)| *w == self).map_or("?", |(_, n)| n)
    }

    /// Runs the workload on the current rayon pool; the real-model workloads read the model at
    /// `model` and are skipped without one. Errors are messages for the user.
    pub fn run(self, model: Option<&Path>) -> Result<Outcome, String> {
        let real = |work: fn(&Path) -> Result<Vec<Measurement>, String>| match model {
            Some(path) => work(path).map(Outcome::Measured),
            None => Ok(Outcome::Skipped(format!(
                "{} skipped: no model file (run scripts/fetch-model, then pass --model PATH or set LLM_MODEL)",
                self.name()
            ))),
        };
        match self {
            Workload::RealPrefill => real(real::prefill),
            Workload::RealDecode => real(real::decode),
            Workload::Stream => real::stream(model).map(Outcome::Measured),
            Workload::Gemm => gemm(),
            Workload::MhaTrain => mha_train(),
            Workload::Decode => decode(),
            Workload::LongCausal => long_causal(),
            Workload::TrainStep => train_step(),
            Workload::TrainText => train_text(),
        }
    }
}

/// `len` values uniform in [−1, 1) from `seed`: never zeros, never the same for two seeds.
fn random_values(len: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

/// `gemm f64`: `C = A·B` for row-major 1024×1024 f64 matrices through
/// [`kernels::matmul`] with `parallel = true` (every thread of the pool).
///
/// - Flops: `2n³` = 2 147 483 648 (2.15 GFLOP) → 9.76 ms at 220 GFLOP/s (4.4 GFLOP/ms per
///   thread: 18.7 ms on one core at 115 GFLOP/s).
/// - Bytes: A and B read, C written, 8 MiB each: 25.2 MB → 1.0 ms at 25 GB/s; the packed blocks
///   are re-read from cache.
/// - Floor: compute-bound, 9.8 ms (220 GFLOP/s). Target (`docs/performance.md`): ≥ 0.9 of the
///   best peer's GFLOP/s on the same machine in the same run.
/// - On this project's Intel machine the best peer is PyTorch, whose MKL takes its tuned path on
///   Intel processors: 162–179 GFLOP/s in the rounds where this product ran 157–165
///   (`peer/peer.py`, 2026-11-30); JAX ran 121–142. A loop of independent FMAs peaks at about
///   110 GFLOP/s per core here, and a 8×24 register tile with its operands in L1 at 85–89.
///
/// Four input pairs (64 MiB) rotate from run to run, so no run finds its operands in the L2 cache
/// of the previous one (`peer/peer.py` times its peers' products the same way: the same pairs,
/// warm-ups and timed runs, PyTorch into one output made beforehand); after timing, entries of
/// the last product are checked against a plain dot product, so a kernel that skipped work would
/// fail rather than look fast.
fn gemm() -> Result<Outcome, String> {
    let mut pass = GemmPass::new(GEMM_N);
    let ms = median_ms(Runs { warmups: 3, timed: 15 }, |i| pass.run(i))?;
    pass.check()?;
    Ok(Outcome::Measured(vec![Measurement::new("gemm", "f64", ms).with_flops(pass.flops())]))
}

/// The size of [`gemm`]'s product.
const GEMM_N: usize = 1024;

/// The product [`gemm`] times, run by run: four input pairs of `n × n` values rotating into one
/// output (`n` = [`GEMM_N`] in the workloads).
struct GemmPass {
    n: usize,
    inputs: Vec<(Vec<f64>, Vec<f64>)>,
    out: Vec<f64>,
    last: usize,
}

impl GemmPass {
    const PAIRS: usize = 4;

    fn new(n: usize) -> Self {
        let inputs =
            (0..Self::PAIRS as u64).map(|s| (random_values(n * n, 2 * s), random_values(n * n, 2 * s + 1))).collect();
        Self { n, inputs, out: vec![0.0; n * n], last: 0 }
    }

    /// `2n³`.
    fn flops(&self) -> f64 {
        2.0 * (self.n as f64).powi(3)
    }

    /// The rate in GFLOP/s of a run that took `ms`.
    fn gflops(&self, ms: f64) -> f64 {
        self.flops() / (ms * 1e6)
    }

    /// Run `i`: the product of input pair `i mod 4`.
    fn run(&mut self, i: usize) -> Result<(), String> {
        self.last = i % Self::PAIRS;
        let (a, b) = &self.inputs[self.last];
        let n = self.n;
        let (a, b) = (MatRef::row_major(a, n, n), MatRef::row_major(b, n, n));
        let (a, b) = (a.map_err(|e| e.to_string())?, b.map_err(|e| e.to_string())?);
        kernels::matmul(&mut self.out, a, b, false, true).map_err(|e| e.to_string())
    }

    /// The last run's product checked against plain dot products ([`check_product`]).
    fn check(&self) -> Result<(), String> {
        let (a, b) = &self.inputs[self.last];
        check_product(&self.out, a, b, self.n)
    }
}

/// An attention workload's variant timed in [`real::BLOCKS`] blocks of `runs` that alternate with
/// blocks of [`gemm`]'s product, `gemm_runs` each ([`alternating_medians_ms`]), so that the
/// variant's `of_gemm` is its rate over the product's in the same minutes: the variant's median
/// time, and the product's rate in GFLOP/s.
fn alternating_with_gemm(
    runs: Runs,
    gemm_runs: Runs,
    variant: impl FnMut(usize) -> Result<(), String>,
) -> Result<(f64, f64), String> {
    let mut pass = GemmPass::new(GEMM_N);
    let (ms, gemm_ms) = alternating_medians_ms(real::BLOCKS, [runs, gemm_runs], variant, |i| pass.run(i))?;
    pass.check()?;
    Ok((ms, pass.gflops(gemm_ms)))
}

/// Checks a spread of entries of the `n×n` product `c = a·b` against a left-to-right dot product,
/// within 1e-12 of `Σ_p |a_ip·b_pj|` (the blocked, fused sum rounds differently).
fn check_product(c: &[f64], a: &[f64], b: &[f64], n: usize) -> Result<(), String> {
    for i in (0..n).step_by(n / 8 + 1).chain([n - 1]) {
        for j in (0..n).step_by(n / 8 + 3).chain([n - 1]) {
            let (mut dot, mut scale) = (0.0, 0.0);
            for p in 0..n {
                let term = a[i * n + p] * b[p * n + j];
                dot += term;
                scale += term.abs();
            }
            let got = c[i * n + j];
            let close = (got - dot).abs() <= 1e-12 * scale;
            if !close {
                return Err(format!("wrong product: C[{i},{j}] = {got}, the dot product gives {dot}"));
            }
        }
    }
    Ok(())
}

/// `mha-train forward` and `mha-train forward-backward`: one multi-head attention layer,
/// B=4, T=256, d=256, H=8 (d_h = 32), RoPE base 10000, no bias, random weights and input, one
/// random upstream adjoint of the output. N = B·T = 1024 rows.
///
/// Flops, forward:
/// - Q, K, V and output projections, `4 · 2·N·d²` = 536 870 912;
/// - scores `Q·Kᵀ` and weights·values `P·V` over the causal triangle (the tiled kernel skips the
///   hidden half): `2·B·H·(T(T+1)/2)·d_h` = 67 371 008 each, 134 742 016 together (268 435 456
///   over the full T×T square, which the explicit path computes);
/// - total in products 671 612 928 (0.672 GFLOP); softmax over B·H·T(T+1)/2 = 1 052 672 scores
///   (about 5 flops and one exp each), the 1/√d_h scale and RoPE (about 6 flops per element of
///   q and k) add about 15 MFLOP (2 %).
/// - → about 0.686 GFLOP, floor 3.1 ms at 220 GFLOP/s.
///
/// Flops, forward + backward: every product `C = A·B` sends back `dA = dC·Bᵀ` and `dB = Aᵀ·dC`,
/// twice its forward work, so 3 × 0.686 = 2.058 GFLOP (the tiled backward also recomputes the
/// scores, 67 MFLOP more, which is not counted) → floor 9.4 ms at 220 GFLOP/s. If the input is a
/// constant, the three products for its gradient (`dQ·Wqᵀ + dK·Wkᵀ + dV·Wvᵀ`, 0.403 GFLOP) drop.
///
/// Of that, the twelve projection products (four forward, eight backward, `2·N·d²` each) are
/// 1.611 GFLOP: the variant `products` times them alone, on the layer's shapes and product
/// kernel, so that one run shows how much of `forward-backward` no attention kernel can remove
/// (`docs/performance.md`, issue 16's bounds). The variant `attention` times the tiled kernel
/// alone, forward and backward (3 × 0.135 = 0.404 GFLOP); what `forward-backward` spends beyond
/// the two is RoPE, the head split and merge and the tape.
///
/// Bytes: weights 4·d²·8 = 2 MiB; x, q, k, v, the context and the output [N, d] 2 MiB each; the
/// scores and the weights [B, H, T, T] 16 MiB each. An explicit forward writes and re-reads both
/// `[B,H,T,T]` tensors: ≥ 64 MiB + 12 MiB ≈ 80 MB → 3.2 ms at 25 GB/s; its backward moves about
/// 6 more `[B,H,T,T]` passes (P, dP, dS) ≈ 100 MB → 4 ms. A fused kernel keeps score tiles in cache
/// (≈ 16 MB, 0.7 ms). Floor: compute-bound, 3.1 ms forward, 9.4 ms forward+backward.
/// Targets (issue 16): forward+backward ≤ 0.4× the best peer on an AVX-512 machine, ≤ 0.5×
/// PyTorch held to AVX2 with the AVX2 target.
///
/// Report `forward`, `forward-backward`, `products` and `attention` with `with_flops` (0.686e9,
/// 2.058e9, 1.611e9 and 0.404e9). Until 2026-12-02 `forward` and `forward-backward` counted the
/// full square (0.82e9, 2.44e9), which overstated their rate by a fifth.
///
/// The layer is [`GroupedQueryAttention`] with `G = H` (multi-head attention) on the tiled kernel,
/// the path selected for training; the explicit path computes the same to 1e-12 (tests).
fn mha_train() -> Result<Outcome, String> {
    const B: usize = 4;
    const T: usize = 256;
    const D: usize = 256;
    const H: usize = 8;
    const N_ROWS: usize = B * T;
    // products over the causal triangle (the tiled kernel skips the hidden half) and elementwise work
    const FORWARD_FLOPS: f64 = 0.686e9;
    // the twelve projection products: 4 forward, 8 backward, `2·N·d²` each
    const PRODUCT_FLOPS: f64 = 12.0 * 2.0 * (N_ROWS * D * D) as f64;
    // `Q·Kᵀ` and `P·V` over the causal triangle, forward (backward twice that)
    const ATTENTION_FLOPS: f64 = 2.0 * 2.0 * (B * H * (T * (T + 1) / 2) * (D / H)) as f64;
    let mut rng = SplitMix64::new(7);
    // multi-head attention (G = H, d_h = d/H) on the training path: the tiled kernel
    let config = AttentionConfig::multi_head(D, H).with_rope(T, 10_000.0).with_path(AttentionPath::Tiled);
    let layer = GroupedQueryAttention::new("bench", config, &mut rng).map_err(|e| e.to_string())?;
    // two inputs and upstream adjoints rotate between runs
    let inputs: Vec<Tensor> = (0..2).map(|s| tensor(&[B, T, D], 100 + s)).collect::<Result<_, _>>()?;
    let upstreams: Vec<Tensor> = (0..2).map(|s| tensor(&[B, T, D], 200 + s)).collect::<Result<_, _>>()?;
    let runs = Runs { warmups: 3, timed: 11 };
    let forward = median_ms(runs, |i| -> Result<(), String> {
        let x = TensorValue::leaf(inputs[i % 2].clone(), true);
        let out = layer.forward(&x, 0).map_err(|e| e.to_string())?;
        std::hint::black_box(out.output.value().map_err(|e| e.to_string())?);
        Ok(())
    })?;
    // issue 31's line (`of_gemm` ≥ 0.75): blocks of about 70 ms of each, alternating
    let (fb, gemm) = (Runs { warmups: 2, timed: 4 }, Runs { warmups: 2, timed: 5 });
    let (forward_backward, gemm) = alternating_with_gemm(fb, gemm, |i| {
        let x = TensorValue::leaf(inputs[i % 2].clone(), true);
        let out = layer.forward(&x, 0).map_err(|e| e.to_string())?;
        let grads = out.output.backward_with(&upstreams[i % 2]).map_err(|e| e.to_string())?;
        std::hint::black_box(grads.get(&x).map(Tensor::len));
        Ok(())
    })?;
    let products = layer_products(N_ROWS, D)?;
    let attention = layer_attention([B, H, T, D / H], runs)?;
    let lines = [
        Measurement::new("mha-train", "forward", forward).with_flops(FORWARD_FLOPS),
        Measurement::new("mha-train", "forward-backward", forward_backward).with_flops(3.0 * FORWARD_FLOPS),
        Measurement::new("mha-train", "products", products).with_flops(PRODUCT_FLOPS),
        Measurement::new("mha-train", "attention", attention).with_flops(3.0 * ATTENTION_FLOPS),
    ];
    Ok(Outcome::Measured(lines.into_iter().map(|line| line.relative_to_gemm(gemm)).collect()))
}

/// `mha-train attention`: the layer's attention kernel alone, forward and backward, on rotated
/// query, key and value heads of the layer's shape `[B, H, T, d_h]` (random, all three needing
/// gradients) with one upstream adjoint: the other part of `forward-backward` besides
/// [`layer_products`]. What is left of the layer's time is RoPE, the head split and merge and
/// the tape.
fn layer_attention(shape: [usize; 4], runs: Runs) -> Result<f64, String> {
    let heads: Vec<Tensor> = (0..4).map(|s| tensor(&shape, 310 + s)).collect::<Result<_, _>>()?;
    let visibility = Visibility::default();
    median_ms(runs, |_| -> Result<(), String> {
        let [q, k, v] = [0, 1, 2].map(|i| TensorValue::leaf(heads[i].clone(), true));
        let out = tiled_attention(&q, &k, &v, None, &visibility).map_err(|e| e.to_string())?;
        let grads = out.backward_with(&heads[3]).map_err(|e| e.to_string())?;
        std::hint::black_box(grads.get(&q).map(Tensor::len));
        Ok(())
    })
}

/// `mha-train products`: the layer's twelve projection products alone, with the shapes and the
/// matrix product the layer's forward and backward use (`N = B·T` rows, `d` wide): forward
/// `X·W_q`, `X·W_k`, `X·W_v`, `C·W_o`; backward `dO·W_oᵀ`, `Cᵀ·dO` and, per branch, `dY·Wᵀ`
/// (added into `dX`) and `Xᵀ·dY`. What the layer would cost if its attention, RoPE, head
/// split and merge and its tape were free: the part of `forward-backward` no attention kernel
/// can remove.
fn layer_products(n: usize, d: usize) -> Result<f64, String> {
    let x = random_values(n * d, 300);
    let dy = random_values(n * d, 301);
    let w = random_values(d * d, 302);
    let (mut out, mut grad_x, mut grad_w) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; d * d]);
    let err = |e: llm_from_scratch::TensorAutodiffError| e.to_string();
    let view = |e: llm_from_scratch::kernels::gemm::ShapeError| e.to_string();
    median_ms(Runs { warmups: 3, timed: 11 }, |_| -> Result<(), String> {
        let (x, dy, w) = (
            MatRef::row_major(&x, n, d).map_err(view)?,
            MatRef::row_major(&dy, n, d).map_err(view)?,
            MatRef::row_major(&w, d, d).map_err(view)?,
        );
        for _ in 0..4 {
            kernels::matmul(&mut out, x, w, false, true).map_err(err)?; // forward, four projections
        }
        for branch in 0..4 {
            // dX (dC for the output projection) and the weight's gradient
            kernels::matmul(&mut grad_x, dy, w.t(), branch > 1, true).map_err(err)?;
            kernels::matmul(&mut grad_w, x.t(), dy, false, true).map_err(err)?;
        }
        std::hint::black_box((&out, &grad_x, &grad_w));
        Ok(())
    })
}

/// A tensor of `shape` with values uniform in [−1, 1) from `seed`.
fn tensor(shape: &[usize], seed: u64) -> Result<Tensor, String> {
    Tensor::new(shape, random_values(shape.iter().product(), seed)).map_err(|e| e.to_string())
}

/// `decode cached` and `decode recompute`: an MHA layer with d=512, H=8 (d_h = 64) producing the
/// output of one new token against a KV cache of 2047 positions (2048 with the new one), against
/// recomputing the layer on all 2048 tokens.
///
/// `cached` times consecutive steps of one generation, as a decoding loop runs them: the cache
/// is prefilled with 2047 positions once, then each run decodes the next token into it (warm-ups
/// included, the 27 runs see caches of 2047 to 2073 positions; the middle timed run about 2061,
/// 0.7 % more than 2047). Like a real loop, each step finds the cache and weights where the previous
/// step left them — in this machine's L3 (they total 25 MB).
///
/// - Flops: the token's 4 projections `4 · 2·d²` = 2 097 152; scores `2·H·T·d_h` = 2 097 152;
///   weights·V the same → 6.3 MFLOP → 0.03 ms at 220 GFLOP/s.
/// - Bytes: the K and V caches `2·T·d·8` = 16 MiB (16.8 MB) and the weights `4·d²·8` = 8 MiB
///   (8.4 MB) read once: 25.2 MB. Measured here (2026-11-30, 2 threads, 64-value rows as the
///   cache stores them): 51 GB/s from L3, 18 GB/s from DRAM.
/// - Floor: memory-bound, 0.5 ms from L3; 1.4 ms when every step must come
///   from DRAM (a model whose layers do not fit in L3 together; decoding on 16 rotated copies of
///   the cache measured 1.8 ms). Appending the token writes 2·d·8 = 8 KiB; a step must not copy
///   the 16 MiB cache (that alone would cost 1.3 ms: read + write).
///
/// The `cached` line also gives the rate over those 25.2 MB (`gbs`) and its fraction of the rate
/// of read-only passes over a buffer of the same size (`of_stream`): [`real::StreamPass`]es timed
/// in [`real::BLOCKS`] blocks that alternate with the steps', so that both rates come from the
/// same minutes, each block's warm-ups bringing its bytes back into L3. That is the ceiling the
/// target's "≥ 0.85 of the streaming rate" is measured against.
///
/// `recompute` (full forward, T = 2048, on the tiled kernel):
/// - Flops: projections `4 · 2·T·d²` = 4 294 967 296; `Q·Kᵀ` and `P·V` over the full square
///   `2 · 2·H·T²·d_h` = 8 589 934 592 (half with the tiled kernel's causal skip) → 12.9 GFLOP,
///   58.6 ms at 220 GFLOP/s (8.6 GFLOP, 39 ms with the causal skip).
/// - Bytes: the tiled kernel keeps its score tiles in cache; the explicit kernel would write and
///   re-read scores and weights `[H,T,T]` of 256 MiB each: ≈ 1.07 GB → 43 ms at 25 GB/s, and it
///   took 549 ms here (2026-11-30), against PyTorch's 97 ms.
fn decode() -> Result<Outcome, String> {
    const D: usize = 512;
    const H: usize = 8;
    const CACHED: usize = 2047;
    let err = |e: AttentionError| e.to_string();
    let mut rng = SplitMix64::new(11);
    let runs = Runs { warmups: 2, timed: 7 };
    // room for the prompt and every decoded token
    let positions = CACHED + real::BLOCKS * (runs.warmups + runs.timed);
    // the tiled kernel for `recompute` (a full pass over 2048 tokens, as an engineer without a
    // cache would run it); `forward_cached` has its own row kernel whatever this setting says
    let config = AttentionConfig::multi_head(D, H).with_rope(positions, 10_000.0).with_path(AttentionPath::Tiled);
    let layer = GroupedQueryAttention::new("bench", config, &mut rng).map_err(err)?;
    let prompt = TensorValue::leaf(tensor(&[1, CACHED, D], 300)?, false);
    let mut cache = layer.new_cache(1);
    layer.forward_cached(&prompt, &mut cache).map_err(err)?;
    let tokens: Vec<TensorValue> =
        (0..2).map(|s| tensor(&[1, 1, D], 301 + s).map(|t| TensorValue::leaf(t, false))).collect::<Result<_, _>>()?;
    // what a step reads (the cache at 2048 positions; the middle timed run's holds about 2061,
    // so the rate is understated by 0.5 %), and passes over as many bytes in the same minutes
    let bytes = 4 * D * D * 8 + 2 * (CACHED + 1) * D * 8;
    let stream = real::StreamPass::new(bytes);
    let (cached, stream_ms) = alternating_medians_ms(
        real::BLOCKS,
        [runs, runs],
        |i| -> Result<(), String> {
            std::hint::black_box(layer.forward_cached(&tokens[i % 2], &mut cache).map_err(err)?);
            Ok(())
        },
        |_| {
            stream.read();
            Ok(())
        },
    )?;
    let (gbs, stream_gbs) = (bytes as f64 / (cached * 1e6), stream.gbs(stream_ms));
    drop(stream); // before `recompute`'s tensors
    let full = TensorValue::leaf(tensor(&[1, CACHED + 1, D], 303)?, false);
    let recompute = median_ms(Runs { warmups: 1, timed: 5 }, |_| -> Result<(), String> {
        std::hint::black_box(layer.forward(&full, 0).map_err(err)?.output.value().map_err(|e| e.to_string())?);
        Ok(())
    })?;
    Ok(Outcome::Measured(vec![
        Measurement::new("decode", "cached", cached).with_bandwidth(gbs, Some(stream_gbs)),
        Measurement::new("decode", "recompute", recompute),
    ]))
}

/// `long-causal explicit` and `long-causal tiled`: the causal attention kernel alone (no
/// projections), B=1, H=8, T=4096, d_h=64; report `peak_mib` from
/// [`crate::measure::resident_growth`] (measure `tiled` first, or each variant in a process of its
/// own: memory the allocator kept from a larger variant would hide growth).
///
/// - Flops: `Q·Kᵀ` and `P·V` over the full square, `2 · 2·H·T²·d_h` = 34 359 738 368 (34.4 GFLOP,
///   156 ms at 220 GFLOP/s): what `explicit` computes. Over the causal triangle only (T(T+1)/2
///   pairs): 17.2 GFLOP → 78 ms at 220 GFLOP/s. (An estimate of a "floor about 40 ms" matches
///   counting a multiply-add as one flop, or one of the two products only.)
/// - exp: one per kept score, H·T(T+1)/2 = 67.1 M (134 M for the square). Not in the flop floor
///   but not free: at about 5 ns per scalar `f64::exp` that is 170 ms on 2 cores, above the
///   matrix floor; the tiled kernel needs a vectorised exp (≈ 1–2 ns per value) to approach it.
/// - Bytes: q, k, v and the output [H, T, d_h], 16 MiB each: 67 MB → 2.7 ms at 25 GB/s. `explicit`
///   also materialises scores and weights [H, T, T], 1 GiB each: +2 GiB resident and ≥ 4.3 GB of
///   traffic (172 ms at 25 GB/s).
/// - Floor (tiled): compute-bound, 78 ms. PyTorch's SDPA took 197–213 ms on this project's
///   machine (`peer/peer.py`, 2026-11-30). Targets: tiled ≤ 120 ms (0.5 × the peer's 241 ms) with
///   peak growth ≤ 16 MiB (the output alone is 16 MiB: allocate it before the measured call or
///   count it).
/// - Where the tiled time goes (the strip kernel on AVX-512, measured 2026-11-30 by switching
///   parts off): the two products about 80 % (at about 75 % of the FMA peak, where their register
///   tiles reach 85–90 % with data in L1), the exponentials and the rest of the online softmax
///   about 16 %, and reading K and V from the last-level cache about a tenth of the products'
///   time. 120 ms asks for about 80 % of the peak over the whole kernel.
fn long_causal() -> Result<Outcome, String> {
    const H: usize = 8;
    const T: usize = 4096;
    const DH: usize = 64;
    let leaf = |seed| tensor(&[1, H, T, DH], seed).map(|t| TensorValue::leaf(t, false));
    let (q, k, v) = (leaf(400)?, leaf(401)?, leaf(402)?);
    let visibility = Visibility::default();
    let runs = Runs { warmups: 1, timed: 5 };
    // tiled first: memory the allocator keeps from the explicit variant would hide growth. One
    // warm-up call pays the one-time costs (worker threads' heaps and packing buffers) and its
    // output stays alive while the growth of the second call is read, so that the second cannot
    // simply reuse the first one's memory (`keep_freed_memory` keeps freed buffers)
    let tiled_call = || tiled_attention(&q, &k, &v, None, &visibility);
    let warm = tiled_call().map_err(|e| e.to_string())?;
    let (_, tiled_peak) = resident_growth(tiled_call);
    drop(warm);
    // issue 31's line (`of_gemm` ≥ 0.9): blocks of about 250 ms of each, alternating
    let (tiled_runs, gemm) = (Runs { warmups: 1, timed: 2 }, Runs { warmups: 2, timed: 16 });
    let (tiled, gemm) = alternating_with_gemm(tiled_runs, gemm, |_| {
        let out = tiled_attention(&q, &k, &v, None, &visibility).map_err(|e| e.to_string())?;
        std::hint::black_box(out.len());
        Ok(())
    })?;
    let explicit_call = || {
        causal_scaled_dot_product_self_attention(&q, &k, &v).and_then(|o| Ok(o.output().value().map(|t| t.len())?))
    };
    let (_, explicit_peak) = resident_growth(explicit_call);
    let explicit = median_ms(runs, |_| -> Result<(), String> {
        std::hint::black_box(explicit_call().map_err(|e| e.to_string())?);
        Ok(())
    })?;
    let with_peak = |m: Measurement, peak: Option<f64>| match peak {
        Some(p) => m.with_peak_mib(p),
        None => m,
    };
    let lines = [
        with_peak(Measurement::new("long-causal", "explicit", explicit).with_flops(34.4e9), explicit_peak),
        with_peak(Measurement::new("long-causal", "tiled", tiled).with_flops(17.2e9), tiled_peak),
    ];
    Ok(Outcome::Measured(lines.into_iter().map(|line| line.relative_to_gemm(gemm)).collect()))
}

/// `train-step step`: one optimiser step of the tiny decoder of chapter 36 (the configuration of
/// `demos/ch36-tiny-decoder`, rebuilt here): V = 16, d = 32, L = 2 blocks of H = 4 query heads
/// sharing G = 2 key/value heads (d_h = 8), SwiGLU width 64, tied head, RoPE base 100, explicit
/// attention kernel; a batch of B = 32 sequences of the reversal task (11 tokens: T = 10 inputs,
/// N = B·T = 320 positions, the last 6 scored). A step is [`Trainer::step`]: forward, loss,
/// backward, global-norm clipping at 1, AdamW (warm-up/cosine schedule of the demo). Four batches
/// rotate; the model keeps training from run to run, as it would in the demo.
///
/// With P = 18 944 weights in the matrix products (per block `2·d·d_h·(H+G)` = 3 072 attention
/// and `3·d·64` = 6 144 feed-forward; the tied head `d·V` = 512), 19 104 parameters in all:
/// - Flops, forward: products `2·P·N` = 12 124 160, attention over the full square
///   `L · 2 · 2·B·T²·(H·d_h)` = 819 200 → 12.9 MFLOP; backward twice that; AdamW about 12 flops
///   per parameter (0.23 MFLOP) → 39.1 MFLOP in all, floor 0.18 ms at 220 GFLOP/s.
/// - Bytes: the update reads weights, gradients and both moments and writes three of them,
///   `7 · 8 · 19 104` = 1.07 MB (0.04 ms at 25 GB/s); the activations kept for backward are about
///   80 KB per `[B, T, d]` tensor and 100 KB per `[B, H, T, T]` one, a few MB that stay in cache.
/// - So the floor is far below what a step costs: at this size the time goes to building the tape,
///   allocating small tensors and hundreds of tiny matrix products, not to arithmetic.
fn train_step() -> Result<Outcome, String> {
    const SYMBOLS: u64 = 15; // ids 0..15; 15 is the separator
    const LENGTH: usize = 5;
    const BATCH: usize = 32;
    const FLOPS: f64 = 39.06e6;
    let err = |e: ModelError| e.to_string();
    let config = DecoderConfig::new(16, 32, 2, 4).with_kv_heads(2).with_ffn_width(64).with_rope(16, 100.0);
    let model = Decoder::new(config, &mut SplitMix64::new(36)).map_err(err)?;
    let schedule = LrSchedule::warmup_cosine(1e-2, 1e-3, 50, 600).map_err(err)?;
    let training = TrainingConfig { adamw: AdamWConfig::default(), schedule, clip_norm: Some(1.0) };
    let mut trainer = Trainer::new(model, training).map_err(err)?;
    // L random symbols, the separator, the symbols reversed; scored from the separator on
    let mut rng = SplitMix64::new(3_600);
    let mut sequence = || {
        let symbols: Vec<usize> = (0..LENGTH).map(|_| rng.below(SYMBOLS) as usize).collect();
        [symbols.clone(), vec![SYMBOLS as usize], symbols.into_iter().rev().collect()].concat()
    };
    let batches: Vec<TokenBatch> = (0..4)
        .map(|_| TokenBatch::next_token(&(0..BATCH).map(|_| sequence()).collect::<Vec<_>>(), LENGTH))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    time_steps("train-step", &mut trainer, &batches, FLOPS)
}

/// `train-text step`: one optimiser step of chapter 37's character model (the configuration of
/// `demos/ch37-train-on-text`, rebuilt here): V = 57 characters, d = 64, L = 2 blocks of H = 4
/// query heads sharing G = 2 key/value heads (d_h = 16), SwiGLU width 176, tied head, RoPE base
/// 10 000 over 64 positions, the chapter's tiled attention kernel (its `ATTENTION_PATH`; until
/// 2026-12-06 both ran the explicit one); a batch of B = 16 windows of T = 64 inputs
/// (N = B·T = 1 024 positions, all scored). A step is [`Trainer::step`]: forward, loss, backward,
/// global-norm clipping at 1, AdamW (warm-up/cosine schedule of the chapter). The windows are
/// uniformly random ids (the cost does not depend on which characters they are); four batches
/// rotate and the model keeps training from run to run.
///
/// With P = 95 808 weights in the matrix products (per block `2·d·d_h·(H+G)` = 12 288 attention
/// and `3·d·176` = 33 792 feed-forward; the tied head `d·V` = 3 648), 96 128 parameters in all:
/// - Flops, forward: products `2·P·N` = 196.2 M, attention over the full square
///   `L · 2 · 2·B·T²·(H·d_h)` = 33.6 M → 229.8 MFLOP (the count PyTorch's peer is credited with;
///   the tiled kernel skips the hidden half of the square); backward twice that; AdamW about 12
///   flops per parameter (1.2 MFLOP) → 690.6 MFLOP in all, floor 3.1 ms at 220 GFLOP/s.
/// - Bytes: the update moves `7 · 8 · 96 128` = 5.4 MB (0.2 ms at 25 GB/s); the activations kept
///   for backward are about 0.5 MB per `[B, T, d]` tensor (the tiled kernel keeps no `[B, H, T, T]`
///   one).
fn train_text() -> Result<Outcome, String> {
    const FLOPS: f64 = 690.6e6;
    let err = |e: ModelError| e.to_string();
    let (config, training) = text_model().map_err(err)?;
    let model = Decoder::new(config, &mut SplitMix64::new(37)).map_err(err)?;
    let mut trainer = Trainer::new(model, training).map_err(err)?;
    let mut rng = SplitMix64::new(3_700);
    let mut window = || (0..=TEXT_CONTEXT).map(|_| rng.below(TEXT_VOCAB as u64) as usize).collect::<Vec<_>>();
    let batches: Vec<TokenBatch> = (0..4)
        .map(|_| TokenBatch::next_token(&(0..TEXT_BATCH).map(|_| window()).collect::<Vec<_>>(), 0))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    time_steps("train-text", &mut trainer, &batches, FLOPS)
}

/// Characters in chapter 37's vocabulary.
const TEXT_VOCAB: usize = 57;
/// Windows per step in chapter 37.
const TEXT_BATCH: usize = 16;
/// Inputs per window in chapter 37.
const TEXT_CONTEXT: usize = 64;

/// Chapter 37's model and training settings, rebuilt here (the chapter's crate is not a
/// dependency of the benchmark): a test holds them equal to the chapter's own, attention kernel
/// included, so that `train-text` measures the step the chapter takes.
fn text_model() -> Result<(DecoderConfig, TrainingConfig), ModelError> {
    let config = DecoderConfig::new(TEXT_VOCAB, 64, 2, 4)
        .with_kv_heads(2)
        .with_rope(TEXT_CONTEXT, 10_000.0)
        .with_path(AttentionPath::Tiled);
    let schedule = LrSchedule::warmup_cosine(4e-3, 2e-4, 40, 800)?;
    Ok((config, TrainingConfig { adamw: AdamWConfig::default(), schedule, clip_norm: Some(1.0) }))
}

/// The median time of one optimiser step of `trainer`, the `batches` rotating (the model keeps
/// training from run to run); a non-finite loss fails the workload.
fn time_steps(
    workload: &'static str,
    trainer: &mut Trainer,
    batches: &[TokenBatch],
    flops: f64,
) -> Result<Outcome, String> {
    let runs = Runs { warmups: 3, timed: 21 };
    let ms = median_ms(runs, |i| -> Result<(), String> {
        let report = trainer.step(&batches[i % batches.len()]).map_err(|e| e.to_string())?;
        if !report.loss.is_finite() {
            return Err(format!("{workload}: loss {} at step {}", report.loss, report.step));
        }
        Ok(())
    })?;
    Ok(Outcome::Measured(vec![Measurement::new(workload, "step", ms).with_flops(flops)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        use clap::ValueEnum;
        for (workload, name) in NAMES {
            assert_eq!(Workload::from_str(name, false), Ok(workload));
            assert_eq!(workload.name(), name);
        }
        assert!(Workload::from_str("GEMM", false).is_err());
        assert_eq!(Workload::value_variants().len(), NAMES.len());
    }

    #[test]
    fn train_text_takes_chapter_37s_step() {
        // until 2026-12-06 the chapter and this copy trained on the explicit kernel; a kernel,
        // a shape or a setting changed in one place and not the other fails here
        use ch37_train_on_text as ch37;
        let (config, training) = text_model().unwrap();
        let corpus = ch37::Corpus::new(ch37::CORPUS).unwrap();
        assert_eq!(config, ch37::config(corpus.tokenizer.vocab_size()));
        assert_eq!(training, ch37::RECIPE.training_config().unwrap());
        assert_eq!((TEXT_BATCH, TEXT_CONTEXT, 37), (ch37::BATCH, ch37::CONTEXT, ch37::SEED));
    }

    #[test]
    fn the_gemm_pass_rotates_four_pairs_and_checks_the_last_runs_product() {
        // small: a test beside it reads the process's resident memory
        let mut pass = GemmPass::new(48);
        assert_eq!(pass.flops(), 2.0 * 48.0 * 48.0 * 48.0);
        assert_eq!(pass.gflops(0.5), 2.0 * 48.0 * 48.0 * 48.0 / 0.5e6);
        pass.run(5).unwrap();
        assert_eq!(pass.last, 1, "run 5 multiplies pair 1");
        pass.check().unwrap();
        // the product is pair 1's: against pair 0 the check fails
        let (a, b) = &pass.inputs[0];
        assert!(check_product(&pass.out, a, b, 48).is_err());
    }

    #[test]
    fn the_product_check_catches_a_wrong_entry() {
        let n = 16;
        let a = random_values(n * n, 1);
        let b = random_values(n * n, 2);
        let mut c = vec![0.0; n * n];
        kernels::matmul_naive(
            &mut c,
            MatRef::row_major(&a, n, n).unwrap(),
            MatRef::row_major(&b, n, n).unwrap(),
            false,
        )
        .unwrap();
        assert_eq!(check_product(&c, &a, &b, n), Ok(()));
        c[n - 1] += 1e-6;
        assert!(check_product(&c, &a, &b, n).unwrap_err().contains("C[0,15]"));
        assert!(check_product(&vec![0.0; n * n], &a, &b, n).is_err());
    }
}
