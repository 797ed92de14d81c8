"""Engine memory on the CPU: weights, KV cache and the process's resident set, per engine.

For each engine (``--engines``, e.g. the default pair built with ``--max-seq-len`` 4096 and
32768) and each KV cache type (``--kv`` f32,f16), one fresh process each:
  - the engine file's size, the weights' bytes (target and draft, as in the file) and the KV
    cache's bytes (``Engine.kv_bytes``: every sequence slot at the full max_seq_len), as
    ``trt-spec info`` prints them;
  - the resident set after load (``VmRSS``), split into anonymous memory (the backend's repacked
    weights, scratch) and file pages (what is read in place from the mapped engine file);
  - with ``--prefill N`` (and an engine that holds N + 1 positions), the resident set after a
    target prefill of N prompt tokens (HumanEval prompts joined) and its peak (``VmHWM``): the
    KV cache's pages become resident as they are written.

    python benchmarks/bench_memory.py --engines a.engine,b.engine [--kv f32,f16]
        [--prefill 4096] [--threads 2] [--tag s33]

Writes ``benchmarks/results/memory_<tag>.json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_prefill import prompt_ids
from trt_spec.bench.common import environment, proc_status_bytes, write_report

RESULTS = Path(__file__).resolve().parent / "results"
FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def status_mb() -> dict[str, float]:
    """This process's resident figures from /proc/self/status, in MB."""
    return {k: v / 1e6 for k, v in proc_status_bytes(FIELDS).items()}


def measure(path: str, kv: str, prefill: int, threads: int) -> dict[str, Any]:
    """One engine and KV type, in this process (run in a fresh one per configuration)."""
    from trt_spec import Engine

    eng = Engine(path, device="cpu", n_threads=threads, kv_cache_dtype=kv)
    meta = eng.metadata
    row: dict[str, Any] = {
        "engine": path,
        "kv": eng.kv_cache_dtype,
        "max_seq_len": eng.max_seq_len,
        "max_batch": eng.max_batch,
        "file_mb": Path(path).stat().st_size / 1e6,
        "weights_mb": sum(m["weight_bytes"] for m in meta["models"].values()) / 1e6,
        "kv_mb": eng.kv_bytes / 1e6,
        "loaded": status_mb(),
    }
    if prefill and prefill < eng.max_seq_len:
        eng.generate(prompt_ids(eng, prefill), max_new_tokens=1, draft="none", ignore_eos=True)
        row["prefill"] = prefill
        row["after_prefill"] = status_mb()
    return row


def render(rep: dict[str, Any]) -> str:
    env = rep["environment"]
    lines = [
        f"# Engine memory ({rep['tag']})",
        "",
        f"{env.get('cpu')}, commit {env.get('git_commit')}, {rep['threads']} threads; one fresh "
        "process per row; MB = 10^6 bytes; resident figures from /proc/self/status.",
        "",
        "| engine | max_seq_len x batch | KV | file MB | weights MB | KV cache MB | "
        "resident after load MB (anon + file) | after a prefill of N: resident (peak) MB |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rep["rows"]:
        ld = r["loaded"]
        pre = r.get("after_prefill")
        cell = f"N={r['prefill']}: {pre['VmRSS']:.0f} ({pre['VmHWM']:.0f})" if pre else "-"
        lines.append(
            f"| {Path(r['engine']).name} | {r['max_seq_len']} x {r['max_batch']} | {r['kv']} | "
            f"{r['file_mb']:.0f} | {r['weights_mb']:.0f} | {r['kv_mb']:.0f} | "
            f"{ld['VmRSS']:.0f} ({ld['RssAnon']:.0f} + {ld['RssFile']:.0f}) | {cell} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", required=True, help="comma-separated engine paths")
    ap.add_argument("--kv", default="f32,f16", help="KV cache types (comma-separated)")
    ap.add_argument("--prefill", type=int, default=0, help="prompt tokens to prefill (0: none)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="cpu")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # path|kv: measure in this process
    args = ap.parse_args()
    if args.one:
        path, kv = args.one.split("|")
        print(json.dumps(measure(path, kv, args.prefill, args.threads)))
        return 0
    rows = []
    for path in args.engines.split(","):
        for kv in args.kv.split(","):
            cmd = [sys.executable, __file__, "--engines", path, "--one", f"{path}|{kv}"]
            cmd += ["--prefill", str(args.prefill), "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    rep = {"tag": args.tag, "environment": environment(args.threads), "threads": args.threads}
    rep["rows"] = rows
    write_report(RESULTS / f"memory_{args.tag}", rep, render(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
