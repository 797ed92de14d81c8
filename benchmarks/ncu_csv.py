"""Nsight Compute's CSV output, read: the details page (one row per kernel and metric) and the raw
page (one row per kernel, a column per metric), and the warp-state breakdown of a kernel (why its
warps did not issue: waiting for an instruction fetch, a global load, a barrier, ..).

profile_gpu.py runs ncu and reads its output through these; tests/test_gpu_tooling.py and
tests/test_benchmark_scripts.py feed them ncu-shaped text.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from typing import Any

from kernel_code import short_name

# ncu's units as its versions print them ('nsecond' in older ones, 'ns' in 2025.x on the H200).
UNITS = {
    "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,  # -> microseconds
    "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,  # -> bytes (ncu's units are SI)
    "B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9,
    "%": 1.0,
}  # fmt: skip


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV lines of ncu's output (its own '==PROF==' lines and the program's dropped)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def ncu_kernels(text: str, strict: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The details page (`ncu --csv`): per profiled kernel (launch order) its name (short_name:
    no 'void ', casts or arguments), grid, block and every metric's value in the units of UNITS
    (time in us, bytes); a metric in `strict` with a unit UNITS lacks is refused (others keep
    ncu's value)."""
    rows = _csv_rows(text)
    if not rows:
        return []
    kernels: dict[int, dict[str, Any]] = {}
    for values in rows[1:]:
        row = dict(zip(rows[0], values, strict=False))
        k = kernels.setdefault(
            int(row["ID"]), {"name": short_name(str(row.get("Kernel Name", ""))),
                             "grid": row.get("Grid Size", ""), "block": row.get("Block Size", "")},
        )  # fmt: skip
        metric, unit = row.get("Metric Name", ""), row.get("Metric Unit", "")
        if metric in strict and unit not in UNITS:
            raise ValueError(f"ncu: unknown unit {unit!r} of {metric}")
        value = float(str(row["Metric Value"]).replace(",", ""))
        k[metric] = value * UNITS[unit] if unit in UNITS else value
    return [kernels[i] for i in sorted(kernels)]


def ncu_raw(text: str) -> list[dict[str, Any]]:
    """The raw page (`ncu --csv --page raw`): a header row of metric names, a row of units, then
    one row per profiled kernel. Per kernel (launch order): name (short_name), grid, and every
    column whose value is a number (as ncu printed it, no unit conversion)."""
    rows = _csv_rows(text)
    if not rows:
        return []
    head, out = rows[0], []
    for values in rows[1:]:
        if len(values) != len(head) or not values[0].strip().isdigit():  # (the units row)
            continue
        row = dict(zip(head, values, strict=True))
        k: dict[str, Any] = {"name": short_name(row.get("Kernel Name", "")),
                             "grid": row.get("Grid Size", "")}  # fmt: skip
        for metric, v in row.items():
            try:
                k.setdefault(metric, float(v.replace(",", "")))
            except ValueError:
                pass
        out.append(k)
    return out


# The warp states of ncu's WarpStateStats section: warps per issue-active cycle in each state
# (smsp__average_warps_issue_stalled_<state>_per_issue_active.ratio), or where only the sampled
# counters are there, samples per state (smsp__pcsamp_warps_issue_stalled_<state>).
_STATE = re.compile(r"^smsp__average_warps_issue_stalled_([a-z0-9_]+)_per_issue_active\.ratio$")
_STATE_SAMPLED = re.compile(r"^smsp__pcsamp_warps_issue_stalled_([a-z0-9_]+)$")


def warp_states(kernel: dict[str, Any]) -> dict[str, float]:
    """One profiled kernel's warp states: state ('no_instruction', 'long_scoreboard', 'barrier',
    .., 'selected' = issuing) -> its value in the first family present (see above); the sampled
    family's '_not_issued' variants left out. {} when the kernel has neither."""
    for pattern in (_STATE, _STATE_SAMPLED):
        got = {}
        for metric, v in kernel.items():
            m = pattern.match(metric)
            if m and isinstance(v, float) and not m.group(1).endswith("_not_issued"):
                got[m.group(1)] = v
        if got:
            return got
    return {}


def warp_state_shares(kernels: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (kernel name, grid): the launches profiled and each warp state's share of all states
    (each launch's states normalized to sum 1, then averaged over its launches), largest first."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for k in kernels:
        states = warp_states(k)
        total = sum(states.values())
        if total <= 0:
            continue
        g = acc.setdefault((k["name"], k["grid"]), {"launches": 0, "sums": {}})
        g["launches"] += 1
        for s, v in states.items():
            g["sums"][s] = g["sums"].get(s, 0.0) + v / total
    return {
        key: {"launches": g["launches"],
              "shares": dict(sorted(((s, v / g["launches"]) for s, v in g["sums"].items()),
                                    key=lambda sv: -sv[1]))}
        for key, g in acc.items()
    }  # fmt: skip


def top_states(shares: dict[str, float], n: int = 3) -> str:
    """'no_instruction 41%, long_scoreboard 22%, barrier 12%': the n largest."""
    return ", ".join(f"{s} {v:.0%}" for s, v in list(shares.items())[:n])
