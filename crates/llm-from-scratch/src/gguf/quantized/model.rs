//! [`QuantizedLlama`]: a GGUF LLaMA that generates from the file's blocks.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use rayon::prelude::*;

use super::QuantizedMatrix;
use crate::attention::{AttentionConfig, AttentionError, Branch, KvCache, attend_cached, merge_heads, split_heads_of};
use crate::autodiff::TensorValue;
use crate::error::{Shape, TensorAutodiffError};
use crate::gguf::llama::{GgufRope, Layout, checked_plan, hugging_face_row};
use crate::gguf::{Gguf, GgufError, TensorType};
use crate::model::{DecoderConfig, Generator, ModelError};
use crate::nn::RotaryEmbedding;
use crate::tensor::Tensor;

/// One block's weights: the two gains in `f64`, the seven matrices as the file stores them.
#[derive(Clone, Debug)]
struct Block {
    input_norm: Tensor,
    query: QuantizedMatrix,
    key: QuantizedMatrix,
    value: QuantizedMatrix,
    output: QuantizedMatrix,
    post_norm: Tensor,
    gate: QuantizedMatrix,
    up: QuantizedMatrix,
    down: QuantizedMatrix,
}

/// A GGUF LLaMA for generation that keeps its weights in the file's blocks: a `Q4_1` SmolLM2-135M
/// holds 98 MB instead of the 1.08 GB of a [`crate::model::Decoder`] in `f64`, and each decoded
/// token reads those 98 MB once.
///
/// Every step is the decoder's own — the same RMSNorm, RoPE, attention over a [`KvCache`],
/// SwiGLU and residual sums — and each product gives the bits of the `f64` one (see
/// [`QuantizedMatrix`]), so [`QuantizedLlama::forward_cached`] returns exactly the logits of
/// [`crate::model::Decoder::forward_cached`] on the weights [`crate::gguf::load_gguf_llama`] loads,
/// for one token or a whole prompt. It has no tape and cannot be trained; it generates through
/// [`Generator::generate_streaming`].
///
/// ```
/// use llm_from_scratch::gguf::{GgufRope, QuantizedLlama, load_gguf_llama};
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf");
/// let (quantized, dense) = (QuantizedLlama::load(path, GgufRope::AsStored)?, load_gguf_llama(path, GgufRope::AsStored)?);
/// let (mut a, mut b) = (quantized.new_caches(1), dense.new_caches(1));
/// for tokens in [&[1, 5, 9][..], &[4], &[7]] {
///     let shape = [1, tokens.len()];
///     let (x, y) = (quantized.forward_cached(tokens, shape, &mut a)?, dense.forward_cached(tokens, shape, &mut b)?);
///     assert_eq!(x, y); // the same bits
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct QuantizedLlama {
    config: DecoderConfig,
    attention: AttentionConfig,
    rope: RotaryEmbedding,
    embed: QuantizedMatrix,
    blocks: Vec<Block>,
    norm: Tensor,
    head: Option<QuantizedMatrix>,
}

