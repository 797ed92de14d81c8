"""Every CUDA kernel of a decode or verify forward (1-16 rows) fits one wave of the blocks the
GPU holds at once, for the 0.5B, 1.5B and 7B shapes (trt_spec.cuda_waves, from the backend's own
planning code; no GPU needed), and `trt-spec info --plan` prints the waves."""

from __future__ import annotations

import pytest
from random_engine import SHAPES
from trt_spec import _core
from trt_spec import cost_model as cm
from trt_spec import cuda_waves as cw

pytestmark = pytest.mark.skipif(
    not _core.cuda_compiled(), reason="this build has no CUDA backend (its planning code)"
)
SHAPE_NAMES = ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"]


@pytest.mark.parametrize("weights", ["q4", "q8", "f16"])
@pytest.mark.parametrize("max_seq", [2048, 32768])
@pytest.mark.parametrize("sm_count", [132, 114])  # H100 / H200 SXM; H100 PCIe
def test_one_wave_at_1_to_16_rows(weights: str, max_seq: int, sm_count: int) -> None:
    models = {n: cm.model_of_config(SHAPES[n], weights) for n in SHAPE_NAMES}
    plan = cw.plan_waves(models, max_seq, sm_count)
    assert plan.keys() == set(SHAPE_NAMES)
    over = [w for ws in plan.values() for w in ws if w.waves > 1.0]
    assert not over, over[:5]
    assert cw.max_waves(plan) <= 1.0
    # Every op of every row count is there: 4 matmuls, the head and attention.
    for ws in plan.values():
        assert len(ws) == 6 * 16
        assert {w.op for w in ws} == {*cm.MATMULS, "output", "attention"}


def test_waves_of_a_launch() -> None:
    a = _core.cuda_matmul_wave("q4", 17920, 1536, 1, 132)
    assert a["kernel"] == "matmul_kernel<q4, 1>" and a["resident"] == 3 * 132
    assert a["waves"] == pytest.approx(a["blocks"] / a["resident"])
    b = _core.cuda_matmul_wave("q4", 17920, 1536, 12, 132)  # two 8-row tiles in one block
    assert b["kernel"] == "matmul_kernel<q4, 8>" and b["blocks"] <= 2 * 132
    c = _core.cuda_attention_wave(16, 12, 2, 128, 2048, 132)
    assert c["kernel"] == "attention_kernel<128>" and c["blocks"] == 4 * 132
    with pytest.raises(ValueError):
        _core.cuda_matmul_wave("q4", 64, 100, 1, 132)  # q4 needs columns % 64


def test_info_plan_prints_the_waves_line(tiny, tmp_path) -> None:
    import subprocess
    import sys

    from random_engine import write_random_engine

    cfg = dict(
        arch="qwen2", n_layers=2, dim=128, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=256,
        vocab_size=512, rope_theta=1e6, rms_eps=1e-6, tied_embeddings=True, qkv_bias=True,
    )  # fmt: skip
    eng = tmp_path / "t.engine"
    write_random_engine(eng, cfg, weights="q4", max_seq_len=256, max_batch=1, fast=True)
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "info", str(eng), "--no-verify", "--plan"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [x for x in out.splitlines() if x.startswith("cuda waves, max over kernels")]
    assert len(lines) == 1
    assert lines[0].startswith("cuda waves, max over kernels and 1-16 rows: ")
    assert float(lines[0].rsplit(" ", 1)[1]) <= 1.0
    assert "  target attention (attention_kernel<64>): 1:" in out
