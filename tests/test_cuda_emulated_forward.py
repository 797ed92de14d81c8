"""The persistent forward (cpp/kernels/cuda/forward_program.cuh) on the CUDA emulation: a tiny
model's whole forward as one instruction list, run in the global order by the persistent kernel
and in adversarial orders (random, and each consumer as early as its counters allow) with every
unwritten buffer filled with NaN, gives the bits of the per-operation launches; the static check
refuses programs that could deadlock.

Loads tests/cpp/emu_forward.cpp (built by native_build.py)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda_helpers import emulation_library

F32, F16, BF16, Q8, Q4 = range(5)
# wtype, layers, dim, heads, kv_heads, head_dim, ffn, vocab, max_seq, sm_count; a 33-entry context
# takes two attention splits, and SPLIT_K an f16 down projection of two splits.
SHAPE = dict(layers=2, dim=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=256, max_seq=64)
SPLIT_K = dict(ffn=1024)


@pytest.fixture(scope="module")
def lib():
    so = emulation_library("emu_forward")
    so.emu_forward_error.restype = ctypes.c_char_p
    return so


def _shape(wtype: int, sm_count: int = 32, **kw) -> np.ndarray:
    s = {**SHAPE, **kw}
    return np.array(
        [wtype, s["layers"], s["dim"], s["heads"], s["kv_heads"], s["head_dim"], s["ffn"],
         s["vocab"], s["max_seq"], sm_count],
        np.int32,
    )  # fmt: skip


def forward(
    lib,
    shape: np.ndarray,
    n: int,
    mode: int,
    *,
    n_ctx: int = 33,
    n_logits: int = 0,
    order: int = 0,
    prefetch: int = 0,
    hint: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_logits = n_logits or n
    logits = np.zeros((n_logits, shape[7]), np.float32)
    tap = np.zeros((n_logits, shape[2]), np.float32)
    info = np.zeros(7, np.int64)
    p = ctypes.c_void_p
    rc = lib.emu_forward(
        p(shape.ctypes.data), n_ctx, n, n_logits, mode, ctypes.c_uint64(7), ctypes.c_uint64(order),
        prefetch, ctypes.c_int64(hint), p(logits.ctypes.data), p(tap.ctypes.data),
        p(info.ctypes.data),
    )  # fmt: skip
    if rc != 0:
        raise RuntimeError(f"emu_forward returned {rc}: {lib.emu_forward_error().decode()}")
    return logits, tap, info


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)


@pytest.mark.parametrize(
    "wtype, n, n_logits, mode, prefetch",
    [
        (F16, 3, 0, 3, 0),  # a split-K product, consumers as early as allowed
        (Q4, 1, 0, 1, 32768),  # decode, the persistent kernel in global order
        (Q8, 5, 2, 3, 32768),  # an 8-row tile; the head over 2 rows with the pass's tile
        (BF16, 2, 0, 2, 0),  # a random order
    ],
)
def test_program_gives_the_per_operation_bits(
    lib, wtype: int, n: int, n_logits: int, mode: int, prefetch: int
):
    """The program's bits are the per-operation launches', with each block streaming its next
    instruction's weights toward L2 (prefetch: matmul_prefetch, a hint) or not."""
    shape = _shape(wtype, **(SPLIT_K if wtype == F16 else {}))
    ref_logits, ref_tap, off = forward(lib, shape, n, 0, n_logits=n_logits)
    assert np.isfinite(ref_logits).all() and np.isfinite(ref_tap).all()
    assert off[6] == 0  # nothing prefetched when it is off
    logits, tap, info = forward(
        lib, shape, n, mode, n_logits=n_logits, order=wtype + 1, prefetch=prefetch
    )
    assert info[5] == 0, "a prefetch outside the weights, or not whole 16-byte lines"
    assert (info[6] > 0) == (prefetch > 0)
    # embed, the tap, 5 ops per layer, the head, the reset
    assert info[1] == 1 + 1 + 5 * SHAPE["layers"] + 1 + 1
    assert info[2] == 0, "the static check refused the program"
    if mode == 3:  # consumers first: attention and o start before the op before them is done
        assert info[4] > 0
    np.testing.assert_array_equal(bits(logits), bits(ref_logits))
    np.testing.assert_array_equal(bits(tap), bits(ref_tap))


def test_orders_agree_on_a_long_row(lib):
    """Attention over two splits (a 33-entry context) and a split-K product: three random
    orders."""
    shape = _shape(F16, sm_count=16, **SPLIT_K)
    ref, _, _ = forward(lib, shape, 1, 0)
    for order in (11, 12, 13):
        got, _, _ = forward(lib, shape, 1, 2, order=order)
        np.testing.assert_array_equal(bits(got), bits(ref))


