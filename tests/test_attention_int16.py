"""Prompt rows in int16 (cpp/kernels/cpu/attention_int16.h) through T.cpu_attention(int16_from=).

Rows i >= int16_from take integer products summed exactly by pmaddwd: q and k scaled per row to
integers in [-R, R] (R = floor(sqrt((2^31 - 1) / head_dim))), v per entry to [-8191, 8191], the
probabilities (times the V entries' scales) per tile to [0, 8191]. Every build runs them (the
prompt precision of CPUs without AVX512_BF16).

- Against a float64 reference on the quantized q, k and v (the probabilities' quantization is the
  remaining error): GQA 1 / 6, head_dim 64 / 80 / 128, partial tiles, tree masks (gathered
  tiles), f32 / f16 / bf16 caches; sums at their int32 bounds (head_dim 256 too).
- The rule greedy speculation relies on still holds per row: an int16 row's bits do not depend on
  the other rows of the call, on where int16_from falls, on the split of tasks, on the blocks or
  on the build; the f32 rows before int16_from keep their bits.
"""

from __future__ import annotations

import numpy as np
import pytest
from native import T
from test_attention_cpu import (
    ISAS,
    assert_prompt_blocks_keep_the_bits,
    assert_prompt_row_bits_do_not_depend_on_the_call,
    entry_sets,
    from_bits,
    make_case,
    to_bits,
)

V_RANGE = 8191


def quantized(x: np.ndarray, r: float) -> np.ndarray:
    """x's values as the kernel codes them, per vector along the last axis: scale = max|x| / r,
    code = round(x * (r / max|x|)) (float32 steps, nearest even); code * scale as float64."""
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(r) / amax, np.float32(0)).astype(np.float32)
    codes = np.rint(x * inv)
    assert np.abs(codes).max() <= r
    return codes.astype(np.float64) * (amax / np.float32(r)).astype(np.float32)


def qk_range(hd: int) -> float:
    return float(np.floor(np.sqrt((2**31 - 1) / hd)))


def reference_int16(q, k, v, slot, lens, scale, tree_base=None, tree_bits=None):
    """float64 softmax(scale q.k) v with q, k and v quantized as the kernel does."""
    n, nh, hd = q.shape
    group = nh // k.shape[1]
    r = qk_range(hd)
    out = np.zeros((n, nh, hd))
    for i, ent in enumerate(entry_sets(lens, tree_base, tree_bits)):
        for h in range(nh):
            kk = quantized(k[slot[i], h // group][ent], r)
            vv = quantized(v[slot[i], h // group][ent], V_RANGE)
            s = kk @ quantized(q[i, h], r) * scale
            p = np.exp(s - s.max())
            out[i, h] = p @ vv / p.sum()
    return out


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("length", [1, 33, 700])
@pytest.mark.parametrize("group,hd", [(1, 64), (6, 128), (2, 80), (1, 72)])
def test_int16_rows_match_the_int16_reference(group, hd, length, tree, isa):
    q, k, v, slot, lens, scale, tb, tbits = make_case(
        group * 100 + hd + length, group, hd, length, tree=tree
    )
    if hd % 16:
        with pytest.raises(Exception, match="multiple of 16"):
            T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, isa=isa, int16_from=0)
        return
    got = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, isa=isa, int16_from=0)
    f32 = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, isa=isa)
    ref = reference_int16(q, k, v, slot, lens, scale, tb, tbits)
    # The probabilities' quantization (1 / 8,191 of a tile's largest) is all that is left:
    # measured 2e-4 to 3.4e-4 at most, 2.4e-5 to 4.5e-5 on average (bf16 rows sit 1e-2 from f32).
    np.testing.assert_allclose(got, ref, rtol=0, atol=1.5e-3)
    assert np.abs(got - ref).mean() < 2e-4
    assert np.abs(got - f32).max() < 5e-3
    if length > 1:
        assert not np.array_equal(got, f32), "int16 rows gave the f32 bits: the flag did nothing"


@pytest.mark.parametrize("kv", ["f16", "bf16"])
def test_int16_rows_on_a_typed_cache(kv):
    q, k, v, slot, lens, scale, _, _ = make_case(5, 6, 128, 300)
    kb, vb = to_bits(k, kv), to_bits(v, kv)
    got = T.cpu_attention(q, kb, vb, slot, lens, scale, kv_type=kv, int16_from=0)
    k32, v32 = from_bits(kb, kv), from_bits(vb, kv)
    # the cache's values converted to f32 exactly, then coded: the same bits as from f32 ones
    same = T.cpu_attention(q, k32, v32, slot, lens, scale, int16_from=0)
    assert np.array_equal(got.view(np.uint32), same.view(np.uint32))
    np.testing.assert_allclose(got, reference_int16(q, k32, v32, slot, lens, scale), atol=1.5e-3)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("group", [1, 6])
def test_int16_row_bits_do_not_depend_on_the_call(group, tree, isa):
    """Each row alone (int16), inside the whole call, with int16_from anywhere before it, and
    under another task split: the same bits. Rows before int16_from: the f32 bits."""
    case = make_case(11 + group, group, 128, 200, tree=tree)
    assert_prompt_row_bits_do_not_depend_on_the_call(case, "int16_from", isa=isa)


@pytest.mark.skipif(len(ISAS) < 2, reason="needs both builds (a CPU with AVX-512)")
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
def test_int16_builds_give_the_same_bits(tree):
    q, k, v, slot, lens, scale, tb, tbits = make_case(21, 6, 128, 700, tree=tree)
    a, b = (
        T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, isa=isa, int16_from=0)
        for isa in ISAS
    )
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("isa", ISAS)
def test_int16_blocks_follow_the_workers_not_the_bits(isa):
    assert_prompt_blocks_keep_the_bits("int16_from", isa=isa)


