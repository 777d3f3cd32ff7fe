//! A GGUF LLaMA as a [`Decoder`]: every tensor mapped to its Hugging Face name, checked, then
//! dequantized straight into the decoder's parameters.
//!
//! ```text
//! GGUF name                dimensions (fastest first)   ours (names.rs)                     in memory
//! token_embd.weight        [d, V]                        model.embed_tokens.weight           [V, d]   as stored
//! blk.{i}.attn_norm.weight [d]                           ….input_layernorm.weight            [d]
//! blk.{i}.attn_q.weight    [d, H·d_h]                    ….self_attn.q_proj.weight           [d, H·d_h] transposed
//! blk.{i}.attn_k.weight    [d, G·d_h]                    ….self_attn.k_proj.weight           [d, G·d_h] transposed
//! blk.{i}.attn_v.weight    [d, G·d_h]                    ….self_attn.v_proj.weight           transposed
//! blk.{i}.attn_output.weight [H·d_h, d]                  ….self_attn.o_proj.weight           transposed
//! blk.{i}.ffn_norm.weight  [d]                           ….post_attention_layernorm.weight
//! blk.{i}.ffn_gate.weight  [d, f]                        ….mlp.gate_proj.weight              transposed
//! blk.{i}.ffn_up.weight    [d, f]                        ….mlp.up_proj.weight                transposed
//! blk.{i}.ffn_down.weight  [f, d]                        ….mlp.down_proj.weight              transposed
//! output_norm.weight       [d]                           model.norm.weight
//! output.weight            [d, V]                        lm_head.weight (absent: tied)       transposed
//! ```
//!
//! A weight applied as `x·Wᵀ` (PyTorch, ggml) has dimensions `[in, out]` in GGUF: `out` rows of
//! `in` values. This crate computes `y = x·W` with `W [in, out]`, so the dimensions read the same
//! and the values are transposed: stored row `r` becomes column `r`. The embedding is a lookup
//! table, `V` rows of `d`, used as stored.
//!
//! # The rows of W_Q and W_K
//!
//! llama.cpp rotates adjacent pairs `(2i, 2i+1)` of each head; Hugging Face checkpoints pair
//! `(i, i + d_h/2)`. Its converter therefore permutes the rows of W_Q and W_K within every head:
//! Hugging Face row `s·d_h/2 + i` (half `s` ∈ {0, 1}) is stored as row `2i + s`. Either loading
//! computes the same model:
//!
//! - [`GgufRope::AsStored`]: the rows as stored, RoPE on adjacent pairs;
//! - [`GgufRope::HuggingFace`]: the rows put back in Hugging Face order, RoPE on split halves
//!   (the weights then equal those of the original checkpoint).
//!
//! # Memory
//!
//! Before any tensor is dequantized, the configuration's parameter count is held against the
//! values the file holds (at most twice as many: the file cannot ask for more than a small
//! multiple of itself), and every tensor is checked (present, its dimensions, a type that can be
//! dequantized, nothing left over). Then each tensor is dequantized into its parameter (the pool's
//! threads taking tensors in turn), a transposed one [`ROWS_AT_ONCE`] rows at a time, so the f64
//! weights exist once.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::llama_config::{OUTPUT, TOKEN_EMBD, gguf_llama_config};
use super::{Gguf, GgufError, TensorInfo, dequantize_into};
use crate::autodiff::TensorValue;
use crate::error::Shape;
use crate::model::names::{BLOCK_TENSORS, EMBED_TOKENS, FINAL_NORM, LM_HEAD, block_prefix, block_shapes};
use crate::model::{Decoder, DecoderConfig, ModelError};
use crate::nn::{NamedParameter, NamedParameters};
use crate::tensor::Tensor;

/// Which row order W_Q and W_K are loaded in, and the RoPE layout that goes with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgufRope {
    /// The rows as the file stores them (llama.cpp's order), with
    /// [`crate::nn::RopeLayout::AdjacentPairs`].
    AsStored,
    /// The rows put back in the order of the Hugging Face checkpoint, with
    /// [`crate::nn::RopeLayout::SplitHalves`].
    HuggingFace,
}

/// The GGUF names of one block's tensors, after `blk.{i}.`, in the order of [`BLOCK_TENSORS`].
const GGUF_BLOCK_TENSORS: [&str; 9] = [
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
];

/// How a tensor's stored values become a parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Layout {
    /// As stored (a gain, the embedding table).
    AsStored,
    /// Stored rows become columns; with `Some(heads)`, the rows of each head are first put back
    /// in Hugging Face order.
    Transposed(Option<usize>),
}

