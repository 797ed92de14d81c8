"""GPU profile of the speculative iteration and of the quantized matmul (issue 9, point 4).

* ``iteration``: one K = 4 iteration of the real-shape q4 pair (Qwen2.5 1.5B target, 0.5B
  draft, random weights; bench_gpu.py's ``pair-q4`` engine) at batch 1, replayed as its CUDA
  graph, under Nsight Systems (``nsys profile --cuda-graph-trace=node``). From the trace
  (exported to SQLite): kernels per iteration, the GPU's idle time between them inside an
  iteration, and the kernels' share of the time by name. The kernels of one graph launch share
  its correlation id (CUPTI), so every ``cudaGraphLaunch`` of the timed window is one iteration.
  Without nsys: the iteration timed by the test module, and the kernels per iteration from the
  launch plan (``_core.cuda_launch_plan``), idle time not measured (the report says so).
  Both: the draft step over the target step (one-row forwards in a graph, timed alike).
* ``matmul``: the q4 and q8 matmul (the 1.5B's gate/up shape [17920, 1536] and down shape
  [1536, 8960]) at 1 and 5 rows under Nsight Compute (``ncu``): duration, DRAM bytes read and
  DRAM throughput (percent of peak), caches flushed between replays (ncu's default).

* ``step``: one forward of the same engine, kernel by kernel under ncu (caches kept, clocks
  left alone, launched op by op inside a cuProfilerStart / Stop window): the 1.5B target and the
  0.5B draft at one row (decode) and the target at 5 rows (a K = 4 verify). Per kernel and grid:
  launches, mean and total microseconds per forward, registers, code bytes (kernel_code.py);
  against the forward's time as a graph and op by op in the same process; then a second pass
  (WarpStateStats, the warm-up forward skipped; --no-states leaves it out): what the warps of
  each kernel wait on (instruction fetch, global loads, barriers, ..). Says where a decode
  step's time goes.

``python benchmarks/profile_gpu.py [--out DIR] [--engine PATH] [--parts P,..]`` runs the parts,
writes ``DIR/profile_gpu.{json,md}`` (default: benchmarks/results/gpu_logs); the parts' own runs
(``--part run-iteration`` / ``run-matmul`` / ``run-step``) are what the profilers launch. Needs
a CUDA build; ``benchmarks/run_gpu_checks.sh profile`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from kernel_code import code_bytes_by_name, default_library
from ncu_csv import ncu_kernels, ncu_raw, top_states, warp_state_shares

REPO = Path(__file__).resolve().parents[1]
ENGINE = Path("/tmp/trt-spec-gpu-bench/pair-q4-s2048.engine")  # bench_gpu.py --part engines
K, CONTEXT, ITERS = 4, 128, 20
MATMUL_SHAPES = {"gate_up": (17920, 1536), "down": (1536, 8960)}  # [rows, cols] of W
NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)


def tool(name: str) -> str | None:
    """A CUDA tool on PATH or in the toolkit's bin folder."""
    return shutil.which(name) or shutil.which("/usr/local/cuda/bin/" + name)


# ---- what the profilers launch -------------------------------------------------------------------
def ensure_engine(path: Path) -> Path:
    if path.exists():
        return path
    from random_engine import SHAPES, write_random_engine

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    write_random_engine(
        tmp, SHAPES["qwen2.5-1.5b"], draft=SHAPES["qwen2.5-0.5b"], weights="q4",
        max_seq_len=2048, max_batch=1, draft_len=8, data="random",
    )  # fmt: skip
    tmp.rename(path)
    return path


