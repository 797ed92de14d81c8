"""CUDA launch counts without a GPU (``trt-spec info --plan``, ``_core.cuda_launch_plan``): the CUDA
backend in planning mode runs the very launch code of a GPU run and records its launches.

Needs a build with the CUDA backend (CI compiles it); no GPU. The default pair's count is checked
in test_real_speculative.py, where its engine is built anyway.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import spec_pairs
from trt_spec import _core

pytestmark = pytest.mark.skipif(not _core.cuda_compiled(), reason="needs the CUDA build")


# Launches of the speculative iteration's own ops at B = 1 and k draft tokens (cpp/spec/*): the
# first draft step's rows, the draft's node draws (3 passes each), the verify rows, acceptance
# (3 row passes and the walk), and prompt lookup's next tree. No kv_copy: draft-model chains
# leave every accepted node where it is.
def spec_launches(k: int) -> int:
    return 1 + 3 * k + 1 + 4 + 1


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    return spec_pairs.make_pair(tmp_path_factory.mktemp("plan"), "noisy", draft_len=6)


def test_five_launches_per_layer_and_the_iteration_adds_up(pair) -> None:
    for k in (1, 4, 6):
        p = _core.cuda_launch_plan(str(pair), batch=1, draft_len=k)
        tl, dl = p["target_layers"], p["draft_layers"]
        assert p["target_step"] == 5 * tl + 2  # embed, 5 per layer, the head (norm + matmul)
        assert p["draft_step"] == 5 * dl + 2
        assert p["iteration"] == k * p["draft_step"] + p["target_step"] + spec_launches(k)
        assert sum(p["iteration_kernels"].values()) == p["iteration"]
        assert p["iteration_kernels"]["matmul_tile_kernel"] == 4 * (k * dl + tl) + k + 1
    target_only = _core.cuda_launch_plan(str(pair), batch=1, draft_len=0)
    assert target_only["iteration"] == target_only["target_step"] + 1 + 4 + 1  # + verify, accept


@pytest.fixture(scope="module")
def pair16(tmp_path_factory: pytest.TempPathFactory):
    return spec_pairs.make_pair(
        tmp_path_factory.mktemp("plan16"), "noisy", draft_len=6, weights="f16"
    )


def test_persistent_forward_is_one_launch(pair16) -> None:
    """With the persistent forward every model forward of at most 16 rows is one launch: one-row
    steps of the tile-1 instance, the 2-row first draft step and the verify pass of the tile-8
    one; the iteration's own ops are unchanged."""
    for k in (1, 4, 6):
        p = _core.cuda_launch_plan(str(pair16), batch=1, draft_len=k, persistent=True)
        assert p["persistent"] and p["target_step"] == 1 and p["draft_step"] == 1
        assert p["iteration"] == k + 1 + spec_launches(k)
        assert p["iteration_kernels"].get("persistent_forward_kernel<1>", 0) == k - 1
        assert p["iteration_kernels"]["persistent_forward_kernel<8>"] == 2
        assert "matmul_tile_kernel" not in p["iteration_kernels"]


def test_f32_products_run_per_operation(pair) -> None:
    """The persistent kernel holds f16, bf16, q8 and q4 products: an f32 engine's forward runs
    its embedding as the one held op, then per operation."""
    per_op = _core.cuda_launch_plan(str(pair), batch=1, draft_len=4)
    held = _core.cuda_launch_plan(str(pair), batch=1, draft_len=4, persistent=True)
    for key in ("target_step", "draft_step", "iteration"):
        assert held[key] == per_op[key]
    assert held["iteration_kernels"]["persistent_forward_kernel<1>"] == 3  # the embeds


def test_bad_plans_are_refused(pair) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        _core.cuda_launch_plan(str(pair), batch=2, draft_len=4)
    with pytest.raises(ValueError, match="draft length"):
        _core.cuda_launch_plan(str(pair), batch=1, draft_len=7)


def test_info_plan_prints_the_iteration_line(pair) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "info", str(pair), "--plan"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    m = re.search(r"^cuda launches per iteration \(B=1, K=4\): (\d+)$", out, re.M)
    assert m, out
    assert int(m.group(1)) == _core.cuda_launch_plan(str(pair), batch=1, draft_len=4)["iteration"]
    persistent = r"^persistent forward .*: target step (\d+), draft step (\d+), iteration .* (\d+) "
    m = re.search(persistent, out, re.M)
    assert m, out
    p = _core.cuda_launch_plan(str(pair), batch=1, draft_len=4, persistent=True)
    assert [int(x) for x in m.groups()] == [p["target_step"], p["draft_step"], p["iteration"]]
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "info", str(pair), "--plan", "--draft-len", "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.search(r"^cuda launches per iteration \(B=1, K=2\): \d+$", out, re.M), out
