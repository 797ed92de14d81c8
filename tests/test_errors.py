"""Every bad input gets a clear Python exception (type and message), never a crash.

Covers damaged and foreign engine files (truncated, bit-flipped, wrong magic/version, header
offsets past the end, metadata that parses but makes no sense), bad builder inputs (unsupported
architectures and GGUF tensor types, malformed checkpoints, bad options, draft tokenizers that do
not match, a build that fails midway) and bad generation parameters. Everything runs in-process:
a segfault would take pytest down with it, which is itself a failure.

Engine files are edited with :func:`reserialise`, which writes the same tensor data with new JSON
metadata, a recomputed metadata checksum and a fresh 64-byte header (layout of
``cpp/runtime/engine_file.h``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny_models
from trt_spec import BuildError, Engine, EngineFileError, _core, build_engine
from trt_spec.build import builder as builder_mod

SEQ = 64  # max_seq_len of the engine under test
PROMPT = "def fibonacci(n):"
HEADER = struct.Struct("<8sIIQQQQQQ")
HEADER_FIELDS = (
    "magic",
    "version",
    "flags",
    "json_offset",
    "json_bytes",
    "data_offset",
    "data_bytes",
    "json_checksum",
    "reserved",
)
GGUF_Q = gguf.GGMLQuantizationType


# ---- engine-file helpers ----------------------------------------------------------------------
def parse_header(raw: bytes) -> dict:
    return dict(zip(HEADER_FIELDS, HEADER.unpack_from(raw, 0), strict=True))


def pack_header(h: dict) -> bytes:
    return HEADER.pack(*(h[k] for k in HEADER_FIELDS))


def read_metadata(raw: bytes) -> dict:
    h = parse_header(raw)
    return json.loads(raw[h["json_offset"] : h["json_offset"] + h["json_bytes"]])


def reserialise(raw: bytes, meta: dict | None = None, *, text: bytes | None = None) -> bytes:
    """The engine `raw` with its JSON replaced by `meta` (or raw `text`), checksum recomputed."""
    h = parse_header(raw)
    if text is None:
        text = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode()
    h["json_bytes"] = len(text)
    h["json_checksum"] = _core.checksum64(np.frombuffer(text, dtype=np.uint8))
    out = bytearray(raw[: h["json_offset"]]) + text
    out[: _core.ENGINE_HEADER_BYTES] = pack_header(h)
    return bytes(out)


def patched(raw: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(raw)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def flipped(raw: bytes, offset: int) -> bytes:
    b = bytearray(raw)
    b[offset] ^= 0x10
    return bytes(b)


@pytest.fixture(scope="module")
def engine_path(tiny) -> Path:
    path, _ = tiny.engine("qwen2", weights="f32", max_seq_len=SEQ)
    return path


@pytest.fixture(scope="module")
def raw(engine_path: Path) -> bytes:
    return engine_path.read_bytes()


@pytest.fixture(scope="module")
def meta(raw: bytes) -> dict:
    return read_metadata(raw)


@pytest.fixture(scope="module")
def engine(engine_path: Path) -> Engine:
    return Engine(engine_path, n_threads=2)


@pytest.fixture(scope="module")
def baseline(engine: Engine) -> list[int]:
    ids = engine.generate(PROMPT, max_new_tokens=8).token_ids
    assert len(ids) >= 1
    return ids


def _load(tmp_path: Path, data: bytes, **kw) -> Engine:
    p = tmp_path / "bad.engine"
    p.write_bytes(data)
    return Engine(p, **kw)


def test_helper_roundtrip_still_loads(tmp_path, raw, meta, baseline):
    """The re-serialiser itself is sound: unchanged metadata gives a working engine."""
    assert raw[:8] == _core.ENGINE_MAGIC
    e = _load(tmp_path, reserialise(raw, copy.deepcopy(meta)))
    assert e.generate(PROMPT, max_new_tokens=8).token_ids == baseline


# ---- damaged engine files ---------------------------------------------------------------------
def _cut_points(raw: bytes) -> dict[str, int]:
    h = parse_header(raw)
    return {
        "empty": 0,
        "inside-header": 10,
        "one-short-of-header": 63,
        "header-only": 64,
        "inside-data": h["data_offset"] + h["data_bytes"] // 2,
        "end-of-data": h["json_offset"],
        "inside-json": h["json_offset"] + h["json_bytes"] // 2,
        "last-byte-missing": len(raw) - 1,
    }


CUT_POINTS = [
    "empty",
    "inside-header",
    "one-short-of-header",
    "header-only",
    "inside-data",
    "end-of-data",
    "inside-json",
    "last-byte-missing",
]


@pytest.mark.parametrize("where", CUT_POINTS)
def test_truncated_file(tmp_path, raw, where):
    cut = _cut_points(raw)[where]
    msg = r"too small to be a trt-spec engine" if cut < 64 else r"truncated or corrupt"
    with pytest.raises(EngineFileError, match=msg):
        _load(tmp_path, raw[:cut])


def test_engine_file_error_is_value_error():
    assert issubclass(EngineFileError, ValueError)


def test_flipped_byte_in_tensor_data_names_the_tensor(tmp_path, raw, meta):
    h = parse_header(raw)
    name = "blk.1.ffn_down.weight"
    entry = meta["models"]["target"]["tensors"][name]
    bad = flipped(raw, h["data_offset"] + entry["offset"] + entry["bytes"] // 2)
    with pytest.raises(EngineFileError, match=rf"checksum mismatch in tensor target/{name}\b"):
        _load(tmp_path, bad)


def test_verify_false_skips_tensor_checksums(tmp_path, raw, meta):
    """Documented: ``verify=False`` does not read the tensor bytes, so a flipped bit loads."""
    assert "verify" in (Engine.__doc__ or "")
    h = parse_header(raw)
    entry = meta["models"]["target"]["tensors"]["blk.0.ffn_down.weight"]
    e = _load(tmp_path, flipped(raw, h["data_offset"] + entry["offset"] + 7), verify=False)
    r = e.generate(PROMPT, max_new_tokens=4)
    assert 1 <= len(r.token_ids) <= 4
    with pytest.raises(EngineFileError, match="checksum mismatch"):
        Engine(tmp_path / "bad.engine", verify=True)


def test_flipped_byte_in_metadata(tmp_path, raw):
    h = parse_header(raw)
    with pytest.raises(EngineFileError, match=r"metadata checksum mismatch"):
        _load(tmp_path, flipped(raw, h["json_offset"] + h["json_bytes"] // 3))


def test_flipped_metadata_checksum_in_header(tmp_path, raw):
    h = parse_header(raw)
    with pytest.raises(EngineFileError, match=r"metadata checksum mismatch"):
        _load(tmp_path, patched(raw, 48, "<Q", h["json_checksum"] ^ 1))


def test_wrong_magic(tmp_path, raw):
    bad = b"GGUF\x03\0\0\0" + raw[8:]
    with pytest.raises(EngineFileError, match=r"not a trt-spec engine \(wrong magic bytes\)"):
        _load(tmp_path, bad)


def test_future_format_version(tmp_path, raw):
    v = _core.ENGINE_FORMAT_VERSION + 1
    with pytest.raises(EngineFileError, match=rf"format version {v}\b.*rebuild the engine"):
        _load(tmp_path, patched(raw, 8, "<I", v))


def test_format_version_zero(tmp_path, raw):
    with pytest.raises(EngineFileError, match=r"format version 0\b"):
        _load(tmp_path, patched(raw, 8, "<I", 0))


@pytest.mark.parametrize(
    "field, value",
    [
        ("json_offset", "past-eof"),
        ("json_offset", 2**64 - 1),
        ("json_offset", 8),  # inside the header
        ("json_bytes", "past-eof"),
        ("json_bytes", 2**64 - 1),
        ("data_offset", "past-eof"),
        ("data_offset", 2**64 - 4096),
        ("data_offset", 4096 + 64),  # misaligned
        ("data_bytes", "past-eof"),
        ("data_bytes", 2**64 - 1),
        ("data_bytes", "overlap-json"),
    ],
)
def test_header_offsets_out_of_bounds(tmp_path, raw, field, value):
    h = parse_header(raw)
    if value == "past-eof":
        value = len(raw) + 4096
    elif value == "overlap-json":
        value = h["data_bytes"] + 4096
    h[field] = value
    bad = pack_header(h) + raw[64:]
    with pytest.raises(EngineFileError, match=r"truncated or corrupt|checksum mismatch"):
        _load(tmp_path, bad)


def test_empty_file(tmp_path):
    with pytest.raises(EngineFileError, match=r"too small to be a trt-spec engine \(0 bytes\)"):
        _load(tmp_path, b"")


def test_directory(tmp_path):
    with pytest.raises(EngineFileError, match=r"is not a regular file"):
        Engine(tmp_path)


def test_missing_path(tmp_path):
    missing = tmp_path / "nope" / "model.engine"
    with pytest.raises(EngineFileError, match=r"cannot open engine file .*No such file"):
        Engine(missing)


def test_foreign_file(tmp_path):
    with pytest.raises(EngineFileError, match=r"wrong magic bytes"):
        _load(tmp_path, b"hello, I am a text file and not an engine\n" * 10)


# ---- metadata that parses but is wrong ---------------------------------------------------------
def _target(m: dict) -> dict:
    return m["models"]["target"]


def _tensor(m: dict, name: str) -> dict:
    return _target(m)["tensors"][name]


MetaEdit = Callable[[dict], None]

META_CASES: list[tuple[str, MetaEdit, str]] = [
    (
        "arch-gpt2",
        lambda m: _target(m)["config"].update(arch="gpt2"),
        r"unsupported architecture 'gpt2'",
    ),
    (
        "tensor-type-q3",
        lambda m: _tensor(m, "blk.0.ffn_down.weight").update(type="q3"),
        r"unsupported tensor type 'q3'",
    ),
    (
        "shape-disagrees-with-bytes",
        lambda m: _tensor(m, "blk.0.ffn_down.weight").update(shape=[128, 128]),
        r"blk\.0\.ffn_down\.weight: byte size does not match its shape and type",
    ),
    (
        "missing-tensor",
        lambda m: _target(m)["tensors"].pop("blk.1.ffn_down.weight"),
        r"lacks tensor blk\.1\.ffn_down\.weight",
    ),
    (
        "rank-3-tensor",
        lambda m: _tensor(m, "output_norm.weight").update(shape=[1, 1, 128]),
        r"output_norm\.weight has rank 3",
    ),
    (
        "empty-shape",
        lambda m: _tensor(m, "output_norm.weight").update(shape=[0], bytes=0),
        r"output_norm\.weight has an empty shape",
    ),
    (
        "tensor-outside-data",
        lambda m: _tensor(m, "output_norm.weight").update(offset=2**40),
        r"tensor output_norm\.weight lies outside the data block",
    ),
    (
        "negative-offset",
        lambda m: _tensor(m, "output_norm.weight").update(offset=-64),
        r"tensor output_norm\.weight lies outside the data block",
    ),
    (
        "checksum-not-a-string",
        lambda m: _tensor(m, "output_norm.weight").update(checksum=5),
        r"checksum should be a string",
    ),
    (
        "checksum-not-hex",  # std::stoull's invalid_argument escapes as a bare ValueError
        lambda m: _tensor(m, "output_norm.weight").update(checksum="not-hex!"),
        r"output_norm\.weight.*checksum|checksum.*output_norm\.weight",
    ),
    (
        "checksum-too-long",  # std::stoull's out_of_range escapes as IndexError("stoull")
        lambda m: _tensor(m, "output_norm.weight").update(checksum="f" * 40),
        r"output_norm\.weight.*checksum|checksum.*output_norm\.weight",
    ),
    (
        "tensor-shape-vs-config",
        lambda m: _target(m)["config"].update(dim=64),
        r"tok_embd\.weight has shape \[384, 128\], expected \[384, 64\]",
    ),
    (
        "more-layers-than-tensors",
        lambda m: _target(m)["config"].update(n_layers=3),
        r"lacks tensor blk\.2\.",
    ),
    (
        "odd-head-dim",
        lambda m: _target(m)["config"].update(head_dim=33),
        r"inconsistent model shape",
    ),
    (
        "kv-heads-not-dividing",
        lambda m: _target(m)["config"].update(n_kv_heads=3),
        r"inconsistent model shape",
    ),
    ("no-config", lambda m: _target(m).pop("config"), r"missing \$\.models\.target\.config"),
    (
        "config-wrong-type",
        lambda m: _target(m)["config"].update(n_layers="2"),
        r"n_layers should be a number",
    ),
    (
        "no-target-model",
        lambda m: m["models"].update(draft=m["models"].pop("target")),
        r"holds no target model",
    ),
    ("no-models", lambda m: m.pop("models"), r"missing \$\.models"),
    ("no-build", lambda m: m.pop("build"), r"missing \$\.build"),
    (
        "max-seq-len-zero",
        lambda m: m["build"].update(max_seq_len=0),
        r"max_seq_len and max_batch must be positive",
    ),
    (
        "max-seq-len-fraction",
        lambda m: m["build"].update(max_seq_len=64.5),
        r"max_seq_len should be an integer",
    ),
    (
        "format-version-disagrees",
        lambda m: m.update(format_version=_core.ENGINE_FORMAT_VERSION + 1),
        r"format_version disagrees with the header",
    ),
    ("no-tokenizer", lambda m: m.pop("tokenizer"), r"tokenizer"),  # KeyError today
    (
        "tokenizer-json-garbage",  # tokenizers' bare Exception today
        lambda m: m["tokenizer"].update(json="{not a tokenizer"),
        r"tokenizer",
    ),
]


@pytest.mark.parametrize(
    "edit, pattern", [c[1:] for c in META_CASES], ids=[c[0] for c in META_CASES]
)
def test_semantically_wrong_metadata(tmp_path, raw, meta, edit, pattern):
    m = copy.deepcopy(meta)
    edit(m)
    with pytest.raises(EngineFileError, match=pattern):
        _load(tmp_path, reserialise(raw, m))


@pytest.mark.parametrize(
    "text, pattern",
    [
        (b"{not json", r"not valid JSON"),
        (b"", r"not valid JSON \(unexpected end"),
        (b"[1, 2]", r"\$ should be an object"),
        (b"[" * 200 + b"]" * 200, r"not valid JSON \(nesting too deep"),
        (b'{"format_version": 1} trailing', r"not valid JSON \(trailing characters"),
    ],
    ids=["garbage", "empty", "array", "deep-nesting", "trailing"],
)
def test_metadata_not_an_engine_document(tmp_path, raw, text, pattern):
    with pytest.raises(EngineFileError, match=pattern):
        _load(tmp_path, reserialise(raw, text=text))


def test_metadata_number_with_leading_zero(tmp_path, raw, meta):
    """RFC 8259 forbids ``01``; the C++ parser accepts it, then Python's json.loads refuses it
    (a JSONDecodeError, not EngineFileError)."""
    text = json.dumps(meta, separators=(",", ":")).encode()
    assert b'"max_batch":1' in text
    text = text.replace(b'"max_batch":1', b'"max_batch":01', 1)
    with pytest.raises(EngineFileError, match=r"not valid JSON"):
        _load(tmp_path, reserialise(raw, text=text))


# ---- builder ----------------------------------------------------------------------------------
def _write_gguf(path: Path, arch: str, tensors, kv: Callable | None = None) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    if kv is not None:
        kv(w)
    for name, arr, raw_dtype in tensors:
        if raw_dtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _copy_checkpoint(tiny, dst: Path) -> Path:
    folder, _ = tiny.checkpoint("qwen2")
    shutil.copytree(folder, dst)
    return dst


def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


def test_build_unsupported_hf_architecture(tiny, tmp_path):
    folder = _copy_checkpoint(tiny, tmp_path / "gpt2-hf")
    _edit_config(folder, model_type="gpt2")
    with pytest.raises(BuildError, match=r"unsupported architecture 'gpt2' \(supported: qwen2"):
        build_engine(folder, tmp_path / "x.engine", weights="f32")
    assert not (tmp_path / "x.engine").exists()


def test_build_unsupported_gguf_architecture(tmp_path):
    path = _write_gguf(
        tmp_path / "gpt2.gguf", "gpt2", [("token_embd.weight", np.zeros((4, 8), np.float32), None)]
    )
    with pytest.raises(BuildError, match=r"gpt2\.gguf: unsupported architecture 'gpt2'"):
        build_engine(path, tmp_path / "x.engine")


@pytest.mark.parametrize("qtype", [GGUF_Q.IQ2_XXS, GGUF_Q.Q8_1, GGUF_Q.IQ4_NL])
def test_build_unsupported_gguf_tensor_type(tmp_path, qtype):
    block, type_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw_bytes = np.zeros((2, type_bytes * (256 // block)), dtype=np.uint8)  # 2 x 256 weights
    path = _write_gguf(tmp_path / "q.gguf", "qwen2", [("token_embd.weight", raw_bytes, qtype)])
    with pytest.raises(
        BuildError, match=rf"tensor token_embd\.weight has type {qtype.name}, which trt-spec"
    ):
        build_engine(path, tmp_path / "x.engine")


def test_build_gguf_missing_metadata(tmp_path):
    path = _write_gguf(
        tmp_path / "bare.gguf", "qwen2", [("token_embd.weight", np.zeros((4, 8), np.float32), None)]
    )
    with pytest.raises(BuildError, match=r"GGUF metadata lacks qwen2\.embedding_length"):
        build_engine(path, tmp_path / "x.engine")


def test_build_missing_path(tmp_path):
    with pytest.raises(BuildError, match=r"no such file or folder"):
        build_engine(tmp_path / "does-not-exist", tmp_path / "x.engine")


def test_build_text_file(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("just some notes\n")
    with pytest.raises(BuildError, match=r"neither a GGUF file nor a Hugging Face model folder"):
        build_engine(p, tmp_path / "x.engine")


def test_build_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match=r"empty: no config\.json"):
        build_engine(tmp_path / "empty", tmp_path / "x.engine")


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"weights": "q3"}, r"unknown weight format 'q3' \(choose from f32, f16, bf16, q8, q4\)"),
        ({"weights": "Q4"}, r"unknown weight format 'Q4'"),
        ({"max_batch": 0}, r"max_batch must be in \[1, 64\], got 0"),
        ({"max_batch": -3}, r"max_batch must be in \[1, 64\], got -3"),
        ({"max_batch": 65}, r"max_batch must be in \[1, 64\], got 65"),
        ({"max_seq_len": 513}, r"max_seq_len must be in \[1, 512\] \(the target's context\)"),
        ({"max_seq_len": 0}, r"max_seq_len must be in \[1, 512\].*got 0"),
    ],
)
def test_build_bad_options(tiny, tmp_path, kwargs, pattern):
    folder, _ = tiny.checkpoint("qwen2")
    with pytest.raises(BuildError, match=pattern):
        build_engine(folder, tmp_path / "x.engine", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_build_output_is_a_folder_or_has_no_parent(tiny, tmp_path):
    folder, _ = tiny.checkpoint("qwen2")
    (tmp_path / "out").mkdir()
    with pytest.raises(BuildError, match=r"is a folder"):
        build_engine(folder, tmp_path / "out", weights="f32")
    with pytest.raises(BuildError, match=r"output folder .* does not exist"):
        build_engine(folder, tmp_path / "nowhere" / "x.engine", weights="f32")


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


MALFORMED_HF: list[tuple[str, Callable[[Path], None]]] = [
    ("config-not-json", lambda d: (d / "config.json").write_text("{oops")),
    ("config-missing-hidden-size", lambda d: _edit_config(d, hidden_size=None)),
    ("safetensors-truncated", lambda d: _truncate(d / "model.safetensors")),
    ("safetensors-garbage", lambda d: (d / "model.safetensors").write_bytes(b"\xff" * 64)),
    ("tokenizer-not-json", lambda d: (d / "tokenizer.json").write_text("{oops")),
]


@pytest.mark.parametrize("damage", [c[1] for c in MALFORMED_HF], ids=[c[0] for c in MALFORMED_HF])
def test_build_malformed_hf_checkpoint(tiny, tmp_path, damage):
    """A damaged checkpoint is a BuildError naming the checkpoint (not KeyError, OverflowError,
    SafetensorError or a bare JSONDecodeError), and leaves nothing behind."""
    folder = _copy_checkpoint(tiny, tmp_path / "broken-ckpt")
    damage(folder)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BuildError, match=r"broken-ckpt"):
        build_engine(folder, out / "x.engine", weights="f32", max_seq_len=SEQ)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("keep", [4, 24, 0.5])
def test_build_truncated_gguf(tmp_path, keep):
    """A cut-off GGUF is a BuildError (today gguf's reader raises IndexError/ValueError)."""
    path = _write_gguf(
        tmp_path / "cut.gguf",
        "qwen2",
        [("token_embd.weight", np.ones((4, 64), np.float32), None)],
        kv=lambda w: w.add_context_length(512),
    )
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    path.write_bytes(data[:n])
    with pytest.raises(BuildError, match=r"cut\.gguf"):
        build_engine(path, tmp_path / "x.engine")


def _vocab_by_id(folder: Path) -> list[str | None]:
    doc = json.loads((folder / "tokenizer.json").read_text())
    vocab = dict(doc["model"]["vocab"])
    vocab.update({t["content"]: t["id"] for t in doc.get("added_tokens", [])})
    out: list[str | None] = [None] * (max(vocab.values()) + 1)
    for s, i in vocab.items():
        out[i] = s
    return out


def test_build_draft_tokenizer_swapped_ids(tiny, tmp_path):
    target, _ = tiny.checkpoint("qwen2")
    draft = _copy_checkpoint(tiny, tmp_path / "draft")
    doc = json.loads((draft / "tokenizer.json").read_text())
    vocab = doc["model"]["vocab"]
    by_id = {i: s for s, i in vocab.items()}
    a, b = by_id[300], by_id[301]
    vocab[a], vocab[b] = 301, 300
    (draft / "tokenizer.json").write_text(json.dumps(doc))
    out = tmp_path / "pair.engine"
    pattern = (
        rf"tokenizers differ: token id 300 is {re.escape(repr(a))} in the target and "
        rf"{re.escape(repr(b))} in the draft"
    )
    with pytest.raises(BuildError, match=pattern):
        build_engine(target, out, draft=draft, weights="f32", max_seq_len=SEQ)
    assert not out.exists()


def test_build_draft_tokenizer_other_vocab(tiny, tmp_path):
    target, _ = tiny.checkpoint("qwen2")
    draft = _copy_checkpoint(tiny, tmp_path / "draft")
    tiny_models.make_tokenizer(draft, 300)
    a, b = _vocab_by_id(target), _vocab_by_id(draft)
    assert a != b
    first = next(
        i
        for i in range(max(len(a), len(b)))
        if (a[i] if i < len(a) else None) != (b[i] if i < len(b) else None)
    )
    with pytest.raises(BuildError, match=rf"tokenizers differ: token id {first} is "):
        build_engine(target, tmp_path / "pair.engine", draft=draft, weights="f32", max_seq_len=SEQ)


def test_build_draft_matching_tokenizer_is_accepted(tiny, tmp_path):
    """Control for the two tests above: the same tokenizer passes the check."""
    target, _ = tiny.checkpoint("qwen2")
    out = tmp_path / "pair.engine"
    report = build_engine(target, out, draft=target, weights="f32", max_seq_len=SEQ)
    assert set(report.models) == {"target", "draft"}
    assert Engine(out).has_draft


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "over-older-engine"])
def test_failed_build_leaves_no_partial_engine(tiny, tmp_path, monkeypatch, engine_path, existing):
    folder, _ = tiny.checkpoint("qwen2")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "model.engine"
    if existing:
        shutil.copyfile(engine_path, out)
    before = out.read_bytes() if existing else None
    seen_partial: list[list[str]] = []
    real_open = builder_mod.open_source

    def broken_open(path):
        src = real_open(path)
        name = "blk.1.ffn_down.weight"  # late in the plan: earlier tensors are on disk by now

        def boom():
            seen_partial.append(_leftovers(out_dir))
            raise OSError("injected read failure")

        src.tensors[name] = dataclasses.replace(src.tensors[name], load=boom)
        return src

    monkeypatch.setattr(builder_mod, "open_source", broken_open)
    with pytest.raises(BuildError, match="blk.1.ffn_down.weight.*injected read failure"):
        build_engine(folder, out, weights="q8", max_seq_len=SEQ)
    # The build did get midway: its hidden partial file existed when the load failed ...
    assert len(seen_partial) == 1
    assert any(n.startswith(".model.engine.partial-") for n in seen_partial[0])
    # ... and is gone now; an older engine at the path is untouched and still loads.
    if existing:
        assert _leftovers(out_dir) == ["model.engine"]
        assert out.read_bytes() == before
        assert Engine(out).weights == "f32"
    else:
        assert _leftovers(out_dir) == []


