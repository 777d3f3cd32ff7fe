//! The fast matrix products against the naive reference, and their edge cases.

use super::*;

fn filled(len: usize, seed: u64) -> Vec<f64> {
    let mut rng = crate::nn::SplitMix64::new(seed);
    (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

#[test]
fn naive_kernel_on_a_hand_example() {
    // [1 2; 3 4] · [5 6; 7 8] = [1·5+2·7, 1·6+2·8; 3·5+4·7, 3·6+4·8] = [19 22; 43 50]
    let a = [1.0, 2.0, 3.0, 4.0];
    let b = [5.0, 6.0, 7.0, 8.0];
    let mut c = [0.0; 4];
    let (a, b) = (MatRef::row_major(&a, 2, 2).unwrap(), MatRef::row_major(&b, 2, 2).unwrap());
    matmul_naive(&mut c, a, b, false).unwrap();
    assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    // with the transposed view of b: [1 2; 3 4] · [5 7; 6 8] = [17 23; 39 53]
    matmul_naive(&mut c, a, b.t(), false).unwrap();
    assert_eq!(c, [17.0, 23.0, 39.0, 53.0]);
}

#[test]
fn fast_kernel_matches_naive_with_transposes_and_accumulation() {
    for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 64, 64), (70, 129, 31)] {
        let a = filled(m * k, 1);
        let b = filled(k * n, 2);
        let bt = filled(n * k, 3);
        for accumulate in [false, true] {
            let mut fast = filled(m * n, 4);
            let mut slow = fast.clone();
            let av = MatRef::row_major(&a, m, k).unwrap();
            let bv = MatRef::row_major(&b, k, n).unwrap();
            matmul(&mut fast, av, bv, accumulate, true).unwrap();
            matmul_naive(&mut slow, av, bv, accumulate).unwrap();
            for (f, s) in fast.iter().zip(&slow) {
                assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{m}x{k}x{n}: {f} vs {s}");
            }
            let btv = MatRef::row_major(&bt, n, k).unwrap().t();
            matmul(&mut fast, av, btv, false, true).unwrap();
            matmul_naive(&mut slow, av, btv, false).unwrap();
            for (f, s) in fast.iter().zip(&slow) {
                assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()));
            }
        }
    }
}

