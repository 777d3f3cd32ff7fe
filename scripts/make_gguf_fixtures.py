#!/usr/bin/env python3
"""Writes the GGUF fixtures of `crates/llm-from-scratch/tests/gguf.rs` (and of the module docs).

Into `crates/llm-from-scratch/tests/fixtures/gguf/`:

- `dequantize.json`: for each type the Rust side dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
  Q4_K, Q6_K), random stored blocks (every bit random except the f16 scales, which are finite) and
  what the reference reader, `gguf.quants.dequantize`, computes from them in float32, as bit
  patterns. The Rust test compares every value bitwise.
- `tiny-llama.gguf`: a tiny random LLaMA written by `gguf.GGUFWriter` (vocabulary 48 with a token
  list, width 32, 2 layers, 4 query heads sharing 2 key/value heads of width 8, SwiGLU width 256,
  64 positions, an untied head) whose tensors use all eight types; a few extra metadata types too.
- `tiny-llama-tied.gguf`: another (1 layer, 2 heads sharing 1, width 16, tied embeddings, no token
  list: the vocabulary comes from the embedding's shape, alignment 64).

The logits these two models give are written by `scripts/reference_logits.py` (it needs torch).

Run once, from the repository root, and commit the output (CI never runs Python):

    pip install gguf numpy
    python3 scripts/make_gguf_fixtures.py

Tested with gguf 0.19.0 and numpy 2.4.6. The draws come from a fixed seed; the Rust tests only
need the files to agree with each other, not with a previous run.
"""

import json
import os

import numpy as np
from gguf import GGUFValueType, GGUFWriter, GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "llm-from-scratch", "tests", "fixtures", "gguf")
rng = np.random.default_rng(20261203)

# where the f16 fields of each block format are: (offset, scale of the random value)
F16_FIELDS = {
    T.Q8_0: [(0, 0.01)],
    T.Q4_0: [(0, 0.05)],
    T.Q4_1: [(0, 0.02), (2, 0.2)],
    T.Q4_K: [(0, 0.001), (2, 0.005)],
    T.Q6_K: [(208, 0.0005)],
}


