"""Draft heads as the builder sees them, whatever their kind: a draft that is not a model of its
own but reads the target's hidden states (Medusa heads, an EAGLE-3 head). The engine holds them
under ``draft_heads``: kind, config, tensors (and a kind's own metadata, ``extra``).

Each kind has a reader module (``medusa_source.py``, ``eagle3_source.py``) with ``is_<kind>``
and ``open_<kind>``; this module picks the kind of a folder and checks heads against a target.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trt_spec.builder.hf_source import safetensors_tensors
from trt_spec.builder.source import BuildError

#: (engine tensor name, float32 array, whether it is an output head), in file order.
Arrays = Iterator[tuple[str, np.ndarray, bool]]


@dataclass
class HeadsSource:
    """Draft heads: their kind, published layout and config, and their engine tensors."""

    path: Path
    kind: str  # "medusa", "eagle3"
    layout: str  # the published layout read ("fasterdecoding", "vllm", "eagle")
    name: str
    config: dict  # the engine's draft_heads.config (JSON)
    count: int  # engine tensors
    arrays: Callable[[], Arrays]
    extra: dict = field(default_factory=dict)  # more keys of the engine's draft_heads entry
    # Checks against the target's config and completes config (BuildError where they do not fit).
    fit: Callable[[dict], None] | None = None


def read_config(folder: Path) -> dict:
    """A heads folder's config.json ({} where there is none)."""
    p = folder / "config.json"
    if not p.is_file():
        return {}
    try:
        cfg = json.loads(p.read_text())
    except ValueError as e:
        raise BuildError(f"{p}: invalid JSON ({e})") from e
    return cfg if isinstance(cfg, dict) else {}


def read_tensors(
    files: list[Path], rename: Callable[[str], str], integers: bool = False
) -> dict[str, tuple[tuple[int, ...], Callable[[], np.ndarray]]]:
    """Every tensor of the files (``*.safetensors``, else PyTorch checkpoints): name (renamed)
    -> (shape, float32 loader); with ``integers``, integer and boolean tensors too."""
    out: dict[str, tuple[tuple[int, ...], Callable[[], np.ndarray]]] = {}
    for file in files:
        if file.suffix == ".safetensors":
            for name, t in safetensors_tensors(file, integers=integers).items():
                out[rename(name)] = (tuple(t.shape), t.load)
            continue
        try:
            import torch
        except ImportError as e:
            raise BuildError(f"{file}: reading a PyTorch checkpoint needs torch installed") from e
        try:
            state = torch.load(str(file), map_location="cpu", weights_only=True)
        except Exception as e:
            raise BuildError(f"{file}: cannot read ({type(e).__name__}: {e})") from e
        for name, t in state.items():
            arr = t.detach().float().numpy()
            out[rename(name)] = (tuple(arr.shape), lambda a=arr: np.ascontiguousarray(a))
    return out


def is_heads(path: str | Path) -> bool:
    """Whether ``path`` is a folder of draft heads of a kind the builder reads."""
    from trt_spec.builder.eagle3_source import is_eagle3
    from trt_spec.builder.medusa_source import is_medusa

    return is_eagle3(path) or is_medusa(path)


def open_heads(path: str | Path) -> HeadsSource:
    from trt_spec.builder.eagle3_source import is_eagle3, open_eagle3
    from trt_spec.builder.medusa_source import open_medusa

    return open_eagle3(path) if is_eagle3(path) else open_medusa(path)


def check_heads(target_config: dict, heads: HeadsSource) -> None:
    """Heads read the target's hidden states and score into its vocabulary: both must fit (and
    a kind's own checks, which may complete its config from the target's)."""
    t, h = target_config, heads.config
    if h["dim"] != t["dim"] or h["vocab_size"] != t["vocab_size"]:
        raise BuildError(
            f"{heads.path}: {heads.kind} heads of hidden size {h['dim']} and vocabulary "
            f"{h['vocab_size']} do not fit the target's ({t['dim']}, {t['vocab_size']})"
        )
    if heads.fit is not None:
        heads.fit(t)
