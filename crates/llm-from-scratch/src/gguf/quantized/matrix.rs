//! [`QuantizedMatrix`]: a weight kept as the file stores it — `out` rows of `in` values, in
//! blocks — and multiplied by rows without ever being written out in `f64`.

use std::ops::Range;
use std::sync::Arc;

use llm_kernels::gemm::{MatRef, SMALL_PRODUCT, ShapeError, StripeLayout, matmul, matmul_in_stripes, stripe_route};
use llm_kernels::quant::{self, BlockFormat, QuantRows};

use crate::gguf::{GgufError, TensorType, dequantize_into};

/// How the values are held.
#[derive(Clone, Debug)]
enum Storage {
    /// The file's blocks — `range` of the shared `bytes`, usually the whole file's, so that a
    /// model's matrices are the file itself — read by the kernels of [`llm_kernels::quant`], in
    /// their grouped layout (each run of 16 rows side by side: [`quant::group_rows`], a
    /// permutation of the stored bytes in place).
    Blocks(BlockFormat, Arc<Vec<u8>>, Range<usize>),
    /// Types those kernels do not read (F32, F16, BF16, Q4_K, Q6_K): dequantized once, rows as
    /// stored.
    Dense(Vec<f64>),
}

/// A weight `[out, in]` as a GGUF file stores it, for `y = x · Wᵀ`: `rows` = outputs, each
/// `cols` = inputs long.
///
/// [`QuantizedMatrix::row_times`] gives each output the same bits as the decoder's `f64` path
/// (the one-row product on the dequantized weight), and [`QuantizedMatrix::rows_times`] gives
/// a prefill's rows the same bits as the matrix product on it.
#[derive(Clone, Debug)]
pub struct QuantizedMatrix {
    name: String,
    tensor_type: TensorType,
    rows: usize,
    cols: usize,
    /// A lookup table (the embedding), which the decoder multiplies as stored, transposed.
    table: bool,
    storage: Storage,
}

/// The kernels' name for a type they read in blocks.
fn block_format(t: TensorType) -> Option<BlockFormat> {
    match t {
        TensorType::Q8_0 => Some(BlockFormat::Q8_0),
        TensorType::Q4_0 => Some(BlockFormat::Q4_0),
        TensorType::Q4_1 => Some(BlockFormat::Q4_1),
        _ => None,
    }
}

impl QuantizedMatrix {
    /// `rows` stored rows of `cols` values of type `t` in `bytes`, as a GGUF file stores a
    /// weight `[out, in]` (`rows` = outputs): [`llm_kernels::quant`]'s formats (Q8_0, Q4_0,
    /// Q4_1) are kept as blocks, the other types [`dequantize_into`] reads are dequantized.
    ///
    /// # Errors
    /// [`GgufError::UnsupportedTensorType`]; [`GgufError::TensorData`] when the bytes are not
    /// exactly those rows.
    pub fn from_stored(name: &str, t: TensorType, bytes: &[u8], shape: [usize; 2]) -> Result<Self, GgufError> {
        Self::new(name, t, bytes, shape, None)
    }

    /// The blocks at `range` of `file` (a whole GGUF file, shared by a model's matrices, its
    /// blocks already grouped by [`QuantizedMatrix::group_in_place`]): no copy. Types
    /// [`llm_kernels::quant`] does not read are dequantized, as [`QuantizedMatrix::from_stored`] does.
    ///
    /// # Errors
    /// As [`QuantizedMatrix::from_stored`]; [`GgufError::TensorData`] if `range` is not in `file`.
    pub(crate) fn shared(
        name: &str,
        t: TensorType,
        file: &Arc<Vec<u8>>,
        range: Range<usize>,
        [rows, cols]: [usize; 2],
    ) -> Result<Self, GgufError> {
        let bytes = file.get(range.clone()).ok_or_else(|| GgufError::TensorData {
            tensor: name.to_string(),
            offset: range.start as u64,
            size: range.len() as u64,
            reason: "outside the file".to_string(),
        })?;
        Self::held(name, t, bytes, [rows, cols], None, Some((file, range.clone())))
    }

