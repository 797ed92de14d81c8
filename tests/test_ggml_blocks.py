"""The builder's C++ decode of GGUF block types (cpp/format/ggml_blocks.cpp) equals the gguf
package's numpy dequantizers bit for bit, on random blocks of every type it decodes."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from trt_spec import _core

Q = gguf.GGMLQuantizationType
DECODED = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K)


def _random_rows(qtype: Q, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random block bytes [rows, bytes per row] whose f16 fields are finite (any bits else)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    halves = {  # byte offsets of the f16 fields in a block
        Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,),
        Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
    }[qtype]  # fmt: skip
    for off in halves:
        h = rng.normal(0.0, 0.05, size=(rows, cols // block)).astype(np.float16)
        data[:, :, off : off + 2] = h.view(np.uint8).reshape(rows, cols // block, 2)
    return data.reshape(rows, -1)


@pytest.mark.parametrize("qtype", DECODED, ids=lambda t: t.name)
def test_decode_equals_gguf_bit_for_bit(qtype: Q) -> None:
    rng = np.random.default_rng(int(qtype))
    rows, cols = 37, 512
    blocks = _random_rows(qtype, rows, cols, rng)
    ours = _core.decode_ggml_rows(blocks, int(qtype), cols)
    ref = gguf.quants.dequantize(blocks, qtype).astype(np.float32)
    assert ours.shape == ref.shape == (rows, cols)
    assert np.isfinite(ref).all()
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


def test_decode_rejects_bad_shapes_and_types() -> None:
    blocks = np.zeros((2, 34), dtype=np.uint8)
    assert _core.decode_ggml_rows(blocks, int(Q.Q8_0), 32).shape == (2, 32)
    with pytest.raises(ValueError, match="bytes per row"):
        _core.decode_ggml_rows(blocks, int(Q.Q8_0), 64)
    with pytest.raises(ValueError, match="ggml type"):
        _core.decode_ggml_rows(blocks, int(Q.Q2_K), 256)
    assert not _core.ggml_type_decodable(int(Q.F16)) and _core.ggml_type_decodable(int(Q.Q6_K))
