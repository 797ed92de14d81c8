"""CPU kernels (cpp/kernels/cpu) against numpy references, for every ISA this CPU runs.

- f16 / bf16 conversions: exact against numpy / torch (all 65536 halves, random bit patterns).
- quantize_weight / dequantize_weight: the blob layout of kernels/weight_format.h decoded by an
  independent numpy reader, and per-type error bounds (Q8: |err| <= d/2; Q4: |err| <= d/2 where
  the value is not clipped, and the (d, m) search beats plain min/max).
- cpu_matmul: every weight type, shapes (cols 64 .. 4864, rows not a multiple of the tile, one
  row), M in {1, 2, 5, 9, 33} (+ a large M), row sub-ranges; a row's bits whatever M (up to 160,
  several column and activation-row blocks) and whatever rows share the call. The reference is
  numpy in float64 on the DEQUANTIZED weights (quantization error is not the kernel's error);
  for Q8/Q4 the activations are quantized in numpy exactly as quantize_acts does, so the results
  agree to ~1e-5 relative; a looser bound checks them against the exact float activations too.
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
    assert "avx2" in ISAS
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
    return np.concatenate([special, bits, near]).view(np.float32)


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

# rows: partial and whole blocks of 16 (the AVX-512 tile's Rows16 layout needs whole ones)
SHAPES = [(1, 64), (7, 64), (3, 192), (9, 320), (5, 448), (33, 896), (130, 1536), (17, 4864),
          (16, 64), (32, 896), (48, 1536)]  # fmt: skip
MS = [1, 2, 5, 9, 33]
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


@pytest.mark.parametrize("sub", [False, True], ids=["all_rows", "row_range"])
@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_matmul(isa, t, shape, M, sub):
    rows, cols = shape
    r0, r1 = (1, rows - 2) if sub and rows > 3 else (0, rows)
    if sub and rows <= 3:
        r0, r1 = (0, 0) if rows == 1 else (1, rows)
    check_matmul(isa, t, rows, cols, M, r0, r1)


@pytest.mark.parametrize("M", [77, 130])
@pytest.mark.parametrize("t", ALL_TYPES)
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_large_m(isa, t, M):
    """Prefill-sized M: tiled over M and blocked over columns."""
    check_matmul(isa, t, 6, 4864, M, 1, 6)


@pytest.mark.parametrize("shape", [(5, 100), (3, 7), (9, 33), (4, 1)])
@pytest.mark.parametrize("M", [1, 3, 12])
@pytest.mark.parametrize("t", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("isa", ISAS)
def test_matmul_float_any_cols(isa, t, M, shape):
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
