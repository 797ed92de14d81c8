"""CPU kernels (cpp/kernels/cpu) against numpy references, for every ISA this CPU runs.

- f16 / bf16 conversions: exact against numpy / torch (all 65536 halves, random bit patterns).
- quantize_weight / dequantize_weight: the blob layout of kernels/weight_format.h decoded by an
  independent numpy reader, and per-type error bounds (Q8: |err| <= d/2; Q4: |err| <= d/2 where
  the value is not clipped, and the (d, m) search beats plain min/max).
- quantize_acts (the Q8 / Q4 kernels' activations): bit for bit against numpy.
- cpu_matmul: every weight type, shapes (cols 64 .. 8960, rows in partial and whole blocks, one
  row), every tile height M (1 .. 12, 33, prefill-sized M), row sub-ranges; a row's bits
  whatever M (up to 160, several column and activation-row blocks) and whatever rows share the
  call; the repacked weights of the CPU backend (the same bits; another ISA's layout refused).
  The reference is numpy in float64 on the DEQUANTIZED weights (quantization error is not the
  kernel's error); for Q8/Q4 the activations are quantized in numpy exactly as quantize_acts
  does, so the results agree to ~1e-5 relative; a looser bound checks them against the exact
  float activations too.
- swiglu_rows against float64, its bits independent of a value's column.

The fast tier (-m "not slow") runs a few shapes and tile heights of each grid; the whole suite
runs every case.
"""

from __future__ import annotations

import numpy as np
import pytest
from native import T, wt
from trt_spec import _core

WT = _core.WeightType
ISAS = T.cpu_isas()
ALL_TYPES = ["F32", "F16", "BF16", "Q8", "Q4"]
QUANT = {"Q8", "Q4"}
SECTION_ALIGN = 64
GROUP = 32


# ---------------------------------------------------------------------------------------------
# numpy side of the contract


def _align(n: int) -> int:
    return (n + SECTION_ALIGN - 1) // SECTION_ALIGN * SECTION_ALIGN