# ---- generation parameters --------------------------------------------------------------------
CHAT_ERR = r"each chat message must be a mapping with 'role' and 'content'"
PROMPT_TYPE_ERR = r"prompt must be a str, a sequence of token ids or a list of chat messages"

PARAM_CASES: list[tuple[str, object, dict, str]] = [
    (
        "prompt-too-long",
        [5] * (SEQ + 1),
        {},
        rf"65 tokens, more than this engine's max_seq_len of {SEQ}",
    ),
    ("prompt-way-too-long", "x " * 500, {}, r"more than this engine's max_seq_len of 64"),
    ("empty-text", "", {}, r"the prompt is empty"),
    ("empty-ids", [], {}, r"the prompt is empty"),
    ("empty-array", np.zeros(0, dtype=np.int64), {}, r"the prompt is empty"),
    ("negative-id", [5, -1], {}, r"token id -1 at index 1, outside the vocabulary \[0, 384\)"),
    ("id-equals-vocab", [384], {}, r"token id 384 at index 0, outside the vocabulary \[0, 384\)"),
    ("negative-id-array", np.array([3, -7], dtype=np.int32), {}, r"token id -7 at index 1"),
    ("id-beyond-int32", [5, 2**40], {}, r"token id"),
    ("id-beyond-int32-array", np.array([2**33], dtype=np.int64), {}, r"token id"),
    ("stop-id-vocab", [5], {"stop": 384}, r"stop holds token id 384"),
    ("stop-id-negative", [5], {"stop": ["ab", -2]}, r"stop holds token id -2"),
    ("stop-id-beyond-int32", [5], {"stop": 2**40}, r"stop"),
    ("stop-float", [5], {"stop": 1.5}, r"stop"),
    (
        "temperature-negative",
        [5],
        {"temperature": -0.5},
        r"temperature must be a finite number >= 0",
    ),
    ("temperature-nan", [5], {"temperature": math.nan}, r"temperature must be a finite number"),
    ("temperature-inf", [5], {"temperature": math.inf}, r"temperature must be a finite number"),
    ("temperature-minus-inf", [5], {"temperature": -math.inf}, r"temperature must be a finite"),
    ("top-p-zero", [5], {"top_p": 0.0}, r"top_p must lie in \(0, 1\]"),
    ("top-p-negative", [5], {"top_p": -0.1}, r"top_p must lie in \(0, 1\]"),
    ("top-p-above-one", [5], {"top_p": 1.5}, r"top_p must lie in \(0, 1\]"),
    ("top-p-nan", [5], {"top_p": math.nan}, r"top_p must lie in \(0, 1\]"),
    ("top-k-negative", [5], {"top_k": -1}, r"top_k must be >= 0, got -1"),
    ("top-k-float", [5], {"top_k": 2.5}, r"top_k must be an integer"),
    ("max-new-negative", [5], {"max_new_tokens": -1}, r"max_new_tokens must be >= 0, got -1"),
    ("max-new-float", [5], {"max_new_tokens": 8.0}, r"max_new_tokens must be an integer"),
    ("max-new-bool", [5], {"max_new_tokens": True}, r"max_new_tokens must be an integer"),
    ("seed-negative", [5], {"seed": -1}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ("seed-too-big", [5], {"seed": 2**64}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ("seed-float", [5], {"seed": 1.5}, r"seed must be an integer"),
    ("prompt-float", 1.5, {}, PROMPT_TYPE_ERR + r", got float"),
    ("prompt-int", 7, {}, PROMPT_TYPE_ERR + r", got int"),
    ("prompt-none", None, {}, PROMPT_TYPE_ERR + r", got NoneType"),
    ("prompt-dict", {"role": "user", "content": "hi"}, {}, PROMPT_TYPE_ERR + r", got dict"),
    ("prompt-float-list", [1.0, 2.0], {}, r"token ids must be integers, got float"),
    ("prompt-bool-list", [True, False], {}, r"token ids must be integers, got bool"),
    ("prompt-str-list", ["def", "f"], {}, r"token ids must be integers, got str"),
    ("prompt-mixed-list", [1, None], {}, r"token ids must be integers, got NoneType"),
    ("array-2d", np.array([[1, 2]]), {}, r"one-dimensional and integer"),
    ("array-float", np.array([1.0, 2.0]), {}, r"one-dimensional and integer"),
    ("chat-no-content", [{"role": "user"}], {}, CHAT_ERR),
    ("chat-no-role", [{"content": "hi"}], {}, CHAT_ERR),
    ("chat-then-str", [{"role": "user", "content": "hi"}, "oops"], {}, CHAT_ERR),
    ("chat-then-int", [{"role": "user", "content": "hi"}, 3], {}, CHAT_ERR),
    ("stream-validates", [5], {"temperature": -1.0, "stream": True}, r"temperature must be"),
]


@pytest.mark.parametrize(
    "prompt, kwargs, pattern", [c[1:] for c in PARAM_CASES], ids=[c[0] for c in PARAM_CASES]
)
def test_bad_generation_parameter(engine, baseline, prompt, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        engine.generate(prompt, **kwargs)
    # Nothing is lost: the same Engine still generates exactly what it did before.
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_bad_parameters_do_not_disturb_sampling_or_streaming(engine, baseline):
    sampled = engine.generate(PROMPT, max_new_tokens=8, temperature=0.9, top_p=0.9, seed=7)
    for _, prompt, kwargs, _ in PARAM_CASES:
        try:
            engine.generate(prompt, **kwargs)
        except (ValueError, TypeError):
            pass
    again = engine.generate(PROMPT, max_new_tokens=8, temperature=0.9, top_p=0.9, seed=7)
    assert again.token_ids == sampled.token_ids
    stream = engine.generate(PROMPT, max_new_tokens=8, stream=True)
    text = "".join(stream)
    assert stream.result is not None and stream.result.token_ids == baseline
    assert text == stream.result.text
    assert engine.logits(PROMPT).shape[1] == engine.vocab_size


@pytest.mark.parametrize("param", ["max_new_tokens", "top_k"])
def test_huge_integer_parameter_is_accepted_or_value_error(engine, baseline, param):
    """max_new_tokens / top_k of 2**31 and up: either a sensible request (it ends at max_seq_len;
    top_k beyond the vocabulary means off) or a ValueError naming the parameter. Today nanobind
    rejects the C++ int with a TypeError ("incompatible function arguments")."""
    try:
        r = engine.generate([5, 6], **{param: 2**31}, ignore_eos=True)
    except ValueError as e:
        assert param in str(e)
    else:
        assert r.finish_reason in ("max_seq_len", "max_new_tokens")
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_logits_bad_prompt(engine):
    with pytest.raises(ValueError, match=r"token id -1 at index 0"):
        engine.logits([-1])
    with pytest.raises(ValueError, match=r"at least one token"):
        engine.logits([])
    with pytest.raises(ValueError, match=r"max_seq_len is 64"):
        engine.logits([5] * (SEQ + 1))


def test_prompt_of_exactly_max_seq_len(engine, baseline):
    r = engine.generate([5] * SEQ, max_new_tokens=5, ignore_eos=True)
    assert len(r.token_ids) == 1
    assert r.finish_reason == "max_seq_len"
    r = engine.generate([5] * SEQ, max_new_tokens=5)
    assert len(r.token_ids) <= 1
    assert r.finish_reason in ("max_seq_len", "stop_token")
    r = engine.generate([5] * (SEQ - 1), max_new_tokens=5, ignore_eos=True)
    assert len(r.token_ids) == 2 and r.finish_reason == "max_seq_len"
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_max_new_tokens_zero(engine, baseline):
    r = engine.generate(PROMPT, max_new_tokens=0)
    assert r.token_ids == [] and r.text == ""
    assert r.finish_reason == "max_new_tokens"
    assert r.prompt_token_ids == engine.encode(PROMPT)
    stream = engine.generate(PROMPT, max_new_tokens=0, stream=True)
    assert list(stream) == []
    assert stream.result is not None and stream.result.token_ids == []
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_chat_prompt_without_template(tmp_path, raw, meta):
    m = copy.deepcopy(meta)
    m["tokenizer"]["chat_template"] = None
    e = _load(tmp_path, reserialise(raw, m))
    with pytest.raises(ValueError, match=r"has no chat template"):
        e.generate([{"role": "user", "content": "hi"}], max_new_tokens=2)
    assert len(e.generate("hi", max_new_tokens=2).token_ids) >= 1


def test_valid_chat_prompt_after_malformed_ones(engine):
    chat = [{"role": "user", "content": "hi"}]
    before = engine.generate(chat, max_new_tokens=4).token_ids
    for bad in ([{"role": "user"}], [chat[0], "oops"], [{"content": "hi"}]):
        with pytest.raises(ValueError, match=CHAT_ERR):
            engine.generate(bad, max_new_tokens=4)
    assert engine.generate(chat, max_new_tokens=4).token_ids == before


# ---- Engine(...) options ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, -1, -64])
def test_bad_thread_count(engine_path, n):
    with pytest.raises(ValueError, match=rf"n_threads must be >= 1, got {n}"):
        Engine(engine_path, n_threads=n)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "", "metal"])
def test_unknown_device(engine_path, device):
    with pytest.raises(ValueError, match=rf"unknown device '{re.escape(device)}' \(this build has"):
        Engine(engine_path, device=device)
