"""``trt-spec build`` writes the same bytes whatever its thread count, with
``SOURCE_DATE_EPOCH`` set, and the default pair's engine keeps the bytes of the builder before
it read GGUF files itself and encoded tensors in parallel (commit 4a88724)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from bench_build import engine_sections
from trt_spec import build_engine
from trt_spec.builder.source import BuildError

# The default pair built with `trt-spec build` defaults by the builder at 4a88724: the sha256 of
# the tensor data section, and of the metadata without "created" and the per-model quant_error
# (that builder summed the errors in float32 through BLAS; these figures are in double now).
PAIR_DATA_SHA256 = "b1bac254b1eb8ce8e5f06a5ab8dd6451a2610bcde071767ef7a1ebd9ea832b1f"
PAIR_DATA_BYTES = 1_770_488_320
PAIR_META_SHA256 = "b89b6664c8a459ae3e1268c9e57a028020f95bab1ab2d90e31c9300d260b9ef1"
PAIR_QUANT_ERROR = {  # (max, mean) per model at 4a88724
    "target": (0.007469369367542892, 0.002092018827075262),
    "draft": (0.08935098824541439, 0.06188577761368749),
}


def test_build_bytes_do_not_depend_on_threads(tiny, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    target, _ = tiny.checkpoint("qwen2")
    draft, _ = tiny.checkpoint("qwen2", layers=1, seed=1)
    for weights in ("q4", "q8", "bf16"):
        files = []
        for threads in (1, 3):
            out = tmp_path / f"{weights}-{threads}.engine"
            build_engine(target, out, draft=draft, weights=weights, max_seq_len=64, threads=threads)
            files.append(out.read_bytes())
        assert files[0] == files[1], weights
    meta, _, _ = engine_sections(tmp_path / "q4-1.engine")
    assert meta["created"] == "2023-11-14T22:13:20+00:00"
    errors = meta["models"]["target"]["quant_error"]["per_tensor"]
    assert errors and all(0.0 < e < 0.2 for e in errors.values())


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_build_threads_must_be_positive(tiny, tmp_path: Path, threads) -> None:
    target, _ = tiny.checkpoint("qwen2")
    with pytest.raises(BuildError, match="threads must be an integer >= 1"):
        build_engine(target, tmp_path / "x.engine", threads=threads)
    assert not list(tmp_path.iterdir())


@pytest.mark.models
@pytest.mark.slow
def test_default_pair_engine_keeps_its_bytes(default_pair_engine: Path) -> None:
    """(The engine: conftest's default_pair_engine, built with SOURCE_DATE_EPOCH 1700000000.)"""
    meta, data_sha, data_bytes = engine_sections(default_pair_engine)
    assert (data_sha, data_bytes) == (PAIR_DATA_SHA256, PAIR_DATA_BYTES)
    for role, (err_max, err_mean) in PAIR_QUANT_ERROR.items():
        q = meta["models"][role]["quant_error"]
        assert q["max"] == pytest.approx(err_max, rel=1e-4)
        assert q["mean"] == pytest.approx(err_mean, rel=1e-4)
    meta.pop("created")
    for m in meta["models"].values():
        m["quant_error"] = None
    assert hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest() == PAIR_META_SHA256