#[test]
fn fast_kernel_is_bitwise_independent_of_thread_count() {
    let (m, k, n) = (300, 257, 190);
    let a = filled(m * k, 5);
    let b = filled(k * n, 6);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut out = vec![0.0; m * n];
            let av = MatRef::row_major(&a, m, k).unwrap();
            let bv = MatRef::row_major(&b, k, n).unwrap();
            matmul(&mut out, av, bv, false, true).unwrap();
            out
        })
    };
    let one = run(1);
    let two = run(2);
    let four = run(4);
    assert!(one.iter().zip(&two).all(|(x, y)| x.to_bits() == y.to_bits()));
    assert!(one.iter().zip(&four).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn long_inner_products_split_their_rows_and_match_naive_on_any_thread_count() {
    // (m, k, n) with k ≥ 2·max(m, n): a weight gradient's shape; odd m splits unevenly, and
    // k > SPLIT_DEPTH runs in depth blocks (a shorter last one for 300 and 1030, one or two
    // deep for 257 and 258, where the crate takes its short-depth routine). The left
    // side is xᵀ, a transposed view as in `xᵀ·dy`, or a row-major one (row stride k).
    for &(m, k, n, transposed) in &[
        (64, 128, 64, true),
        (97, 300, 40, true),
        (80, 512, 150, true),
        (97, 300, 40, false),
        (64, 1030, 8, true),
        (64, 257, 8, true),
        (64, 258, 8, false),
    ] {
        assert!(llm_kernels::gemm::splits_rows(m, k, n));
        let x = filled(k * m, 11);
        let dy = filled(k * n, 12);
        let lhs =
            if transposed { MatRef::row_major(&x, k, m).unwrap().t() } else { MatRef::row_major(&x, m, k).unwrap() };
        let rhs = MatRef::row_major(&dy, k, n).unwrap();
        let scale = 0.375;
        for accumulate in [false, true] {
            let start = filled(m * n, 13);
            let mut product = vec![0.0; m * n];
            matmul_naive(&mut product, lhs, rhs, false).unwrap();
            let slow: Vec<f64> =
                start.iter().zip(&product).map(|(s, p)| if accumulate { s + scale * p } else { scale * p }).collect();
            let run = |threads: usize, parallel: bool| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    let mut out = start.clone();
                    matmul_scaled(&mut out, lhs, rhs, scale, accumulate, parallel).unwrap();
                    out
                })
            };
            let fast = run(2, true);
            for (f, s) in fast.iter().zip(&slow) {
                assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{m}x{k}x{n}: {f} vs {s}");
            }
            for other in [run(1, true), run(2, false)] {
                assert!(fast.iter().zip(&other).all(|(a, b)| a.to_bits() == b.to_bits()), "{m}x{k}x{n}");
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn fast_kernel_equals_the_naive_kernel(
        m in 1usize..40, k in 1usize..40, n in 1usize..40, seed in proptest::prelude::any::<u64>(),
        lhs_t in proptest::prelude::any::<bool>(), rhs_t in proptest::prelude::any::<bool>(),
        accumulate in proptest::prelude::any::<bool>(), scale in -2.0f64..2.0
    ) {
        let a = filled(m * k, seed);
        let b = filled(k * n, seed ^ 1);
        let av = if lhs_t { MatRef::row_major(&a, k, m).unwrap().t() } else { MatRef::row_major(&a, m, k).unwrap() };
        let bv = if rhs_t { MatRef::row_major(&b, n, k).unwrap().t() } else { MatRef::row_major(&b, k, n).unwrap() };
        let mut fast = filled(m * n, seed ^ 2);
        let mut slow = fast.clone();
        matmul_scaled(&mut fast, av, bv, scale, accumulate, true).unwrap();
        let mut product = vec![0.0; m * n];
        matmul_naive(&mut product, av, bv, false).unwrap();
        for (s, p) in slow.iter_mut().zip(&product) {
            *s = if accumulate { *s + scale * p } else { scale * p };
        }
        for (f, s) in fast.iter().zip(&slow) {
            proptest::prop_assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{} vs {}", f, s);
        }
    }
}

#[test]
fn one_row_times_a_matrix_equals_naive_and_ignores_the_thread_count() {
    // m = 1 with a row-major right side takes the streaming path (decoding one token)
    for &(k, n) in &[(300, 300), (512, 1000), (64, 129)] {
        let a = filled(k, 7);
        let b = filled(k * n, 8);
        let (av, bv) = (MatRef::row_major(&a, 1, k).unwrap(), MatRef::row_major(&b, k, n).unwrap());
        let mut slow = vec![0.0; n];
        matmul_naive(&mut slow, av, bv, false).unwrap();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                let mut out = filled(n, 9);
                matmul_scaled(&mut out, av, bv, 0.5, true, true).unwrap();
                out
            })
        };
        let (one, two) = (run(1), run(2));
        assert!(one.iter().zip(&two).all(|(x, y)| x.to_bits() == y.to_bits()));
        for ((got, start), want) in one.iter().zip(filled(n, 9)).zip(&slow) {
            assert!((got - (start + 0.5 * want)).abs() <= 1e-12 * (1.0 + want.abs()));
        }
    }
}

