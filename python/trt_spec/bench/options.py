"""Command-line values of ``trt-spec bench``: draft lengths, temperatures and draft sources,
parsed and checked before anything runs (errors are ``ValueError`` naming the option).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from trt_spec.bench.common import available_cpus

#: Draft sources ``--draft`` takes (``none``, target-only, always runs).
SOURCES = ("model", "lookup", "auto")


@dataclass(frozen=True)
class Options:
    """The checked options: fixed K (None: 1..each engine's), sources (None: by engine) and
    threads."""

    fixed: list[int] | None
    sources: list[str] | None
    threads: int


def parse_draft_lens(text: str, option: str = "--draft-lens") -> list[int]:
    """``"1-8"``, ``"1,2,4"`` or ``"1-3,6"`` -> sorted distinct K >= 1; ``"none"`` -> [] (no
    fixed K: only the auto lengths run)."""
    if text.strip() == "none":
        return []
    ks: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if dash else (int(part), int(part))
        except ValueError:
            raise ValueError(f"{option}: {part!r} is not K or A-B (e.g. 1-8 or 1,2,4)") from None
        if a > b:
            raise ValueError(f"{option}: empty range {part!r}")
        if a < 1:
            raise ValueError(f"{option}: draft lengths must be >= 1 (target-only always runs)")
        ks.update(range(a, b + 1))
    return sorted(ks)


def parse_temperatures(text: str) -> list[float]:
    temps: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            t = float(part)
        except ValueError:
            raise ValueError(f"--temperatures: {part!r} is not a number") from None
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"--temperatures: {part!r} must be finite and >= 0")
        if t not in temps:
            temps.append(t)
    return temps


def parse_sources(text: str) -> list[str]:
    """``"model,lookup,auto"`` -> the distinct sources in the order given."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part not in SOURCES:
            raise ValueError(
                f"--draft: unknown draft source {part!r} (known: {', '.join(SOURCES)}; "
                "target-only always runs)"
            )
        if part not in out:
            out.append(part)
    return out


def default_sources(has_draft: bool) -> list[str]:
    """``model,auto`` on an engine with a draft model, ``lookup,auto`` otherwise."""
    return ["model", "auto"] if has_draft else ["lookup", "auto"]


def parse_options(args: argparse.Namespace) -> Options:
    """Checks the plain options (engines and prompts are checked when opened)."""
    args.temperatures = parse_temperatures(args.temperatures)
    fixed = parse_draft_lens(args.draft_lens) if args.draft_lens else None
    sources = parse_sources(args.draft) if args.draft else None
    if (sources == ["auto"] or fixed == []) and not args.auto:
        raise ValueError(
            "--no-auto with --draft auto or --draft-lens none leaves nothing but target-only"
        )
    if args.max_new_tokens < 2:
        raise ValueError("--max-new-tokens must be >= 2 (decode starts after the first token)")
    for name in ("threads", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    return Options(fixed, sources, args.threads or available_cpus())
