"""The CUDA attention and KV cache kernels (cpp/kernels/cuda/attention.cuh) on the CPU through the
CUDA emulation (tests/cpp/cuda_emu.h), against the CPU backend, for every KV cache type.

Loads tests/cpp/emu_attention.cpp, built by CMake (native_build.py), and calls the header's own
plan and launch functions through ctypes. Checks: kv_write stores the CPU's bits; attention matches
the CPU backend for decode rows of different slots, verify blocks, tree rows and prefill chunks
(GQA groups 1, 2, 6; head_dim 64, 128, 256), with splits and their in-launch combine (granules of
32 entries dealt round up to 64 splits; up to 16K positions); a row's output is bitwise the same
alone, in any batch and over caches of any max_seq; a tree row equals the decode row of its
accepted path bit for bit; the split counters are back to 0; kv_copy."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda_helpers import emulation_library
from native import T as native

KV_TYPES = {"f32": 0, "f16": 1, "bf16": 2}
I32, F32 = ctypes.c_int, ctypes.c_float
SM = 132  # an H100's SM count: up to 64 splits
SLOW = pytest.mark.slow  # cases left to the whole suite (the fast tier runs one of each grid)


@pytest.fixture(scope="module")
def emu():
    return emulation_library("emu_attention")


@pytest.fixture(scope="module")
def cpu():
    return native.OpRunner("cpu")


def P(a: np.ndarray | None):
    return ctypes.c_void_p(0 if a is None else a.ctypes.data)


def to_cache(x: np.ndarray, kv: str) -> np.ndarray:
    """float32 values -> the cache's elements (float32, or uint16 bits rounded to nearest even)."""
    x = np.ascontiguousarray(x, np.float32)
    if kv == "f32":
        return x
    if kv == "f16":
        return x.astype(np.float16).view(np.uint16)
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_cache(c: np.ndarray, kv: str) -> np.ndarray:
    if kv == "f32":
        return c
    if kv == "f16":
        return c.view(np.float16).astype(np.float32)
    return (c.astype(np.uint32) << 16).view(np.float32)


def plan(emu, n, nh, nkv, hd, max_seq, sm=SM) -> dict:
    info = np.zeros(10, np.int64)
    assert emu.emu_attention_plan(n, nh, nkv, hd, max_seq, sm, P(info)) == 0
    keys = "hd_class tile_rows head_chunk chunk splits grid_x grid_y smem partial counters"
    return dict(zip(keys.split(), info.tolist(), strict=True))


