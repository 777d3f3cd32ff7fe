//! Public entry points fed sizes that safe code may pass: a task size or a stride so large that a
//! product of it wraps around. None may read, or hand back, memory it has not written.

use llm_kernels::Target;
use llm_kernels::bands::Band;
use llm_kernels::gemm::{
    MAX_VALUES, MatRef, ShapeError, StripeLayout, matmul_in_stripes, matmul_new, row_times_matrices,
};
use llm_kernels::rows::{RowTasks, build_rows};
use llm_kernels::strips::{Dims, KeyValueGradients, Operands, QueryGradients, StripKernel};
use llm_kernels::visibility::Visibility;

#[test]
fn a_task_size_whose_blocks_would_wrap_still_writes_every_row() {
    // rows of 3 in tasks of ⌊2⁶⁴/3⌋ + 1 rows: 3 × that wraps to 2 values, which are not whole rows
    let rows_per_task = usize::MAX / 3 + 1;
    for parallel in [false, true] {
        let tasks = RowTasks { rows_per_task, parallel };
        let out = build_rows((6, 3), tasks, || (), |_, block| block.write_rows(|r, row| row.copy_from(&[r as f64; 3])));
        assert_eq!(out, [0.0, 0.0, 0.0, 1.0, 1.0, 1.0], "parallel: {parallel}");
    }
}

#[test]
fn strides_whose_products_wrap_read_nothing_out_of_bounds() {
    let (t, d) = (6, 4);
    let (q, k, v, g) = (vec![0.1; t * d], vec![0.2; t * d], vec![0.3; t * d], vec![0.4; t * d]);
    let (lse, delta) = (vec![0.0; t], vec![0.0; t]);
    // five rows of this stride apart wrap around to 4 values: a plain bounds test would pass
    let huge = usize::MAX / 5 + 1;
    let dims = Dims { b: 1, h: 1, g: 1, t_q: t, t_k: t, d, block: 64 };
    let operands =
        |v_stride, g_stride| Operands { q: &q, k: &k, v: &v, g: &g, lse: &lse, delta: &delta, v_stride, g_stride };
    for target in Target::available() {
        let kernel = StripKernel::new(target);
        // returning is the test: before the checks were made with checked arithmetic, both calls
        // read far past their slices and the process died
        let mut dq = vec![0.0; t * d];
        let vis = Visibility::default();
        kernel.query_gradients(QueryGradients { dq: &mut dq, lane: operands(huge, d), dims, b: 0, i0: 0, vis });
        let (mut dk, mut dv) = (vec![0.0; t * d], vec![0.0; t * d]);
        let heads = [operands(d, huge)];
        let (dk, dv) = (Band::whole(&mut dk, d), Band::whole(&mut dv, d));
        kernel.key_value_gradients(KeyValueGradients { dk, dv, heads: &heads, dims, b: 0, j0: 0, vis });
    }
}

#[test]
fn products_of_views_that_repeat_one_value_are_held_to_the_ceiling_before_allocating() {
    // a stride of 0 repeats one value: views of any size over one number are valid
    let one = [1.0];
    let repeated = |rows, cols| MatRef::new(&one, rows, cols, 0, 0).unwrap();
    // 2¹⁶ × 2¹⁶ = 2³² outputs, twice the ceiling: refused, where it allocated 32 GiB
    let err = matmul_new(repeated(1 << 16, 1), repeated(1, 1 << 16), false).unwrap_err();
    assert!(err.reason.contains("ceiling"), "{err}");
    // within the ceiling, the same views multiply
    assert_eq!(matmul_new(repeated(2, 1), repeated(1, 3), false).unwrap(), [1.0; 6]);
    // one row times matrices whose outputs together pass the ceiling
    let wide = repeated(1, MAX_VALUES / 2 + 1);
    assert!(row_times_matrices(&[2.0], &[wide, wide], false).is_err());
    assert!(row_times_matrices(&[2.0], &[repeated(1, usize::MAX / 4)], false).is_err());
    // stripes: the output (2 × 2³¹) and the right side's panel are checked before any panel is made
    let lhs = MatRef::row_major(&[1.0; 4], 2, 2).unwrap();
    let make = |_: std::ops::Range<usize>, _: &mut [f64]| -> Result<(), ShapeError> { panic!("nothing may be made") };
    assert!(matmul_in_stripes(lhs, MAX_VALUES, StripeLayout::InputsByOutputs, make, false).is_err());
}

#[test]
fn visibility_takes_empty_ranges_and_the_largest_positions() {
    use llm_kernels::visibility::Visibility;
    for window_keys in [None, Some(3)] {
        let vis = Visibility { query_offset: usize::MAX, window_keys, key_padding: None };
        // empty ranges, which subtracted one from zero: nothing to see, nothing to mask
        assert!(vis.block_hidden(0, 0, 0, 4) && vis.block_hidden(2, 5, 0, 0));
        assert!(vis.block_open(0, 0, 0, 4) && vis.block_open(2, 5, 3, 3));
        // positions past usize::MAX stay at it: every key 0..8 is in the past, and too old for a
        // window of 3
        assert_eq!(vis.sees(0, 8, 5, 7), window_keys.is_none());
        assert_eq!(vis.block_hidden(1, 4, 0, 8), window_keys.is_some());
    }
}

