"""The Engine's argument checks: Python values into the binding's types, with a ValueError
naming the argument for anything else (ranges are the scheduler's checks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def as_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    if not -(2**31) <= int(v) < 2**31:
        raise ValueError(f"{name} is out of range: {v}")
    return int(v)


def as_number(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {v!r}")
    return float(v)


def int_list(values: Any, what: str) -> list[int]:
    out = []
    for t in values:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            raise ValueError(f"{what} must be integers, got {type(t).__name__}")
        out.append(int(t))
    return out


def draft_len_arg(draft_len: int | str) -> int | None:
    """The request's draft_len: None for auto, else the fixed draft length (its range is the
    scheduler's check)."""
    if isinstance(draft_len, str) and draft_len == "auto":
        return None
    if isinstance(draft_len, (int, np.integer)) and not isinstance(draft_len, bool):
        return as_int(draft_len, "draft_len")
    raise ValueError(f"draft_len must be 'auto' or an integer, got {draft_len!r}")


def seeds_arg(seed: int | Sequence[int], n: int) -> list[int]:
    if isinstance(seed, (list, tuple)):
        seeds = list(seed)
    elif isinstance(seed, int) and not isinstance(seed, bool):
        seeds = [seed] * n
    else:
        raise ValueError("seed must be an integer in [0, 2**64), or a list of them")
    if len(seeds) != n:
        raise ValueError(f"got {len(seeds)} seeds for {n} prompts")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**64:
            raise ValueError("seed must be an integer in [0, 2**64)")
    return seeds