class Case:
    """A cache [slots, layers, nkv, max_seq, hd] of random values and rows over it."""

    def __init__(self, seed, kv, nh, nkv, hd, max_seq, slots, layers=2, layer=1):
        rng = np.random.default_rng(seed)
        self.rng, self.kv, self.nh, self.nkv, self.hd = rng, kv, nh, nkv, hd
        self.max_seq, self.slots, self.layers, self.layer = max_seq, slots, layers, layer
        size = slots * layers * nkv * max_seq * hd
        self.k = to_cache(rng.standard_normal(size), kv)
        self.v = to_cache(rng.standard_normal(size), kv)

    def qkv(self, n):
        return self.rng.standard_normal((n, (self.nh + 2 * self.nkv) * self.hd)).astype(np.float32)

    def cpu(self, cpu, qkv, pos, slot, kv_idx=None, base=None, bits=None):
        extra = {}
        if kv_idx is not None:
            extra["kv_idx"] = [int(i) for i in kv_idx]
        if bits is not None:
            extra.update(tree_base=[int(b) for b in base], tree_bits=[int(b) for b in bits])
        return cpu.attention(
            qkv,
            [int(p) for p in pos],
            [int(s) for s in slot],
            self.nh,
            self.nkv,
            self.hd,
            1 / np.sqrt(self.hd),
            self.k,
            self.v,
            self.slots,
            self.layers,
            self.max_seq,
            self.layer,
            kv_type=self.kv,
            **extra,
        )

    def emu(
        self, emu, qkv, pos, slot, kv_idx=None, base=None, bits=None, k=None, v=None, sm=SM,
        warps=4, one_row=False,
    ):  # fmt: skip
        """kv_write then attention on copies of the cache (or k, v in place)."""
        n = len(pos)
        k = self.k.copy() if k is None else k
        v = self.v.copy() if v is None else v
        pos, slot = np.asarray(pos, np.int32), np.asarray(slot, np.int32)
        kv_idx = None if kv_idx is None else np.asarray(kv_idx, np.int32)
        base = None if base is None else np.asarray(base, np.int32)
        bits = None if bits is None else np.asarray(bits, np.uint64)
        t, dims = KV_TYPES[self.kv], (self.layers, self.max_seq, self.layer)
        shape = (I32(self.nh), I32(self.nkv), I32(self.hd))
        emu.emu_kv_write(
            P(qkv),
            P(pos),
            P(slot),
            P(kv_idx),
            I32(n),
            *shape,
            I32(t),
            P(k),
            P(v),
            I32(dims[0]),
            I32(dims[1]),
            I32(dims[2]),
        )
        pl = plan(emu, n, self.nh, self.nkv, self.hd, self.max_seq, sm)
        partial = np.full(max(pl["partial"], 1), np.nan, np.float32)
        counters = np.zeros(max(pl["counters"], 1), np.uint32)
        out = np.full((n, self.nh * self.hd), np.nan, np.float32)
        emu.emu_attention(
            P(qkv),
            P(pos),
            P(slot),
            P(kv_idx),
            P(base),
            P(bits),
            I32(n),
            *shape,
            F32(1 / np.sqrt(self.hd)),
            I32(t),
            P(k),
            P(v),
            I32(dims[0]),
            I32(dims[1]),
            I32(dims[2]),
            I32(sm),
            I32(warps),
            I32(int(one_row)),
            P(partial),
            P(counters),
            P(out),
        )
        assert not counters.any(), "split counters must be back to 0"
        return out, k, v, pl


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    b = b.astype(np.float64)
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


# Mixed rows over 4 slots (max_seq 640: 20 splits of 32): a verify block of 5 rows of slot 0
# across a split boundary, decode rows of slots 1 (many splits) and 2 (1 split), the 4 rows
# of a draft tree in slot 3 (root at 100; nodes 0, 1 children of the root, node 2 child of 1).
POS = [300, 301, 302, 303, 304, 520, 10, 100, 101, 101, 102]
SLOT = [0, 0, 0, 0, 0, 1, 2, 3, 3, 3, 3]
KV_IDX = [300, 301, 302, 303, 304, 520, 10, 100, 101, 102, 103]
BASE = [0, 0, 0, 0, 0, 0, 0, 100, 100, 100, 100]
BITS = [~0 & (2**64 - 1)] * 7 + [0b1, 0b11, 0b101, 0b1101]


@pytest.mark.parametrize("kv", list(KV_TYPES))
@pytest.mark.parametrize(
    "group,hd,nkv",
    [(2, 128, 1)] + [pytest.param(*c, marks=SLOW) for c in [(1, 64, 2), (6, 64, 1), (2, 256, 1)]],
)
def test_attention_mixed_rows(emu, cpu, kv: str, group: int, hd: int, nkv: int) -> None:
    c = Case(group * hd + len(kv), kv, group * nkv, nkv, hd, 640, 4)
    qkv = c.qkv(len(POS))
    out_c, k_c, v_c = c.cpu(cpu, qkv, POS, SLOT, KV_IDX, BASE, BITS)
    out, k, v, pl = c.emu(emu, qkv, POS, SLOT, KV_IDX, BASE, BITS)
    assert pl["splits"] == 20 and pl["chunk"] == 32
    np.testing.assert_array_equal(k, k_c)  # kv_write: the CPU's bits
    np.testing.assert_array_equal(v, v_c)
    assert np.isfinite(out).all()
    assert rel_err(out, out_c) < 2e-5
    # Every row alone gives its bits in the batch; so do the verify block and the tree alone.
    for i in range(len(POS)):
        one, _, _, _ = c.emu(
            emu,
            qkv[i : i + 1],
            POS[i : i + 1],
            SLOT[i : i + 1],
            KV_IDX[i : i + 1],
            BASE[i : i + 1],
            BITS[i : i + 1],
            k=k,
            v=v,
        )
        np.testing.assert_array_equal(one[0], out[i], err_msg=f"row {i}")
    sub = slice(1, 9)
    part, _, _, _ = c.emu(
        emu, qkv[sub], POS[sub], SLOT[sub], KV_IDX[sub], BASE[sub], BITS[sub], k=k, v=v
    )
    np.testing.assert_array_equal(part, out[sub])


