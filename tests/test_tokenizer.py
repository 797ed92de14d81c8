"""The tokenizer: GGUF/HF conversion (builder), the runtime codec, chat templates.

The unmarked tests use small synthetic tokenizers and GGUF files. Tests marked ``models``
compare against transformers (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``) on the
Qwen2.5-Coder 0.5B GGUF (qwen2 pre-tokenizer) and SmolLM2-135M (llama arch, smollm pre-tokenizer).

transformers' GGUF converter has no entry for ``tokenizer.ggml.pre == "smollm"`` and falls back to
plain GPT-2 ``ByteLevel``; SmolLM2's own tokenizer.json (and llama.cpp) first split every digit
(``Digits(individual_digits=True)``). The two differ only on numerals such as ``" Ⅻ"``, so the
SmolLM2 reference gets its real pre-tokenizer put back before comparing.

trt-spec reads GGUF metadata with the stock ``gguf.GGUFReader`` (public API only). Loading the
151k-token Qwen vocabulary through transformers reads the GGUF again (~10-20 s on 2 cores); the
fixture lends transformers the tests' bulk reader (tests/gguf_bulk_reader.py) instead, which
``test_fast_reader_matches_stock_reader`` checks field by field against the stock one.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf_bulk_reader import fast_gguf_reader_class
from trt_spec.builder.gguf_reader import GGUFFile
from trt_spec.builder.tokenizer_convert import (
    special_tokens_from_gguf,
    tokenizer_json_from_gguf,
    tokenizer_json_from_hf,
)
from trt_spec.tokenizer import TextCodec, bytes_to_unicode

QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
SMOL = "smollm2-135m-instruct-q4_1"

EXTRA_TEXTS = [
    "",
    " ",
    "\n",
    "Hello, world!",
    "Café naïve résumé façade Ångström, and e\u0301 decomposed",
    "emoji 😀👋🏽 family 👨\u200d👩\u200d👧\u200d👦 flag 🇯🇵 math 𝔘𝔫𝔦",
    "你好，世界！这是一个测试。日本語のテキスト 한국어 텍스트 龘靐齉",
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया Привет мир",
    "a  b   c\t\td\n\n\ne    \n  \r\n end   ",
    "123 4567 89012 3.14159 1e-10 0x1F 1_000_000 ²½ Ⅻ ١٢٣ 二〇二四",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|><|endoftext|>",
    "<|im_start <|im_end| |> <tool_call>{}</tool_call> <|fim_prefix|>x<|fim_suffix|>",
    "I'M you're WE'VE they'd it's CAN'T",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE __dunder__",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // C++\n",
    "\u200b\u200d\x00\x7f\ufeff tab\there",
    "=" * 80 + "\n" + "-" * 33,
]

CODE_TEXTS = [
    'def add(a: int, b: int) -> int:\n    """Return a + b.\n\n    >>> add(2, 3)\n    5\n    """\n',
    "from typing import List\n\n\ndef has_close_elements(numbers: List[float]) -> bool:\n",
    "    return [x for x in xs if x % 2 == 0]\n",
    "class Node:\n    def __init__(self, val=None):\n        self.val, self.next = val, None\n",
    "import numpy as np\nx = np.arange(10).reshape(2, 5)\nprint(x.T @ x)\n",
]


def _prompts() -> list[str]:
    """The first 20 HumanEval prompts when they can be had, else a few code-like strings."""
    try:
        from trt_spec.models import humaneval_prompts

        return [p["prompt"] for p in humaneval_prompts(20)]
    except Exception:  # noqa: BLE001 - no data file: fall back to our own code strings
        return CODE_TEXTS


def _model_path(name: str) -> Path:
    try:
        from trt_spec.models import fetch_model

        return fetch_model(name)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"model {name} not available: {exc}")


def _load_reference(path: Path) -> Any:
    """transformers' tokenizer for a GGUF file (read with the bulk reader, see module doc)."""
    transformers = pytest.importorskip("transformers")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf, "GGUFReader", fast_gguf_reader_class())
        ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return ref


