//! Chapter 29 — rotary position embedding (RoPE): position as a rotation.
//!
//! Attention by itself does not know where a token is: permuting the keys permutes the weights
//! and nothing else. RoPE tells it by *rotating* each query and key according to the token's
//! absolute position `p`. A head vector of width `d_h` is cut into `d_h/2` coordinate pairs;
//! pair `i` turns by the angle `p·θ_i`, with one frequency per pair:
//!
//! ```text
//! θ_i = base^(−2i/d_h)                         i = 0 … d_h/2 − 1   (fast … slow)
//! (x, y) ↦ (x·cos(pθ_i) − y·sin(pθ_i),  x·sin(pθ_i) + y·cos(pθ_i))
//! ```
//!
//! Two facts make this the right encoding:
//! - a rotation keeps lengths, so `‖R_p x‖ = ‖x‖`: position never inflates or shrinks a vector;
//! - rotations compose by adding angles and `R_aᵀ = R_{−a}`, so for a query at position `m` and a
//!   key at position `n`: `(R_m q)·(R_n k) = qᵀ R_mᵀ R_n k = qᵀ R_{n−m} k`. The score depends on
//!   the *distance* `n − m` only — shifting both tokens by the same amount changes nothing.
//!
//! Pair `0` turns one radian per position (it tells neighbours apart); the last pairs turn
//! slowly (they keep long distances distinguishable without wrapping around). With `d_h = 4`
//! and `base = 100`, as here, `θ = [1, 0.1]`; real models use `base = 10 000` and `d_h = 64…256`.
//!
//! Which coordinates form a pair is a convention. The paper (and this course) pairs neighbours
//! `(0,1), (2,3), …`; Hugging Face checkpoints pair the two halves `(i, i + d_h/2)`. Both are the
//! same rotation after permuting coordinates, which this report shows bit for bit. RoPE has no
//! parameters and is applied to queries and keys only (chapter 30), never to values.
#![doc = demo_support::chapter_page!(
    "ch29-rotary-position-embedding",
    "[`RotaryEmbedding`](../llm_from_scratch/nn/struct.RotaryEmbedding.html) and [`RopeLayout`](../llm_from_scratch/nn/enum.RopeLayout.html)",
    ("chapter 28", "ch28_causal_masking"),
    ("chapter 30", "ch30_multi_head_attention")
)]

use demo_support::evidence::{DemoResult, rejection};

use demo_support::report::{fmt_f64, fmt_tensor, fmt_values};
use llm_from_scratch::nn::{RopeError, RopeLayout, RotaryEmbedding, SplitMix64};
use llm_from_scratch::{GradcheckConfig, GradcheckReport, Tensor, TensorValue, constant, gradcheck};

mod figure;
pub use figure::{render_svg, render_thumbnail};

/// `d_h`.
const HEAD_WIDTH: usize = 4;
/// Positions the tables cover.
const CAPACITY: usize = 8;
/// The frequency base: `θ = [100⁰, 100^(−1/2)] = [1, 0.1]`.
const BASE: f64 = 100.0;
/// The vector rotated at positions 0‥3 and in both layouts.
const VECTOR: [f64; 4] = [1.0, 2.0, 3.0, 4.0];
/// The query and key of the relative-position example: orthogonal before rotation.
const QUERY: [f64; 4] = [1.0, 0.0, 1.0, 0.0];
const KEY: [f64; 4] = [0.0, 1.0, 0.0, 1.0];
/// `(query position, key position)` pairs of the relative-position example.
const POSITION_PAIRS: [(usize, usize); 5] = [(3, 1), (5, 3), (7, 5), (1, 3), (2, 2)];
/// Seed of the random vectors (relative-position sweep, gradient check).
const SEED: u64 = 29;

