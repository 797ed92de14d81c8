"""The engine schema as the builder and the checkpoint readers see it.

Defined once, in C++ (``cpp/format/schema.h``), and read from ``trt_spec._core``: the
supported architectures, the model config keys (required and optional) and, for a config, the
engine's tensors (their names, shapes and the checkpoint tensors each is concatenated from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from trt_spec import _core

ARCHITECTURES: tuple[str, ...] = tuple(_core.ARCHITECTURES)
CONFIG_KEYS: dict[str, str] = dict(_core.CONFIG_KEYS)  # name -> "str" | "int" | "float" | "bool"
OPTIONAL_CONFIG_KEYS: dict[str, str] = dict(_core.OPTIONAL_CONFIG_KEYS)  # e.g. head_vocab

_PY_TYPES = {"str": (str,), "int": (int,), "float": (float, int), "bool": (bool,)}


@dataclass(frozen=True)
class EngineTensor:
    name: str
    shape: tuple[int, ...]  # (cols,) for a 1-D tensor (a norm or a bias), else (rows, cols)
    sources: tuple[str, ...]  # checkpoint tensors, concatenated along rows


def config_problems(config: dict) -> list[str]:
    """What is wrong with a model config dict (missing keys, wrong types), if anything."""
    out = []
    for key, kind in CONFIG_KEYS.items():
        if key not in config:
            out.append(f"missing {key}")
        elif isinstance(config[key], bool) and kind != "bool":
            out.append(f"{key} must be {kind}")
        elif not isinstance(config[key], _PY_TYPES[kind]):
            out.append(f"{key} must be {kind}, got {type(config[key]).__name__}")
    for key, kind in OPTIONAL_CONFIG_KEYS.items():
        if key in config and (
            isinstance(config[key], bool) or not isinstance(config[key], _PY_TYPES[kind])
        ):
            out.append(f"{key} must be {kind}")
    return out


def engine_tensors(config: dict) -> list[EngineTensor]:
    """The engine tensors of a model config, in file order."""
    out = []
    for name, rows, cols, sources in _core.engine_tensors(json.dumps(config)):
        shape = (cols,) if rows == 1 else (rows, cols)
        out.append(EngineTensor(name, shape, tuple(sources)))
    return out


def checkpoint_tensors(config: dict) -> list[str]:
    """Every checkpoint tensor (GGUF names) the engine tensors of a config are made of."""
    return [s for t in engine_tensors(config) for s in t.sources]
