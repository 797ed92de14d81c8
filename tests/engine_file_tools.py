"""Helpers for the bad-input tests: read, edit and re-serialise engine files.

:func:`reserialise` writes the same tensor data with new JSON metadata, a recomputed metadata
checksum and a fresh 64-byte header (layout of ``cpp/format/engine_file.h``).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
from trt_spec import Engine, _core

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


def load_engine_bytes(tmp_path: Path, data: bytes, **kw) -> Engine:
    p = tmp_path / "bad.engine"
    p.write_bytes(data)
    return Engine(p, **kw)