@pytest.mark.parametrize("group, hd", [(6, 128), (7, 64), (2, 256)])
def test_eight_warps_give_the_four_warp_bits(emu, group: int, hd: int) -> None:
    """Blocks of 8 warps (CudaBackend::set_attention_warps(8); the persistent forward's
    attention) give every row the bits of the default 4-warp blocks: decode, verify and tree
    rows, several splits; each (row, head) pair's arithmetic does not depend on its warp."""
    c = Case(group * hd + 5, "f16", group, 1, hd, 640, 4)
    qkv = c.qkv(len(POS))
    four, k, v, pl4 = c.emu(emu, qkv, POS, SLOT, KV_IDX, BASE, BITS)
    eight, _, _, pl8 = c.emu(emu, qkv, POS, SLOT, KV_IDX, BASE, BITS, k=k, v=v, warps=8)
    assert pl4["splits"] == pl8["splits"] == 20
    assert np.isfinite(four).all()
    np.testing.assert_array_equal(eight, four)


@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("kv,hd", [("f16", 128), ("bf16", 64), ("f32", 128)])
def test_one_row_kernel_gives_the_general_bits(emu, kv: str, hd: int, warps: int) -> None:
    """The decode instance (kOneRow; CudaBackend::set_attention_one_row) gives a one-row launch
    the general kernel's bits: a short row (one split), a long one (several splits and tiles),
    and a row whose kv_idx is not its position."""
    c = Case(hd + warps, kv, 14, 2, hd, 640, 2)
    for pos, slot, kv_idx in (([9], [1], None), ([600], [0], None), ([300], [1], [77])):
        qkv = c.qkv(1)
        general, k, v, pl = c.emu(emu, qkv, pos, slot, kv_idx, warps=warps)
        one, _, _, _ = c.emu(emu, qkv, pos, slot, kv_idx, k=k, v=v, warps=warps, one_row=True)
        assert np.isfinite(general).all()
        np.testing.assert_array_equal(one, general)


@pytest.mark.parametrize(
    "kv", ["f32", pytest.param("f16", marks=SLOW), pytest.param("bf16", marks=SLOW)]
)
def test_tree_row_equals_accepted_decode_row(emu, kv: str) -> None:
    """Tree node 2 (cache index 103; ancestors at 100, 102) gives bitwise the output of the chain
    row at 102 once the accepted path sits at 100, 101, 102 (entries moved, logical order)."""
    c = Case(7, kv, 6, 1, 64, 640, 4)
    qkv = c.qkv(4)
    tree, k, v, _ = c.emu(emu, qkv, POS[7:], SLOT[7:], KV_IDX[7:], BASE[7:], BITS[7:])
    slot = np.full(2, 3, np.int32)
    src, dst = np.array([102, 103], np.int32), np.array([101, 102], np.int32)
    emu.emu_kv_copy(
        P(k),
        P(v),
        I32(KV_TYPES[kv]),
        I32(c.layers),
        I32(1),
        I32(c.max_seq),
        I32(64),
        P(slot),
        P(src),
        P(dst),
        I32(2),
    )
    # The chain row at position 102 reads entries [0, 102] in place (its own k, v already there).
    chain, _, _, _ = c.emu(emu, qkv[3:4], [102], [3], [102], k=k.copy(), v=v.copy())
    np.testing.assert_array_equal(chain[0], tree[3])
    # (kv_write rewrote 102 with the same k, v: the tree row's own values.)