impl QuantizedLlama {
    /// Reads the GGUF LLaMA at `path`, W_Q and W_K in the row order `rope` names.
    ///
    /// # Errors
    /// [`GgufError::Io`]; the errors of [`QuantizedLlama::from_bytes`].
    pub fn load(path: impl AsRef<Path>, rope: GgufRope) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| GgufError::Io { path: path.display().to_string(), reason: e.to_string() })?;
        Self::from_bytes(bytes, rope)
    }

    /// The model of the GGUF LLaMA whose file is `bytes`: the checks of
    /// [`crate::gguf::llama_from_gguf`], then the matrices kept where they are in `bytes`, which the
    /// model keeps (with [`GgufRope::HuggingFace`] the rows of W_Q and W_K are first put in that
    /// order, in place). The blocks of every matrix are then rearranged in place, each run of 16
    /// rows side by side and two such runs sharing each line ([`llm_kernels::quant::group_rows`]),
    /// so that decoding loads one input of 16 outputs at once (32 with AVX-512): the same bytes,
    /// no copy. Types the product kernels do not read — F32,
    /// F16, BF16, Q4_K, Q6_K — are dequantized once, and so are the gains.
    ///
    /// # Errors
    /// As [`crate::gguf::llama_from_gguf`].
    pub fn from_bytes(mut bytes: Vec<u8>, rope: GgufRope) -> Result<Self, GgufError> {
        /// A matrix of the plan: where its bytes are and how it is laid out.
        struct Item {
            name: String,
            t: TensorType,
            dims: [usize; 2],
            range: Range<usize>,
            heads: Option<usize>,
        }
        let (config, items, gains) = {
            let file = Gguf::parse(&bytes)?;
            let (config, plan, infos) = checked_plan(&file, rope)?;
            let (mut items, mut gains) = (Vec::new(), Vec::new());
            for (p, info) in plan.iter().zip(infos) {
                match (p.layout, info.dims()) {
                    (Layout::AsStored, &[_]) => {
                        let gain = Tensor::new(&p.shape, file.dequantize(info.name())?).map_err(ModelError::from)?;
                        gains.push(gain);
                    }
                    (layout, &[cols, rows]) => {
                        let heads = if let Layout::Transposed(heads) = layout { heads } else { None };
                        let (name, t, range) = (info.name().to_string(), info.tensor_type(), info.byte_range());
                        items.push(Item { name, t, dims: [rows, cols], range, heads });
                    }
                    _ => return Err(GgufError::MissingTensor { name: p.gguf.clone() }),
                }
            }
            (config, items, gains)
        };
        // stored row r of W_Q or W_K becomes row hugging_face_row(r) (only with GgufRope::HuggingFace)
        for item in &items {
            let ([rows, _], Some(heads)) = (item.dims, item.heads) else { continue };
            let row_bytes = item.range.len().checked_div(rows).unwrap_or(0);
            let stored = bytes[item.range.clone()].to_vec();
            for (r, row) in stored.chunks_exact(row_bytes.max(1)).take(rows).enumerate() {
                let at = item.range.start + hugging_face_row(r, rows / heads.max(1)) * row_bytes;
                bytes[at..at + row_bytes].copy_from_slice(row);
            }
        }
        // the product kernels' layout: each run of 16 rows side by side (in place; the rows of a
        // matrix that is not whole are refused below, by `QuantizedMatrix::shared`)
        for item in &items {
            if let Some(matrix) = bytes.get_mut(item.range.clone()) {
                QuantizedMatrix::group_in_place(item.t, matrix, item.dims);
            }
        }
        let attention = config.attention();
        let rope_table = attention.rope().map_err(ModelError::from)?;
        let file = Arc::new(bytes);
        let mut matrices = items.into_iter().map(|i| QuantizedMatrix::shared(&i.name, i.t, &file, i.range, i.dims));
        let mut gains = gains.into_iter();
        // the plan's order: embedding; per block two gains and seven matrices; the final gain; the head
        let missing = || GgufError::MissingTensor { name: "a tensor of the plan".to_string() };
        let embed = matrices.next().ok_or_else(missing)??.into_table();
        let mut blocks = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            let mut next = || matrices.next().ok_or_else(missing)?;
            let (query, key, value, output, gate, up, down) =
                (next()?, next()?, next()?, next()?, next()?, next()?, next()?);
            let (input_norm, post_norm) = (gains.next().ok_or_else(missing)?, gains.next().ok_or_else(missing)?);
            blocks.push(Block { input_norm, query, key, value, output, post_norm, gate, up, down });
        }
        let norm = gains.next().ok_or_else(missing)?;
        let head = matrices.next().transpose()?;
        Ok(Self { config, attention, rope: rope_table, embed, blocks, norm, head })
    }

    /// The model's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// The bytes of every weight held (blocks as stored, dense ones 8 per value).
    pub fn weight_bytes(&self) -> usize {
        let blocks = self.blocks.iter().map(|b| {
            [&b.query, &b.key, &b.value, &b.output, &b.gate, &b.up, &b.down].iter().map(|m| m.bytes()).sum::<usize>()
        });
        self.embed.bytes() + self.head.as_ref().map_or(0, QuantizedMatrix::bytes) + blocks.sum::<usize>()
    }

    /// One empty KV cache per layer for `batch` sequences.
    pub fn new_caches(&self, batch: usize) -> Vec<KvCache> {
        self.blocks.iter().map(|_| KvCache::for_config(&self.attention, batch)).collect()
    }

    /// Logits `[B, T, V]` for the next `T` tokens of each of `B` sequences after what `caches`
    /// hold, appending their keys and values: [`crate::model::Decoder::forward_cached`], read from
    /// the blocks. The pass runs on a worker of the current thread pool — the global one when it
    /// is called from another thread, such as a program's `main` — where each of its parallel
    /// regions starts without waking the calling thread ([`llm_kernels::parallel::on_pool`]).
    ///
    /// # Errors
    /// [`GgufError::Model`] with [`ModelError::CacheCount`]; [`ModelError::Attention`] for caches
    /// of another model or batch, or tokens past `max_positions` (checked before any cache
    /// changes); [`ModelError::TokenOutOfRange`]; [`ModelError::InvalidSetting`] for a shape that
    /// does not hold the tokens or caches at different positions; [`ModelError::Tensor`] when the
    /// logits `[B, T, V]` would pass [`crate::tensor::MAX_ELEMENTS`] (before anything is allocated).
    pub fn forward_cached(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, GgufError> {
        self.pass(tokens, shape, caches, Rows::All)
    }

    /// [`QuantizedLlama::forward_cached`] keeping only each sequence's last logits, `[B, 1, V]`,
    /// the only ones a generator reads after a prompt: the head (about a fifth of SmolLM2's
    /// products over a prompt) runs on those rows alone, and the logits of the others (100 MB for
    /// 256 tokens) are never made. The caches change as with [`QuantizedLlama::forward_cached`],
    /// and the logits are bitwise the last rows of its. One sequence of more than one token takes
    /// its last two rows, so that the head is a product of several rows (the one-row path sums in
    /// another order); and the head runs on the kept rows only where their product and the whole
    /// one both take `gemm-f64`'s general product in stripes ([`llm_kernels::gemm::stripe_route`]
    /// for the head's layout), as SmolLM2's does. A small model's head, a plain loop at a few
    /// rows, runs on every row and keeps the last.
    ///
    /// # Errors
    /// As [`QuantizedLlama::forward_cached`].
    pub fn forward_cached_last(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, GgufError> {
        self.pass(tokens, shape, caches, Rows::Last)
    }

    /// [`QuantizedLlama::forward_body`] on a worker of the pool, where each of the pass's parallel
    /// regions starts without waking the calling thread (see `llm_kernels::parallel::on_pool`).
    fn pass(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
        rows: Rows,
    ) -> Result<Tensor, GgufError> {
        llm_kernels::parallel::on_pool(|| {
            llm_kernels::parallel::with_workers_awake(|| self.forward_body(tokens, shape, caches, rows))
        })
    }

    fn forward_body(
        &self,
        tokens: &[usize],
        [b, t]: [usize; 2],
        caches: &mut [KvCache],
        rows: Rows,
    ) -> Result<Tensor, GgufError> {
        let (d, v) = (self.config.model_width, self.config.vocab_size);
        if caches.len() != self.blocks.len() {
            return Err(ModelError::CacheCount { expected: self.blocks.len(), actual: caches.len() }.into());
        }
        if b.checked_mul(t) != Some(tokens.len()) || tokens.is_empty() {
            let reason = "B·T must equal the number of tokens, and be at least 1";
            return Err(ModelError::setting("quantized llama", "shape", format!("{:?}", [b, t]), reason).into());
        }
        // the embedded rows and the logits are B·T·d and B·T·V values: within the tensor ceiling
        crate::tensor::dense::element_count("quantized llama logits", &[b, t, v.max(d)])?;
        if let Some((index, &id)) = tokens.iter().enumerate().find(|&(_, &id)| id >= v) {
            return Err(ModelError::TokenOutOfRange { what: "input token", index, id, vocab: v }.into());
        }
        let first = caches.first().map_or(0, KvCache::next_position);
        for cache in caches.iter() {
            cache.check_matches_config(&self.attention, b)?;
            if cache.next_position() != first {
                let positions = format!("{:?}", caches.iter().map(KvCache::next_position).collect::<Vec<_>>());
                let reason = "every layer's cache must be at the same position";
                return Err(ModelError::setting("quantized llama", "next positions", positions, reason).into());
            }
        }
        self.rope.check_interval(first, t).map_err(|e| AttentionError::from_rope(Branch::Query, e))?;
        let embed = |&id: &usize| self.embed.row(id);
        let mut x = Tensor::new(&[b, t, d], tokens.iter().map(embed).collect::<Result<Vec<_>, _>>()?.concat())?;
        for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
            x = self.block(block, x, cache, first)?;
        }
        let head = self.head.as_ref().unwrap_or(&self.embed);
        // each sequence's last row; one sequence takes its last two, so that the head is a product
        // of several rows. Only where those rows' product takes the whole product's route
        // (stripes of `gemm-f64`'s general product) are its rows bitwise the whole product's: a
        // small model's head is a plain loop at a few rows, so it computes every row's logits
        let kept_rows = if b == 1 { 2 } else { b };
        let same_route = |rows: usize| head.route(rows) == Some(false);
        let every_row = rows == Rows::All || t == 1 || v == 0;
        if every_row || !same_route(kept_rows) || !same_route(b * t) {
            let h = self.rms_norm(&TensorValue::leaf(x, false), &self.norm)?;
            let logits = head.rows_times(h.as_slice())?;
            if every_row {
                return Ok(Tensor::new(&[b, t, v], logits)?);
            }
            let last = logits.chunks(t * v).flat_map(|sequence| &sequence[(t - 1) * v..]).copied().collect();
            return Ok(Tensor::new(&[b, 1, v], last)?);
        }
        // the norm works row by row, so on these rows alone it gives the same values
        let from = t - kept_rows / b;
        let kept: Vec<f64> = x.as_slice().chunks(t * d).flat_map(|sequence| &sequence[from * d..]).copied().collect();
        let h = self.rms_norm(&TensorValue::leaf(Tensor::new(&[kept_rows, d], kept)?, false), &self.norm)?;
        let logits = head.rows_times(h.as_slice())?;
        let last =
            logits.chunks(v * kept_rows / b).flat_map(|sequence| &sequence[sequence.len() - v..]).copied().collect();
        Ok(Tensor::new(&[b, 1, v], last)?)
    }

    /// One block for the tokens `x [B, T, d]` at positions `first..`: attention through `cache`,
    /// then the feed-forward, each added to the residual stream.
    fn block(&self, w: &Block, x: Tensor, cache: &mut KvCache, first: usize) -> Result<Tensor, GgufError> {
        let c = &self.attention;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let x = TensorValue::leaf(x, false);
        let normed = self.rms_norm(&x, &w.input_norm)?;
        let [q, k, v] = products(normed.as_slice(), [&w.query, &w.key, &w.value])?;
        let positions: Vec<usize> = (first..first + t).collect();
        let projected = |values: Vec<f64>, n: usize| held(&[b, t, n * c.head_width], values);
        // split into heads and rotated in one pass, as the `f64` layer does (the same bits)
        let rotated = |values: Vec<f64>, n: usize, branch| -> Result<Tensor, GgufError> {
            let heads = self.rope.rotate_heads(&projected(values, n)?, n, &positions);
            Ok(heads.map_err(|e| AttentionError::from_rope(branch, e))?.value()?)
        };
        let q = rotated(q, c.query_heads, Branch::Query)?;
        let k = rotated(k, c.kv_heads, Branch::Key)?;
        let v = split_heads_of(&projected(v, c.kv_heads)?, c.kv_heads, Some(Branch::Value))?.value()?;
        let attended = attend_cached(c, None, cache, (&q, &k, &v), first)?; // [B,H,T,d_h]
        cache.append(&k, &v, first);
        let merged = merge_heads(&held(&[b, c.query_heads, t, c.head_width], attended)?)?.value()?;
        let out = w.output.rows_times(merged.as_slice())?;
        let h = x.add(&held(x.shape(), out)?)?;
        let normed = self.rms_norm(&h, &w.post_norm)?;
        let [gate, up] = products(normed.as_slice(), [&w.gate, &w.up])?;
        let hidden = gated(gate, &up)?;
        let fed = w.down.rows_times(&hidden)?;
        Ok(h.add(&held(h.shape(), fed)?)?.value()?)
    }

    /// The decoder's RMSNorm of `x` with `gain`: the model keeps its gains as plain tensors, so
    /// that it can be shared between threads (a [`TensorValue`] is a node of one thread's tape).
    fn rms_norm(&self, x: &TensorValue, gain: &Tensor) -> Result<Tensor, GgufError> {
        Ok(x.rms_norm(&TensorValue::leaf(gain.clone(), false), self.config.rms_eps)?.value()?)
    }
}