def run_iteration(engine: Path, out: Path) -> dict[str, Any]:
    """Warm-up, then ITERS replays of the K = 4 iteration graph (the profiled window), then the
    target and draft one-row steps; writes the timings to `out` (JSON)."""
    from native_testing import testing_module

    T = testing_module(REPO)  # noqa: N806
    s = T.Session(str(engine), "cuda")
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, s.vocab_size, CONTEXT)]
    rid = s.submit(prompt, 1024, draft="model", draft_len=K)
    got = 0
    while got < 2:  # the prefill's token, then one iteration: the graph is captured
        got += sum(len(ev.tokens) for ev in s.step() if ev.id == rid)
    s.time_iterations("model", K, 3)
    time.sleep(0.05)  # a gap in the trace before the window
    sec, n = s.time_iterations("model", K, ITERS)
    s.cancel(rid)
    while s.has_work:
        s.step()
    r = {
        "iteration_ms": sec * 1e3,
        "iterations": n,
        "target_step_ms": s.time_forward("target", 1, 1, CONTEXT, ITERS, True) * 1e3,
        "draft_step_ms": s.time_forward("draft", 1, 1, CONTEXT, ITERS, True) * 1e3,
    }
    r["draft_over_target"] = r["draft_step_ms"] / r["target_step_ms"]
    out.write_text(json.dumps(r))
    return r


STEP_CASES = "target:1,draft:1,target:5"  # role:rows of `step` (--step-cases)
STEP_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "launch__registers_per_thread")


def _cuda_profiler(on: bool) -> None:
    """The driver's cuProfilerStart / Stop: the window of `ncu --profile-from-start off`."""
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    rc = (lib.cuProfilerStart if on else lib.cuProfilerStop)()
    if rc != 0:
        raise RuntimeError(f"cuProfiler{'Start' if on else 'Stop'}: CUresult {rc}")


def run_step(engine: Path, role: str, rows: int, out: Path) -> dict[str, Any]:
    """The forward of `rows` rows at context CONTEXT timed as a graph and op by op, then two
    forwards launched op by op inside the profiler window (time_forward: a warm-up and one)."""
    from native_testing import testing_module

    T = testing_module(REPO)  # noqa: N806
    s = T.Session(str(engine), "cuda")
    r = {
        "role": role,
        "rows": rows,
        "graph_ms": s.time_forward(role, rows, rows, CONTEXT, ITERS, True) * 1e3,
        "eager_ms": s.time_forward(role, rows, rows, CONTEXT, ITERS, False) * 1e3,
        "forwards": 2,
    }
    _cuda_profiler(True)
    s.time_forward(role, rows, rows, CONTEXT, 1, False)
    _cuda_profiler(False)
    out.write_text(json.dumps(r))
    return r


def run_matmul() -> list[dict[str, Any]]:
    """One `linear` per (format, shape, rows), in this order (ncu's launch ids follow it)."""
    from native_testing import testing_module
    from trt_spec import _core

    T = testing_module(REPO)  # noqa: N806
    runner = T.OpRunner("cuda")
    rng = np.random.default_rng(0)
    cases = []
    for fmt in ("q4", "q8"):
        t = _core.weight_type_from_name(fmt)
        for shape, (rows, cols) in MATMUL_SHAPES.items():
            w = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
            blob = _core.quantize_weight(w, t)
            for n in (1, 5):
                x = rng.standard_normal((n, cols)).astype(np.float32)
                runner.linear(blob, int(getattr(t, "value", t)), rows, cols, x)
                cases.append({"weights": fmt, "shape": shape, "rows": n, "w_rows": rows,
                              "w_cols": cols, "weight_bytes": int(blob.nbytes)})  # fmt: skip
    return cases


# ---- parsing -------------------------------------------------------------------------------------
def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def graph_iterations(db: Path) -> list[list[tuple[int, int, str]]]:
    """The kernels (start, end, name) of each cudaGraphLaunch in an nsys SQLite export, in launch
    order, each sorted by start."""
    con = sqlite3.connect(db)
    try:
        kcols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        name = "shortName" if "shortName" in kcols else "demangledName"
        launches = {
            cid
            for (cid,) in con.execute(
                "SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaGraphLaunch%'"
            )
        }
        groups: dict[int, list[tuple[int, int, str]]] = {}
        for start, end, cid, kname in con.execute(
            f"SELECT k.start, k.end, k.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            f"LEFT JOIN StringIds s ON s.id = k.{name} ORDER BY k.start"
        ):
            if cid in launches:
                groups.setdefault(cid, []).append((int(start), int(end), str(kname)))
    finally:
        con.close()
    return [sorted(g) for _, g in sorted(groups.items(), key=lambda kv: kv[1][0][0])]


