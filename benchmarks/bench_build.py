"""``trt-spec build`` of the default pair: wall and CPU seconds, against a baseline in one run.

Each round builds the default pair (q4, defaults) with the installed ``trt-spec`` and, with
``--baseline-path DIR``, with the ``trt_spec`` package found in DIR first on ``PYTHONPATH`` (e.g.
``python/`` of an earlier commit's worktree, with its ``_core`` module copied in), in
alternating order, each in a fresh process, each time to a new file in ``--work-dir``. The
engines' tensor data must be identical (checked by sha256 of the data section); the report gives
the median wall and CPU (user + system) seconds of each and their ratio.

    python benchmarks/bench_build.py --rounds 3 [--baseline-path OLD/python]
        [--threads N] [--tag NAME]

Writes ``benchmarks/results/build_<tag>.json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trt_spec import models
from trt_spec.bench.common import available_cpus, environment, write_report

RESULTS = Path(__file__).resolve().parent / "results"


def engine_sections(path: Path) -> tuple[dict[str, Any], str, int]:
    """An engine file's metadata, and the sha256 and size of its tensor data section."""
    with open(path, "rb") as f:
        head = f.read(64)
        _, _, json_off, json_len, data_off, data_len, _, _ = struct.unpack("<IIQQQQQQ", head[8:])
        f.seek(json_off)
        meta = json.loads(f.read(json_len))
        f.seek(data_off)
        digest, left = hashlib.sha256(), data_len
        while left:
            chunk = f.read(min(left, 1 << 24))
            digest.update(chunk)
            left -= len(chunk)
    return meta, digest.hexdigest(), data_len


def build_once(path: str, target: Path, draft: Path, out: Path, threads: int | None) -> dict:
    """One build in a fresh process (``path``: its PYTHONPATH): wall and CPU seconds."""
    cmd = [sys.executable, "-m", "trt_spec.cli", "build", "--target", str(target)]
    cmd += ["--draft", str(draft)]
    cmd += ["-o", str(out), "-q"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=path))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"wall_s": wall, "cpu_s": cpu, "data_sha256": engine_sections(out)[1]}
    out.unlink()
    return row


def summary(runs: list[dict]) -> dict[str, Any]:
    return {
        "wall_s_median": statistics.median(r["wall_s"] for r in runs),
        "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
        "runs": runs,
    }


def render(rep: dict[str, Any]) -> str:
    env, s = rep["environment"], rep["settings"]
    lines = [
        "# trt-spec build, default pair (q4)",
        "",
        f"Host: {env['cpu']} ({env['cpus_available']} CPUs), commit {env['git_commit']}, "
        f"load at start {env['loadavg_start']}, {s['rounds']} rounds, threads "
        f"{s['threads'] or 'default'}.",
        "",
        "| builder | wall s (median) | CPU s (median) |",
        "|---|---|---|",
    ]
    for name, r in rep["builders"].items():
        lines.append(f"| {name} | {r['wall_s_median']:.1f} | {r['cpu_s_median']:.1f} |")
    if "baseline" in rep["builders"]:
        sha = rep["builders"]["this checkout"]["runs"][0]["data_sha256"]
        lines += ["", f"Wall time ratio baseline / this checkout: {rep['speedup']:.2f}x."]
        lines.append(f"Tensor data identical: {rep['identical']} ({sha}).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--baseline-path", default=None, help="PYTHONPATH of a baseline trt_spec")
    p.add_argument("--threads", type=int, default=None, help="--threads of this checkout's build")
    p.add_argument("--work-dir", default=None, help="where engines are written (then deleted)")
    p.add_argument("--tag", default=time.strftime("%Y-%m-%d"))
    args = p.parse_args(argv)
    target, draft = models.fetch_default_pair()
    env = environment(available_cpus())
    builders = {"this checkout": ("", args.threads)}
    if args.baseline_path:
        builders["baseline"] = (args.baseline_path, None)
    runs: dict[str, list[dict]] = {name: [] for name in builders}
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        for i in range(args.rounds):
            order = list(builders) if i % 2 == 0 else list(reversed(builders))
            for name in order:
                path, threads = builders[name]
                row = build_once(path, target, draft, Path(work) / "pair.engine", threads)
                runs[name].append(row)
                print(f"round {i + 1} {name}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU")
    rep: dict[str, Any] = {
        "kind": "bench_build",
        "environment": env,
        "settings": {
            "rounds": args.rounds,
            "threads": args.threads,
            "pair": [target.name, draft.name],
        },
        "builders": {name: summary(r) for name, r in runs.items()},
    }
    if args.baseline_path:
        shas = {r["data_sha256"] for rs in runs.values() for r in rs}
        rep["identical"] = len(shas) == 1
        b, t = rep["builders"]["baseline"], rep["builders"]["this checkout"]
        rep["speedup"] = b["wall_s_median"] / t["wall_s_median"]
    env["loadavg_end"] = os.getloadavg()[0]
    write_report(RESULTS / f"build_{args.tag}", rep, render(rep))
    return 0 if rep.get("identical", True) else 1


if __name__ == "__main__":
    sys.exit(main())