/// One parameter: its GGUF name, its name and shape here, and how it is laid out.
pub(super) struct Placement {
    pub(super) gguf: String,
    pub(super) ours: String,
    pub(super) shape: Vec<usize>,
    pub(super) layout: Layout,
}

impl Placement {
    /// The dimensions the file must have (fastest first): our `[in, out]` for a transposed weight,
    /// our shape reversed otherwise.
    fn file_dims(&self) -> Vec<usize> {
        match self.layout {
            Layout::Transposed(_) => self.shape.clone(),
            Layout::AsStored => self.shape.iter().rev().copied().collect(),
        }
    }
}

/// Every parameter of `config`, in the order of [`crate::model::parameter_shapes`].
fn placements(config: &DecoderConfig, rope: GgufRope) -> Vec<Placement> {
    let (v, d) = (config.vocab_size, config.model_width);
    let place = |gguf: &str, ours: &str, shape: Vec<usize>, layout| Placement {
        gguf: gguf.to_string(),
        ours: ours.to_string(),
        shape,
        layout,
    };
    let mut list = vec![place(TOKEN_EMBD, EMBED_TOKENS, vec![v, d], Layout::AsStored)];
    for i in 0..config.layers {
        let names = GGUF_BLOCK_TENSORS.iter().zip(BLOCK_TENSORS);
        for ((gguf, ours), shape) in names.zip(block_shapes(config)) {
            let heads = match (*gguf, rope) {
                ("attn_q.weight", GgufRope::HuggingFace) => Some(config.query_heads),
                ("attn_k.weight", GgufRope::HuggingFace) => Some(config.kv_heads),
                _ => None,
            };
            let layout = if shape.len() == 2 { Layout::Transposed(heads) } else { Layout::AsStored };
            list.push(place(&format!("blk.{i}.{gguf}"), &format!("{}.{ours}", block_prefix(i)), shape, layout));
        }
    }
    list.push(place("output_norm.weight", FINAL_NORM, vec![d], Layout::AsStored));
    if !config.tie_embeddings {
        list.push(place(OUTPUT, LM_HEAD, vec![d, v], Layout::Transposed(None)));
    }
    list
}

/// Reads the GGUF LLaMA at `path` into a [`Decoder`], loading W_Q and W_K as `rope` says.
///
/// ```
/// use llm_from_scratch::gguf::{GgufRope, load_gguf_llama};
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gguf/tiny-llama.gguf");
/// let stored = load_gguf_llama(path, GgufRope::AsStored)?;
/// let hf = load_gguf_llama(path, GgufRope::HuggingFace)?;
/// let (a, b) = (stored.forward(&[1, 5, 9], [1, 3])?.value()?, hf.forward(&[1, 5, 9], [1, 3])?.value()?);
/// let gap = a.max_abs_diff(&b).ok_or("the shapes differ")?;
/// assert!(gap <= 1e-12 * b.as_slice().iter().fold(1.0f64, |m, x| m.max(x.abs())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`GgufError::Io`]; the errors of [`Gguf::parse`], [`gguf_llama_config`] and [`llama_from_gguf`].
pub fn load_gguf_llama(path: impl AsRef<Path>, rope: GgufRope) -> Result<Decoder, GgufError> {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).map_err(|e| GgufError::Io { path: path.display().to_string(), reason: e.to_string() })?;
    gguf_llama_from_bytes(&bytes, rope)
}

/// [`load_gguf_llama`] on the bytes of a GGUF file in memory.
///
/// # Errors
/// As [`load_gguf_llama`], without [`GgufError::Io`].
pub fn gguf_llama_from_bytes(bytes: &[u8], rope: GgufRope) -> Result<Decoder, GgufError> {
    llama_from_gguf(&Gguf::parse(bytes)?, rope)
}

