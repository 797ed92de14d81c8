"""Fits the GPU cost model's kernel constants (``trt_spec.cost_model``) to one GPU run and writes
the package's calibration file.

Inputs: a ``bench_gpu.py`` report (decode steps, the targets' n-row forwards, the draft's
2-row step) and the microbenchmarks' JSON of the same machine (``run_gpu_checks.sh calibrate``:
``gpu_calibrate.cu``). The kernel constants are a least-squares fit of relative errors over the
one-row steps of every model and the targets' forwards of 1-16 rows; ``iteration_extra_us`` is
the engine's target-only iteration less its one-row forward, averaged over the targets. The
iterations (K = 2..6) are held out: the fit never sees them, and ``tests/test_cost_model.py``
checks the model against them.

    python benchmarks/fit_gpu_cost_model.py benchmarks/results/gpu_s34_h200.json \\
        benchmarks/results/gpu_calibration_h200.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from random_engine import SHAPES
from trt_spec import cost_model as cm

FITTED = [k for k in cm.KERNEL_KEYS if k != "iteration_extra_us"]


def shape_of(model: str, weights: str) -> cm.Shape:
    cfg = SHAPES[model]
    return cm.Shape.of(cfg, cm.matrices_of_config(cfg, weights))


def observations(report: dict) -> list[tuple[str, str, int, float]]:
    """(model, weights, rows, measured µs) of the forwards the fit uses."""
    obs = []
    for row in report["decode_steps"]:
        ms = row.get("step_pdl_ms") or row["step_ms"]
        obs.append((row["model"], row["weights"], 1, ms * 1e3))
    for name, fr in (report.get("forward_rows") or {}).items():
        weights = name.rsplit("-", 1)[1]
        for r in fr["verify_rows"][1:]:  # (one row: the decode step above)
            obs.append((fr["model"], weights, r["rows"], r["ms"] * 1e3))
    for name, its in (report.get("iterations") or {}).items():
        weights = name.rsplit("-", 1)[1]
        if its:  # the draft's two-row step (the same 0.5B in every pair: once)
            obs.append(("qwen2.5-0.5b", weights, 2, its[0]["draft_step0_ms"] * 1e3))
            break
    return obs


def fit(report: dict, measured: dict) -> dict:
    cal0 = cm.Calibration(measured["device"], float(measured["copy_gbps"]), {}, measured, "")
    a, b = [], []
    for model, weights, n, us in observations(report):
        shape = shape_of(model, weights)
        terms = cm.forward_terms(shape, n)
        a.append([terms[k] / us for k in FITTED])
        b.append((us - cm.kv_read_us(cal0, shape, n, report["settings"]["trt"]["context"])) / us)
    x, *_ = np.linalg.lstsq(np.array(a), np.array(b), rcond=None)
    if (x <= 0).any():
        raise SystemExit(f"fit: non-positive constants {dict(zip(FITTED, x, strict=True))}")
    kernel = {k: float(v) for k, v in zip(FITTED, x, strict=True)}
    kernel["matmul_bytes_per_us"] = 1.0 / kernel["matmul_bytes_per_us"]
    extra = [
        (r["engine_step_ms"] - (r.get("step_pdl_ms") or r["step_ms"])) * 1e3
        for r in report["decode_steps"]
        if r.get("engine_step_ms")
    ]
    kernel["iteration_extra_us"] = float(np.mean(extra))
    return kernel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="bench_gpu.py report (.json)")
    ap.add_argument("measured", help="the microbenchmarks' JSON of the same machine")
    ap.add_argument("--out", default=str(cm.CALIBRATION))
    args = ap.parse_args()
    report = json.loads(Path(args.report).read_text())
    measured = json.loads(Path(args.measured).read_text())
    kernel = fit(report, measured)
    out = {
        "source": f"fitted by benchmarks/fit_gpu_cost_model.py to {Path(args.report).name}; "
        f"measured constants from {Path(args.measured).name}",
        "report": Path(args.report).name,
        "measured": measured,
        "kernel": kernel,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(kernel, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
