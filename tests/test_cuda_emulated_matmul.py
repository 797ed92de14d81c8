"""The fused CUDA matmul (cpp/kernels/cuda/matmul.cuh) on the CPU through the CUDA emulation
(tests/cpp/cuda_emu.h): every weight type x input transform x epilogue against numpy float64
references, bitwise row independence (a row's bits whatever n and the other rows: the greedy
exactness of speculative decoding), the RoPE + KV-cache epilogue for every cache type, split-K
determinism and counter reset, staging in pieces with several row groups per block, and the
fallback path.

tests/cpp/emu_matmul.cpp calls plan_matmul / launch_matmul, the host code the backend runs.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest
from cuda_helpers import emulation_library
from trt_spec import _core

TYPES = ["f32", "f16", "bf16", "q8", "q4"]
INS = {"plain": 0, "rmsnorm": 1, "swiglu": 2}
EPIS = {"store": 0, "accumulate": 1, "rope_kv": 2}
KV_TYPES = {"f32": 0, "f16": 1, "bf16": 2}
UNIT_COLS = {"f32": 8, "f16": 16, "bf16": 16, "q8": 32, "q4": 64}
# The emulation runs a std::thread per CUDA thread: CI runs a covering subset (every type,
# transform and epilogue at least once; tiles of 1, 8 and 16 + 1 rows); TRT_SPEC_EMU_FULL=1 runs
# the whole matrix (86 cases, about 25 minutes on 2 cores).
FULL = os.environ.get("TRT_SPEC_EMU_FULL") == "1"
NS = [1, 2, 3, 5, 9, 16, 17] if FULL else [1, 5, 17]
EPS = 1e-6
NH, NKV, HD = 4, 2, 16  # rope-kv: rows (NH + 2 NKV) HD = 128
SLOTS, LAYERS, LAYER, MAX_SEQ = 3, 2, 1, 64

P = ctypes.c_void_p


class EmuMatmul(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("blob", P),
        ("x", P),
        ("in_rows", P),
        ("in_mode", ctypes.c_int32),
        ("epi", ctypes.c_int32),
        ("norm_w", P),
        ("eps", ctypes.c_float),
        ("n_heads", ctypes.c_int32),
        ("bias", P),
        ("out", P),
        ("pos", P),
        ("slot", P),
        ("kv_idx", P),
        ("n_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("cos_t", P),
        ("sin_t", P),
        ("k", P),
        ("v", P),
        ("kv_type", ctypes.c_int32),
        ("layers", ctypes.c_int32),
        ("max_seq", ctypes.c_int32),
        ("layer", ctypes.c_int32),
        ("imma_rows", ctypes.c_int32),
        ("legacy_waves", ctypes.c_int32),
    ]


@pytest.fixture(scope="module")
def lib():
    return emulation_library("emu_matmul")


def ptr(a: np.ndarray | None) -> int:
    return 0 if a is None else a.ctypes.data


def aligned(a: np.ndarray, offset: int = 0) -> np.ndarray:
    """A copy of a whose data starts 64-byte aligned (plus offset bytes)."""
    raw = np.zeros(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def weight(rng: np.random.Generator, wtype: str, rows: int, cols: int):
    t = _core.weight_type_from_name(wtype)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    blob = aligned(np.asarray(_core.quantize_weight(w, t)))
    return t.value, blob, _core.dequantize_weight(blob, t, rows, cols).astype(np.float64)


def rope_tables():
    half = HD // 2
    ang = np.arange(MAX_SEQ, dtype=np.float32)[:, None] * (
        1.0 / 10000 ** (np.arange(half, dtype=np.float32) * 2 / HD)
    )
    return aligned(np.cos(ang).astype(np.float32)), aligned(np.sin(ang).astype(np.float32))


def rope_rows(n: int, with_kv_idx: bool):
    i = np.arange(n)
    slot = (i % SLOTS).astype(np.int32)
    pos = (i // SLOTS * 2 + 5).astype(np.int32)
    kv_idx = (pos + 20).astype(np.int32) if with_kv_idx else None
    return pos, slot, kv_idx


def new_cache(kv_type: str, rng: np.random.Generator):
    size = SLOTS * LAYERS * NKV * MAX_SEQ * HD
    vals = rng.standard_normal(size).astype(np.float32)
    if kv_type == "f32":
        return vals.copy(), vals.copy() + 1
    bits = rng.integers(0, 0x3C00, size, dtype=np.uint16)
    return bits.copy(), bits.copy() + 1


def launch(
    lib,
    t,
    blob,
    rows,
    cols,
    x,
    n,
    in_mode,
    epi,
    out,
    *,
    norm_w=None,
    bias=None,
    in_rows=None,
    rope=None,
    sm_count=1,
    counters=None,
    run=True,
    imma_rows=0,
    legacy_waves=0,
):
    """Plans (and runs) the product; returns the plan's info dict."""
    m = EmuMatmul(
        type=t,
        n=n,
        rows=rows,
        cols=cols,
        blob=ptr(blob),
        x=ptr(x),
        in_rows=ptr(in_rows),
        in_mode=INS[in_mode],
        epi=EPIS[epi],
        norm_w=ptr(norm_w),
        eps=EPS,
        bias=ptr(bias),
        out=ptr(out),
        imma_rows=imma_rows,
        legacy_waves=legacy_waves,
    )
    if rope is not None:
        m.n_heads, m.n_kv_heads, m.head_dim = NH, NKV, HD
        m.pos, m.slot, m.kv_idx = ptr(rope["pos"]), ptr(rope["slot"]), ptr(rope["kv_idx"])
        m.cos_t, m.sin_t = ptr(rope["cos"]), ptr(rope["sin"])
        m.k, m.v, m.kv_type = ptr(rope["k"]), ptr(rope["v"]), KV_TYPES[rope["kv_type"]]
        m.layers, m.max_seq, m.layer = LAYERS, MAX_SEQ, LAYER
    info = np.zeros(10, np.int64)
    rc = lib.emu_matmul(
        ctypes.byref(m), sm_count, 0, P(0), ctypes.c_int64(0), P(0), ctypes.c_int64(0), P(ptr(info))
    )
    keys = [
        "vectorized",
        "splits",
        "tile",
        "grid_x",
        "grid_y",
        "reps",
        "split_units",
        "partial_bytes",
        "counter_bytes",
        "imma",
    ]
    if rc != 0:
        return {"rc": rc}
    d = dict(zip(keys, (int(v) for v in info), strict=True), rc=0)
    if run:
        partial = np.full(max(d["partial_bytes"] // 4, 1), np.nan, np.float32)
        if counters is None:
            counters = np.zeros(max(d["counter_bytes"] // 4, 1), np.int32)
        rc = lib.emu_matmul(
            ctypes.byref(m),
            sm_count,
            1,
            P(ptr(partial)),
            ctypes.c_int64(partial.nbytes),
            P(ptr(counters)),
            ctypes.c_int64(counters.nbytes),
            P(ptr(info)),
        )
        assert rc == 0
        assert not counters.any(), "split-K counters must be back to zero"
    return d


def transform(x: np.ndarray, in_mode: str, g: np.ndarray | None, cols: int) -> np.ndarray:
    x = x.astype(np.float64)
    if in_mode == "rmsnorm":
        return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + EPS) * g
    if in_mode == "swiglu":
        gate, up = x[:, :cols], x[:, cols:]
        return gate / (1 + np.exp(-gate)) * up
    return x


def rope_ref(y: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    y = y.copy()
    half = HD // 2
    for h in range(NH + NKV):
        a = y[:, h * HD : h * HD + half].copy()
        b = y[:, h * HD + half : (h + 1) * HD].copy()
        c, s = cos[pos].astype(np.float64), sin[pos].astype(np.float64)
        y[:, h * HD : h * HD + half] = a * c - b * s
        y[:, h * HD + half : (h + 1) * HD] = b * c + a * s
    return y


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


def tol(wtype: str) -> float:
    return 2e-2 if wtype in ("q8", "q4") else 2e-5


class Case:
    """Inputs of one weight type / transform / epilogue, and its launches."""

    def __init__(
        self, lib, wtype, in_mode, epi, rows, cols, seed, x_offset=0, sm_count=1, n_max=17
    ):
        rng = np.random.default_rng(seed)
        self.lib, self.wtype, self.in_mode, self.epi = lib, wtype, in_mode, epi
        self.rows, self.cols, self.sm_count = rows, cols, sm_count
        self.t, self.blob, self.exact = weight(rng, wtype, rows, cols)
        width = 2 * cols if in_mode == "swiglu" else cols
        self.x = aligned((2 * rng.standard_normal((n_max, width))).astype(np.float32), x_offset)
        self.g = aligned(rng.standard_normal(cols).astype(np.float32))
        self.bias = aligned(rng.standard_normal(rows).astype(np.float32))
        self.out0 = rng.standard_normal((n_max, rows)).astype(np.float32)
        self.cos, self.sin = rope_tables()
        self.rng = rng

    def run(
        self,
        x: np.ndarray,
        n: int,
        *,
        kv_type="f32",
        with_kv_idx=False,
        in_rows=None,
        counters=None,
        start=None,
        imma_rows=0,
        legacy_waves=0,
    ):
        out = aligned((self.out0[:n] if start is None else start).copy())
        rope = None
        if self.epi == "rope_kv":
            pos, slot, kv_idx = rope_rows(n, with_kv_idx)
            k, v = new_cache(kv_type, np.random.default_rng(7))
            rope = dict(
                pos=pos,
                slot=slot,
                kv_idx=kv_idx,
                cos=self.cos,
                sin=self.sin,
                k=k,
                v=v,
                kv_type=kv_type,
            )
        bias = None if self.epi == "accumulate" else self.bias
        info = launch(
            self.lib,
            self.t,
            self.blob,
            self.rows,
            self.cols,
            x,
            n,
            self.in_mode,
            self.epi,
            out,
            norm_w=self.g,
            bias=bias,
            in_rows=in_rows,
            rope=rope,
            sm_count=self.sm_count,
            counters=counters,
            imma_rows=imma_rows,
            legacy_waves=legacy_waves,
        )
        return out, info, rope

    def reference(self, x: np.ndarray, n: int) -> np.ndarray:
        y = transform(x[:n], self.in_mode, self.g, self.cols) @ self.exact.T
        if self.epi == "accumulate":
            return self.out0[:n].astype(np.float64) + y
        y = y + self.bias
        if self.epi == "rope_kv":
            y = rope_ref(y, rope_rows(n, False)[0], self.cos, self.sin)
        return y

    def check(self, out: np.ndarray, x: np.ndarray, n: int) -> None:
        ref = self.reference(x, n)
        if self.epi == "accumulate":  # compare the added product
            got, ref = out.astype(np.float64) - self.out0[:n], ref - self.out0[:n]
        else:
            got = out
        assert rel_err(got, ref) < tol(self.wtype), (self.wtype, self.in_mode, self.epi, n)


MATRIX = [(t, i, e) for t in TYPES for i in INS for e in EPIS]
if not FULL:  # each type with two (transform, epilogue) pairs, all nine pairs covered
    MATRIX = [
        (t, i, e)
        for k, (t, i, e) in enumerate(MATRIX)
        if (k // 9 * 2 + 0) % 9 == k % 9 or (k // 9 * 2 + 5) % 9 == k % 9
    ]


# The fast tier's cases (-m "not slow"): three types, both transforms, two epilogues.
FAST_MATRIX = {
    ("f16", "swiglu", "accumulate"),
    ("q8", "swiglu", "store"),
    ("q4", "rmsnorm", "accumulate"),
}
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "wtype,in_mode,epi", [c if c in FAST_MATRIX else pytest.param(*c, marks=SLOW) for c in MATRIX]
)
def test_matmul_matrix(lib, wtype: str, in_mode: str, epi: str) -> None:
    """All n of NS against the reference; every row bitwise equal to the same row in any other
    launch (n = 1 of row 0, the n = 17 launch, a 1-row launch of row 16)."""
    rows = NH * HD + 2 * NKV * HD if epi == "rope_kv" else 71  # 71: an unpaired last row
    case = Case(
        lib,
        wtype,
        in_mode,
        epi,
        rows,
        256,
        seed=TYPES.index(wtype) * 9 + list(INS).index(in_mode) * 3 + list(EPIS).index(epi),
    )
    outs = {}
    for n in NS:
        out, info, _ = case.run(case.x, n)
        assert info["vectorized"] == 1 and info["splits"] == 1
        case.check(out, case.x, n)
        outs[n] = out
    for n in NS:
        np.testing.assert_array_equal(outs[n], outs[17][:n], err_msg=f"n={n}")
    last = aligned(case.x[16:17].copy())
    out16, _, _ = case.run(last, 1, start=case.out0[16:17])
    if epi != "rope_kv":  # (rope: row 16's position differs from row 0's)
        np.testing.assert_array_equal(out16, outs[17][16:])


@pytest.mark.parametrize("kv_type", list(KV_TYPES))
@pytest.mark.parametrize("with_kv_idx", [pytest.param(False, marks=SLOW), True])
@pytest.mark.parametrize("wtype", ["f16", "q4"])
def test_rope_kv_cache(lib, wtype: str, kv_type: str, with_kv_idx: bool) -> None:
    rows = (NH + 2 * NKV) * HD
    case = Case(lib, wtype, "rmsnorm", "rope_kv", rows, 128, seed=11)
    n = 9
    out, _, rope = case.run(case.x, n, kv_type=kv_type, with_kv_idx=with_kv_idx)
    case.check(out, case.x, n)
    k0, v0 = new_cache(kv_type, np.random.default_rng(7))
    idx = rope["kv_idx"] if with_kv_idx else rope["pos"]
    shape = (SLOTS, LAYERS, NKV, MAX_SEQ, HD)
    k, v = rope["k"].reshape(shape), rope["v"].reshape(shape)
    k0, v0 = k0.reshape(shape), v0.reshape(shape)
    for i in range(n):
        for g in range(NKV):
            for cache, base, h in ((k, k0, NH + g), (v, v0, NH + NKV + g)):
                want = out[i, h * HD : (h + 1) * HD]
                got = cache[rope["slot"][i], LAYER, g, idx[i]]
                if kv_type == "f32":
                    np.testing.assert_array_equal(got, want)
                elif kv_type == "f16":
                    np.testing.assert_array_equal(got, want.astype(np.float16).view(np.uint16))
                else:
                    b = want.view(np.uint32).astype(np.uint64)
                    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
                    np.testing.assert_array_equal(got, b)
                base[rope["slot"][i], LAYER, g, idx[i]] = got  # the only entries that change
    np.testing.assert_array_equal(k, k0)
    np.testing.assert_array_equal(v, v0)


SPLIT = [(t, e) for t in TYPES for e in EPIS]
if not FULL:
    SPLIT = [("q4", "rope_kv"), ("q8", "accumulate"), ("f16", "store")]


@SLOW
@pytest.mark.parametrize("wtype,epi", SPLIT)
def test_split_k(lib, wtype: str, epi: str) -> None:
    """96 units per row on 64 SMs: 3 splits; the result against the reference, rows bitwise
    independent of n, two launches (same counters, like a graph replay) bit-identical; 12 rows:
    one block runs both 8-row tiles of its split, each tile's arrival counted on its own."""
    rows = (NH + 2 * NKV) * HD if epi == "rope_kv" else 64
    case = Case(lib, wtype, "rmsnorm", epi, rows, 96 * UNIT_COLS[wtype], seed=5, sm_count=64)
    counters = None
    outs = {}
    for n in (1, 5, 12, 17) if epi == "store" else (1, 5, 17):
        out, info, _ = case.run(case.x, n, counters=counters)
        assert info["splits"] == 3 and info["split_units"] == 32, info
        if n <= 16:  # one wave: every tile of a (row group, split) in one block
            assert info["grid_x"] * info["grid_y"] == ((rows + 15) // 16) * 3, info
        case.check(out, case.x, n)
        outs[n] = out
        if n == (12 if epi == "store" else 5):
            counters = np.zeros(info["counter_bytes"] // 4, np.int32)
            again, _, _ = case.run(case.x, n, counters=counters)
            again2, _, _ = case.run(case.x, n, counters=counters)
            np.testing.assert_array_equal(again, out)
            np.testing.assert_array_equal(again2, out)
            counters = None
    for n in (1, 5, 12) if epi == "store" else (1, 5):
        np.testing.assert_array_equal(outs[n], outs[17][:n])


@pytest.mark.parametrize("wtype", ["f16", pytest.param("q4", marks=SLOW)])
def test_staging_pieces_and_row_group_reps(lib, wtype: str) -> None:
    """80 units per row: staged in 3 pieces for a 16-row tile and 2 for an 8-row one (1 for one
    row), and 64 row pairs (8 row groups) on 1 SM: row groups per block (reps) 3 for one row
    (one wave of 3 resident blocks), 4 for an 8-row tile (2 resident) and for two 8-row tiles
    (12 rows: a block runs both tiles), 2 for two 16-row tiles (groups / 4 SMs, a block per
    tile). A lane fetches each unit one ahead, across pieces, reps and tiles: against the
    reference, rows bitwise independent of n."""
    case = Case(lib, wtype, "rmsnorm", "store", 128, 80 * UNIT_COLS[wtype], seed=11)
    outs = {}
    for n, reps, grid_x in ((1, 3, 3), (5, 4, 2), (12, 4, 2), (17, 2, 8)):
        out, info, _ = case.run(case.x, n)
        assert (info["reps"], info["splits"], info["grid_x"]) == (reps, 1, grid_x), info
        case.check(out, case.x, n)
        outs[n] = out
    for n in (1, 5, 12):
        np.testing.assert_array_equal(outs[n], outs[17][:n])


@SLOW
@pytest.mark.parametrize("wtype", ["q4", "f16"])
def test_earlier_grids_behind_the_switch(lib, wtype: str) -> None:
    """plan_matmul's one_wave false (the CUDA backend's set_one_wave(False), for timing both in
    one GPU run): the earlier grids (a block per tile, reps at most 8, splits ceil(2 SMs /
    groups)), rows still bitwise independent of n, against the reference."""
    case = Case(lib, wtype, "rmsnorm", "store", 128, 80 * UNIT_COLS[wtype], seed=11)
    outs = {}
    for n, reps, grid_x in ((1, 3, 3), (5, 4, 2), (12, 8, 2), (17, 2, 8)):
        out, info, _ = case.run(case.x, n, legacy_waves=1)
        assert (info["reps"], info["splits"], info["grid_x"]) == (reps, 1, grid_x), info
        case.check(out, case.x, n)
        outs[n] = out
    for n in (1, 5, 12):
        np.testing.assert_array_equal(outs[n], outs[17][:n])
    split = Case(lib, wtype, "rmsnorm", "store", 64, 140 * UNIT_COLS[wtype], seed=3, sm_count=64)
    new, info_new, _ = split.run(split.x, 12)
    old, info_old, _ = split.run(split.x, 12, legacy_waves=1)
    # 4 row groups on 64 SMs: floor or ceil of 128 / 4, at most units / 32 = 4 splits, whole
    # lane rounds of 64 units: 3 either way; the grids differ in tiles only.
    assert info_new["splits"] == info_old["splits"] == 3
    assert info_old["grid_x"] == 2 * info_new["grid_x"]
    split.check(new, split.x, 12)
    split.check(old, split.x, 12)


IMMA = [
    ("q4", "rmsnorm", "store", 1),
    ("q8", "swiglu", "accumulate", 1),
    ("q4", "plain", "rope_kv", 64),
]


@SLOW
@pytest.mark.parametrize("wtype,in_mode,epi,sm_count", IMMA)
def test_imma_rows_bitwise(lib, wtype: str, in_mode: str, epi: str, sm_count: int) -> None:
    """q8 / q4 products on the tensor-core kernel (matmul_imma.cuh, imma_rows 2: off by default):
    40 rows (three 16-row tiles, the last of 8) and a 5-row verify pass (one partial tile), 70
    units per row (9 pieces of 8 units: two rounds of the 32 virtual lanes and part of a third,
    the last piece of 6), an unpaired last output row or rope pairs, one split or two (64 SMs):
    against the reference, and every row the bits of the one-row decode kernel (rows 0 and 39
    launched alone). The default plan keeps the dp4a tiles (test_plan)."""
    rows = (NH + 2 * NKV) * HD if epi == "rope_kv" else 71
    cols = 70 * UNIT_COLS[wtype]
    case = Case(lib, wtype, in_mode, epi, rows, cols, seed=13, sm_count=sm_count, n_max=40)
    out, info, _ = case.run(case.x, 40, imma_rows=2)
    assert info["imma"] == 1 and info["tile"] == 16 and info["reps"] == 1, info
    assert info["splits"] == (2 if sm_count == 64 else 1), info
    case.check(out, case.x, 40)
    one, info1, _ = case.run(case.x, 1, imma_rows=2)
    assert info1["imma"] == 0 and info1["tile"] == 1, info1
    np.testing.assert_array_equal(one, out[:1])
    five, info5, _ = case.run(case.x, 5, imma_rows=2)
    assert info5["imma"] == 1 and info5["tile"] == 16, info5
    np.testing.assert_array_equal(five, out[:5])
    if epi != "rope_kv":  # (rope: row 39's position differs from row 0's)
        last = aligned(case.x[39:40].copy())
        alone, _, _ = case.run(last, 1, start=case.out0[39:40])
        np.testing.assert_array_equal(alone, out[39:])


@pytest.mark.parametrize("wtype", TYPES)
def test_gather(lib, wtype: str) -> None:
    """Output head: gathered rows + final norm; row i equals the ungathered row in_rows[i]."""
    case = Case(lib, wtype, "rmsnorm", "store", 40, 128, seed=3)
    full, _, _ = case.run(case.x, 17)
    in_rows = np.array([16, 3, 3, 0, 9], np.int32)
    out, _, _ = case.run(case.x, 5, in_rows=in_rows)
    np.testing.assert_array_equal(out, full[in_rows])


@pytest.mark.parametrize(
    "wtype,cols,x_offset", [("f16", 75, 0), ("f32", 100, 0), ("q8", 128, 4), ("bf16", 128, 8)]
)
@pytest.mark.parametrize("epi", ["store", pytest.param("rope_kv", marks=SLOW)])
def test_fallback(lib, wtype: str, cols: int, x_offset: int, epi: str) -> None:
    """Columns that are no whole units or an unaligned x: the scalar kernel, same results."""
    rows = (NH + 2 * NKV) * HD if epi == "rope_kv" else 30
    for in_mode in ("plain", "rmsnorm"):
        case = Case(lib, wtype, in_mode, epi, rows, cols, seed=9, x_offset=x_offset)
        outs = {}
        for n in (1, 3, 17):
            out, info, _ = case.run(case.x, n)
            assert info["vectorized"] == 0
            tolerance = 2e-5
            assert rel_err(out, case.reference(case.x, n)) < tolerance
            outs[n] = out
        np.testing.assert_array_equal(outs[1], outs[17][:1])
        np.testing.assert_array_equal(outs[3], outs[17][:3])


def test_plan(lib) -> None:
    """Splits depend on the shape and the SM count only; bad arguments are rejected."""
    rng = np.random.default_rng(0)
    t, blob, _ = weight(rng, "q4", 64, 96 * 64)
    x = aligned(np.zeros((40, 96 * 64), np.float32))
    out = aligned(np.zeros((40, 64), np.float32))
    plans = [
        launch(lib, t, blob, 64, 96 * 64, x, n, "plain", "store", out, sm_count=64, run=False)
        for n in (1, 2, 5, 16, 17, 40)
    ]
    assert {p["splits"] for p in plans} == {3}
    assert {p["imma"] for p in plans} == {0}  # the tensor-core kernel: off by default
    assert [p["tile"] for p in plans] == [1, 2, 8, 8, 16, 16]  # 9 to 16 rows: two 8-row tiles
    assert (
        launch(lib, t, blob, 64, 96 * 64, x, 1, "plain", "store", out, sm_count=1, run=False)[
            "splits"
        ]
        == 1
    )
    # rope-kv with rows that are not (n_heads + 2 n_kv_heads) head_dim; accumulate with a bias
    cos, sin = rope_tables()
    k, v = new_cache("f32", rng)
    pos, slot, _ = rope_rows(1, False)
    rope = dict(pos=pos, slot=slot, kv_idx=None, cos=cos, sin=sin, k=k, v=v, kv_type="f32")
    assert (
        launch(lib, t, blob, 64, 96 * 64, x, 1, "plain", "rope_kv", out, rope=rope, run=False)["rc"]
        == -2
    )
    assert (
        launch(lib, t, blob, 64, 96 * 64, x, 1, "plain", "accumulate", out, bias=out[0], run=False)[
            "rc"
        ]
        == -2
    )
    assert launch(lib, t, blob, 64, 96 * 64, x, 0, "plain", "store", out, run=False)["rc"] == -2