/// What the chapter computes; `render_report` prints it.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// `θ_i = base^(−2i/d_h)`, one per pair.
    pub thetas: Vec<f64>,
    /// `p·θ_i` at `[p, i]`, `[8, 2]`.
    pub angles: Tensor,
    /// The library's rotation of `[1,0,1,0]` at positions 0‥7: rows `[cos pθ₀, sin pθ₀, cos pθ₁, sin pθ₁]`.
    pub unit_rotations: Tensor,
    /// `[1,2,3,4]` rotated at positions 0, 1, 2, 3 (one row each), `[4, 4]`.
    pub rotated: Tensor,
    /// The norm of each rotated row (all `√30`).
    pub norms: Vec<f64>,
    /// Whether every norm equals `‖x‖` within 1e-12.
    pub norms_preserved: bool,
    /// `(m, n, (R_m q)·(R_n k))` for (m, n) = (3,1), (5,3), (7,5), (1,3), (2,2).
    pub relative_dots: Vec<(usize, usize, f64)>,
    /// Random `q, k` at every `(m, n)` and every shift `s ≥ 1` that fits: number of comparisons.
    pub shift_comparisons: usize,
    /// Whether all of them agreed within 1e-12.
    pub shift_invariant: bool,
    /// `[1,2,3,4]` at position 1, adjacent pairs `(0,1), (2,3)`.
    pub adjacent: Tensor,
    /// `[1,2,3,4]` at position 1, split halves `(0,2), (1,3)`.
    pub split_halves: Tensor,
    /// Whether split halves applied to `[x0,x2,x1,x3]` and permuted back equals adjacent pairs bitwise.
    pub layouts_agree_after_permutation: bool,
    /// Central-difference check of `rotate` (offset 2) for each layout.
    pub gradchecks: Vec<(&'static str, GradcheckReport)>,
    /// `(case, message)` of configurations and positions the library rejects.
    pub errors: Vec<(&'static str, String)>,
}

/// Computes the chapter's evidence through the library.
///
/// # Errors
/// Any library error (none is expected), or an error case that the library unexpectedly accepts.
pub fn learner_evidence() -> DemoResult<Evidence> {
    let rope = RotaryEmbedding::new(HEAD_WIDTH, CAPACITY, BASE)?;
    let halves = rope.clone().with_layout(RopeLayout::SplitHalves);
    let rotated = rotate_repeated(&rope, &VECTOR, 4)?;
    let norms = row_norms(&rotated);
    let length = row_norms(&Tensor::new(&[1, HEAD_WIDTH], VECTOR.to_vec())?)[0];
    let mut rng = SplitMix64::new(SEED);
    let (shift_comparisons, shift_invariant) = shift_sweep(&rope, &mut rng)?;
    let relative_dots = POSITION_PAIRS
        .iter()
        .map(|&(m, n)| Ok((m, n, rotated_dot(&rope, &QUERY, m, &KEY, n)?)))
        .collect::<DemoResult<Vec<_>>>()?;
    let adjacent = rotate_at(&rope, &VECTOR, 1)?;
    let permuted = [VECTOR[0], VECTOR[2], VECTOR[1], VECTOR[3]];
    let halves_permuted = rotate_at(&halves, &permuted, 1)?;
    Ok(Evidence {
        thetas: thetas(),
        angles: angle_table()?,
        unit_rotations: rotate_repeated(&rope, &[1.0, 0.0, 1.0, 0.0], CAPACITY)?,
        norms_preserved: norms.iter().all(|n| (n - length).abs() <= 1e-12),
        rotated,
        norms,
        relative_dots,
        shift_comparisons,
        shift_invariant,
        layouts_agree_after_permutation: swap_middle(&halves_permuted)?.bitwise_eq(&adjacent),
        split_halves: rotate_at(&halves, &VECTOR, 1)?,
        adjacent,
        gradchecks: vec![
            ("adjacent_pairs", check_rotate(&rope, &mut rng.clone())?),
            ("split_halves", check_rotate(&halves, &mut rng)?),
        ],
        errors: error_cases(&rope)?,
    })
}

/// `θ_i = base^(−2i/d_h)` by the formula.
fn thetas() -> Vec<f64> {
    (0..HEAD_WIDTH / 2).map(|i| BASE.powf(-2.0 * i as f64 / HEAD_WIDTH as f64)).collect()
}

/// The angle `p·θ_i` for every position of the capacity, `[CAPACITY, d_h/2]`.
fn angle_table() -> DemoResult<Tensor> {
    let thetas = thetas();
    let values = (0..CAPACITY).flat_map(|p| thetas.iter().map(move |t| p as f64 * t)).collect();
    Ok(Tensor::new(&[CAPACITY, HEAD_WIDTH / 2], values)?)
}

// Hand derivation for x = [1,2,3,4] at position 1 (angles 1 and 0.1), adjacent pairs:
//   pair (x0,x1) = (1,2) by 1 rad:   (cos1 − 2·sin1, sin1 + 2·cos1)
//                                   = (0.540302 − 1.682942, 0.841471 + 1.080605) = (−1.142640, 1.922076)
//   pair (x2,x3) = (3,4) by 0.1 rad: (3·cos0.1 − 4·sin0.1, 3·sin0.1 + 4·cos0.1)
//                                   = (2.985012 − 0.399334, 0.299500 + 3.980017) = (2.585679, 4.279517)
// Split halves pairs (x0,x2) = (1,3) by 1 rad and (x1,x3) = (2,4) by 0.1 rad:
//   (cos1 − 3·sin1, 2·cos0.1 − 4·sin0.1, sin1 + 3·cos1, 2·sin0.1 + 4·cos0.1)
//   = (−1.984111, 1.590675, 2.462378, 4.179683)
// Every row keeps the norm √(1 + 4 + 9 + 16) = √30 = 5.477226.
/// One token `x` at absolute position `position`, rotated: `[1, d_h]`.
fn rotate_at(rope: &RotaryEmbedding, x: &[f64], position: usize) -> DemoResult<Tensor> {
    Ok(rope.rotate(&constant(&[1, x.len()], x)?, position)?.value()?)
}

/// `x` repeated as tokens `0..count`, rotated from offset 0: row `p` is `R_p x`, `[count, d_h]`.
fn rotate_repeated(rope: &RotaryEmbedding, x: &[f64], count: usize) -> DemoResult<Tensor> {
    let values: Vec<f64> = (0..count).flat_map(|_| x.iter().copied()).collect();
    Ok(rope.rotate(&constant(&[count, x.len()], &values)?, 0)?.value()?)
}

/// The Euclidean norm of every row.
fn row_norms(t: &Tensor) -> Vec<f64> {
    t.as_slice().chunks(HEAD_WIDTH).map(|row| row.iter().map(|v| v * v).sum::<f64>().sqrt()).collect()
}

/// `[a, c, b, d] → [a, b, c, d]`: undoes the permutation that turns adjacent pairs into halves.
fn swap_middle(t: &Tensor) -> DemoResult<Tensor> {
    let v = t.as_slice();
    Ok(Tensor::new(t.shape(), vec![v[0], v[2], v[1], v[3]])?)
}

// Relative position, q = [1,0,1,0] and k = [0,1,0,1] (orthogonal, q·k = 0):
//   R_m q has pairs (cos mθ, sin mθ); R_n k has pairs (−sin nθ, cos nθ)
//   (R_m q)·(R_n k) = Σ_i (−cos mθ_i·sin nθ_i + sin mθ_i·cos nθ_i) = Σ_i sin((m − n)θ_i)
//   m − n = 2:  sin 2 + sin 0.2 = 0.909297 + 0.198669 = 1.107967 for (3,1), (5,3) and (7,5)
//   m − n = −2: −1.107967 (the direction matters); m = n: 0, as without rotation.
/// `(R_m q)·(R_n k)` through the tape: rotate both, then `[1, d_h] · [d_h, 1]`.
fn rotated_dot(rope: &RotaryEmbedding, q: &[f64], m: usize, k: &[f64], n: usize) -> DemoResult<f64> {
    let rq = rope.rotate(&constant(&[1, q.len()], q)?, m)?;
    let rk = rope.rotate(&constant(&[1, k.len()], k)?, n)?;
    Ok(rq.matmul(&rk.transpose(0, 1)?)?.value()?.as_slice()[0])
}

/// Random `q, k`; for every `(m, n)` and every shift `s ≥ 1` with `m + s, n + s` in capacity,
/// compares `(R_m q)·(R_n k)` with `(R_{m+s} q)·(R_{n+s} k)`. Returns (comparisons, all within 1e-12).
fn shift_sweep(rope: &RotaryEmbedding, rng: &mut SplitMix64) -> DemoResult<(usize, bool)> {
    let q: Vec<f64> = (0..HEAD_WIDTH).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let k: Vec<f64> = (0..HEAD_WIDTH).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let (mut comparisons, mut invariant) = (0, true);
    for m in 0..CAPACITY {
        for n in 0..CAPACITY {
            let reference = rotated_dot(rope, &q, m, &k, n)?;
            for s in 1..CAPACITY - m.max(n) {
                let shifted = rotated_dot(rope, &q, m + s, &k, n + s)?;
                invariant &= (shifted - reference).abs() <= 1e-12;
                comparisons += 1;
            }
        }
    }
    Ok((comparisons, invariant))
}

/// Central differences (δ = 1e-6, ε = 8e-6) of `rotate` at offset 2 on a random `x [2, 3, 4]`
/// (both layouts are checked on the same draw).
fn check_rotate(rope: &RotaryEmbedding, rng: &mut SplitMix64) -> DemoResult<GradcheckReport> {
    let x = Tensor::uniform(&[2, 3, HEAD_WIDTH], -1.0, 1.0, rng)?;
    let config = GradcheckConfig { delta: 1e-6, tolerance: 8e-6, ..GradcheckConfig::default() };
    let rotate = |v: &[TensorValue]| -> Result<TensorValue, RopeError> { rope.rotate(&v[0], 2) };
    Ok(gradcheck(&[("x", x)], &config, rotate)?)
}

/// Configurations that cannot build tables, and position intervals the tables do not cover.
fn error_cases(rope: &RotaryEmbedding) -> DemoResult<Vec<(&'static str, String)>> {
    let four_tokens = constant(&[4, HEAD_WIDTH], &[0.0; 4 * HEAD_WIDTH])?;
    let wrong_width = constant(&[1, 6], &[0.0; 6])?;
    Ok(vec![
        rejection("zero_width", RotaryEmbedding::new(0, CAPACITY, BASE))?,
        rejection("odd_width", RotaryEmbedding::new(3, CAPACITY, BASE))?,
        rejection("zero_capacity", RotaryEmbedding::new(HEAD_WIDTH, 0, BASE))?,
        rejection("zero_base", RotaryEmbedding::new(HEAD_WIDTH, CAPACITY, 0.0))?,
        rejection("nan_base", RotaryEmbedding::new(HEAD_WIDTH, CAPACITY, f64::NAN))?,
        rejection("past_capacity", rope.rotate(&four_tokens, 6))?,
        rejection("offset_overflow", rope.rotate(&four_tokens, usize::MAX))?,
        rejection("explicit_position", rope.rotate_at(&four_tokens, &[0, 1, 2, CAPACITY]))?,
        rejection("input_width", rope.rotate(&wrong_width, 0))?,
    ])
}

/// `name:coordinates failures passed` for each layout's gradient check.
fn fmt_gradcheck(name: &str, report: &GradcheckReport) -> String {
    format!(
        "gradcheck_{name}=delta:1e-6 tolerance:8e-6 offset:2 coordinates:{} failures:{} passed:{}",
        report.coordinates(),
        report.failures(),
        report.passed()
    )
}

/// The report, one `key=value` line each, ending with a newline.
pub fn render_report(evidence: &Evidence) -> String {
    let e = evidence;
    let dots: Vec<String> = e.relative_dots.iter().map(|(m, n, d)| format!("({m},{n}):{}", fmt_f64(*d))).collect();
    let mut lines = vec![
        "chapter=29-rotary-position-embedding".to_string(),
        "prediction=position 0 leaves a vector unchanged; every rotated row keeps the norm \
         sqrt(30); q.k after rotation depends only on the distance m-n (equal for (3,1), (5,3), \
         (7,5), opposite sign for (1,3)); the two pair layouts give different vectors but are \
         the same rotation after permuting coordinates"
            .to_string(),
        format!(
            "config=head_width:{HEAD_WIDTH} capacity:{CAPACITY} base:{BASE} layout:adjacent_pairs \
             vector:{} query:{} key:{} seed:{SEED}",
            fmt_values(&VECTOR),
            fmt_values(&QUERY),
            fmt_values(&KEY)
        ),
        format!("thetas={}", fmt_values(&e.thetas)),
        format!("angles={}", fmt_tensor(&e.angles)),
        format!("unit_rotations={}", fmt_tensor(&e.unit_rotations)),
        format!("rotated_positions_0_to_3={}", fmt_tensor(&e.rotated)),
        format!("norms={}", fmt_values(&e.norms)),
        format!("norms_preserved_1e-12={}", e.norms_preserved),
        format!("relative_dots={}", dots.join(" ")),
        format!("shift_invariance_1e-12=comparisons:{} passed:{}", e.shift_comparisons, e.shift_invariant),
        format!("layout_adjacent_pairs={}", fmt_tensor(&e.adjacent)),
        format!("layout_split_halves={}", fmt_tensor(&e.split_halves)),
        format!("layouts_after_permutation={}", if e.layouts_agree_after_permutation { "bitwise" } else { "differs" }),
    ];
    lines.extend(e.gradchecks.iter().map(|(name, report)| fmt_gradcheck(name, report)));
    lines.extend(e.errors.iter().map(|(case, message)| format!("error_{case}={message}")));
    lines.push("next=30-multi-head-attention".to_string());
    lines.join("\n") + "\n"
}
