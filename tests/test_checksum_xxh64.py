"""Engine checksums are standard XXH64 (seed 0): published test vectors, an independent Python
implementation of the specification on many lengths, the ``xxhash`` package when it is installed
(it is not a dependency), and the checksums stored in a freshly built engine file.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_file_tools import parse_header, read_metadata
from trt_spec import _core

MASK = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5

# Published values (xxHash's README / python-xxhash's documentation).
VECTORS = [
    (b"", 0xEF46DB3751D8E999),
    (b"a", 0xD24EC4F1A98C6E5B),
    (b"abc", 0x44BC2CF5AD770999),
    (b"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1),
]


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * P2) & MASK, 31) * P1) & MASK


def xxh64_reference(data: bytes, seed: int = 0) -> int:
    """XXH64 straight from the specification (slow; for test inputs only)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed, (seed - P1) & MASK]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[i + 8 * k : i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & MASK
        for lane in v:
            h = ((h ^ _round(0, lane)) * P1 + P4) & MASK
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * P1 + P4) & MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * P1) & MASK
        h = (_rotl(h, 23) * P2 + P3) & MASK
        i += 4
    while i < n:
        h ^= (data[i] * P5) & MASK
        h = (_rotl(h, 11) * P1) & MASK
        i += 1
    h ^= h >> 33
    h = (h * P2) & MASK
    h ^= h >> 29
    h = (h * P3) & MASK
    return h ^ (h >> 32)


def checksum(data: bytes) -> int:
    return _core.checksum64(np.frombuffer(data, dtype=np.uint8))


@pytest.mark.parametrize("data, want", VECTORS, ids=[repr(v[0][:8]) for v in VECTORS])
def test_published_vectors(data: bytes, want: int) -> None:
    assert checksum(data) == want
    assert xxh64_reference(data) == want


def _random_inputs() -> list[bytes]:
    rng = np.random.default_rng(1234)
    lengths = [*range(0, 80), 95, 96, 97, 127, 128, 129, 255, 1000, 4096, 4099, 65_537]
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in lengths]


def test_matches_specification_on_many_lengths() -> None:
    """Every tail path (32-byte stripes, 8-, 4- and 1-byte steps) against the reference."""
    for data in _random_inputs():
        assert checksum(data) == xxh64_reference(data), len(data)


def test_matches_xxhash_package_when_installed() -> None:
    xxhash = pytest.importorskip("xxhash", reason="the optional xxhash package is not installed")
    for data in _random_inputs():
        assert checksum(data) == xxhash.xxh64_intdigest(data, seed=0), len(data)


def test_engine_checksums_are_xxh64(raw: bytes) -> None:
    """A standard XXH64 tool verifies every tensor and the metadata of a built engine."""
    h = parse_header(raw)
    text = raw[h["json_offset"] : h["json_offset"] + h["json_bytes"]]
    assert h["json_checksum"] == xxh64_reference(text)
    meta = read_metadata(raw)
    base = h["data_offset"]
    checked = 0
    for t in meta["models"]["target"]["tensors"].values():
        blob = raw[base + t["offset"] : base + t["offset"] + t["bytes"]]
        if len(blob) <= 8192:  # the pure-Python reference is slow; the big ones go via _core
            assert t["checksum"] == f"{xxh64_reference(blob):016x}"
            checked += 1
        assert t["checksum"] == f"{checksum(blob):016x}"
    assert checked >= 3