/// The [`Decoder`] of a parsed GGUF LLaMA.
///
/// # Errors
/// [`GgufError::TooManyParameters`]; for each tensor in the order of
/// [`crate::model::parameter_shapes`]: [`GgufError::MissingTensor`], [`GgufError::TensorShape`],
/// [`GgufError::UnsupportedTensorType`]; then [`GgufError::UnexpectedTensor`] for the first
/// tensor of the file that is not used — all before anything is dequantized. The errors of
/// [`gguf_llama_config`].
pub fn llama_from_gguf(file: &Gguf<'_>, rope: GgufRope) -> Result<Decoder, GgufError> {
    let (config, plan, infos) = checked_plan(file, rope)?;
    // the tensors are independent, so the pool's threads dequantize them in any order; the
    // values are collected in the plan's order, and the first error in that order is returned.
    // After an error, tensors later in the plan are skipped (`None`): each skipped one comes
    // after a failed one, so the loop below returns before it meets one.
    let failed = AtomicUsize::new(usize::MAX);
    let values: Vec<Option<Result<Vec<f64>, GgufError>>> = plan
        .par_iter()
        .zip(infos)
        .enumerate()
        .map(|(i, (p, info))| {
            if i > failed.load(Ordering::Relaxed) {
                return None;
            }
            let values = match p.layout {
                Layout::AsStored => file.dequantize(&p.gguf),
                Layout::Transposed(heads) => transposed(file, info, heads),
            };
            if values.is_err() {
                failed.fetch_min(i, Ordering::Relaxed);
            }
            Some(values)
        })
        .collect();
    let mut list = Vec::with_capacity(plan.len());
    for (p, values) in plan.iter().zip(values) {
        // a skipped tensor follows a failed one, whose error was returned
        let Some(values) = values else { break };
        let tensor = Tensor::new(&p.shape, values?).map_err(ModelError::from)?;
        list.push(NamedParameter::new(p.ours.clone(), TensorValue::leaf(tensor, true)));
    }
    let params = NamedParameters::try_new(list).map_err(ModelError::from)?;
    Ok(Decoder::from_named(config, &params)?)
}

/// The configuration of `file`, every parameter's placement and its tensor, checked: the
/// parameter count against the values the file holds, each tensor (present, its dimensions, a
/// type that can be dequantized) and no tensor left over — before anything is dequantized.
pub(super) fn checked_plan<'f, 'a>(
    file: &'f Gguf<'a>,
    rope: GgufRope,
) -> Result<(DecoderConfig, Vec<Placement>, Vec<&'f TensorInfo<'a>>), GgufError> {
    let config = gguf_llama_config(file, rope)?;
    // tensors do not overlap in the file, so this sum is at most 8 per byte of it
    let held = file.tensors().iter().map(|t| t.values() as u64).fold(0u64, u64::saturating_add);
    let needed = config.parameter_count() as u64;
    if needed > held.saturating_mul(2) {
        return Err(GgufError::TooManyParameters { needed, held });
    }
    let plan = placements(&config, rope);
    let infos = plan.iter().map(|p| checked(file, p)).collect::<Result<Vec<_>, _>>()?;
    if let Some(extra) = file.tensors().iter().find(|t| !plan.iter().any(|p| p.gguf == t.name())) {
        return Err(GgufError::UnexpectedTensor { name: extra.name().to_string() });
    }
    Ok((config, plan, infos))
}

/// The tensor of `p`, present with the dimensions it needs and a type that can be dequantized.
fn checked<'f, 'a>(file: &'f Gguf<'a>, p: &Placement) -> Result<&'f TensorInfo<'a>, GgufError> {
    let info = file.tensor(&p.gguf)?;
    let expected = p.file_dims();
    if info.dims() != expected {
        return Err(GgufError::TensorShape {
            name: p.gguf.clone(),
            expected: Shape(expected),
            actual: Shape::from(info.dims()),
        });
    }
    if !info.tensor_type().dequantizable() {
        return Err(GgufError::UnsupportedTensorType { tensor: p.gguf.clone(), type_name: info.tensor_type().name() });
    }
    Ok(info)
}

/// The column that stored row `row` of W_Q or W_K becomes in Hugging Face order: within its
/// head of `head_width` rows, stored row `2i + s` is Hugging Face row `s·d_h/2 + i`.
pub(super) fn hugging_face_row(row: usize, head_width: usize) -> usize {
    let (head, within) = (row / head_width, row % head_width);
    let (i, s) = (within / 2, within % 2);
    head * head_width + s * (head_width / 2) + i
}

/// The weight `info` (dimensions `[in, out]`: `out` stored rows of `in` values) as our `[in, out]`
/// matrix: stored row `r` becomes column `r` (or its Hugging Face position among `heads` heads).
/// [`ROWS_AT_ONCE`] rows are dequantized at a time, so no second copy of the matrix is made.
fn transposed(file: &Gguf<'_>, info: &TensorInfo<'_>, heads: Option<usize>) -> Result<Vec<f64>, GgufError> {
    let (inputs, outputs) = (info.dims()[0], info.dims()[1]);
    let bytes = file.tensor_bytes(info.name())?;
    let row_bytes = bytes.len().checked_div(outputs).unwrap_or(0);
    let head_width = heads.and_then(|h| outputs.checked_div(h)).unwrap_or(0);
    let stored: Vec<&[u8]> = bytes.chunks_exact(row_bytes.max(1)).take(outputs).collect();
    let dequantize_row =
        |r: usize, values: &mut [f64]| dequantize_into(info.name(), info.tensor_type(), stored[r], values);
    let column = |r: usize| if head_width > 0 { hugging_face_row(r, head_width) } else { r };
    rows_as_columns([inputs, outputs], stored.len(), dequantize_row, column)
}