    /// `rows` stored rows of `cols` values of type `t` in `bytes` (the file's layout), with the
    /// stored rows put in the order `order` gives (`order[r]` = the stored row that becomes row
    /// `r`), or as stored.
    ///
    /// # Errors
    /// [`GgufError::UnsupportedTensorType`], [`GgufError::TensorData`] when the bytes are not those rows.
    pub(crate) fn new(
        name: &str,
        t: TensorType,
        bytes: &[u8],
        [rows, cols]: [usize; 2],
        order: Option<&[usize]>,
    ) -> Result<Self, GgufError> {
        Self::held(name, t, bytes, [rows, cols], order, None)
    }

    /// [`QuantizedMatrix::new`]; blocks kept as `file[range]` (which `bytes` is) when `file` is given.
    fn held(
        name: &str,
        t: TensorType,
        bytes: &[u8],
        [rows, cols]: [usize; 2],
        order: Option<&[usize]>,
        file: Option<(&Arc<Vec<u8>>, Range<usize>)>,
    ) -> Result<Self, GgufError> {
        if !t.dequantizable() {
            return Err(GgufError::UnsupportedTensorType { tensor: name.to_string(), type_name: t.name() });
        }
        // the bytes must be exactly `rows` rows of `cols` values of the type
        let (per_block, block_bytes) = (t.block_values() as usize, t.block_bytes() as usize);
        let row_bytes = cols.is_multiple_of(per_block).then(|| (cols / per_block).checked_mul(block_bytes)).flatten();
        let fits = row_bytes.and_then(|r| rows.checked_mul(r)) == Some(bytes.len());
        let row_bytes = row_bytes.unwrap_or(0);
        let data_error = |reason: String| GgufError::TensorData {
            tensor: name.to_string(),
            offset: 0,
            size: bytes.len() as u64,
            reason,
        };
        if !fits {
            return Err(data_error(format!("does not hold {rows} rows of {cols} values")));
        }
        let stored = |r: usize| &bytes[order.map_or(r, |o| o[r]) * row_bytes..][..row_bytes];
        let storage = match block_format(t).filter(|_| cols % quant::BLOCK == 0) {
            Some(format) => {
                QuantRows::new(format, bytes, rows, cols).map_err(|e| data_error(e.to_string()))?;
                match (file, order) {
                    (Some((file, range)), None) => Storage::Blocks(format, Arc::clone(file), range),
                    _ => {
                        let mut held = Vec::with_capacity(bytes.len());
                        (0..rows).for_each(|r| held.extend_from_slice(stored(r)));
                        quant::group_rows(format, &mut held, rows, cols).map_err(|e| data_error(e.to_string()))?;
                        let range = 0..held.len();
                        Storage::Blocks(format, Arc::new(held), range)
                    }
                }
            }
            None => {
                let mut values = vec![0.0; rows * cols];
                for (r, row) in values.chunks_exact_mut(cols.max(1)).enumerate().take(rows) {
                    dequantize_into(name, t, stored(r), row)?;
                }
                Storage::Dense(values)
            }
        };
        Ok(Self { name: name.to_string(), tensor_type: t, rows, cols, table: false, storage })
    }

    /// Puts the stored rows of a weight `[rows, cols]` of type `t` in `bytes` into the grouped
    /// layout the product kernels read ([`quant::group_rows`]), in place, if `t` is one of their
    /// formats; bytes that are not those rows are left for [`QuantizedMatrix::shared`] to refuse.
    pub(crate) fn group_in_place(t: TensorType, bytes: &mut [u8], [rows, cols]: [usize; 2]) {
        if let Some(format) = block_format(t) {
            // an error leaves the bytes as they are
            let _ = quant::group_rows(format, bytes, rows, cols);
        }
    }