class Pair:
    """Our codec and transformers' tokenizer for one model."""

    def __init__(self, name: str) -> None:
        path = _model_path(name)
        self.name = name
        self.fields = GGUFFile(path).fields
        self.special = special_tokens_from_gguf(self.fields)
        self.codec = TextCodec(tokenizer_json_from_gguf(self.fields), self.special)
        self.ref = _load_reference(path)
        if self.fields.get("tokenizer.ggml.pre") == "smollm":
            from tokenizers import pre_tokenizers as pt

            self.ref.backend_tokenizer.pre_tokenizer = pt.Sequence(
                [pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False)]
            )


@pytest.fixture(scope="module", params=[QWEN, SMOL])
def pair(request: pytest.FixtureRequest) -> Pair:
    return Pair(request.param)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _prompts() + EXTRA_TEXTS


CONVERSATIONS = [
    [
        {"role": "system", "content": "You are a concise coding assistant."},
        {"role": "user", "content": "Write fib(n) in Python. Ünïcode: 日本 😀"},
        {"role": "assistant", "content": "def fib(n):\n    return n if n < 2 else n * fib(n-1)"},
    ],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}],
]


# ------------------------------------------------------------------------------------------------
# Real models against transformers


@pytest.mark.models
def test_encode_matches_transformers(pair: Pair, texts: list[str]) -> None:
    for text in texts:
        assert pair.codec.encode(text) == pair.ref(text)["input_ids"], text


@pytest.mark.models
def test_decode_round_trip(pair: Pair, texts: list[str]) -> None:
    for text in texts:
        ids = pair.codec.encode(text)
        assert pair.codec.decode(ids) == text
        assert pair.codec.decode(ids) == pair.ref.decode(ids)
    ids = pair.codec.encode("<|im_start|>user\nhi<|im_end|>")
    skipped = pair.ref.decode(ids, skip_special_tokens=True)
    assert pair.codec.decode(ids, skip_special=True) == skipped == "user\nhi"


@pytest.mark.models
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("gen", [True, False])
def test_chat_template_matches_transformers(pair: Pair, conv: int, gen: bool) -> None:
    messages = CONVERSATIONS[conv]
    if gen:
        messages = messages + [{"role": "user", "content": "Now in C, please."}]
    ours = pair.codec.apply_chat_template(messages, add_generation_prompt=gen)
    ref = pair.ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    assert ours == ref


@pytest.mark.models
def test_chat_template_with_tools(pair: Pair) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city (°C)",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    messages = [{"role": "user", "content": "Weather in Zürich?"}]
    ours = pair.codec.apply_chat_template(messages, tools=[tool])
    ref = pair.ref.apply_chat_template(
        messages, tools=[tool], tokenize=False, add_generation_prompt=True
    )
    assert ours == ref


@pytest.mark.models
def test_special_tokens(pair: Pair) -> None:
    codec, ref = pair.codec, pair.ref
    assert codec.vocab_size == len(ref) == len(pair.fields["tokenizer.ggml.tokens"])
    assert pair.special["bos_id"] == ref.bos_token_id
    assert pair.special["eos_id"] == ref.eos_token_id
    assert pair.special["pad_id"] == ref.pad_token_id
    assert pair.special["add_bos"] is False
    assert isinstance(pair.special["chat_template"], str)
    im_end, eot = codec.token_to_id("<|im_end|>"), codec.token_to_id("<|endoftext|>")
    assert im_end is not None and eot is not None
    assert {pair.special["eos_id"], im_end, eot} <= set(pair.special["eog_ids"])
    assert codec.token_to_id("<|im_start|>") not in pair.special["eog_ids"]
    assert codec.id_to_token(im_end) == "<|im_end|>"
    assert codec.encode("<|im_end|>") == [im_end]