#[test]
fn several_matrices_in_one_pass_equal_one_product_each_bitwise() {
    let k = 300;
    let row = filled(k, 10);
    let shapes = [(k, 200), (k, 7), (k, 1000)];
    let data: Vec<Vec<f64>> = shapes.iter().enumerate().map(|(i, &(r, c))| filled(r * c, 11 + i as u64)).collect();
    let mut views: Vec<MatRef<'_>> =
        shapes.iter().zip(&data).map(|(&(r, c), d)| MatRef::row_major(d, r, c).unwrap()).collect();
    // a transposed view does not take the one-row path: it goes through `matmul` alone
    let t = filled(k * 9, 20);
    views.push(MatRef::row_major(&t, 9, k).unwrap().t());
    let lhs = MatRef::row_major(&row, 1, k).unwrap();
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let together = pool.install(|| row_times_matrices(&row, &views, true)).unwrap();
        for (got, &m) in together.iter().zip(&views) {
            let mut alone = vec![0.0; m.cols()];
            matmul(&mut alone, lhs, m, false, true).unwrap();
            assert!(got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
    let wrong = MatRef::row_major(&data[0], 200, 300).unwrap();
    assert!(row_times_matrices(&row, &[views[0], wrong], true).is_err());
}

/// `(m, k, n, transposed right side)` of a product down each path of the fast product: the small
/// loop, the one-row paths (plain and transposed), the fast kernel (plain and transposed), halves
/// of rows (an odd m; one depth block, then three), an empty depth, and empty outputs.
const EVERY_PATH: [(usize, usize, usize, bool); 10] = [
    (3, 4, 5, false),
    (1, 300, 200, false),
    (1, 300, 200, true),
    (70, 129, 31, false),
    (64, 40, 90, true),
    (65, 200, 30, false),
    (65, 600, 30, true),
    (6, 0, 4, false),
    (0, 5, 4, false),
    (4, 5, 0, false),
];

#[test]
fn a_new_product_equals_filling_zeros_bitwise_on_every_path() {
    for &(m, k, n, transposed) in &EVERY_PATH {
        let a = filled(m * k, 30);
        let b = filled(k * n, 31);
        let av = MatRef::row_major(&a, m, k).unwrap();
        let bv =
            if transposed { MatRef::row_major(&b, n, k).unwrap().t() } else { MatRef::row_major(&b, k, n).unwrap() };
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let (new, sequential, filled_in) = pool.install(|| {
                let mut zeros = vec![0.0; m * n];
                matmul(&mut zeros, av, bv, false, true).unwrap();
                (matmul_new(av, bv, true).unwrap(), matmul_new(av, bv, false).unwrap(), zeros)
            });
            assert_eq!(new.len(), m * n);
            assert!(new.iter().zip(&filled_in).all(|(x, y)| x.to_bits() == y.to_bits()), "{m}x{k}x{n}");
            assert!(new.iter().zip(&sequential).all(|(x, y)| x.to_bits() == y.to_bits()), "{m}x{k}x{n}");
        }
    }
    let a = [1.0; 6];
    assert!(matmul_new(MatRef::row_major(&a, 2, 3).unwrap(), MatRef::row_major(&a, 2, 3).unwrap(), true).is_err());
}

#[test]
fn a_batch_of_new_products_equals_each_product_alone_bitwise_on_every_path() {
    // three products of each shape with their own operands, on every kernel target, on one
    // thread and on two, in parallel and not
    for &(m, k, n, transposed) in &EVERY_PATH {
        let operands: Vec<(Vec<f64>, Vec<f64>)> =
            (0..3).map(|t| (filled(m * k, 40 + 2 * t), filled(k * n, 41 + 2 * t))).collect();
        let views: Vec<(MatRef<'_>, MatRef<'_>)> = operands
            .iter()
            .map(|(a, b)| {
                let bv = if transposed {
                    MatRef::row_major(b, n, k).unwrap().t()
                } else {
                    MatRef::row_major(b, k, n).unwrap()
                };
                (MatRef::row_major(a, m, k).unwrap(), bv)
            })
            .collect();
        for target in llm_kernels::target::Target::available() {
            let forced = |f: &dyn Fn() -> Vec<f64>| llm_kernels::target::with_target(target, f).unwrap();
            let want: Vec<u64> = forced(&|| {
                let mut want = Vec::new();
                for &(a, b) in &views {
                    let mut alone = vec![f64::NAN; m * n];
                    matmul(&mut alone, a, b, false, false).unwrap();
                    want.extend(alone);
                }
                want
            })
            .iter()
            .map(|v| v.to_bits())
            .collect();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                for parallel in [true, false] {
                    let got = pool.install(|| forced(&|| matmul_new_batch((m, n), &views, parallel).unwrap()));
                    let got: Vec<u64> = got.iter().map(|v| v.to_bits()).collect();
                    assert!(got == want, "{target} {m}x{k}x{n}, {threads} threads, parallel {parallel}");
                }
            }
        }
    }
}

#[test]
fn a_batch_of_products_of_different_depths_takes_each_ones_path() {
    // one output shape, depths that send the products down different paths in one batch: the
    // small loop, the fast kernel, the split halves, an empty depth
    let (m, n) = (65, 30);
    let operands: Vec<(Vec<f64>, Vec<f64>)> = [1, 129, 600, 0]
        .iter()
        .enumerate()
        .map(|(t, &k)| (filled(m * k, 60 + t as u64), filled(k * n, 70 + t as u64)))
        .collect();
    let views: Vec<(MatRef<'_>, MatRef<'_>)> = operands
        .iter()
        .map(|(a, b)| {
            let k = b.len() / n;
            (MatRef::row_major(a, m, k).unwrap(), MatRef::row_major(b, k, n).unwrap())
        })
        .collect();
    let mut want = Vec::new();
    for &(a, b) in &views {
        let mut alone = vec![f64::NAN; m * n];
        matmul(&mut alone, a, b, false, false).unwrap();
        want.extend(alone.iter().map(|v| v.to_bits()));
    }
    let got = matmul_new_batch((m, n), &views, true).unwrap();
    assert!(got.iter().map(|v| v.to_bits()).eq(want));
}