def random_blocks(qtype, n_blocks, scale=1.0):
    """`n_blocks` stored blocks of `qtype`: random bytes, finite random f16 scales."""
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for offset, magnitude in F16_FIELDS.get(qtype, []):
        d = (rng.uniform(0.25, 1.0, n_blocks) * magnitude * scale).astype(np.float16)
        blocks[:, offset : offset + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def dequantize_fixture():
    """Random blocks of each type and the reference's float32 values, as hex of little-endian bytes."""
    entries = []
    for qtype, n_values in [
        (T.F32, 512),
        (T.F16, 512),
        (T.BF16, 512),
        (T.Q8_0, 512),
        (T.Q4_0, 512),
        (T.Q4_1, 512),
        (T.Q4_K, 1024),
        (T.Q6_K, 1024),
    ]:
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        blocks = random_blocks(qtype, n_values // block_size)
        if qtype == T.F32:
            # random bits are mostly huge or tiny: use ordinary values, plus the special ones
            values = rng.standard_normal(n_values).astype(np.float32)
            values[:6] = [0.0, -0.0, np.inf, -np.inf, 1e-45, -3.4e38]
            blocks = values.view(np.uint8).reshape(n_values, 4)
        # (the F16 and BF16 entries keep every random bit pattern: subnormals, ±inf and NaN too)
        reference = dequantize(blocks.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        assert reference.size == n_values, qtype.name
        entries.append(
            {
                "type": qtype.name,
                "id": int(qtype),
                "values": n_values,
                "blocks": blocks.tobytes().hex(),
                "f32": reference.astype("<f4").tobytes().hex(),
            }
        )
        print(f"dequantize.json: {qtype.name}: {n_values} values")
    with open(os.path.join(OUT, "dequantize.json"), "w") as f:
        json.dump({"source": "gguf.quants.dequantize (gguf 0.19.0)", "types": entries}, f, indent=1)
        f.write("\n")


def stored(qtype, rows, cols, std):
    """A `[rows, cols]` weight (PyTorch layout `[out, in]`) stored as `qtype`: `(array, raw_dtype)`."""
    if qtype in (T.Q4_K, T.Q6_K):
        # the gguf package cannot quantize k-quants: random blocks, scaled to about `std`
        per_row = cols // GGML_QUANT_SIZES[qtype][0]
        scale = std / {T.Q4_K: 0.06, T.Q6_K: 0.0625}[qtype]
        return random_blocks(qtype, rows * per_row, scale).reshape(rows, -1), qtype
    values = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
    if qtype == T.F32:
        return values, None
    if qtype == T.F16:
        return values.astype(np.float16), None
    return quantize(values, qtype), qtype


def gain(width):
    return (1.0 + 0.25 * rng.standard_normal(width)).astype(np.float32)


def write_model(path, c, types, tokens=None, alignment=None, extras=None):
    """A LLaMA GGUF of configuration `c` whose tensors are stored as `types` says."""
    d, v, f = c["d"], c["vocab"], c["ffn"]
    q, kv = c["heads"] * c["head_width"], c["kv_heads"] * c["head_width"]
    w = GGUFWriter(path, arch="llama")
    w.add_name(c["name"])
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_context_length(c["context"])
    w.add_embedding_length(d)
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(f)
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_dimension_count(c["head_width"])
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_types([1] * len(tokens))
        w.add_token_scores([-float(i) for i in range(len(tokens))])
    for key, value, vtype, sub in extras or []:
        w.add_key_value(key, value, vtype, sub_type=sub)
    weights = [("token_embd.weight", v, d, 1.0)]
    for i in range(c["layers"]):
        weights += [
            (f"blk.{i}.attn_q.weight", q, d, d**-0.5),
            (f"blk.{i}.attn_k.weight", kv, d, d**-0.5),
            (f"blk.{i}.attn_v.weight", kv, d, d**-0.5),
            (f"blk.{i}.attn_output.weight", d, q, q**-0.5),
            (f"blk.{i}.ffn_gate.weight", f, d, d**-0.5),
            (f"blk.{i}.ffn_up.weight", f, d, d**-0.5),
            (f"blk.{i}.ffn_down.weight", d, f, f**-0.5),
        ]
    if not c["tied"]:
        weights.append(("output.weight", v, d, d**-0.5))
    for name, rows, cols, std in weights:
        array, raw = stored(types[name], rows, cols, std)
        w.add_tensor(name, array, raw_dtype=raw)
    for i in range(c["layers"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", gain(d))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", gain(d))
    w.add_tensor("output_norm.weight", gain(d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{os.path.basename(path)}: {os.path.getsize(path)} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    dequantize_fixture()

    untied = {
        "name": "tiny-llama",
        "vocab": 48,
        "d": 32,
        "layers": 2,
        "heads": 4,
        "kv_heads": 2,
        "head_width": 8,
        "ffn": 256,
        "context": 64,
        "rope_base": 10000.0,
        "eps": 1e-5,
        "tied": False,
    }
    types = {
        "token_embd.weight": T.Q8_0,
        "output.weight": T.F16,
        "blk.0.attn_q.weight": T.Q4_0,
        "blk.0.attn_k.weight": T.Q4_1,
        "blk.0.attn_v.weight": T.Q8_0,
        "blk.0.attn_output.weight": T.F16,
        "blk.0.ffn_gate.weight": T.Q4_1,
        "blk.0.ffn_up.weight": T.Q4_0,
        "blk.0.ffn_down.weight": T.Q4_K,
        "blk.1.attn_q.weight": T.Q4_1,
        "blk.1.attn_k.weight": T.Q4_0,
        "blk.1.attn_v.weight": T.BF16,
        "blk.1.attn_output.weight": T.Q8_0,
        "blk.1.ffn_gate.weight": T.Q4_0,
        "blk.1.ffn_up.weight": T.Q8_0,
        "blk.1.ffn_down.weight": T.Q6_K,
    }
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(45)]
    extras = [
        ("fixture.bytes", [0, 1, 254, 255], GGUFValueType.ARRAY, GGUFValueType.UINT8),
        ("fixture.flag", True, GGUFValueType.BOOL, None),
        ("fixture.big", -(2**40), GGUFValueType.INT64, None),
        ("fixture.third", 1.0 / 3.0, GGUFValueType.FLOAT64, None),
        ("fixture.text", "ünïcödé ✓", GGUFValueType.STRING, None),
    ]
    write_model(os.path.join(OUT, "tiny-llama.gguf"), untied, types, tokens=tokens, extras=extras)

    tied = dict(untied, name="tiny-llama-tied", vocab=40, layers=1, heads=2, kv_heads=1, head_width=16, ffn=64)
    tied.update(context=16, rope_base=500000.0, eps=1e-6, tied=True)
    types = {
        "token_embd.weight": T.F16,
        "blk.0.attn_q.weight": T.Q8_0,
        "blk.0.attn_k.weight": T.F32,
        "blk.0.attn_v.weight": T.Q4_1,
        "blk.0.attn_output.weight": T.Q4_0,
        "blk.0.ffn_gate.weight": T.Q8_0,
        "blk.0.ffn_up.weight": T.BF16,
        "blk.0.ffn_down.weight": T.Q8_0,
    }
    write_model(os.path.join(OUT, "tiny-llama-tied.gguf"), tied, types, alignment=64)


if __name__ == "__main__":
    main()