@pytest.mark.models
def test_hf_folder(pair: Pair, texts: list[str], tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    pair.ref.save_pretrained(tmp_path)
    text, special = tokenizer_json_from_hf(tmp_path)
    codec = TextCodec(text, special)
    reloaded = AutoTokenizer.from_pretrained(str(tmp_path))
    for key in ("bos_id", "eos_id", "pad_id", "chat_template", "add_bos", "eog_ids"):
        assert special[key] == pair.special[key], key
    for sample in texts:
        assert codec.encode(sample) == pair.codec.encode(sample)
        # transformers rebuilds Qwen2Tokenizer with its class's NFC normalizer on reload, whatever
        # tokenizer.json says; we use tokenizer.json as-is, so compare on NFC text only.
        sample = unicodedata.normalize("NFC", sample)
        assert codec.encode(sample) == reloaded(sample)["input_ids"]
    messages = CONVERSATIONS[0]
    assert codec.apply_chat_template(messages) == reloaded.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    # Older layout: template inside tokenizer_config.json, BOS flag, generation_config EOS list.
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = (tmp_path / "chat_template.jinja").read_text()
    config["add_bos_token"] = True
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    text, special = tokenizer_json_from_hf(tmp_path)
    assert special["chat_template"] == pair.special["chat_template"]
    assert special["add_bos"] is True
    assert {7, 8} | set(pair.special["eog_ids"]) == set(special["eog_ids"])
    assert TextCodec(text, special).encode("x") == [special["bos_id"], *pair.codec.encode("x")]


# ------------------------------------------------------------------------------------------------
# Synthetic (no model files)


def _toy_fields(**overrides: object) -> dict[str, object]:
    """A byte-level BPE over the 256 byte tokens plus a few merges and special tokens."""

    tokens = [bytes_to_unicode()[b] for b in range(256)]
    merges = ["h e", "l l", "he ll", "Ġ w", "Ġw o", "o r", "Ġwo r", "Ġwor l", "Ġworl d", "1 2"]
    tokens += [m.replace(" ", "") for m in merges]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"]
    types = [1] * len(tokens) + [3, 3, 3, 4]
    fields: dict[str, object] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens + specials,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": len(tokens),
        "tokenizer.ggml.eos_token_id": len(tokens) + 2,
        "tokenizer.chat_template": "{% for m in messages %}{{ bos_token + m['content'] }}"
        "{% endfor %}{% if add_generation_prompt %}>{% endif %}",
    }
    fields.update(overrides)
    return fields


def test_toy_tokenizer() -> None:
    fields = _toy_fields()
    special = special_tokens_from_gguf(fields)
    n = len(fields["tokenizer.ggml.tokens"])  # type: ignore[arg-type]
    assert special["eog_ids"] == [n - 4, n - 2]  # <|endoftext|>, <|im_end|>; not <think>
    assert special["add_bos"] is False
    codec = TextCodec(tokenizer_json_from_gguf(fields), special)
    ids = codec.encode("hello world<|im_end|><think>12")
    assert codec.id_to_token(ids[0]) == "hell"
    assert codec.id_to_token(ids[2]) == "Ġworld"
    assert ids[3:5] == [n - 2, n - 1]
    assert codec.decode(ids) == "hello world<|im_end|><think>12"
    assert codec.decode(ids, skip_special=True) == "hello world<think>12"
    assert codec.vocab_size == n
    assert codec.apply_chat_template([{"role": "user", "content": "hi"}]) == "<|endoftext|>hi>"

    bos_fields = _toy_fields(**{"tokenizer.ggml.add_bos_token": True})
    bos_json = tokenizer_json_from_gguf(bos_fields)
    bos_codec = TextCodec(bos_json, special_tokens_from_gguf(bos_fields))
    assert bos_codec.encode("he") == [n - 4, codec.token_to_id("he")]
    assert bos_codec.encode("he", add_special=False) == [codec.token_to_id("he")]
    assert bos_codec.tokenizer.encode("he").ids == bos_codec.encode("he")  # post-processor too


def test_toy_errors() -> None:
    with pytest.raises(ValueError, match="pre-tokenizer"):
        tokenizer_json_from_gguf(_toy_fields(**{"tokenizer.ggml.pre": "no-such-regex"}))
    with pytest.raises(ValueError, match="gpt2"):
        tokenizer_json_from_gguf(_toy_fields(**{"tokenizer.ggml.model": "llama"}))
    codec = TextCodec(tokenizer_json_from_gguf(_toy_fields()), {})
    with pytest.raises(ValueError, match="chat template"):
        codec.apply_chat_template([{"role": "user", "content": "x"}])
    template = "{{ raise_exception('bad role') }}"
    codec = TextCodec(tokenizer_json_from_gguf(_toy_fields()), {"chat_template": template})
    with pytest.raises(Exception, match="bad role"):
        codec.apply_chat_template([{"role": "user", "content": "x"}])