@pytest.mark.parametrize("hd", [128, 256])
def test_int16_sums_at_their_bounds_do_not_overflow(hd):
    """Every code at its largest: q . k = hd R^2 (positive or negative by the key's sign) and a
    uniform tile's output lane 32 x 8,191^2, both just under 2^31. A wrapped int32 would flip
    the scores' signs or the output's."""
    rng = np.random.default_rng(hd)
    n_ent = 200
    k = np.zeros((1, 1, 256, hd), np.float32)
    v = np.zeros_like(k)
    k[0, 0, :n_ent] = rng.choice([-1.0, 1.0], n_ent)[:, None]  # each key all +1 or all -1
    v[0, 0, :n_ent] = rng.choice([-3.0, 3.0], (n_ent, hd))
    q = np.full((2, 1, hd), 0.05, np.float32)  # row 0: scores +-0.05 hd * scale
    q[1] = 0.0  # row 1: uniform probabilities, every p' at 8,191
    slot = np.zeros(2, np.int32)
    lens = np.full(2, n_ent, np.int32)
    scale = np.float32(1 / np.sqrt(hd))
    got = T.cpu_attention(q, k, v, slot, lens, scale, int16_from=0)
    ref = reference_int16(q, k, v, slot, lens, scale)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3)
    np.testing.assert_allclose(got[1, 0], v[0, 0, :n_ent].mean(0), atol=2e-3)


def test_int16_zero_rows_give_zero_not_nan():
    """A query, key or value vector of zeros codes to zeros with scale 0 (no division by 0)."""
    q, k, v, slot, lens, scale, _, _ = make_case(3, 1, 64, 40)
    q[0] = 0.0
    k[0, :, 5] = 0.0
    v[0, :, 7] = 0.0
    got = T.cpu_attention(q, k, v, slot, lens, scale, int16_from=0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, reference_int16(q, k, v, slot, lens, scale), atol=1.5e-3)


def test_int16_and_bf16_rows_are_exclusive():
    q, k, v, slot, lens, scale, _, _ = make_case(3, 1, 64, 40)
    with pytest.raises(Exception, match="not both"):
        T.cpu_attention(q, k, v, slot, lens, scale, bf16_from=0, int16_from=0)