def test_weight_prefetch_changes_no_bits(lib):
    """The per-operation kernels with each block's weights streamed toward L2 before its grid
    dependency (matmul_prefetch) and each launch's hint of the next matmuls' weights
    (l2_prefetch.cuh WeightHint): hints, so the same bits, every prefetch inside a weight
    array (the persistent program's prefetch: test_program_gives_the_per_operation_bits)."""
    shape, n = _shape(F16, layers=1, **SPLIT_K), 2
    ref_logits, ref_tap, _ = forward(lib, shape, n, 0)
    logits, tap, info = forward(lib, shape, n, 0, prefetch=32768, hint=1 << 20)
    np.testing.assert_array_equal(bits(logits), bits(ref_logits))
    np.testing.assert_array_equal(bits(tap), bits(ref_tap))
    assert info[5] == 0, "a prefetch outside the weights, or not whole 16-byte lines"
    assert info[6] > 0


def prefetch_cover(lib, shape: np.ndarray, n: int, budget: int) -> np.ndarray:
    out = np.zeros(7, np.int64)
    rc = lib.emu_forward_prefetch_cover(
        ctypes.c_void_p(shape.ctypes.data), n, budget, ctypes.c_void_p(out.ctypes.data)
    )
    assert rc == 0, lib.emu_forward_error().decode()
    return out


@pytest.mark.parametrize(
    "wtype, n, extra",
    [(Q4, 1, {}), (F16, 9, SPLIT_K)],  # 9 rows: two 8-row tiles in one block; two splits
)
def test_weight_prefetch_is_what_each_block_reads(lib, wtype: int, n: int, extra: dict):
    """Each matmul instruction's prefetch (its rows, its split's units, the q8 / q4 scales and
    offsets) is exactly the weight lines its block then reads."""
    shape = _shape(wtype, layers=1, **extra)
    full = prefetch_cover(lib, shape, n, 1 << 30)
    assert full[0] >= 4 + 1  # blocks of qkv, o, gate / up, down; the head
    assert full[1] == 0, "prefetched lines the block never reads"
    assert full[2] == 0, "read lines the prefetch left out"
    assert full[3] == full[4] > 0
    assert full[6] == 0


@pytest.mark.parametrize("first, k, budget, grid", [(1, 2, 1 << 30, 7), (2, 1, 4096, 3)])
def test_next_weights_hint_is_streamed_once(lib, first: int, k: int, budget: int, grid: int):
    """A launch's hint of the next matmuls' weights (o and gate / up after attention; one matmul
    after another), cut among its blocks: every line of the hint prefetched exactly once, none
    outside it, within the budget (every section cut at the same fraction)."""
    out = np.zeros(7, np.int64)
    rc = lib.emu_hint_cover(
        ctypes.c_void_p(_shape(Q4).ctypes.data), first, k, ctypes.c_int64(budget), grid,
        ctypes.c_void_p(out.ctypes.data),
    )  # fmt: skip
    assert rc == 0, lib.emu_forward_error().decode()
    assert out[0] == out[1] > 0
    assert out[2] == 0 and out[3] == 0 and out[4] == 0  # once each, all, nothing else
    assert out[5] == 0
    assert out[6] <= budget and out[6] == 16 * out[0]


def test_weight_prefetch_keeps_to_its_budget(lib):
    """Under a budget a block prefetches a part of what it reads (its first rows), no more."""
    shape = _shape(Q4, layers=1)
    full = prefetch_cover(lib, shape, 1, 1 << 30)
    small = prefetch_cover(lib, shape, 1, 1024)
    assert small[1] == 0
    assert small[2] > 0 and 0 < small[4] < full[4]
    assert small[5] <= 1024
    assert small[6] == 0


def check(lib, shape: np.ndarray, n: int, tamper: int, grid: int, resident: int) -> str:
    out = ctypes.create_string_buffer(512)
    rc = lib.emu_forward_check(
        ctypes.c_void_p(shape.ctypes.data), n, tamper, ctypes.c_int64(grid),
        ctypes.c_int64(resident), out, 512,
    )  # fmt: skip
    assert rc == 0, lib.emu_forward_error().decode()
    return out.value.decode()


@pytest.mark.parametrize(
    "tamper, grid, resident, words",
    [
        (0, 96, 96, ""),
        (0, 1, 96, ""),
        (0, 97, 96, "resident"),  # a block could wait for one that never starts
        (1, 96, 96, "waits for"),  # the reset before the last op: its waits fail
        (2, 96, 96, "waits for"),  # a target no earlier signals reach
        (3, 96, 96, "waits for"),  # a consumer before its producer
        (4, 96, 96, "repeats"),  # a block run twice (and one never)
    ],
)
def test_static_check(lib, tamper: int, grid: int, resident: int, words: str):
    verdict = check(lib, _shape(F16), 3, tamper, grid, resident)
    if not words:
        assert verdict == ""
    else:
        assert words in verdict, verdict


def test_f32_products_are_not_held(lib):
    """The persistent kernel runs f16, bf16, q8 and q4 products (an f32 engine's forward runs per
    operation in the backend): a program of f32 products is refused, not run."""
    with pytest.raises(RuntimeError, match="returned -1: .*does not run"):
        forward(lib, _shape(F32), 1, 2, n_ctx=4, order=1)
