"""trt-spec: a speculative-decoding LLM inference engine.

``trt-spec build`` compiles a checkpoint (GGUF or Hugging Face) into one engine file;
:class:`Engine` loads it into the C++ runtime and generates::

    from trt_spec import Engine
    result = Engine("model.engine").generate("def fib(n):", max_new_tokens=64)
    print(result.text, result.stats)
"""

from __future__ import annotations

__version__ = "0.1.0"

from trt_spec._core import EngineFileError, WeightType
from trt_spec.builder.builder import WEIGHT_FORMATS, BuildReport, build_engine
from trt_spec.builder.source import BuildError
from trt_spec.engine import (
    Engine,
    GenerationResult,
    GenerationStats,
    GenerationStream,
    TokenLogprob,
)

__all__ = [
    "WEIGHT_FORMATS",
    "BuildError",
    "BuildReport",
    "Engine",
    "EngineFileError",
    "GenerationResult",
    "GenerationStats",
    "GenerationStream",
    "TokenLogprob",
    "WeightType",
    "__version__",
    "build_engine",
]