/// Which logits [`QuantizedLlama::forward_body`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rows {
    /// Every position's.
    All,
    /// Each sequence's last position's.
    Last,
}

impl Generator for QuantizedLlama {
    type Error = GgufError;

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_positions(&self) -> usize {
        self.config.max_positions
    }

    fn new_caches(&self, batch: usize) -> Vec<KvCache> {
        QuantizedLlama::new_caches(self, batch)
    }

    fn forward_cached(&self, tokens: &[usize], shape: [usize; 2], caches: &mut [KvCache]) -> Result<Tensor, GgufError> {
        QuantizedLlama::forward_cached(self, tokens, shape, caches)
    }

    fn forward_cached_last(
        &self,
        tokens: &[usize],
        shape: [usize; 2],
        caches: &mut [KvCache],
    ) -> Result<Tensor, GgufError> {
        QuantizedLlama::forward_cached_last(self, tokens, shape, caches)
    }

    /// The tokens through fresh caches (a prefill): the same logits as a full pass.
    fn forward_window(&self, window: &[usize]) -> Result<Tensor, GgufError> {
        QuantizedLlama::forward_cached(self, window, [1, window.len()], &mut self.new_caches(1))
    }
}

/// `values` as a constant of the pass (no gradient), moved rather than copied: a prefill's
/// projections are megabytes a layer.
fn held(shape: &[usize], values: Vec<f64>) -> crate::error::Result<TensorValue> {
    Ok(TensorValue::leaf(Tensor::new(shape, values)?, false))
}

