"""KV cache element types end to end on the CPU: Engine(kv_cache_dtype=...) for f32 / f16 / bf16
(greedy speculation stays exact for each type; f16 / bf16 logits stay close to f32; the KV bytes
follow the type), bad names raise ValueError, and the CLI's --kv-cache-dtype."""

from __future__ import annotations

import numpy as np
import pytest
import spec_pairs
from trt_spec import _core, cli
from trt_spec.engine import Engine

PROMPTS = [[1, 2, 3, 4], [5, 9, 2], [7] * 10]
PREDICTION = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 7, 8, 9, 2, 3, 4, 10, 11, 12, 1, 2, 3, 4, 5, 13]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kvtype")
    return spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=4)


@pytest.mark.parametrize("kv", ["f32", "f16", "bf16"])
def test_greedy_speculation_exact_per_kv_type(path, kv: str) -> None:
    e = Engine(path, kv_cache_dtype=kv)
    assert e.kv_cache_dtype == kv and f"kv={kv}" in repr(e)
    base = e.generate(PROMPTS, max_new_tokens=24, speculate=False, ignore_eos=True)
    for draft in ["model", "lookup"]:
        got = e.generate(
            PROMPTS,
            max_new_tokens=24,
            draft=draft,
            draft_len=4,
            ignore_eos=True,
            prediction=PREDICTION,
        )
        for b, g in zip(base, got, strict=True):
            assert g.token_ids == b.token_ids, (kv, draft)


def test_kv_bytes_and_auto(path) -> None:
    f32 = Engine(path, kv_cache_dtype="f32")
    f16 = Engine(path, kv_cache_dtype="f16")
    bf16 = Engine(path, kv_cache_dtype="bf16")
    assert f16.kv_bytes * 2 == f32.kv_bytes == bf16.kv_bytes * 2 > 0
    assert Engine(path, device="cpu").kv_cache_dtype == "f32"  # auto on the CPU


def test_typed_cache_logits_close_to_f32(path) -> None:
    tokens = list(range(1, 40))
    ref = np.asarray(_core.Runtime(str(path), "cpu", 2, True, 256, "f32").prompt_logits(tokens))
    for kv, tol in [("f16", 2e-3), ("bf16", 2e-2)]:
        got = np.asarray(_core.Runtime(str(path), "cpu", 2, True, 256, kv).prompt_logits(tokens))
        err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
        assert 0 < err < tol, (kv, err)  # rounded, and close


def test_bad_kv_cache_dtype(path) -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        Engine(path, kv_cache_dtype="f8")
    with pytest.raises(ValueError, match="KV cache type"):
        _core.Runtime(str(path), "cpu", 1, True, 256, "int8")


def test_cli_kv_cache_dtype(path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info", str(path), "--kv-cache-dtype", "bf16"]) == 0
    assert "kv cache: bf16" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.make_parser().parse_args(["generate", str(path), "hi", "--kv-cache-dtype", "f8"])
