"""Prompt rows in bf16 (cpp/kernels/cpu/attention_bf16.h) through T.cpu_attention(bf16_from=).

Rows i >= bf16_from take bf16 products (q, k, the probabilities and v rounded to bf16, pairs of
products summed into f32 lanes by vdpbf16ps). Needs the AVX-512 build on a CPU with AVX512_BF16;
elsewhere the kernel refuses bf16 rows (tested where the AVX2 build exists).

- Against a float64 reference on bf16-rounded q, k and v (the probabilities' rounding is the
  remaining error): GQA 1 / 6, head_dim 64 / 128, partial tiles, tree masks (gathered tiles),
  f32 / f16 / bf16 caches.
- The rule greedy speculation relies on still holds per row: a bf16 row's bits do not depend on
  the other rows of the call, on where bf16_from falls, or on the split of tasks; the f32 rows
  before bf16_from keep their bits.
"""

from __future__ import annotations

import numpy as np
import pytest
from native import T
from test_attention_cpu import (
    assert_prompt_blocks_keep_the_bits,
    assert_prompt_row_bits_do_not_depend_on_the_call,
    make_case,
    reference,
    to_bits,
)

BF16 = T.cpu_attention_bf16("")
needs_bf16 = pytest.mark.skipif(not BF16, reason="needs AVX-512 with AVX512_BF16")


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest even), as float64."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def reference_bf16(q, k, v, slot, lens, scale, tree_base=None, tree_bits=None):
    """float64 softmax(scale q.k) v with q, k and v rounded to bf16."""
    return reference(q, k, v, slot, lens, scale, tree_base, tree_bits, cast=bf16_round)


@needs_bf16
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("length", [1, 33, 700])
@pytest.mark.parametrize("group,hd", [(1, 64), (6, 128), (2, 80)])
def test_bf16_rows_match_the_bf16_reference(group, hd, length, tree):
    q, k, v, slot, lens, scale, tb, tbits = make_case(
        group * 100 + hd + length, group, hd, length, tree=tree
    )
    if hd % 16:
        with pytest.raises(Exception, match="multiple of 16"):
            T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, bf16_from=0)
        return
    got = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, bf16_from=0)
    f32 = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits)
    ref = reference_bf16(q, k, v, slot, lens, scale, tb, tbits)
    # The probabilities' rounding to bf16 (2^-9 relative) is all that is left; f32 rows sit
    # about as far from this reference as bf16 rows do from the exact one.
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-2)
    assert np.abs(got - ref).mean() < 2e-3
    assert np.abs(got - f32).max() < 5e-2
    if length > 1:  # (one entry: softmax is 1, the output v rounded; may equal f32's)
        assert not np.array_equal(got, f32), "bf16 rows gave the f32 bits: the flag did nothing"


@needs_bf16
@pytest.mark.parametrize("kv", ["f16", "bf16"])
def test_bf16_rows_on_a_typed_cache(kv):
    q, k, v, slot, lens, scale, _, _ = make_case(5, 6, 128, 300)
    kb, vb = to_bits(k, kv), to_bits(v, kv)
    got = T.cpu_attention(q, kb, vb, slot, lens, scale, kv_type=kv, bf16_from=0)
    if kv == "bf16":  # a bf16 cache's values are already bf16: the same bits as from f32 ones
        k32 = (kb.astype(np.uint32) << 16).view(np.float32)
        v32 = (vb.astype(np.uint32) << 16).view(np.float32)
        same = T.cpu_attention(q, k32, v32, slot, lens, scale, bf16_from=0)
        assert np.array_equal(got.view(np.uint32), same.view(np.uint32))
    ref = reference_bf16(q, k.astype(np.float32), v, slot, lens, scale)
    np.testing.assert_allclose(got, ref, rtol=0, atol=3e-2)


@needs_bf16
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("group", [1, 6])
def test_bf16_row_bits_do_not_depend_on_the_call(group, tree):
    """Each row alone (bf16), inside the whole call, with bf16_from anywhere before it, and under
    another task split: the same bits. Rows before bf16_from: the f32 bits."""
    case = make_case(11 + group, group, 128, 200, tree=tree)
    assert_prompt_row_bits_do_not_depend_on_the_call(case, "bf16_from")


@needs_bf16
def test_bf16_blocks_follow_the_workers_not_the_bits():
    assert_prompt_blocks_keep_the_bits("bf16_from")


@pytest.mark.skipif("avx2" not in T.cpu_isas(), reason="needs the AVX2 build")
def test_bf16_rows_refused_where_the_build_cannot_run_them():
    q, k, v, slot, lens, scale, _, _ = make_case(3, 1, 64, 40)
    assert not T.cpu_attention_bf16("avx2")
    with pytest.raises(Exception, match="AVX512_BF16"):
        T.cpu_attention(q, k, v, slot, lens, scale, isa="avx2", bf16_from=0)
    # bf16_from past the last row: no bf16 row, any build
    out = T.cpu_attention(q, k, v, slot, lens, scale, isa="avx2", bf16_from=q.shape[0])
    ref = T.cpu_attention(q, k, v, slot, lens, scale, isa="avx2")
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))