@pytest.mark.parametrize(
    "kv", [pytest.param("f32", marks=SLOW), "f16", pytest.param("bf16", marks=SLOW)]
)
def test_prefill_chunk(emu, cpu, kv: str) -> None:
    """40 rows of one slot (tiles of 8 rows at group 2), across a split boundary."""
    c = Case(11, kv, 4, 2, 64, 512, 2)
    pos = list(range(230, 270))
    slot = [1] * len(pos)
    qkv = c.qkv(len(pos))
    out_c, _, _ = c.cpu(cpu, qkv, pos, slot)
    out, k, v, pl = c.emu(emu, qkv, pos, slot)
    assert pl["tile_rows"] == 8 and pl["splits"] == 16
    assert rel_err(out, out_c) < 2e-5
    one, _, _, _ = c.emu(emu, qkv[37:38], pos[37:38], slot[37:38], k=k, v=v)
    np.testing.assert_array_equal(one[0], out[37])


@SLOW
def test_long_context_16k(emu, cpu) -> None:
    """16,384 positions: granules of 32 dealt round 64 splits (8 granules per split for the
    longest row), merged in the launch; rows of 16,384 and 9,001 entries and a short one in a
    third slot."""
    c = Case(13, "f16", 2, 1, 64, 16384, 3, layers=1, layer=0)
    pos, slot = [16383, 9000, 5], [0, 1, 2]
    qkv = c.qkv(3)
    out_c, _, _ = c.cpu(cpu, qkv, pos, slot)
    out, k, v, pl = c.emu(emu, qkv, pos, slot)
    assert pl["splits"] == 64 and pl["chunk"] == 32
    assert rel_err(out, out_c) < 2e-5
    one, _, _, _ = c.emu(emu, qkv[1:2], pos[1:2], slot[1:2], k=k, v=v)
    np.testing.assert_array_equal(one[0], out[1])


