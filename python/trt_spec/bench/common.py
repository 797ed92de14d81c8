"""Helpers shared by every benchmark: environment (CPU, git commit, load, versions), logging,
safe division, percentiles, the process's resident memory, the :class:`Config` of one
benchmarked configuration and the writing of a report's two files.

Used by ``trt-spec bench`` (this package) and by the standalone scripts in ``benchmarks/``; it
imports nothing else of trt-spec, so any of them can import it first.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: ISA flags worth naming in a report (from /proc/cpuinfo).
ISA_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


@dataclass(frozen=True)
class Config:
    """One benchmarked configuration: a label, the draft source and the draft length.

    ``draft`` is one of ``trt_spec._core.DRAFT_MODES`` (``none`` is target-only) and
    ``draft_len`` a fixed K (0 for target-only) or ``"auto"``.
    """

    label: str
    draft: str
    draft_len: int | str

    @property
    def speculative(self) -> bool:
        return self.draft != "none"

    @property
    def auto_len(self) -> bool:
        return self.draft_len == "auto"


def log(msg: str) -> None:
    """A progress line on stderr, with the wall-clock time."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def div(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    return a / b if a is not None and b else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100, linear interpolation) of the values; None if empty."""
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else None


def run_text(cmd: list[str], cwd: str | Path | None = None) -> str | None:
    """A command's stripped stdout, or None if it cannot run or fails."""
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(repo: str | Path | None = None, paths: Iterable[str] = ()) -> str | None:
    """Short HEAD of the repository at ``repo`` (default: the working directory), with
    ``+dirty`` when tracked files (under ``paths``, if given) differ from it; None outside git.
    ``$COMMIT``, where set, wins: a copy of the tree whose git folder is older than its files
    (the GPU machine's) names the commit it was copied from that way."""
    if os.environ.get("COMMIT"):
        return os.environ["COMMIT"]
    head = run_text(["git", "rev-parse", "--short", "HEAD"], cwd=repo)
    if not head:
        return None
    cmd = ["git", "status", "--porcelain", "--untracked-files=no"]
    dirty = run_text([*cmd, "--", *paths] if paths else cmd, cwd=repo)
    return f"{head}+dirty" if dirty else head


def available_cpus() -> int:
    """CPUs this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_info() -> dict[str, Any]:
    """CPU model, logical CPUs, CPUs available to this process and the ISA flags present."""
    model = platform.processor() or "unknown"
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {
        "model": model,
        "logical_cpus": os.cpu_count(),
        "cpus_available": available_cpus(),
        "isa_flags": [f for f in ISA_FLAGS if f in flags],
    }


def loadavg() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def version(dist: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def trt_spec_version() -> str | None:
    """trt-spec's version: the installed distribution's, else the imported package's."""
    found = version("trt-spec")
    if found:
        return found
    try:
        from trt_spec import __version__
    except ImportError:
        return None
    return str(__version__)


def proc_status_bytes(fields: Iterable[str]) -> dict[str, int]:
    """The given fields of /proc/self/status that are counted in kB (VmRSS, RssAnon, RssFile,
    VmHWM...), in bytes; empty where there is no such file (not Linux)."""
    want, out = set(fields), {}
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in want:
            out[key] = int(rest.split()[0]) * 1024
    return out


def write_report(stem: Path, report: dict[str, Any], md: str) -> None:
    """Writes ``<stem>.json`` (the report) and ``<stem>.md`` (its rendering), creating the
    folder, and prints the rendering."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(md)
    print(md)


def environment(threads: int, repo: str | Path | None = None) -> dict[str, Any]:
    """Where a benchmark ran: CPU, threads, load at the start, commit, versions, platform."""
    cpu = cpu_info()
    return {
        "cpu": cpu["model"],
        "logical_cpus": cpu["logical_cpus"],
        "cpus_available": cpu["cpus_available"],
        "isa_flags": cpu["isa_flags"],
        "threads": threads,
        "loadavg_start": loadavg(),
        "git_commit": git_commit(repo),
        "trt_spec_version": trt_spec_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "host": platform.node(),
    }
