"""Shared pieces of the CUDA tests: the skip marker, SeqState arrays, sampling parameter sets."""

from __future__ import annotations

import numpy as np
import pytest
from trt_spec import _core

# Every test in a module with `pytestmark = GPU` is marked `gpu` and skipped without a GPU.
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _core.cuda_available(), reason="needs a CUDA GPU and the CUDA build"),
]

# SeqState (kernels/speculative.h) as int32 [slots, SEQ_STATE_INTS]: these field offsets.
N_PAST, LAST, PREV, N_GEN, N_NEW, N_ACC, DRAFT = 0, 1, 2, 3, 4, 5, 6
OUT = DRAFT + _core.MAX_DRAFT_LEN


def seq_states(n_slots: int, *, n_past=0, last=0, prev=0, n_gen=0) -> np.ndarray:
    s = np.zeros((n_slots, _core.SEQ_STATE_INTS), np.int32)
    s[:, N_PAST], s[:, LAST], s[:, PREV], s[:, N_GEN] = n_past, last, prev, n_gen
    return s


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
