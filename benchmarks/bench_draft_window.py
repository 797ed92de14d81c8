"""The draft model's prompt window and its read after the first token, on long prompts: what
they save and what they cost.

A window (``Engine(draft_window=W)``) has the draft read only the last W prompt tokens, after the
first token, instead of every prompt chunk (all but the last inside the time to first token).
A read chunk (``Engine(draft_read_chunk=N)``) has it read the whole prompt after the first token,
N rows per decode step, while the request decodes without it (plain target steps).
On long prompts this measures, per configuration, in one run on the same CPU and threads:
  - TTFT (the target's prefill, plus the draft's reading of the earlier chunks without a window);
  - the first inter-token latency (it holds the draft's reading of the last chunk or the window),
    and the p95 and largest ones (they hold the pieces of a read after the first token);
  - acceptance rate and tokens per iteration (what the shorter context costs the draft);
  - decode tokens/s after the first token, and the whole request's time.
Configurations: the target alone (``draft="none"``), then the draft model (``draft="model"``,
draft length ``--draft-len``, default auto) with window 0 (the whole prompt), each
``--windows`` value, and each ``--read-chunks`` value (whole prompt, read after the first
token). Each prompt runs every configuration back to back (interleaved), greedy, ``--new``
tokens, EOS ignored.

Prompts are real Python source (not HumanEval): modules of the interpreter's standard library,
picked by a seeded shuffle, each cut to ``--length`` tokens at a line end. The greedy outputs of
every configuration must equal the target's (checked).

    python benchmarks/bench_draft_window.py --engine pair_8k.engine [--length 2048]
        [--prompts 6] [--windows 256,512,1024] [--read-chunks 256] [--new 128]
        [--draft-len auto] [--threads 2] [--seed 31] [--tag s31]

Writes ``benchmarks/results/draft_window_<tag>.json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sysconfig
from pathlib import Path
from typing import Any

from trt_spec import Engine
from trt_spec.bench.common import environment

RESULTS = Path(__file__).resolve().parent / "results"


def source_prompts(eng: Engine, n: int, length: int, seed: int) -> list[tuple[str, list[int]]]:
    """n (name, ids) prompts: standard-library modules with at least `length` tokens, each cut to
    at most `length` tokens at the end of a line."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    random.Random(seed).shuffle(files)
    out: list[tuple[str, list[int]]] = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        if len(text) < 6 * length:  # (about 3-4 characters per token)
            continue
        ids = eng.encode(text)
        if len(ids) < length + 64:
            continue
        cut = eng.decode(ids[:length])
        cut = cut[: cut.rfind("\n") + 1]
        ids = eng.encode(cut)[:length]
        out.append((f.name, ids))
        if len(out) == n:
            return out
    raise RuntimeError(f"found {len(out)} standard-library modules of {length}+ tokens, not {n}")


def measure(eng: Engine, ids: list[int], draft: str, new: int, k: int | str) -> dict[str, Any]:
    r = eng.generate(ids, max_new_tokens=new, draft=draft, draft_len=k, ignore_eos=True)
    s = r.stats
    return {
        "tokens": r.token_ids,
        "ttft_s": s.ttft_s,
        "first_itl_s": (s.itl_ms[0] / 1e3) if s.itl_ms else 0.0,
        "max_itl_s": (max(s.itl_ms) / 1e3) if s.itl_ms else 0.0,
        "p95_itl_s": s.itl_p95_ms / 1e3,
        "total_s": s.total_s,
        "decode_tok_s": s.decode_tokens_per_s,
        "acceptance": s.acceptance_rate,
        "tokens_per_iteration": s.tokens_per_iteration,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "iterations": s.iterations,
    }