#[test]
fn a_batch_whose_products_do_not_fit_its_shape_is_an_error() {
    let (a, b) = (filled(6, 1), filled(12, 2));
    let (av, bv) = (MatRef::row_major(&a, 2, 3).unwrap(), MatRef::row_major(&b, 3, 4).unwrap());
    assert_eq!(matmul_new_batch((2, 4), &[(av, bv), (av, bv)], true).unwrap().len(), 16);
    assert!(matmul_new_batch((2, 4), &[], true).unwrap().is_empty());
    // an output of another shape, dimensions that do not chain, more values than the ceiling
    let wrong = MatRef::row_major(&b, 4, 3).unwrap();
    let shape_of = |r: Result<Vec<f64>>| match r {
        Err(TensorAutodiffError::ShapeMismatch { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    assert!(shape_of(matmul_new_batch((2, 4), &[(av, bv), (av, wrong)], true)).contains("output shape"));
    assert!(shape_of(matmul_new_batch((2, 3), &[(av, wrong)], true)).contains("lhs [m,k]"));
    assert!(shape_of(matmul_new_batch((1 << 20, 1 << 12), &[(av, bv)], true)).contains("ceiling"));
    assert!(shape_of(matmul_new_batch((usize::MAX, 2), &[(av, bv)], true)).contains("ceiling"));
}

#[test]
fn views_that_read_past_their_storage_are_rejected() {
    let data = [0.0; 5];
    assert!(MatRef::new(&data, 2, 3, 3, 1).is_err());
    assert!(MatRef::new(&data, 0, 3, 3, 1).is_ok());
    let a = [1.0; 6];
    let mut c = [0.0; 4];
    let av = MatRef::row_major(&a, 2, 3).unwrap();
    let err = matmul(&mut c, av, av, false, false).unwrap_err();
    assert!(err.to_string().contains("matmul kernel"));
}

#[test]
fn every_kernel_target_matches_naive_on_the_product_and_the_row_path() {
    // 96³ and 200×150·150×90 take gemm-f64 (the AVX2 micro-kernels where AVX2 is forced on an
    // AVX-512 processor), 1×300·300×130 the row path (its loop compiled per target)
    let mut row_results: Vec<Vec<u64>> = Vec::new();
    for target in llm_kernels::target::Target::available() {
        for &(m, k, n) in &[(96, 96, 96), (200, 150, 90), (1, 300, 130)] {
            let (a, b) = (filled(m * k, 11), filled(k * n, 12));
            let (av, bv) = (MatRef::row_major(&a, m, k).unwrap(), MatRef::row_major(&b, k, n).unwrap());
            let mut fast = vec![0.0; m * n];
            llm_kernels::target::with_target(target, || matmul(&mut fast, av, bv, false, true)).unwrap().unwrap();
            let mut slow = vec![0.0; m * n];
            matmul_naive(&mut slow, av, bv, false).unwrap();
            for (f, s) in fast.iter().zip(&slow) {
                assert!((f - s).abs() <= 1e-12 * (1.0 + s.abs()), "{target} {m}x{k}x{n}: {f} vs {s}");
            }
            if m == 1 {
                row_results.push(fast.iter().map(|x| x.to_bits()).collect());
            }
        }
    }
    // the row path performs the same operations on every target
    assert!(row_results.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn the_row_paths_sum_each_output_as_fused_multiply_adds_in_blocks_of_64() {
    // the order the quantized decoder repeats to give the f64 decoder's bits: within each block
    // of 64 inputs s = 0; s ← a·w + s rounded once, then the blocks' sums added in order
    let (k, n) = (300, 130);
    let (a, b) = (filled(k, 21), filled(k * n, 22));
    let chain = |w: &dyn Fn(usize, usize) -> f64| -> Vec<u64> {
        (0..n)
            .map(|j| {
                let blocks =
                    (0..k).step_by(64).map(|p0| (p0..(p0 + 64).min(k)).fold(0.0, |s, p| a[p].mul_add(w(p, j), s)));
                blocks.reduce(|total, s| total + s).unwrap_or(0.0).to_bits()
            })
            .collect()
    };
    let stored = chain(&|p, j| b[p * n + j]);
    let transposed = chain(&|p, j| b[j * k + p]);
    // the order is visible: the product and the sum rounded apart give other bits here
    let unfused: Vec<u64> = (0..n)
        .map(|j| {
            let blocks = (0..k).step_by(64).map(|p0| (p0..(p0 + 64).min(k)).fold(0.0, |s, p| s + a[p] * b[p * n + j]));
            blocks.reduce(|total, s| total + s).unwrap_or(0.0).to_bits()
        })
        .collect();
    assert_ne!(unfused, stored);
    let row = MatRef::row_major(&a, 1, k).unwrap();
    for target in llm_kernels::target::Target::available() {
        for (rhs, want, path) in [
            (MatRef::row_major(&b, k, n).unwrap(), &stored, "row path"),
            (MatRef::row_major(&b, n, k).unwrap().t(), &transposed, "transposed row path"),
        ] {
            let mut out = vec![0.0; n];
            llm_kernels::target::with_target(target, || matmul(&mut out, row, rhs, false, true)).unwrap().unwrap();
            let got: Vec<u64> = out.iter().map(|x| x.to_bits()).collect();
            assert_eq!(&got, want, "{target}, {path}");
        }
    }
}