def test_fast_reader_matches_stock_reader(tmp_path: Path) -> None:
    path = tmp_path / "toy.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("t.str", "héllo 😀")
    writer.add_uint32("t.u32", 7)
    writer.add_int32("t.i32", -3)
    writer.add_float32("t.f32", 0.5)
    writer.add_bool("t.bool", True)
    writer.add_uint64("t.u64", 2**40)
    writer.add_array("t.strs", ["x", "Ġy", "日本", "", "<|im_end|>"] * 50)
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.25, 1.5])
    writer.add_array("t.bools", [True, False, True])
    writer.add_tensor("w", np.arange(16, dtype=np.float32).reshape(4, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    stock, fast = gguf.GGUFReader(str(path)), fast_gguf_reader_class()(str(path))
    assert list(stock.fields) == list(fast.fields)
    for name, field in stock.fields.items():
        other = fast.fields[name]
        assert (field.types, field.data, field.offset) == (other.types, other.data, other.offset)
        assert field.contents() == other.contents(), name
        assert [p.tobytes() for p in field.parts] == [p.tobytes() for p in other.parts], name
    assert np.array_equal(stock.tensors[0].data, fast.tensors[0].data)
    ours = GGUFFile(path)
    meta = ours.fields
    assert meta["t.str"] == "héllo 😀" and meta["t.u64"] == 2**40 and meta["t.bool"] is True
    assert meta["t.strs"][:5] == ["x", "Ġy", "日本", "", "<|im_end|>"]
    assert meta["t.ints"] == [1, -2, 3] and meta["t.bools"] == [True, False, True]
    assert not any(key.startswith("GGUF.") for key in meta)
    # the builder's reader gives what the stock reader's contents() give, and the same tensors
    stock_fields = {k: f.contents() for k, f in stock.fields.items() if not k.startswith("GGUF.")}
    assert meta == stock_fields
    (t,) = ours.tensors
    assert t.name == "w" and t.tensor_type == stock.tensors[0].tensor_type
    assert list(t.shape) == stock.tensors[0].shape.tolist()
    assert np.array_equal(t.data, stock.tensors[0].data) and t.data.dtype == np.float32


def test_builder_gguf_reader_quantized_tensors_and_damage(tmp_path: Path) -> None:
    """Block-quantized tensors come out as the stock reader's byte rows (so gguf's dequantizers
    decode them), and a damaged file is a GGUFFormatError, never a crash."""
    from trt_spec.builder.gguf_reader import GGUFFormatError

    path = tmp_path / "q.gguf"
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(1000)])
    for qtype in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
        q = gguf.quants.quantize(w, qtype)
        writer.add_tensor(f"w_{qtype.name}", q, raw_shape=q.shape, raw_dtype=qtype)
    writer.add_tensor("h", w.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    stock, ours = gguf.GGUFReader(str(path)), GGUFFile(path)
    assert ours.fields["tokenizer.ggml.tokens"][999] == "t999"
    for a, b in zip(stock.tensors, ours.tensors, strict=True):
        assert (a.name, a.tensor_type) == (b.name, b.tensor_type)
        assert a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data), a.name
    deq = gguf.quants.dequantize(ours.tensors[0].data, ours.tensors[0].tensor_type)
    assert deq.shape == (8, 64) and np.abs(deq - w).max() < 0.05
    data = path.read_bytes()
    for cut in (3, 20, 60, len(data) // 3, len(data) - 16):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(GGUFFormatError):
            GGUFFile(bad)
    bad.write_bytes(b"GGUF" + (9).to_bytes(4, "little") + data[8:])
    with pytest.raises(GGUFFormatError, match="version 9"):
        GGUFFile(bad)
