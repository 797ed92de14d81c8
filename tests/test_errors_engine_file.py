"""Damaged and foreign engine files raise EngineFileError with a specific message, never crash.

Truncated and bit-flipped files, wrong magic or version, header offsets past the end, and metadata
that parses but makes no sense (edited with engine_file_tools.reserialise). Everything runs
in-process: a segfault would take pytest down with it, which is itself a failure.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
from engine_file_tools import (
    PROMPT,
    flipped,
    load_engine_bytes,
    pack_header,
    parse_header,
    patched,
    reserialise,
)
from trt_spec import Engine, EngineFileError, _core


def test_helper_roundtrip_still_loads(tmp_path, raw, meta, baseline):
    """The re-serialiser itself is sound: unchanged metadata gives a working engine."""
    assert raw[:8] == _core.ENGINE_MAGIC
    e = load_engine_bytes(tmp_path, reserialise(raw, copy.deepcopy(meta)))
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
        load_engine_bytes(tmp_path, raw[:cut])


def test_engine_file_error_is_value_error():
    assert issubclass(EngineFileError, ValueError)


def test_flipped_byte_in_tensor_data_names_the_tensor(tmp_path, raw, meta):
    h = parse_header(raw)
    name = "blk.1.ffn_down.weight"
    entry = meta["models"]["target"]["tensors"][name]
    bad = flipped(raw, h["data_offset"] + entry["offset"] + entry["bytes"] // 2)
    with pytest.raises(EngineFileError, match=rf"checksum mismatch in tensor target/{name}\b"):
        load_engine_bytes(tmp_path, bad)


def test_verify_false_skips_tensor_checksums(tmp_path, raw, meta):
    """Documented: ``verify=False`` does not read the tensor bytes, so a flipped bit loads."""
    assert "verify" in (Engine.__doc__ or "")
    h = parse_header(raw)
    entry = meta["models"]["target"]["tensors"]["blk.0.ffn_down.weight"]
    e = load_engine_bytes(
        tmp_path, flipped(raw, h["data_offset"] + entry["offset"] + 7), verify=False
    )
    r = e.generate(PROMPT, max_new_tokens=4)
    assert 1 <= len(r.token_ids) <= 4
    with pytest.raises(EngineFileError, match="checksum mismatch"):
        Engine(tmp_path / "bad.engine", verify=True)


def test_flipped_byte_in_metadata(tmp_path, raw):
    h = parse_header(raw)
    with pytest.raises(EngineFileError, match=r"metadata checksum mismatch"):
        load_engine_bytes(tmp_path, flipped(raw, h["json_offset"] + h["json_bytes"] // 3))


def test_flipped_metadata_checksum_in_header(tmp_path, raw):
    h = parse_header(raw)
    with pytest.raises(EngineFileError, match=r"metadata checksum mismatch"):
        load_engine_bytes(tmp_path, patched(raw, 48, "<Q", h["json_checksum"] ^ 1))


def test_wrong_magic(tmp_path, raw):
    bad = b"GGUF\x03\0\0\0" + raw[8:]
    with pytest.raises(EngineFileError, match=r"not a trt-spec engine \(wrong magic bytes\)"):
        load_engine_bytes(tmp_path, bad)


def test_future_format_version(tmp_path, raw):
    v = _core.ENGINE_FORMAT_VERSION + 1
    with pytest.raises(EngineFileError, match=rf"format version {v}\b.*rebuild the engine"):
        load_engine_bytes(tmp_path, patched(raw, 8, "<I", v))


def test_previous_format_version_names_both_versions(tmp_path, raw):
    """Version 1 engines (the checksum before XXH64) are refused, not misread."""
    old = _core.ENGINE_FORMAT_OLDEST_VERSION - 1
    lo, now = _core.ENGINE_FORMAT_OLDEST_VERSION, _core.ENGINE_FORMAT_VERSION
    with pytest.raises(
        EngineFileError,
        match=rf"format version {old} \(an older trt-spec built it\); this trt-spec reads "
        rf"versions {lo} to {now} only: rebuild the engine",
    ):
        load_engine_bytes(tmp_path, patched(raw, 8, "<I", old))


def test_format_version_zero(tmp_path, raw):
    with pytest.raises(EngineFileError, match=r"format version 0\b"):
        load_engine_bytes(tmp_path, patched(raw, 8, "<I", 0))


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
        load_engine_bytes(tmp_path, bad)


def test_empty_file(tmp_path):
    with pytest.raises(EngineFileError, match=r"too small to be a trt-spec engine \(0 bytes\)"):
        load_engine_bytes(tmp_path, b"")


def test_directory(tmp_path):
    with pytest.raises(EngineFileError, match=r"is not a regular file"):
        Engine(tmp_path)


def test_missing_path(tmp_path):
    missing = tmp_path / "nope" / "model.engine"
    with pytest.raises(EngineFileError, match=r"cannot open engine file .*No such file"):
        Engine(missing)


def test_foreign_file(tmp_path):
    with pytest.raises(EngineFileError, match=r"wrong magic bytes"):
        load_engine_bytes(tmp_path, b"hello, I am a text file and not an engine\n" * 10)


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
        "checksum-not-hex",
        lambda m: _tensor(m, "output_norm.weight").update(checksum="not-hex!"),
        r"output_norm\.weight.*checksum|checksum.*output_norm\.weight",
    ),
    (
        "checksum-too-long",
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
        load_engine_bytes(tmp_path, reserialise(raw, m))


@pytest.mark.parametrize(
    "text, pattern",
    [
        (b"{not json", r"not valid JSON"),
        (b"", r"not valid JSON \(.*empty input"),
        (b"[1, 2]", r"\$ should be an object"),
        (b"[" * 200 + b"]" * 200, r"not valid JSON \(nesting deeper than 64 levels"),
        (b'{"format_version": 1} trailing', r"not valid JSON \(.*expected end of input"),
        (b'{"models": "\xff"}', r"not valid JSON \(.*UTF-8"),
        (b'{"format_version": 1e999}', r"not valid JSON|format_version should be"),
    ],
    ids=["garbage", "empty", "array", "deep-nesting", "trailing", "bad-utf8", "huge-number"],
)
def test_metadata_not_an_engine_document(tmp_path, raw, text, pattern):
    with pytest.raises(EngineFileError, match=pattern):
        load_engine_bytes(tmp_path, reserialise(raw, text=text))


def test_metadata_number_with_leading_zero(tmp_path, raw, meta):
    """RFC 8259 forbids ``01``; the C++ parser (nlohmann/json) refuses it too."""
    text = json.dumps(meta, separators=(",", ":")).encode()
    assert b'"max_batch":1' in text
    text = text.replace(b'"max_batch":1', b'"max_batch":01', 1)
    with pytest.raises(EngineFileError, match=r"not valid JSON"):
        load_engine_bytes(tmp_path, reserialise(raw, text=text))