/// `W [inputs, outputs]` (zeros where no row lands) whose column `column(r)` is stored row `r`
/// for `r < rows`, each row's `inputs` values written by `dequantize_row`.
///
/// `column` must map `0..rows` into `0..outputs` (the caller's dimensions are checked against the
/// configuration, whose head count divides the outputs); with no inputs or no outputs there is
/// nothing to write.
fn rows_as_columns(
    [inputs, outputs]: [usize; 2],
    rows: usize,
    mut dequantize_row: impl FnMut(usize, &mut [f64]) -> Result<(), GgufError>,
    column: impl Fn(usize) -> usize,
) -> Result<Vec<f64>, GgufError> {
    let mut w = vec![0.0; inputs * outputs];
    if inputs == 0 || outputs == 0 {
        return Ok(w);
    }
    let mut block = vec![0.0; ROWS_AT_ONCE * inputs];
    for first in (0..rows).step_by(ROWS_AT_ONCE) {
        let these = first..rows.min(first + ROWS_AT_ONCE);
        for (r, values) in these.clone().zip(block.chunks_exact_mut(inputs)) {
            dequantize_row(r, values)?;
        }
        let columns: Vec<usize> = these.map(&column).collect();
        for (k, out) in w.chunks_exact_mut(outputs).enumerate() {
            for (i, &c) in columns.iter().enumerate() {
                out[c] = block[i * inputs + k];
            }
        }
    }
    Ok(w)
}

/// Stored rows [`transposed`] dequantizes before writing them as columns: each row of `W` then
/// receives this many neighbouring values at a time (in Hugging Face's order, two runs of half as
/// many, half a head apart), where one row at a time wrote one value per cache line, rows of `W`
/// apart.
const ROWS_AT_ONCE: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_columns_in_blocks_whatever_the_count_and_the_order() {
        // 37 and 36 outputs leave a partial last block; 36 in Hugging Face order, 3 heads of 12
        for (outputs, head_width) in [(37, 0), (36, 12), (16, 0), (1, 0)] {
            let (inputs, value) = (5, |r: usize, k: usize| (r * 100 + k) as f64 + 0.5);
            let column = |r: usize| if head_width > 0 { hugging_face_row(r, head_width) } else { r };
            let row = |r: usize, out: &mut [f64]| {
                out.iter_mut().enumerate().for_each(|(k, x)| *x = value(r, k));
                Ok(())
            };
            let w = rows_as_columns([inputs, outputs], outputs, row, column).unwrap();
            let mut expected = vec![0.0; inputs * outputs];
            for r in 0..outputs {
                for k in 0..inputs {
                    expected[k * outputs + column(r)] = value(r, k);
                }
            }
            assert_eq!(w, expected, "{outputs} outputs, heads of {head_width}");
        }
        // fewer stored rows than outputs: the columns no row reaches stay 0
        let ones = |_, out: &mut [f64]| {
            out.fill(1.0);
            Ok(())
        };
        let w = rows_as_columns([2, 20], 17, ones, |r| r).unwrap();
        assert_eq!(w.iter().filter(|&&x| x == 1.0).count(), 34);
        assert_eq!(w.iter().filter(|&&x| x == 0.0).count(), 6);
        // an error in a row stops the transposition with that error
        let failing = |r: usize, _: &mut [f64]| match r {
            18 => Err(GgufError::UnexpectedTensor { name: "row 18".into() }),
            _ => Ok(()),
        };
        let err = rows_as_columns([2, 20], 20, failing, |r| r).unwrap_err();
        assert_eq!(err, GgufError::UnexpectedTensor { name: "row 18".into() });
    }

    #[test]
    fn the_hugging_face_order_undoes_the_converters_permutation() {
        // d_h = 4: stored rows 0,1,2,3 of a head are Hugging Face rows 0,2,1,3 (pairs (0,2), (1,3))
        let order: Vec<usize> = (0..8).map(|r| hugging_face_row(r, 4)).collect();
        assert_eq!(order, [0, 2, 1, 3, 4, 6, 5, 7]);
        // the converter: Hugging Face row s·d_h/2 + i is stored at 2i + s (here d_h = 6)
        for (s, i) in [(0, 0), (0, 2), (1, 0), (1, 2)] {
            assert_eq!(hugging_face_row(2 * i + s, 6), s * 3 + i);
        }
    }
}
