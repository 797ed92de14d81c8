"""The options an :class:`~trt_spec.engine.Engine` opens with, defined once for every command
that opens one from flags: ``trt-spec generate``, ``trt-spec serve`` and its Ray replicas."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_spec._core import DEFAULT_DRAFT_READ_CHUNK, DEFAULT_DRAFT_WINDOW

if TYPE_CHECKING:
    from trt_spec.engine import Engine


@dataclass(frozen=True)
class EngineOptions:
    """``Engine(path, **options.kwargs())``: what each field means is Engine's docstring."""

    device: str = "auto"
    n_threads: int | None = None
    kv_cache_dtype: str = "auto"
    draft_window: int = DEFAULT_DRAFT_WINDOW
    draft_read_chunk: int = DEFAULT_DRAFT_READ_CHUNK
    eagle_topk: int = 1
    prompt_cache: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EngineOptions:
        """From a command's flags (``--device``, ``--threads``, ``--kv-cache-dtype``,
        ``--draft-window``, ``--draft-read-chunk``, ``--eagle-topk``, ``--no-prompt-cache``);
        a flag the command does not have keeps its default."""
        d = cls()
        return cls(
            device=getattr(args, "device", d.device),
            n_threads=getattr(args, "threads", d.n_threads),
            kv_cache_dtype=getattr(args, "kv_cache_dtype", d.kv_cache_dtype),
            draft_window=getattr(args, "draft_window", d.draft_window),
            draft_read_chunk=getattr(args, "draft_read_chunk", d.draft_read_chunk),
            eagle_topk=getattr(args, "eagle_topk", d.eagle_topk),
            prompt_cache=not getattr(args, "no_prompt_cache", not d.prompt_cache),
        )

    @classmethod
    def coerce(cls, value: EngineOptions | dict[str, Any] | None) -> EngineOptions:
        """Options from themselves, from their dict (as they travel to a Ray replica) or None."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown engine options: {', '.join(unknown)}")
        return cls(**value)

    def kwargs(self) -> dict[str, Any]:
        return asdict(self)

    def open(self, path: str | Path) -> Engine:
        from trt_spec.engine import Engine

        return Engine(path, **self.kwargs())
