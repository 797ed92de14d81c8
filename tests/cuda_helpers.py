"""Shared pieces of the CUDA and speculative-op tests: the GPU skip marker, SeqState arrays (the
layout exported by the test module), sampling parameter sets."""

from __future__ import annotations

import ctypes

import native_build
import numpy as np
import pytest
from native import T
from trt_spec import _core

# Every test in a module with `pytestmark = GPU` is marked `gpu` and skipped without a GPU.
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _core.cuda_available(), reason="needs a CUDA GPU and the CUDA build"),
]

# SeqState (spec/seq_state.h) as a numpy structured type, from the C++ struct's own offsets.
SEQ = np.dtype(
    {
        "names": list(T.SEQ_STATE_FIELDS),
        "formats": [
            np.dtype(t) if n == 1 else (np.dtype(t), (n,))
            for _, t, n in T.SEQ_STATE_FIELDS.values()
        ],
        "offsets": [off for off, _, _ in T.SEQ_STATE_FIELDS.values()],
        "itemsize": T.SEQ_STATE_BYTES,
    }
)
SOURCE = {name: i for i, name in enumerate(_core.DRAFT_SOURCES)}


def emulation_library(target: str) -> ctypes.CDLL:
    """A CUDA emulation library (tests/cpp/, built by native_build.py), loaded; the calling test
    skips, with the reason, where it cannot be built."""
    try:
        return ctypes.CDLL(str(native_build.build(target)))
    except native_build.Unavailable as e:
        pytest.skip(str(e))


def seq_states(n_slots: int, **fields) -> np.ndarray:
    """SeqState records; keyword fields set (broadcast) per slot. Returned as the int32 words
    the test module takes ([slots, SEQ_STATE_INTS]); see `fields()` to read them back."""
    s = np.zeros(n_slots, SEQ)
    for name, v in fields.items():
        s[name] = v
    return s.view(np.int32).reshape(n_slots, T.SEQ_STATE_INTS)


def fields(words: np.ndarray) -> np.ndarray:
    """int32 SeqState words [slots, SEQ_STATE_INTS] (or one slot's list) -> records."""
    a = np.ascontiguousarray(np.asarray(words, np.int32).reshape(-1, T.SEQ_STATE_INTS))
    return a.view(SEQ).reshape(-1)


# (temperature, top_k, top_p): every branch of the rule (greedy, index order, top-k, top-p,
# both, degenerate cut-offs).
RULES = [
    (0.0, 0, 1.0),
    (1.0, 0, 1.0),
    (0.7, 0, 1.0),
    (1.0, 40, 1.0),
    (0.8, 0, 0.9),
    (1.2, 100, 0.5),
    (1.0, 1, 1.0),
    (1.0, 0, 1e-3),
    (2.5, 0, 0.99),
]


def params(rule, seed: int, step: int = 0) -> tuple:
    t, k, p = rule
    return (float(t), int(k), float(p), int(seed), int(step))


def random_logits(rng: np.random.Generator, shape, scale: float = 3.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)