def iteration_profile(groups: list[list[tuple[int, int, str]]]) -> dict[str, Any]:
    """Kernels per iteration and idle time inside it, over the launches of the most frequent
    kernel count (the replayed iteration graph); medians over those launches."""
    if not groups:
        raise ValueError("no graph launches in the trace")
    sizes = [len(g) for g in groups]
    size = max(set(sizes), key=lambda n: (sizes.count(n), n))
    its = [g for g in groups if len(g) == size]
    spans, busys, gaps, by_name = [], [], [], {}
    for g in its:
        span = g[-1][1] - g[0][0]
        busy, cur_end = 0, g[0][0]
        for start, end, kname in g:
            busy += max(0, end - max(start, cur_end))  # the union of the kernels' intervals
            if start > cur_end:
                gaps.append(start - cur_end)
            cur_end = max(cur_end, end)
            by_name[kname] = by_name.get(kname, 0) + (end - start)
        spans.append(span)
        busys.append(busy)
    span, busy = statistics.median(spans), statistics.median(busys)
    total = sum(by_name.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    return {
        "launches": len(its),
        "kernels_per_iteration": size,
        "iteration_span_us": span / 1e3,
        "kernel_busy_us": busy / 1e3,
        "idle_us": (span - busy) / 1e3,
        "idle_share": (span - busy) / span if span else 0.0,
        "gap_us_median": statistics.median(gaps) / 1e3 if gaps else 0.0,
        "gap_us_max": max(gaps) / 1e3 if gaps else 0.0,
        "time_by_kernel": [
            {"kernel": k, "share": v / total, "us_per_iteration": v / len(its) / 1e3}
            for k, v in top
        ],
    }


_NAMES = {NCU_METRICS[0]: "time_us", NCU_METRICS[1]: "dram_read_bytes", NCU_METRICS[2]: "dram_pct"}


def ncu_metrics(text: str) -> list[dict[str, float]]:
    """Per profiled kernel (launch order): time_us, dram_read_bytes, dram_pct from `ncu --csv`
    output (its details page: one row per kernel and metric; other lines ignored)."""
    kernels = ncu_kernels(text, strict=_NAMES)
    named = [{_NAMES[m]: v for m, v in k.items() if m in _NAMES} for k in kernels]
    return [k for k in named if k]


def step_table(kernels: list[dict[str, Any]], forwards: int) -> dict[str, Any]:
    """Kernels grouped by (name, grid): launches, mean us and us per forward (of `forwards`
    forwards in the window), registers; sorted by time, with the sum per forward."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for k in kernels:
        g = groups.setdefault(
            (k["name"], k["grid"]), {"kernel": k["name"], "grid": k["grid"], "launches": 0,
                                     "us": 0.0, "regs": k.get(STEP_METRICS[2])},
        )  # fmt: skip
        g["launches"] += 1
        g["us"] += float(k.get(STEP_METRICS[0], 0.0))
    total = sum(g["us"] for g in groups.values()) / forwards
    rows = []
    for g in sorted(groups.values(), key=lambda g: -g["us"]):
        per = g["us"] / forwards
        mean = g["us"] / g["launches"]
        share = per / total if total else 0.0
        rows.append(g | {"per_forward": g["launches"] / forwards, "mean_us": mean,
                         "us_per_forward": per, "share": share})  # fmt: skip
    n = len(kernels) / forwards
    return {"kernels_per_forward": n, "kernel_sum_us": total, "by_kernel": rows}


def step_cases(spec: str) -> list[tuple[str, int]]:
    """'target:1,draft:1' -> [('target', 1), ('draft', 1)]."""
    cases = []
    for item in spec.split(","):
        role, _, rows = item.partition(":")
        if role not in ("target", "draft") or not rows.isdigit() or int(rows) < 1:
            raise ValueError(f"step case {item!r}: role:rows, role target or draft")
        cases.append((role, int(rows)))
    return cases


def warp_state_pass(ncu: str, run: list[str], skip: int, log: Path) -> dict[str, Any]:
    """ncu's WarpStateStats section over the run's launches after the first `skip` (the warm-up
    forward): per (kernel, grid) the share of each warp state (ncu_csv.warp_state_shares)."""
    res = subprocess.run(
        [ncu, "--csv", "--page", "raw", "--profile-from-start", "off", "--cache-control", "none",
         "--clock-control", "none", "--section", "WarpStateStats", "--launch-skip", str(skip)]
        + run, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log.write_text(res.stdout[-400000:] + res.stderr[-20000:])
    if res.returncode != 0:
        return {"error": f"exit {res.returncode}: {res.stderr[-600:]}"}
    return {"by_kernel": warp_state_shares(ncu_raw(res.stdout))}


def profile_step(
    engine: Path, out: Path, spec: str = STEP_CASES, states: bool = True
) -> dict[str, Any]:
    """Each case's forward kernel by kernel (durations, registers), each kernel's code bytes
    (kernel_code.py) and, with `states`, a second ncu pass: why its warps did not issue."""
    ncu = tool("ncu")
    if not ncu:
        return {"profiler": "none: ncu missing"}
    try:
        code = code_bytes_by_name(default_library())
    except (OSError, ImportError):
        code = {}
    cases = []
    for role, rows in step_cases(spec):
        timing = out / f"step_{role}_{rows}.json"
        me = [sys.executable, str(Path(__file__).resolve()), "--part", "run-step"]
        run = me + ["--engine", str(engine), "--role", role, "--rows", str(rows),
                    "--timing", str(timing)]  # fmt: skip
        res = subprocess.run(
            [ncu, "--csv", "--profile-from-start", "off", "--cache-control", "none",
             "--clock-control", "none", "--metrics", ",".join(STEP_METRICS)] + run,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        (out / f"ncu_step_{role}_{rows}.log").write_text(res.stdout[-200000:] + res.stderr[-20000:])
        if res.returncode != 0:
            cases.append({"role": role, "rows": rows, "error": f"exit {res.returncode}: "
                          f"{res.stderr[-600:]}"})  # fmt: skip
            continue
        r = json.loads(timing.read_text())
        r.update(step_table(ncu_kernels(res.stdout), int(r["forwards"])))
        ws = {}
        if states:
            log = out / f"ncu_states_{role}_{rows}.log"
            ws = warp_state_pass(ncu, run, round(r["kernels_per_forward"]), log)
            r["states_error"] = ws.get("error")
        for g in r["by_kernel"]:
            g["code_kib"] = code.get(g["kernel"], 0) / 1024
            g["states"] = ws.get("by_kernel", {}).get((g["kernel"], g["grid"]), {}).get("shares")
        cases.append(r)
    return {"profiler": "ncu (op by op, caches kept)", "cases": cases}


def step_markdown(st: dict[str, Any]) -> list[str]:
    out = ["", "## One forward, kernel by kernel (ncu, op by op, caches kept, context "
           f"{CONTEXT})", ""]  # fmt: skip
    if "cases" not in st:
        return out + [f"Not measured: {st.get('error') or st.get('profiler')}."]
    for c in st["cases"]:
        title = f"### {c['role']}, {c['rows']} row{'s' if c['rows'] > 1 else ''}"
        if "error" in c:
            out += [title, "", f"Not measured: {c['error']}", ""]
            continue
        out += [
            title, "",
            f"As a graph {c['graph_ms']:.3f} ms, op by op {c['eager_ms']:.3f} ms; the kernels' own "
            f"durations sum to {c['kernel_sum_us'] / 1e3:.3f} ms ({c['kernels_per_forward']:.0f} "
            "kernels per forward). Code: the kernel's SASS bytes (kernel_code.py); warp states:"
            " the largest shares of ncu's WarpStateStats (no_instruction: waiting for an"
            " instruction fetch; long_scoreboard: a global load; selected: issuing)"
            + (f" (not measured: {c['states_error']})" if c.get("states_error") else "") + ".",
            "",
            "| kernel | grid | per forward | mean us | us per forward | share | registers | "
            "code KiB | warp states |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|",
        ]  # fmt: skip
        out += [
            f"| {g['kernel']} | {g['grid']} | {g['per_forward']:.0f} | {g['mean_us']:.1f} | "
            f"{g['us_per_forward']:.1f} | {g['share']:.1%} | {g['regs'] or '-'} | "
            f"{g.get('code_kib') or 0:.0f} | {top_states(g.get('states') or {}) or '-'} |"
            for g in c["by_kernel"][:16]
        ]
        out.append("")
    return out


# ---- the driver ----------------------------------------------------------------------------------
def profile_iteration(engine: Path, out: Path) -> dict[str, Any]:
    timing = out / "iteration_timing.json"
    nsys = tool("nsys")
    me = [sys.executable, str(Path(__file__).resolve())]
    run = me + ["--part", "run-iteration", "--engine", str(engine), "--timing", str(timing)]
    if not nsys:
        r = {"profiler": "none (nsys missing): CUDA-event timing, launch plan"}
        r.update(run_iteration(engine, timing))
        from trt_spec import _core

        plan = _core.cuda_launch_plan(str(engine), 1, K, 132)
        r["kernels_per_iteration"] = plan["iteration_kernels"]
        r["idle_us"] = None
        return r
    rep = out / "iteration"
    subprocess.run(
        [nsys, "profile", "-t", "cuda", "--cuda-graph-trace=node", "--force-overwrite=true",
         "-o", str(rep), "--export=sqlite"] + run,
        check=True, timeout=240,
    )  # fmt: skip
    r = {"profiler": subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout}
    r.update(json.loads(timing.read_text()))
    r.update(iteration_profile(graph_iterations(rep.with_suffix(".sqlite"))))
    return r


def profile_matmul(out: Path) -> dict[str, Any]:
    ncu = tool("ncu")
    if not ncu:
        return {"profiler": "none: ncu missing"}
    me = [sys.executable, str(Path(__file__).resolve()), "--part", "run-matmul"]
    cases_file = out / "matmul_cases.json"
    res = subprocess.run(
        [ncu, "--csv", "-k", "regex:matmul_kernel", "--metrics", ",".join(NCU_METRICS)]
        + me + ["--timing", str(cases_file)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (out / "ncu.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        return {"profiler": "ncu", "error": f"exit {res.returncode}: {res.stderr[-800:]}"}
    cases = json.loads(cases_file.read_text())
    metrics = ncu_metrics(res.stdout)
    if len(metrics) != len(cases):
        return {"profiler": "ncu", "error": f"{len(metrics)} kernels for {len(cases)} cases"}
    return {"profiler": "ncu", "cases": [c | m for c, m in zip(cases, metrics, strict=True)]}


def markdown(r: dict[str, Any]) -> str:
    out = [f"# GPU profile ({r['date']}, commit {r['commit']}, {r['device']})"]
    if "iteration" in r:
        out += iteration_markdown(r["iteration"])
    if "matmul" in r:
        out += matmul_markdown(r["matmul"])
    if "step" in r:
        out += step_markdown(r["step"])
    return "\n".join(out) + "\n"


def iteration_markdown(it: dict[str, Any]) -> list[str]:
    if "iteration_ms" not in it:
        return ["", "## Iteration", "", f"Not measured: {it.get('error')}."]
    out = [
        "",
        f"## One K = {K} iteration, real-shape q4 pair (1.5B target, 0.5B draft), batch 1",
        "",
        f"Profiler: {str(it.get('profiler', '')).strip()}. Iteration {it['iteration_ms']:.3f} ms "
        f"(test module, {it['iterations']} replays); kernels per iteration: "
        f"{it['kernels_per_iteration']}; draft step / target step: "
        f"{it['draft_step_ms']:.3f} / {it['target_step_ms']:.3f} ms = "
        f"{it['draft_over_target']:.2f}.",
    ]
    if it.get("idle_us") is not None:
        out += [
            f"Inside an iteration (median of {it['launches']} graph launches): span "
            f"{it['iteration_span_us']:.1f} us, kernels busy {it['kernel_busy_us']:.1f} us, GPU "
            f"idle between kernels {it['idle_us']:.1f} us ({it['idle_share']:.1%}); gaps median "
            f"{it['gap_us_median']:.2f} us, max {it['gap_us_max']:.2f} us.",
            "",
            "| kernel | share of kernel time | us per iteration |",
            "|---|---:|---:|",
        ]
        out += [
            f"| {k['kernel']} | {k['share']:.1%} | {k['us_per_iteration']:.1f} |"
            for k in it["time_by_kernel"]
        ]
    else:
        out.append("GPU idle time between kernels: not measured (no nsys).")
    return out


def matmul_markdown(mm: dict[str, Any]) -> list[str]:
    out = ["", "## q4 / q8 matmul under ncu (caches flushed between replays)", ""]
    if "cases" in mm:
        out += [
            "| weights | W shape | rows | us | DRAM read MB | DRAM throughput (% of peak) |",
            "|---|---|---:|---:|---:|---:|",
        ]
        out += [
            f"| {c['weights']} | {c['shape']} [{c['w_rows']}, {c['w_cols']}] | {c['rows']} | "
            f"{c.get('time_us', float('nan')):.1f} | {c.get('dram_read_bytes', 0) / 1e6:.2f} | "
            f"{c.get('dram_pct', float('nan')):.1f} |"
            for c in mm["cases"]
        ]
    else:
        out.append(f"Not measured: {mm.get('error') or mm.get('profiler')}.")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--part", default="all", choices=["all", "run-iteration", "run-matmul", "run-step"]
    )
    ap.add_argument("--parts", default="iteration,matmul,step", help="which parts (with all)")
    ap.add_argument("--role", default="target", help="(run-step) target or draft")
    ap.add_argument("--rows", type=int, default=1, help="(run-step) rows of the forward")
    ap.add_argument("--step-cases", default=STEP_CASES, help="role:rows of the step part")
    ap.add_argument(
        "--no-states", action="store_true", help="(step) no warp-state pass (half the time)"
    )
    ap.add_argument("--engine", default=str(ENGINE), help="the real-shape q4 pair (made if absent)")
    ap.add_argument(
        "--out", default=os.environ.get("OUT", str(REPO / "benchmarks/results/gpu_logs"))
    )
    ap.add_argument("--timing", default=None, help="(the parts' own runs) where to write")
    args = ap.parse_args()
    if args.part == "run-iteration":
        run_iteration(Path(args.engine), Path(args.timing))
        return 0
    if args.part == "run-matmul":
        Path(args.timing).write_text(json.dumps(run_matmul()))
        return 0
    if args.part == "run-step":
        run_step(Path(args.engine), args.role, args.rows, Path(args.timing))
        return 0
    from native_testing import testing_module
    from trt_spec.bench.common import git_commit

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = testing_module(REPO).cuda_device_info(0)
    r: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(REPO, paths=["cpp"]) or "unknown",
        "device": f"{dev['name']} (cc {dev['compute_capability']})",
    }
    engine = ensure_engine(Path(args.engine))
    parts = {
        "iteration": lambda: profile_iteration(engine, out),
        "matmul": lambda: profile_matmul(out),
        "step": lambda: profile_step(engine, out, args.step_cases, not args.no_states),
    }
    for part in args.parts.split(","):
        fn = parts[part]
        try:
            r[part] = fn()
        except Exception as e:  # keep the other part's results
            r[part] = {"error": f"{type(e).__name__}: {e}"}
        (out / "profile_gpu.json").write_text(json.dumps(r, indent=1, default=str))
    try:
        (out / "profile_gpu.md").write_text(markdown(r))
    except KeyError as e:
        print(f"profile_gpu: no markdown ({e}); see profile_gpu.json", file=sys.stderr)
    print((out / "profile_gpu.json").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
