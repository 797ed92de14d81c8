"""The test-only native module, ``_trt_spec_testing`` (cpp/bindings/testing.cpp): kernels, the
acceptance rule, prompt lookup, the controllers, single backend ops (OpRunner) and engine
sessions with internal hooks (Session). Built on first import by tests/native_build.py (CMake,
TRT_SPEC_BUILD_TESTS); a test module that imports this one skips when cmake, a compiler or
nanobind is missing.

It shares no objects with ``trt_spec._core``: weight types cross as integers (``wt``).
"""

from __future__ import annotations

import sys
from typing import Any

import native_build
import pytest

try:
    _path = native_build.build(native_build.TESTING)
except native_build.Unavailable as e:
    pytest.skip(str(e), allow_module_level=True)
if str(_path.parent) not in sys.path:
    sys.path.insert(0, str(_path.parent))

import _trt_spec_testing as T  # noqa: E402, N812

__all__ = ["T", "wt"]


def wt(t: Any) -> int:
    """A trt_spec.WeightType (or its integer) as the integer the test module takes."""
    return int(getattr(t, "value", t))
