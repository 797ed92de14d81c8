"""The test-only native module, ``_trt_spec_testing`` (cpp/bindings/testing.cpp): kernels, the
acceptance rule, prompt lookup, the controllers, single backend ops (OpRunner) and engine
sessions with internal hooks (Session). conftest.py puts its build folder on sys.path.

It shares no objects with ``trt_spec._core``: weight types cross as integers (``wt``).
"""

from __future__ import annotations

from typing import Any

import _trt_spec_testing as T  # noqa: N812

__all__ = ["T", "wt"]


def wt(t: Any) -> int:
    """A trt_spec.WeightType (or its integer) as the integer the test module takes."""
    return int(getattr(t, "value", t))