#[test]
fn strides_that_a_single_row_or_column_never_uses_may_be_anything() {
    // a view of one row never moves by its row stride, nor one of one column by its column
    // stride: `MatRef::new` takes any value there, also those past `isize::MAX` (which
    // `gemm-f64`'s signed strides cannot hold; a debug build checks every stride it is handed).
    // In these shapes no route looks at the unused stride, so each product is the plain view's
    let values: Vec<f64> = (0..64_000).map(|i| ((i * 37 % 101) as f64 - 50.0) / 8.0).collect();
    let huge = [usize::MAX, 1 << 63, isize::MAX as usize + 1, isize::MAX as usize];
    // (m, k, n): a small product, one row (the row paths), `gemm-f64`'s vector-vector and narrow
    // routes (k = 1), matrix times one column, a split one
    for (m, k, n) in [(1, 3, 2), (1, 600, 20), (64, 1, 100), (70, 1, 300), (100, 300, 1), (64, 1000, 1)] {
        let lhs = MatRef::row_major(&values[..m * k], m, k).unwrap();
        let rhs = MatRef::row_major(&values[..k * n], k, n).unwrap();
        // every layout the paths choose among: row-major, transposed storage, a strided right side
        let rhs_t: Vec<f64> = (0..k * n).map(|i| values[(i % k) * n + i / k]).collect();
        let rhs_by_columns = MatRef::new(&rhs_t, k, n, 1, k).unwrap();
        for right in [rhs, rhs_by_columns] {
            let want = matmul_new(lhs, right, false).unwrap();
            for stride in huge {
                let left = match (m, k) {
                    (1, _) => MatRef::new(&values[..k], 1, k, stride, 1).unwrap(),
                    (_, 1) => MatRef::new(&values[..m], m, 1, 1, stride).unwrap(),
                    _ => lhs,
                };
                let r = match (k, n) {
                    (1, _) => MatRef::new(&values[..n], 1, n, stride, 1).unwrap(),
                    (_, 1) => MatRef::new(&values[..k], k, 1, 1, stride).unwrap(),
                    _ => right,
                };
                for parallel in [false, true] {
                    let got = matmul_new(left, r, parallel).unwrap();
                    assert_eq!(got, want, "{m}×{k}·{k}×{n}, stride {stride}, parallel {parallel}");
                }
            }
        }
    }
    // one stored value repeated under a 1×4096 row: `gemm-f64` takes its one-chain path only
    // where a stride is 1, so an unused column stride of 5 gives what one of 0 gives (the general
    // route; cut to the storage's one value, it was 1 and gave other bits)
    let x: Vec<f64> = (0..4096).map(|i| (0.7 * i as f64).sin() * 10f64.powi(i % 9 - 4)).collect();
    let row_view = MatRef::row_major(&x, 1, 4096).unwrap();
    let repeated = |col_stride| MatRef::new(&[0.1], 4096, 1, 0, col_stride).unwrap();
    assert_eq!(matmul_new(row_view, repeated(5), false).unwrap(), matmul_new(row_view, repeated(0), false).unwrap());
    let row = &values[..600];
    let matrix = MatRef::new(&values[..600], 600, 1, 1, usize::MAX).unwrap();
    let plain = MatRef::row_major(&values[..600], 600, 1).unwrap();
    assert_eq!(row_times_matrices(row, &[matrix], true).unwrap(), row_times_matrices(row, &[plain], true).unwrap());
}

#[test]
fn key_gradients_with_no_query_head_are_zeros_written_into_unfilled_storage() {
    use llm_kernels::bands::Unfilled;
    use llm_kernels::strips::LaneGradients;
    let (t, d) = (5, 4);
    let dims = Dims { b: 1, h: 1, g: 1, t_q: t, t_k: t, d, block: 64 };
    let vis = Visibility::default();
    for target in Target::available() {
        let kernel = StripKernel::new(target);
        // a task with no heads: every row of dK and dV still written (zeros), else `finish` returns
        // an `Unwritten` error
        let (mut dk, mut dv) = (Unfilled::new(t * d), Unfilled::new(t * d));
        let (dk_band, dv_band) = (dk.column_bands(d, d).remove(0), dv.column_bands(d, d).remove(0));
        let task = LaneGradients { dq: &mut [], dk: dk_band, dv: dv_band, heads: &[], dims, b: 0, vis };
        kernel.lane_gradients(task);
        assert_eq!((dk.finish(), dv.finish()), (Ok(vec![0.0; t * d]), Ok(vec![0.0; t * d])), "{target:?}");
        let (mut dk, mut dv) = (Unfilled::new(t * d), Unfilled::new(t * d));
        let (dk_band, dv_band) = (dk.column_bands(d, d).remove(0), dv.column_bands(d, d).remove(0));
        kernel.key_value_gradients(KeyValueGradients { dk: dk_band, dv: dv_band, heads: &[], dims, b: 0, j0: 0, vis });
        assert_eq!((dk.finish(), dv.finish()), (Ok(vec![0.0; t * d]), Ok(vec![0.0; t * d])), "{target:?}");
    }
}