@SLOW
@pytest.mark.parametrize("sm", [SM, 16])
def test_rows_same_bits_whatever_max_seq(emu, cpu, sm: int) -> None:
    """The same entries in caches of 4,096 and 16,384 positions: every row's output is the same
    bits (a row's granules go to the same splits whatever max_seq; 64 splits on an H100, 8 on a
    16-SM GPU, so the 3,001-entry row's splits read several granules each)."""
    a = Case(21, "f16", 6, 1, 64, 4096, 2, layers=1, layer=0)
    b = Case(21, "f16", 6, 1, 64, 16384, 2, layers=1, layer=0)
    for name in ("k", "v"):  # b's cache holds a's entries at the same positions
        big = getattr(b, name).reshape(2, 1, 1, 16384, 64)
        big[:, :, :, :4096] = getattr(a, name).reshape(2, 1, 1, 4096, 64)
    pos, slot = [3000, 127], [0, 1]
    qkv = a.qkv(2)
    out_a, _, _, pl_a = a.emu(emu, qkv, pos, slot, sm=sm)
    out_b, _, _, pl_b = b.emu(emu, qkv, pos, slot, sm=sm)
    assert pl_a["splits"] == pl_b["splits"] == min(64, sm // 2)
    np.testing.assert_array_equal(out_a, out_b)
    out_c, _, _ = a.cpu(cpu, qkv, pos, slot)
    assert rel_err(out_a, out_c) < 2e-5


def test_stale_entries_past_a_row_are_masked(emu) -> None:
    """inf in an f16 cache past a row's length (in its last tile) changes nothing."""
    c = Case(17, "f16", 2, 1, 64, 256, 1, layers=1, layer=0)
    qkv = c.qkv(1)
    ref, _, _, _ = c.emu(emu, qkv, [40], [0])
    k, v = c.k.copy(), c.v.copy()
    k.reshape(256, 64)[41:64] = 0x7C00  # +inf
    v.reshape(256, 64)[41:64] = 0x7C00
    out, _, _, _ = c.emu(emu, qkv, [40], [0], k=k, v=v)
    np.testing.assert_array_equal(out, ref)


def test_plan_rules(emu) -> None:
    """Tiles and splits come from the shape, max_seq and the SM count, never from n."""
    a, b = plan(emu, 1, 28, 4, 128, 32768), plan(emu, 200, 28, 4, 128, 32768)
    for key in ("hd_class", "tile_rows", "head_chunk", "chunk", "splits", "smem"):
        assert a[key] == b[key], key
    assert a["tile_rows"] == 2 and a["head_chunk"] == 7 and a["splits"] == 64
    assert a["chunk"] == 32  # granules dealt round the splits, whatever max_seq
    assert a["smem"] <= 48 * 1024 and plan(emu, 1, 16, 1, 256, 4096)["smem"] <= 48 * 1024
    assert plan(emu, 4, 8, 8, 64, 4096, sm=8)["splits"] == 4  # sm / 2 splits on a small GPU
    # The benchmark's 1.5B shape at max_seq 2,048: one key tile per split, so a decode row of
    # 128 entries is read by 4 blocks per kv head at once (was 1 block: 48 us on an H200).
    q = plan(emu, 1, 12, 2, 128, 2048)
    assert (q["chunk"], q["splits"]) == (32, 64)
    assert plan(emu, 1, 12, 2, 128, 100)["chunk"] == 32  # never under one key tile
    assert plan(emu, 1, 12, 2, 128, 100)["splits"] == 4  # no more splits than granules
    # One wave: work items (row, kv head chunk, split) dealt round at most 4 blocks per SM.
    for n, blocks in ((1, 128), (4, 512), (16, 4 * SM)):
        p = plan(emu, n, 12, 2, 128, 2048)
        assert (p["grid_x"], p["grid_y"]) == (blocks, 1), (n, p)
    info = np.zeros(10, np.int64)
    assert emu.emu_attention_plan(1, 8, 3, 64, 64, SM, P(info)) == -1  # 8 % 3
    assert emu.emu_attention_plan(1, 8, 8, 260, 64, SM, P(info)) == -1


@pytest.mark.parametrize("kv", list(KV_TYPES))
def test_kv_copy(emu, cpu, kv: str) -> None:
    rng = np.random.default_rng(3)
    slots, layers, nkv, max_seq, hd = 2, 3, 2, 32, 16
    size = slots * layers * nkv * max_seq * hd
    k, v = to_cache(rng.standard_normal(size), kv), to_cache(rng.standard_normal(size), kv)
    slot = np.array([0, 0, 0, 1, 1], np.int32)
    src = np.array([12, 14, -1, 7, 20], np.int32)  # in order; -1 and src == dst: no move
    dst = np.array([11, 12, 13, 7, 8], np.int32)
    args = (slots, layers, nkv, max_seq, hd, list(slot), list(src), list(dst))
    kc, vc = cpu.kv_copy(k, v, *args, kv_type=kv)
    kg, vg = k.copy(), v.copy()
    emu.emu_kv_copy(
        P(kg),
        P(vg),
        I32(KV_TYPES[kv]),
        I32(layers),
        I32(nkv),
        I32(max_seq),
        I32(hd),
        P(slot),
        P(src),
        P(dst),
        I32(len(slot)),
    )
    np.testing.assert_array_equal(kg, kc)
    np.testing.assert_array_equal(vg, vc)
    cache = k.reshape(slots, layers, nkv, max_seq, hd)
    moved = kc.reshape(slots, layers, nkv, max_seq, hd)
    np.testing.assert_array_equal(moved[0, :, :, 11], cache[0, :, :, 12])
    np.testing.assert_array_equal(moved[0, :, :, 12], cache[0, :, :, 14])
    np.testing.assert_array_equal(moved[1, :, :, 8], cache[1, :, :, 20])
    np.testing.assert_array_equal(moved[0, :, :, 13], cache[0, :, :, 13])
    assert from_cache(moved, kv).dtype == np.float32