/// Values per task of [`gated`]: one token's 1536 hidden values of SmolLM2-135M make two tasks,
/// one for each thread.
const GATED_VALUES_PER_TASK: usize = 768;

/// The feed-forward's gated hidden values `SiLU(gate) · up`, value by value in place of `gate`,
/// with the bits of the tape's `silu` and `mul` the `f64` decoder records (`(g · σ(g)) · u`), on
/// every thread (`llm_kernels::logistic::gated`: σ in the target's registers, its exponential
/// with the bits of the C library's on x86-64 Linux), each with the caller's kernel target.
fn gated(mut gate: Vec<f64>, up: &[f64]) -> Result<Vec<f64>, GgufError> {
    if gate.len() != up.len() {
        let (lhs, rhs) = (Shape::from(&[gate.len()][..]), Shape::from(&[up.len()][..]));
        let reason = "the gate and up projections must give the same number of values";
        return Err(TensorAutodiffError::ShapeMismatch { op: "quantized llama feed-forward", lhs, rhs, reason }.into());
    }
    let tasks = gate.par_chunks_mut(GATED_VALUES_PER_TASK).zip(up.par_chunks(GATED_VALUES_PER_TASK));
    let target = llm_kernels::active();
    tasks.for_each(|(gate, up)| target.within(|| llm_kernels::logistic::gated(gate, up)));
    Ok(gate)
}

