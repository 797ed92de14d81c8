"""The CUDA backend's runtime switches as arms of one comparison: bench_gpu.py times the same
forward under each arm, alternating in one process (switch_compare), so that old and new kernels
are compared on one machine at one moment. Each arms function maps an arm's name to the setter
calls of a test Session (tests' _trt_spec_testing.Session.set_cuda_*); the "" arm restores the
default afterwards. Every switch gives the same bits (the GPU tests check each), except
waves_arms (the earlier grids split some products differently).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SWITCH_REPEATS = 3


def imma_arms(s: Any) -> dict[str, Any]:
    """Every q8 / q4 matmul on the dp4a tiles, or on the tensor-core kernel (then the default)."""
    return {
        "dp4a": lambda: s.set_cuda_imma_rows(10**6),
        "imma": lambda: s.set_cuda_imma_rows(1),
        "": lambda: s.set_cuda_imma_rows(0),
    }


def waves_arms(s: Any) -> dict[str, Any]:
    """Decode and verify launches on the earlier grids, or in one wave (then the default)."""
    return {
        "earlier_grids": lambda: s.set_cuda_one_wave(False),
        "one_wave": lambda: s.set_cuda_one_wave(True),
        "": lambda: s.set_cuda_one_wave(True),
    }


def attention_warps_arms(s: Any, one_row: bool = False) -> dict[str, Any]:
    """Attention blocks of 4 warps (then the default) or 8 (a (row, head) pair per warp) on the
    general kernel; with one_row (one-row forwards) also on the decode instance (attn_4w_1r,
    attn_8w_1r: set_cuda_attention_one_row, less code)."""

    def arm(warps: int, one: bool):
        return lambda: (s.set_cuda_attention_warps(warps), s.set_cuda_attention_one_row(one))

    arms = {"attn_4w": arm(4, False), "attn_8w": arm(8, False)}
    if one_row:
        arms |= {"attn_4w_1r": arm(4, True), "attn_8w_1r": arm(8, True)}
    return arms | {"": arm(4, False)}


def repeat_arms(s: Any) -> dict[str, Any]:
    """Each attention, or each qkv projection, launched once (then the default) or twice in a
    row (set_cuda_repeat_*: the same bits). The second of a pair finds its code, data and
    translations warm: (twice - once) / layers is a warm launch's cost, against what a launch
    costs in the forward's own order (profile_gpu.py's step table)."""

    def arm(attention: int, qkv: int):
        return lambda: (s.set_cuda_repeat_attention(attention), s.set_cuda_repeat_qkv(qkv))

    return {"once": arm(1, 1), "attn_x2": arm(2, 1), "qkv_x2": arm(1, 2), "": arm(1, 1)}


def persistent_arms(s: Any, prefetch: list[int] | None = None) -> dict[str, Any]:
    """A forward as its per-operation launches, or as one persistent launch (then the default:
    per operation); each also with each budget of `prefetch`: that many bytes of each matmul
    block's weights streamed toward L2 ahead of their use (matmul_prefetch in
    kernels/cuda/matmul_kernel.cuh; arms per_op_prefetch_<bytes>, persistent_prefetch_<bytes>);
    and per operation with each launch streaming the next matmuls' weights (per_op_next:
    set_cuda_prefetch_next, 16 MiB)."""

    def arm(persistent: bool, bytes_: int, next_: int = 0):
        return lambda: (
            s.set_cuda_persistent(persistent),
            s.set_cuda_prefetch(bytes_),
            s.set_cuda_prefetch_next(next_),
        )

    arms = {"per_op": arm(False, 0), "persistent": arm(True, 0)}
    for b in prefetch or []:
        arms[f"per_op_prefetch_{b}"] = arm(False, b)
        arms[f"persistent_prefetch_{b}"] = arm(True, b)
    if prefetch:
        arms["per_op_next"] = arm(False, 0, 16 << 20)
    return arms | {"": arm(False, 0)}


def switch_compare(timed, arms: dict[str, Any]) -> dict:
    """The same timed forward under each arm of a backend switch (arms: name -> setter; the ""
    setter restores the default after), alternating SWITCH_REPEATS times in one process:
    "<name>_ms" medians and "<name>_spread_ms" spreads."""
    names = [k for k in arms if k]
    got: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(SWITCH_REPEATS):
        for k in names:
            arms[k]()
            got[k].append(timed() * 1e3)
    arms[""]()
    out = {}
    for k, v in got.items():
        out[f"{k}_ms"] = float(np.median(v))
        out[f"{k}_spread_ms"] = max(v) - min(v)
    return out