def summarise(runs: list[dict[str, Any]], labels: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for lab in labels:
        rows = [r[lab] for r in runs]
        drafted = sum(x["drafted"] for x in rows)
        its = sum(x["iterations"] for x in rows)
        out[lab] = {
            "ttft_s": statistics.median(x["ttft_s"] for x in rows),
            "first_itl_s": statistics.median(x["first_itl_s"] for x in rows),
            "p95_itl_s": statistics.median(x["p95_itl_s"] for x in rows),
            "max_itl_s": statistics.median(x["max_itl_s"] for x in rows),
            "total_s": statistics.median(x["total_s"] for x in rows),
            "decode_tok_s": statistics.median(x["decode_tok_s"] for x in rows),
            "acceptance": sum(x["accepted"] for x in rows) / drafted if drafted else 0.0,
            "tokens_per_iteration": sum(len(x["tokens"]) - 1 for x in rows) / its if its else 0.0,
        }
    return out


def report(meta: dict[str, Any], summary: dict[str, dict[str, float]], runs: list) -> str:
    env = meta["environment"]
    lines = [
        f"# Draft prompt window: {meta['tag']}",
        "",
        f"- {env['cpu']} ({', '.join(env['isa_flags'])}), backend {meta['backend']}, load "
        f"average {env['loadavg_start']} at the start; commit {env['git_commit']}",
        f"- engine `{meta['engine']}`; {meta['prompts']} standard-library modules cut to "
        f"{meta['length']} tokens; {meta['new']} new tokens, greedy; draft length "
        f"{meta['draft_len']}; "
        f"{meta['threads']} threads; configurations interleaved per prompt; medians over "
        "prompts (acceptance and tokens / iteration: pooled)",
        f"- greedy outputs equal to the target's: {meta['exact']}",
        "",
        "| configuration | TTFT s | first ITL s | p95 ITL s | max ITL s | decode tok/s | total s "
        "| acceptance | tokens / iteration |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lab, s in summary.items():
        lines.append(
            f"| {lab} | {s['ttft_s']:.2f} | {s['first_itl_s']:.2f} | {s['p95_itl_s']:.3f} | "
            f"{s['max_itl_s']:.2f} | {s['decode_tok_s']:.2f} | {s['total_s']:.2f} | "
            f"{s['acceptance']:.3f} | {s['tokens_per_iteration']:.2f} |"
        )
    lines += ["", "Per prompt (acceptance; total s):", ""]
    labels = list(summary)
    lines.append("| prompt | " + " | ".join(labels) + " |")
    lines.append("|---" * (len(labels) + 1) + "|")
    for r in runs:
        cells = [f"{r[lab]['acceptance']:.2f}; {r[lab]['total_s']:.1f}" for lab in labels]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", required=True)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--windows", default="256,512,1024")
    ap.add_argument("--read-chunks", default="", help="draft_read_chunk values (whole prompt)")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--draft-len", default="auto", help="the draft length: auto or a number")
    ap.add_argument("--tag", default="run")
    args = ap.parse_args()
    k: int | str = args.draft_len if args.draft_len == "auto" else int(args.draft_len)
    windows = [0] + [int(w) for w in args.windows.split(",") if w]
    chunks = [int(c) for c in args.read_chunks.split(",") if c]
    # (draft_window, draft_read_chunk) per drafting configuration
    configs = [(w, 0) for w in windows] + [(0, c) for c in chunks]
    engines = {
        wc: Engine(args.engine, n_threads=args.threads, draft_window=wc[0], draft_read_chunk=wc[1])
        for wc in configs
    }
    base = engines[(0, 0)]
    prompts = source_prompts(base, args.prompts, args.length, args.seed)
    base.generate(prompts[0][1][:64], max_new_tokens=4, draft="model", ignore_eos=True)  # warm-up

    def label(w: int, c: int) -> str:
        if c:
            return f"read after the first token, {c} rows / step"
        return f"window {w}" if w else "whole prompt"

    labels = ["target alone"] + [label(w, c) for w, c in configs]
    runs: list[dict[str, Any]] = []
    exact = True
    for name, ids in prompts:
        row: dict[str, Any] = {"name": name, "prompt_tokens": len(ids)}
        row[labels[0]] = measure(base, ids, "none", args.new, "auto")
        for lab, wc in zip(labels[1:], configs, strict=True):
            row[lab] = measure(engines[wc], ids, "model", args.new, k)
            exact = exact and row[lab]["tokens"] == row[labels[0]]["tokens"]
        print(name, {lab: round(row[lab]["total_s"], 2) for lab in labels}, flush=True)
        runs.append(row)
    env = environment(args.threads, Path(__file__).resolve().parent.parent)
    meta = {
        "tag": args.tag,
        "engine": args.engine,
        "length": args.length,
        "prompts": len(prompts),
        "new": args.new,
        "threads": args.threads,
        "draft_len": k,
        "windows": windows,
        "read_chunks": chunks,
        "exact": exact,
        "backend": base.backend,
        "environment": env,
    }
    summary = summarise(runs, labels)
    md = report(meta, summary, runs)
    print(md)
    RESULTS.mkdir(exist_ok=True)
    for r in runs:
        for lab in labels:
            r[lab].pop("tokens")
    (RESULTS / f"draft_window_{args.tag}.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1)
    )
    (RESULTS / f"draft_window_{args.tag}.md").write_text(md)
    if not exact:
        raise SystemExit("greedy outputs differ from the target's")


if __name__ == "__main__":
    main()