/// The rows `x` times each matrix: one token's products share a parallel pass.
fn products<const N: usize>(x: &[f64], matrices: [&QuantizedMatrix; N]) -> Result<[Vec<f64>; N], GgufError> {
    let outs = if matrices.first().is_some_and(|m| x.len() == m.cols()) {
        QuantizedMatrix::row_times_each(x, &matrices)?
    } else {
        matrices.iter().map(|m| m.rows_times(x)).collect::<Result<Vec<_>, _>>()?
    };
    outs.try_into().map_err(|_| GgufError::MissingTensor { name: "a projection".to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gated_values_are_the_tapes_silu_times_up_bit_for_bit() {
        // long enough for several tasks, with values of both signs and a zero
        let n = 3 * GATED_VALUES_PER_TASK + 5;
        let gate: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 9.0).collect();
        let up: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos() * 3.0).collect();
        let tape = held(&[n], gate.clone()).unwrap().silu().unwrap().mul(&held(&[n], up.clone()).unwrap()).unwrap();
        let tape: Vec<u64> = tape.value().unwrap().as_slice().iter().map(|x| x.to_bits()).collect();
        let fused: Vec<u64> = gated(gate, &up).unwrap().iter().map(|x| x.to_bits()).collect();
        assert_eq!(fused, tape);
        let err = gated(vec![0.0; 3], &[0.0; 2]).unwrap_err();
        assert!(err.to_string().contains("shapes [3] and [2] are incompatible"), "{err}");
    }
}
