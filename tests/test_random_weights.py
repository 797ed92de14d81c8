"""Engines with random weights made at load (engine format 4, kernels/random_fill.h): the file
holds the metadata only, and each backend makes every tensor from the model's seed, the GPU on
the device (kernels/cuda/random_fill.cuh, here through the emulation) with the same bits as
the host. benchmarks/random_engine.py writes them (data="random") for the GPU timing runs."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda_helpers import emulation_library
from engine_file_tools import load_engine_bytes, parse_header, patched, read_metadata, reserialise
from random_engine import SHAPES, write_random_engine
from trt_spec import Engine, EngineFileError, _core

TINY = dict(
    arch="qwen2", n_layers=2, dim=128, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=256,
    vocab_size=512, rope_theta=10000.0, rms_eps=1e-6, tied_embeddings=False, qkv_bias=True,
)  # fmt: skip
DRAFT = dict(TINY, n_layers=1, tied_embeddings=True)
TYPES = ["f32", "f16", "bf16", "q8", "q4"]


def _engine(tmp_path, name="r.engine", **kw):
    args = dict(weights="q4", max_seq_len=128, max_batch=2, draft_len=4, data="random")
    args.update(kw)
    return write_random_engine(tmp_path / name, TINY, draft=DRAFT, **args)


@pytest.mark.parametrize("weights", TYPES)
def test_random_engine_has_no_data_and_runs(tmp_path, weights) -> None:
    path = _engine(tmp_path, weights=weights)
    raw = path.read_bytes()
    meta = read_metadata(raw)
    assert parse_header(raw)["version"] == _core.ENGINE_FORMAT_RANDOM_WEIGHTS_VERSION == 4
    assert path.stat().st_size < 64 * 1024  # metadata only
    assert all("random_weights" in m for m in meta["models"].values())
    e = Engine(path, n_threads=2)
    logits = e.logits([1, 2, 3, 4, 5])
    assert logits.shape == (5, TINY["vocab_size"])
    assert np.isfinite(logits).all()
    # Realistic logits: not collapsed to a constant, not blown up through the layers.
    spread = float(np.std(logits))
    assert 0.05 < spread < 50.0, spread
    # Speculation over random weights is still exact: greedy equals target-only.
    prompt = [7, 3, 9, 1, 4, 4, 2]
    ref = e.generate(prompt, max_new_tokens=24, draft="none", ignore_eos=True)
    spec = e.generate(prompt, max_new_tokens=24, draft="model", draft_len=3, ignore_eos=True)
    assert spec.token_ids == ref.token_ids


def test_same_seed_same_weights_other_seed_other_weights(tmp_path) -> None:
    a = Engine(_engine(tmp_path, "a.engine", seed=5), n_threads=1).logits([1, 2, 3])
    b = Engine(_engine(tmp_path, "b.engine", seed=5), n_threads=2).logits([1, 2, 3])
    c = Engine(_engine(tmp_path, "c.engine", seed=6), n_threads=1).logits([1, 2, 3])
    assert np.array_equal(a, b)  # whatever the threads
    assert not np.allclose(a, c)


def test_random_weights_need_format_4(tmp_path) -> None:
    raw = _engine(tmp_path).read_bytes()
    meta = read_metadata(raw)
    meta["format_version"] = 3
    v3 = patched(reserialise(raw, meta), 8, "<I", 3)
    with pytest.raises(EngineFileError, match="random weights, which need engine format version 4"):
        load_engine_bytes(tmp_path, v3)


def test_real_shapes_write_in_a_moment(tmp_path) -> None:
    """The GPU benchmark's 7B + 0.5B pair: no multi-GB file (its loading is a GPU run's part)."""
    path = write_random_engine(
        tmp_path / "7b.engine", SHAPES["qwen2.5-7b"], draft=SHAPES["qwen2.5-0.5b"], weights="q4",
        max_seq_len=2048, data="random",
    )  # fmt: skip
    meta = read_metadata(path.read_bytes())
    assert meta["models"]["target"]["weight_bytes"] > 4e9
    assert path.stat().st_size < 8e6  # the metadata (mostly the 152k-word tokenizer)


# ---- the fill itself: device kernel against the host loop ------------------------------------
@pytest.fixture(scope="module")
def emu():
    so = emulation_library("cuda_emu_ops")
    so.emu_random_fill.argtypes = [
        ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint64,
        ctypes.c_float, ctypes.c_float, ctypes.c_void_p,
    ]  # fmt: skip
    return so


def _fill(emu, device: bool, t: str, rows: int, cols: int, key: int, offset: float, scale: float):
    n = _core.weight_blob_bytes(_core.weight_type_from_name(t), rows, cols)
    buf = np.full(n, 0xA5, np.uint8)
    wt = _core.weight_type_from_name(t).value
    emu.emu_random_fill(int(device), wt, rows, cols, key, offset, scale, buf.ctypes.data)
    return buf


def _decode(blob: np.ndarray, t: str, rows: int, cols: int) -> np.ndarray:
    wt = _core.weight_type_from_name(t)
    return _core.dequantize_weight(blob, wt, rows, cols)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape", [(1, 64), (3, 64), (7, 192), (33, 128)])
def test_device_fill_equals_host_fill(emu, t, shape) -> None:
    rows, cols = shape
    key = 0x9E3779B97F4A7C15
    dev = _fill(emu, True, t, rows, cols, key, 0.25, 0.5)
    host = _fill(emu, False, t, rows, cols, key, 0.25, 0.5)
    assert np.array_equal(dev, host)
    other = _fill(emu, False, t, rows, cols, key + 1, 0.25, 0.5)
    assert not np.array_equal(host, other)


@pytest.mark.parametrize("t", TYPES)
def test_fill_values(emu, t) -> None:
    """Values in [offset - scale, offset + scale] (within the type's rounding), spread out
    uniformly; q8 has no offset (its values are centred on 0) and its codes are never -128."""
    rows, cols, scale = 64, 256, 0.25
    offset = 0.0 if t == "q8" else 0.5
    blob = _fill(emu, False, t, rows, cols, 12345, 0.5, scale)
    w = _decode(blob, t, rows, cols)
    slack = 0.01 * scale  # f16 / bf16 rounding of the values and of q8 / q4 scales
    assert w.min() >= offset - scale - slack and w.max() <= offset + scale + slack
    assert abs(float(w.mean()) - offset) < 0.02 * scale * 10
    assert abs(float(w.std()) - scale / np.sqrt(3)) < 0.05 * scale
    if t == "q8":
        assert blob[: rows * cols].min() >= 1
