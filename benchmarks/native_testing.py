"""The test-only native module ``_trt_spec_testing`` for the benchmark scripts (never in the
wheel)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType


def testing_module(repo: str | Path) -> ModuleType:
    """The test-only native module ``_trt_spec_testing`` (never in the wheel): from
    ``$TRT_SPEC_TESTING_DIR``, else the newest ``build/*/`` of the checkout ``repo`` (where
    ``python tests/native_build.py _trt_spec_testing`` builds it)."""
    env = os.environ.get("TRT_SPEC_TESTING_DIR")
    hits = sorted(Path(repo).glob("build/*/_trt_spec_testing*.so"), key=lambda p: p.stat().st_mtime)
    folder = Path(env) if env else (hits[-1].parent if hits else None)
    if folder is not None and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    try:
        return importlib.import_module("_trt_spec_testing")
    except ImportError as e:
        raise RuntimeError(
            "this benchmark needs the test module _trt_spec_testing: build it with "
            "python tests/native_build.py _trt_spec_testing, or set TRT_SPEC_TESTING_DIR"
        ) from e