def section_sizes(t: str, rows: int, cols: int) -> list[int]:
    n = rows * cols
    return {
        "F32": [4 * n],
        "F16": [2 * n],
        "BF16": [2 * n],
        "Q8": [n, 2 * (n // GROUP)],
        "Q4": [n // 2, 2 * (n // GROUP), 2 * (n // GROUP)],
    }[t]


def sections(blob: np.ndarray, t: str, rows: int, cols: int) -> list[np.ndarray]:
    out, off = [], 0
    for size in section_sizes(t, rows, cols):
        out.append(blob[off : off + size])
        off += _align(size)
    assert off == blob.size, "blob size must be the sum of 64-byte aligned sections"
    return out


def q4_parts(blob, rows, cols):
    """codes [rows, cols] (int), d, m [rows, cols/32] (float32) of a Q4 blob."""
    q, d, m = sections(blob, "Q4", rows, cols)
    sb = q.reshape(rows, cols // 64, 32)
    codes = np.concatenate([sb & 0xF, sb >> 4], axis=2).reshape(rows, cols).astype(np.int64)
    f = lambda s: s.view(np.float16).astype(np.float32).reshape(rows, cols // GROUP)  # noqa: E731
    return codes, f(d), f(m)


def np_dequantize(blob: np.ndarray, t: str, rows: int, cols: int) -> np.ndarray:
    """Independent decode of a blob, from the layout comments of weight_format.h."""
    s = sections(blob, t, rows, cols)
    if t == "F32":
        return s[0].view(np.float32).reshape(rows, cols)
    if t == "F16":
        return s[0].view(np.float16).astype(np.float32).reshape(rows, cols)
    if t == "BF16":
        return (s[0].view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    if t == "Q8":
        q = s[0].astype(np.float32).reshape(rows, cols // GROUP, GROUP) - 128
        d = s[1].view(np.float16).astype(np.float32).reshape(rows, cols // GROUP, 1)
        return (d * q).reshape(rows, cols)
    codes, d, m = q4_parts(blob, rows, cols)
    d = np.repeat(d, GROUP, axis=1)
    m = np.repeat(m, GROUP, axis=1)
    return d * codes.astype(np.float32) + m


def np_quantize_acts(x: np.ndarray):
    """quantize_acts in float32, bit for bit: d = max|x| / 127, q = rint(x * (1 / d))."""
    M, cols = x.shape
    xg = x.reshape(M, cols // GROUP, GROUP)
    d = np.abs(xg).max(axis=2) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d > 0)
    q = np.rint(xg * inv[..., None])
    return q.reshape(M, cols), d


def rand_weights(rows: int, cols: int, seed: int, scale: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    w.flat[3 % w.size] = 8 * scale  # outliers and a constant group, like real weights
    w.flat[w.size // 2] = -10 * scale
    if rows >= 2 and cols >= GROUP:
        w[1, :GROUP] = 0.25
    return w


# ---------------------------------------------------------------------------------------------
# conversions


def test_cpu_isas():
    assert ISAS[0] == "avx2"  # the floor, listed first
    assert set(ISAS) <= {"avx2", "avx512"}


def test_f16_decode_all_halves():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = _core.dequantize_weight(h.view(np.uint8), WT.F16, 1, 65536)[0]
    ref = h.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def test_bf16_decode_all():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = _core.dequantize_weight(h.view(np.uint8), WT.BF16, 1, 65536)[0]
    assert np.array_equal(got.view(np.uint32), h.astype(np.uint32) << 16)


def _conversion_inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32)
    near = rng.integers(0x33000000, 0x48000000, 200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array(
        [
            0,
            0x80000000,
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0x477FEFFF,
            0x477FF000,
            0x477FE000,
            0x33000000,
            0x33000001,
            0x387FC000,
            0x387FE000,
            0x38800000,
            0x7F7FFFFF,
            0x3F808000,
            0x3F818000,
            0x00000001,
            0x7F7F8000,
        ],
        dtype=np.uint32,
    )
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    every_half = halves.astype(np.float32).view(np.uint32)  # each encodes back to its own bits
    return np.concatenate([special, bits, near, every_half]).view(np.float32)


def test_f32_to_f16_rne():
    f = _conversion_inputs()
    got = _core.quantize_weight(f[None, :], WT.F16).view(np.uint16)[: f.size]
    with np.errstate(over="ignore"):
        ref = f.astype(np.float16).view(np.uint16)
    nan = np.isnan(f)
    assert np.all((got[nan] & 0x7FFF) > 0x7C00)
    assert np.array_equal(got[~nan], ref[~nan])


def test_f32_to_bf16_rne():
    torch = pytest.importorskip("torch")
    f = _conversion_inputs()
    got = _core.quantize_weight(f[None, :], WT.BF16).view(np.uint16)[: f.size]
    ref = torch.from_numpy(f.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(f)
    assert np.all((got[nan] & 0x7FFF) > 0x7F80)
    assert np.array_equal(got[~nan], ref[~nan])


# ---------------------------------------------------------------------------------------------
# quantize / dequantize


@pytest.mark.parametrize("shape", [(1, 64), (3, 128), (40, 896), (9, 4864)])
@pytest.mark.parametrize("t", ALL_TYPES)
def test_quantize_roundtrip(t, shape):
    rows, cols = shape
    w = rand_weights(rows, cols, seed=rows * cols, scale=0.02)
    blob = _core.quantize_weight(w, getattr(WT, t))
    assert blob.dtype == np.uint8
    deq = _core.dequantize_weight(blob, getattr(WT, t), rows, cols)
    assert np.array_equal(deq, np_dequantize(blob, t, rows, cols))  # layout as documented
    # Section padding is zeroed.
    off = 0
    for size in section_sizes(t, rows, cols):
        assert not blob[off + size : off + _align(size)].any()
        off += _align(size)
    err = np.abs(deq.astype(np.float64) - w)
    if t == "F32":
        assert np.array_equal(deq, w)
    elif t == "F16":
        assert np.array_equal(deq, w.astype(np.float16).astype(np.float32))
    elif t == "BF16":
        assert np.all(err <= np.abs(w) * 2.0**-8)
    elif t == "Q8":
        d = np.repeat(sections(blob, t, rows, cols)[1].view(np.float16).astype(np.float32), 32)
        assert np.all(err.ravel() <= d * 0.5 * (1 + 1e-3) + 1e-12)
    else:
        codes, d, m = q4_parts(blob, rows, cols)
        assert codes.min() >= 0 and codes.max() <= 15
        d, m = np.repeat(d, GROUP, axis=1), np.repeat(m, GROUP, axis=1)
        inside = (w >= m - d / 2) & (w <= m + 15.5 * d)  # not clipped by the (d, m) choice
        bound = d * 0.5 * (1 + 1e-3) + np.abs(m) * 2.0**-11 + 1e-12
        assert np.all(err[inside] <= bound[inside])
        # The search must beat plain min/max (with f16-rounded d, m) on the whole tensor.
        wg = w.reshape(-1, GROUP)
        lo, hi = wg.min(1, keepdims=True), wg.max(1, keepdims=True)
        dm = ((hi - lo) / 15).astype(np.float16).astype(np.float32)
        mm = lo.astype(np.float16).astype(np.float32)
        inv = np.divide(1, dm, out=np.zeros_like(dm), where=dm > 0)
        c = np.clip(np.rint((wg - mm) * inv), 0, 15)
        minmax_err = np.sum((dm * c + mm - wg).astype(np.float64) ** 2)
        assert np.sum(err**2) <= minmax_err


def test_quantize_rejects_bad_cols():
    with pytest.raises(Exception):  # noqa: B017 - the bindings map it to their own error type
        _core.quantize_weight(np.zeros((2, 96), np.float32), WT.Q4)


# ---------------------------------------------------------------------------------------------
# matmul

# The grid, by what each axis reaches in the kernels (matmul_tiling.h, matmul_*_impl.h):
# - shapes: cols with a 64-column tail (64, 192, 320, 448), whole 128-column chunks (384, 896,
#   1536), several column blocks (4864, 8960); rows in partial blocks (1, 3, 5, 7, 9, 17, 33, 130)
#   and whole blocks of 16 (16, 32, 48: the AVX-512 tile's Rows16 layout needs whole ones);
# - M: one tile of M activation rows up to 9 (float) or kQuantMt (6 or 8 on AVX2, 12 on
#   AVX-512), balanced tiles past that, several activation-row blocks past 64;
# - a row sub-range [r0, r1) (rows outside stay untouched).
SHAPES = [(1, 64), (7, 64), (3, 192), (9, 320), (6, 384), (5, 448), (33, 896), (130, 1536),
          (17, 4864), (16, 64), (32, 896), (48, 1536), (32, 4864)]  # fmt: skip
FAST_SHAPES = {(7, 64), (33, 896), (48, 1536), (17, 4864)}
MS = list(range(1, 13)) + [33]
FAST_MS = {1, 5, 12, 33}
_blob_cache: dict = {}


def _weights(t: str, rows: int, cols: int):
    key = (t, rows, cols)
    if key not in _blob_cache:
        w = rand_weights(rows, cols, seed=rows * 31 + cols)
        blob = _core.quantize_weight(w, getattr(WT, t))
        _blob_cache[key] = (blob, np_dequantize(blob, t, rows, cols))
    return _blob_cache[key]


def check_matmul(isa: str, t: str, rows: int, cols: int, M: int, r0: int, r1: int):
    blob, wd = _weights(t, rows, cols)
    x = np.random.default_rng(M * 7 + cols).standard_normal((M, cols)).astype(np.float32)
    y = T.cpu_matmul(blob, wt(getattr(WT, t)), rows, cols, x, isa, r0, r1)
    assert y.shape == (M, rows) and y.dtype == np.float32
    if t in QUANT:  # the weights the CPU backend repacks at load (repack_lanes.h): the same bits
        y_lanes = T.cpu_matmul(blob, wt(getattr(WT, t)), rows, cols, x, isa, r0, r1, lanes=True)
        assert np.array_equal(y_lanes.view(np.uint32), y.view(np.uint32))
    assert not y[:, :r0].any() and not y[:, r1:].any()
    y = y[:, r0:r1].astype(np.float64)
    w64 = wd[r0:r1].astype(np.float64)
    if t in QUANT:
        q, d = np_quantize_acts(x)
        xr = (q.reshape(M, -1, GROUP) * d[..., None]).reshape(M, cols).astype(np.float64)
    else:
        xr = x.astype(np.float64)
    ref = xr @ w64.T
    # Error scale: the sum of |terms| (for Q4 the kernel adds d*code and m terms separately).
    wabs = np.abs(w64)
    if t == "Q4":
        wabs = wabs + 2 * np.repeat(np.abs(q4_parts(blob, rows, cols)[2][r0:r1]), GROUP, axis=1)
    mag = np.abs(xr) @ wabs.T
    np.testing.assert_array_less(np.abs(y - ref), 2e-5 * mag + 1e-30)
    if t in QUANT:  # against the exact activations: |x - d q| <= d / 2 per element
        exact = x.astype(np.float64) @ w64.T
        bound = (np.repeat(d, GROUP, axis=1) * 0.5) @ np.abs(w64).T
        np.testing.assert_array_less(np.abs(y - exact), bound * 1.001 + 2e-5 * mag + 1e-30)


def _row_range(rows: int) -> tuple[int, int]:
    """A sub-range that cuts a row block at both ends (an empty one for a single row)."""
    return (0, 0) if rows == 1 else ((1, rows) if rows <= 3 else (1, rows - 2))


def _slow_unless(fast: bool, value, id: str | None = None):
    """One case of a grid: in the fast tier, or marked slow (the full suite runs both)."""
    return pytest.param(value, marks=() if fast else pytest.mark.slow, id=id)


@pytest.mark.parametrize(
    "shape", [_slow_unless(s in FAST_SHAPES, s, f"{s[0]}x{s[1]}") for s in SHAPES]
)
@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_shapes(isa, t, shape):
    """Every shape at one activation row, a row sub-range of five and nine rows."""
    rows, cols = shape
    check_matmul(isa, t, rows, cols, 1, 0, rows)
    check_matmul(isa, t, rows, cols, 5, *_row_range(rows))
    check_matmul(isa, t, rows, cols, 9, 0, rows)


@pytest.mark.parametrize("M", [_slow_unless(m in FAST_MS, m) for m in MS])
@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_rows(isa, t, M):
    """Every tile height (and past it), over partial and whole row blocks."""
    check_matmul(isa, t, 33, 896, M, *_row_range(33))
    check_matmul(isa, t, 48, 1536, M, 0, 48)


@pytest.mark.slow
@pytest.mark.parametrize(
    "rows,cols,M,r0,r1", [(6, 4864, 77, 1, 6), (5, 4864, 130, 0, 5), (40, 8960, 70, 3, 37),
                          (48, 8960, 30, 5, 43)]
)  # fmt: skip
@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_large_m(isa, t, rows, cols, M, r0, r1):
    """Prefill-sized M: tiled over M, in several activation-row and column blocks."""
    check_matmul(isa, t, rows, cols, M, r0, r1)


@pytest.mark.parametrize("shape", [(5, 100), (3, 7), (9, 33), (4, 1)])
@pytest.mark.parametrize("t", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_float_any_cols(isa, t, shape):
    """Float weights of any width: columns past the last whole vector step."""
    for M in (1, 3, 12):
        check_matmul(isa, t, shape[0], shape[1], M, 0, shape[0])


@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_isas_agree(isa, t):
    """Every ISA gives the same answer up to summation order."""
    blob, _ = _weights(t, 130, 1536)
    x = np.random.default_rng(5).standard_normal((5, 1536)).astype(np.float32)
    y = T.cpu_matmul(blob, wt(getattr(WT, t)), 130, 1536, x, isa)
    y0 = T.cpu_matmul(blob, wt(getattr(WT, t)), 130, 1536, x, ISAS[0])
    np.testing.assert_allclose(y, y0, rtol=1e-4, atol=1e-4 * np.abs(y0).max())


@pytest.mark.parametrize("isa", ISAS)
def test_quantize_acts_exact(isa):
    """quantize_acts bit for bit (np_quantize_acts; ds = d * sum(q) per group, in float32) over
    ordinary values, a zero group, a constant group and huge and tiny magnitudes."""
    rng = np.random.default_rng(3)
    for M, cols in ((1, 64), (13, 4864)):
        x = rng.standard_normal((M, cols)).astype(np.float32)
        if M > 4:
            x[1, :GROUP] = 0
            x[2, GROUP : 2 * GROUP] = 7.5
            x[3, 2 * GROUP : 3 * GROUP] *= np.float32(1e30)
            x[4, 3 * GROUP : 4 * GROUP] *= np.float32(1e-30)
        q, d, ds = T.cpu_quantize_acts(x, isa)
        rq, rd = np_quantize_acts(x)
        assert np.array_equal(q, rq.astype(np.int8))
        assert np.array_equal(d.view(np.uint32), rd.view(np.uint32))
        rds = rd * rq.reshape(M, -1, GROUP).sum(axis=2).astype(np.float32)
        assert np.array_equal(ds.view(np.uint32), rds.view(np.uint32))


LAYOUT = {"avx2": 1, "avx512": 2}  # the CodeLayout of each ISA's quantized tile: Rows8, Rows16


@pytest.mark.parametrize("t", sorted(QUANT))
@pytest.mark.parametrize("isa", ISAS)
def test_repacked_layouts(isa, t):
    """The CPU backend's repacked copy (lanes=True) is in this ISA's own layout and gives the
    natural codes' bits; codes repacked for the other ISA's tile are refused, not misread."""
    rows, cols = 32, 896
    blob, _ = _weights(t, rows, cols)
    x = np.random.default_rng(2).standard_normal((5, cols)).astype(np.float32)
    args = (blob, wt(getattr(WT, t)), rows, cols, x, isa)
    natural = T.cpu_matmul(*args)
    own = T.cpu_matmul(*args, lanes=True, layout=LAYOUT[isa])
    assert np.array_equal(own.view(np.uint32), natural.view(np.uint32))
    with pytest.raises(ValueError, match="another ISA"):
        T.cpu_matmul(*args, lanes=True, layout=3 - LAYOUT[isa])


def test_swiglu_rows():
    """silu(g) * u against float64 over ordinary values, the exp clamps (|g| near and past 88)
    and widths with a partial last vector; a value's bits do not depend on its column."""
    cpu = T.OpRunner("cpu")
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, 1e-30, -87.0, -88.5, -100.0, 87.0, 89.0, 100.0], np.float32)
    for ffn in (8, 13, 64, 8960 + 3):
        gu = (4 * rng.standard_normal((3, 2 * ffn))).astype(np.float32)
        gu[0, : min(ffn, special.size)] = special[:ffn]
        out = cpu.swiglu(gu)
        g, u = gu[:, :ffn].astype(np.float64), gu[:, ffn:].astype(np.float64)
        want = g / (1 + np.exp(-g)) * u
        np.testing.assert_array_less(np.abs(out - want), 2e-6 * np.abs(want) + 1e-30)
        # Row 1 one column to the right (gate and up): every value in another lane.
        shifted = np.full((1, 2 * (ffn + 1)), 0.5, np.float32)
        shifted[0, 1 : ffn + 1] = gu[1, :ffn]
        shifted[0, ffn + 2 :] = gu[1, ffn:]
        assert np.array_equal(cpu.swiglu(shifted)[0, 1:].view(np.uint32), out[1].view(np.uint32))


def test_matmul_bad_isa():
    blob, _ = _weights("F32", 7, 64)
    with pytest.raises(Exception):  # noqa: B017
        T.cpu_matmul(blob, wt(WT.F32), 7, 64, np.zeros((1, 64), np.float32), "sse9")


@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_rows_are_bit_identical_whatever_m(isa, t):
    """For any M, a row's result does not depend on how many rows share the call: a verify pass
    of K+1 rows, a batch or a prefill chunk gives the logits of single decode steps, bit for bit,
    which makes greedy speculation exact. The shapes make the kernels block columns (4864 columns
    exceed one column block for M >= 2 or 5) and activation rows (more than one block of rows)."""
    rows, cols, n = 75, 4864, 160
    blob, _ = _weights(t, rows, cols)
    x = np.random.default_rng(5).normal(size=(n, cols)).astype(np.float32)
    single = np.stack(
        [T.cpu_matmul(blob, wt(getattr(WT, t)), rows, cols, x[i : i + 1], isa)[0] for i in range(n)]
    )
    for m in (2, 5, 9, 10, 17, 36, 64, 65, 100, 128, 160):
        got = T.cpu_matmul(blob, wt(getattr(WT, t)), rows, cols, x[:m], isa)
        assert np.array_equal(got.view(np.uint32), single[:m].view(np.uint32)), m
    # Rows in another company (the last rows first) and a row sub-range.
    got = T.cpu_matmul(blob, wt(getattr(WT, t)), rows, cols, x[::-1].copy(), isa, 3, 70)
    assert np.array_equal(got[:, 3:70].view(np.uint32), single[::-1, 3:70].view(np.uint32))