    /// The same matrix marked as a lookup table `[rows, cols]` (an embedding of `rows` tokens,
    /// also a tied head): [`QuantizedMatrix::rows_times`] then gives `x [t, cols]` times its
    /// `f64` values read transposed the bits of the decoder's product on its `f64` copy as
    /// stored (a table's products differ from a weight's only in which of `gemm-f64`'s routes a
    /// small one takes). Nothing is copied.
    pub fn into_table(self) -> Self {
        Self { table: true, ..self }
    }

    /// Outputs (stored rows).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inputs (values per stored row).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The bytes held: the file's blocks, or 8 per value of a dense one.
    pub fn bytes(&self) -> usize {
        match &self.storage {
            Storage::Blocks(_, _, range) => range.len(),
            Storage::Dense(values) => values.len() * 8,
        }
    }

    /// The blocks as the kernels read them.
    fn blocks(&self) -> Option<QuantRows<'_>> {
        match &self.storage {
            // `new` checked the view
            Storage::Blocks(format, bytes, range) => {
                QuantRows::grouped(*format, &bytes[range.clone()], self.rows, self.cols).ok()
            }
            Storage::Dense(_) => None,
        }
    }

    /// Stored row `r` in `f64` (an embedding lookup).
    ///
    /// # Errors
    /// [`GgufError::TensorData`] if `r` is not a row.
    pub fn row(&self, r: usize) -> Result<Vec<f64>, GgufError> {
        if r >= self.rows {
            return Err(self.error(format!("row {r} of {}", self.rows)));
        }
        self.dequantized(r..r + 1)
    }

    /// Stored rows `rows`, dequantized (row-major).
    fn dequantized(&self, rows: std::ops::Range<usize>) -> Result<Vec<f64>, GgufError> {
        match (&self.storage, self.blocks()) {
            (_, Some(blocks)) => {
                let mut out = vec![0.0; rows.len() * self.cols];
                quant::dequantize_rows(&blocks, rows, &mut out).map_err(|e| self.error(e.to_string()))?;
                Ok(out)
            }
            (Storage::Dense(values), None) => Ok(values[rows.start * self.cols..rows.end * self.cols].to_vec()),
            (Storage::Blocks(..), None) => Err(self.error("blocks that do not fit".to_string())),
        }
    }

    fn error(&self, reason: String) -> GgufError {
        GgufError::TensorData { tensor: self.name.clone(), offset: 0, size: self.bytes() as u64, reason }
    }

    /// `x · Wᵀ` for one row `x` of `cols` values: `rows` outputs, summed as the one-row product
    /// sums them (blocks of 64 inputs, then the blocks in order).
    ///
    /// # Errors
    /// [`GgufError::TensorData`] if `x` is not `cols` long.
    pub fn row_times(&self, x: &[f64]) -> Result<Vec<f64>, GgufError> {
        let mut out = vec![0.0; self.rows];
        self.row_times_into(x, &mut out)?;
        Ok(out)
    }

    fn row_times_into(&self, x: &[f64], out: &mut [f64]) -> Result<(), GgufError> {
        if self.rows * self.cols < SMALL_PRODUCT {
            // the plain loop the matrix product takes for a product this small
            let w = self.dequantized(0..self.rows)?;
            let lhs = MatRef::row_major(x, 1, x.len()).map_err(|e| self.error(e.to_string()))?;
            let rhs = MatRef::row_major(&w, self.rows, self.cols).map_err(|e| self.error(e.to_string()))?;
            return matmul(out, lhs, rhs.t(), false, false).map_err(|e| self.error(e.to_string()));
        }
        match (&self.storage, self.blocks()) {
            (_, Some(blocks)) => {
                quant::row_times_quantized(x, &blocks, out, true).map_err(|e| self.error(e.to_string()))
            }
            (Storage::Dense(values), None) => {
                let lhs = MatRef::row_major(x, 1, x.len()).map_err(|e| self.error(e.to_string()))?;
                let rhs = MatRef::row_major(values, self.rows, self.cols).map_err(|e| self.error(e.to_string()))?;
                matmul(out, lhs, rhs.t(), false, true).map_err(|e| self.error(e.to_string()))
            }
            (Storage::Blocks(..), None) => Err(self.error("blocks that do not fit".to_string())),
        }
    }

    /// [`QuantizedMatrix::row_times`] of one row by several matrices in one parallel pass (a
    /// token's query, key and value projections), each result bitwise equal to its own call.
    ///
    /// # Errors
    /// As [`QuantizedMatrix::row_times`].
    pub fn row_times_each(x: &[f64], matrices: &[&Self]) -> Result<Vec<Vec<f64>>, GgufError> {
        let mut outs: Vec<Vec<f64>> = matrices.iter().map(|m| vec![0.0; m.rows]).collect();
        let views: Vec<Option<QuantRows<'_>>> = matrices.iter().map(|m| m.blocks()).collect();
        let mut shared = Vec::new();
        for ((m, view), out) in matrices.iter().zip(&views).zip(outs.iter_mut()) {
            match view {
                Some(blocks) if m.rows * m.cols >= SMALL_PRODUCT => shared.push((blocks, out.as_mut_slice())),
                _ => m.row_times_into(x, out)?,
            }
        }
        quant::rows_times_quantized(x, &mut shared, true).map_err(|e| matrices[0].error(e.to_string()))?;
        Ok(outs)
    }

    /// `x · Wᵀ` for `t` rows `x [t, cols]` → `[t, rows]`: the matrix product on the weight in
    /// `f64`, made a stripe of outputs at a time ([`matmul_in_stripes`]: each stripe dequantized on
    /// the thread that multiplies it, while it is in that thread's cache), so the outputs are
    /// bitwise those of the decoder's product on its `f64` weight (an `[in, out]` matrix) or table
    /// (an embedding used as the head, `[out, in]` read transposed). A weight's stripes are made
    /// `[in, out]`; so are a table's kept in blocks, where the product runs in stripes, whose bits
    /// do not depend on the layout ([`StripeLayout`]). Made whole (fewer than two stripes of
    /// outputs), a table keeps the decoder's transposed view: there small products take another
    /// route of `gemm-f64`'s, whose bits depend on it. One row takes
    /// [`QuantizedMatrix::row_times`].
    ///
    /// # Errors
    /// [`GgufError::TensorData`] if `x` is not whole rows of `cols`, or if the output `[t, rows]`
    /// would pass [`crate::tensor::MAX_ELEMENTS`] (checked before it is allocated).
    pub fn rows_times(&self, x: &[f64]) -> Result<Vec<f64>, GgufError> {
        let t = x.len().checked_div(self.cols).unwrap_or(0);
        if t * self.cols != x.len() || t == 0 {
            return Err(self.error(format!("{} values are not rows of {}", x.len(), self.cols)));
        }
        if t == 1 {
            return self.row_times(x);
        }
        // the output's size comes from the caller's rows: held to the tensor ceiling first
        crate::tensor::dense::element_count("quantized rows times", &[t, self.rows])
            .map_err(|e| self.error(e.to_string()))?;
        let lhs = MatRef::row_major(x, t, self.cols).map_err(|e| self.error(e.to_string()))?;
        let layout = self.stripe_layout(t);
        let make =
            |rows: Range<usize>, panel: &mut [f64]| self.dequantize_stripe(rows, panel, layout).map_err(Failure::Gguf);
        matmul_in_stripes(lhs, self.rows, layout, make, true).map_err(|failure| match failure {
            Failure::Gguf(e) => e,
            Failure::Shape(e) => self.error(e.to_string()),
        })
    }

    /// The layout [`QuantizedMatrix::rows_times`] makes this matrix's right side in for `t` rows.
    ///
    /// A table in blocks has its stripes made `[in, out]` like a weight's, a group's sixteen
    /// outputs per input as the blocks hold them (row by row, a `Q8_0` table was made at 1.2 G
    /// values a second on a Zen 4 core, against 5.5); a dequantized one is copied as stored; and
    /// a table made whole keeps the decoder's transposed view. (`matmul_in_stripes` makes the
    /// right side whole exactly where `stripe_route` says `None`.)
    fn stripe_layout(&self, t: usize) -> StripeLayout {
        let whole = stripe_route(t, self.cols, self.rows, StripeLayout::InputsByOutputs).is_none();
        if self.table && (whole || matches!(self.storage, Storage::Dense(_))) {
            StripeLayout::OutputsByInputs
        } else {
            StripeLayout::InputsByOutputs
        }
    }

    /// The route [`QuantizedMatrix::rows_times`] takes for `t` rows
    /// ([`llm_kernels::gemm::stripe_route`] in the layout it makes the right side in): rows of
    /// two products that both take `Some(false)` have the same bits.
    pub(crate) fn route(&self, t: usize) -> Option<bool> {
        stripe_route(t, self.cols, self.rows, self.stripe_layout(t))
    }

    /// Stored rows `rows` dequantized into `out` on the calling thread, in `layout`: row-major
    /// (`[rows, cols]`, outputs by inputs) or transposed (`[cols, rows]`, inputs by outputs).
    fn dequantize_stripe(&self, rows: Range<usize>, out: &mut [f64], layout: StripeLayout) -> Result<(), GgufError> {
        let (n, cols) = (rows.len(), self.cols);
        let by_outputs = layout == StripeLayout::OutputsByInputs;
        match (&self.storage, self.blocks()) {
            (_, Some(blocks)) if by_outputs => quant::dequantize_rows(&blocks, rows, out),
            (_, Some(blocks)) => quant::dequantize_rows_transposed(&blocks, rows, out, false),
            (Storage::Dense(values), None) => {
                let stored = &values[rows.start * cols..rows.end * cols];
                if by_outputs {
                    out.copy_from_slice(stored);
                } else {
                    for (r, row) in stored.chunks_exact(cols.max(1)).enumerate() {
                        for (k, &value) in row.iter().enumerate() {
                            out[k * n + r] = value;
                        }
                    }
                }
                Ok(())
            }
            (Storage::Blocks(..), None) => return Err(self.error("blocks that do not fit".to_string())),
        }
        .map_err(|e| self.error(e.to_string()))
    }

    /// The plain twin of [`QuantizedMatrix::row_times`] (for a product of at least
    /// [`SMALL_PRODUCT`] multiply-adds): each stored row dequantized as [`dequantize_into`] does
    /// it, then `s = 0; s ← x·w + s` (fused) over each block of 64 inputs and the blocks' sums added in
    /// order — the sums the kernel arranges eight outputs at a time.
    ///
    /// # Errors
    /// As [`QuantizedMatrix::row_times`].
    pub fn row_times_plain(&self, x: &[f64]) -> Result<Vec<f64>, GgufError> {
        if x.len() != self.cols {
            return Err(self.error(format!("a row of {} values, not {}", x.len(), self.cols)));
        }
        let mut w = vec![0.0; self.cols];
        (0..self.rows)
            .map(|r| {
                match (&self.storage, self.blocks()) {
                    (_, Some(blocks)) => {
                        let stored = blocks.stored_row(r).map_err(|e| self.error(e.to_string()))?;
                        dequantize_into(&self.name, self.tensor_type, &stored, &mut w)?;
                    }
                    (Storage::Dense(values), None) => w.copy_from_slice(&values[r * self.cols..][..self.cols]),
                    (Storage::Blocks(..), None) => return Err(self.error("blocks that do not fit".to_string())),
                }
                let sums = x.chunks(64).zip(w.chunks(64)).map(|(a, w)| {
                    let mut s = 0.0;
                    for (a, w) in a.iter().zip(w) {
                        s = a.mul_add(*w, s);
                    }
                    s
                });
                Ok(sums.reduce(|total, s| total + s).unwrap_or(0.0))
            })
            .collect()
    }
}

/// What goes wrong in a stripe of [`QuantizedMatrix::rows_times`]: a stripe's blocks, or the
/// product's shapes.
enum Failure {
    Gguf(GgufError),
    Shape(ShapeError),
}

impl From<ShapeError> for Failure {
    fn from(e: ShapeError) -> Self {
        Self::Shape(e)
    }
}
