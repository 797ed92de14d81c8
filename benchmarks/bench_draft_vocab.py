"""A reduced draft vocabulary (``trt-spec build --draft-vocab N``) against the full one, engine
against engine, interleaved prompt by prompt so that a shared host's load weighs on both alike.

Two engines of the same pair, built alike but for ``--draft-vocab``: ``--full`` and
``--reduced``. Per prompt (HumanEval, ``--n``): the target alone on the full engine (the greedy
reference), then ``--repeats`` rounds of the speculative configuration (``--draft``, default
auto, with ``draft_len`` auto) on each engine, the order alternating (full, reduced; reduced,
full; ...). Each speculative configuration decodes on an Engine of its own (its draft-length
controller learns from its own iterations only). Greedy, ``--new`` tokens, EOS ignored.

Reports per configuration: decode tokens/s over all prompts (decode tokens over decode time),
the median and lowest per-prompt ratio reduced / full, acceptance (accepted / drafted draft
tokens) and tokens per iteration, greedy exactness against the target alone, the load average
at the start and the end; and the share of a draft step its head takes in each engine (one-row
draft forwards with and without the head, ``Session.time_forward``, interleaved, minima).

    python benchmarks/bench_draft_vocab.py --full pair.engine --reduced pair_32k.engine
        [--n 20] [--new 128] [--repeats 2] [--draft auto] [--threads 2] [--tag s35]

Writes ``benchmarks/results/draft_vocab_<tag>.json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from native_testing import testing_module
from trt_spec import Engine
from trt_spec.bench.common import environment, loadavg, write_report
from trt_spec.bench.prompts import load_prompts

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def head_share(paths: dict[str, str], threads: int, rounds: int = 12) -> dict[str, dict]:
    """Per engine: a one-row draft forward (context 128) with and without the head (minima over
    interleaved rounds of 8 forwards), and the head's share of the step."""
    T = testing_module(REPO)
    sessions = {k: T.Session(p, "cpu", threads) for k, p in paths.items()}
    best: dict[tuple[str, int], float] = {}
    for _ in range(rounds):
        for k, s in sessions.items():
            for n_logits in (0, 1):
                t = s.time_forward("draft", 1, n_logits, 128, 8, False, False)
                best[(k, n_logits)] = min(best.get((k, n_logits), t), t)
    return {
        k: {
            "step_ms": 1e3 * best[(k, 1)],
            "step_without_head_ms": 1e3 * best[(k, 0)],
            "head_share": (best[(k, 1)] - best[(k, 0)]) / best[(k, 1)],
        }
        for k in paths
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    prompts, source = load_prompts("humaneval", args.n)
    paths = {"full": args.full, "reduced": args.reduced}
    ref_engine = Engine(args.full, n_threads=args.threads)
    engines = {k: Engine(p, n_threads=args.threads) for k, p in paths.items()}
    kw = dict(max_new_tokens=args.new, temperature=0.0, ignore_eos=True)
    for e in (ref_engine, *engines.values()):  # warm-up
        e.generate("def f(x):", max_new_tokens=8, ignore_eos=True, draft=args.draft)
    runs: dict[str, list[dict]] = {k: [] for k in ("target", *paths)}
    for i, p in enumerate(prompts):
        ref = ref_engine.generate(p.prompt, speculate=False, **kw)
        runs["target"].append({"id": p.id, "s": ref.stats, "same": True})
        recs: dict[str, list] = {k: [] for k in paths}
        for rep in range(args.repeats):
            order = list(paths) if rep % 2 == 0 else list(reversed(paths))
            for k in order:
                r = engines[k].generate(p.prompt, draft=args.draft, draft_len="auto", **kw)
                recs[k].append(r)
                if r.token_ids != ref.token_ids:
                    print(f"GREEDY MISMATCH: {k} on {p.id}")
        for k in paths:
            runs[k] += [{"id": p.id, "s": r.stats, "same": r.token_ids == ref.token_ids}
                        for r in recs[k]]  # fmt: skip
        rate = {k: _decode_rate(recs[k]) for k in paths}
        print(
            f"[{i + 1}/{len(prompts)}] {p.id}: target {ref.stats.decode_tokens_per_s:.2f}, "
            f"full {rate['full']:.2f}, reduced {rate['reduced']:.2f} tok/s "
            f"(ratio {rate['reduced'] / rate['full']:.3f}), load {loadavg()}",
            flush=True,
        )
    del ref_engine, engines
    summary = {k: _summary(v) for k, v in runs.items()}
    ratios = []
    for i in range(len(prompts)):
        per = {
            k: _decode_rate([x["s"] for x in runs[k] if x["id"] == prompts[i].id]) for k in paths
        }
        ratios.append(per["reduced"] / per["full"])
    return {
        "prompt_source": source,
        "n_prompts": len(prompts),
        "new_tokens": args.new,
        "repeats": args.repeats,
        "draft": args.draft,
        "engines": paths,
        "summary": summary,
        "ratio_reduced_over_full": summary["reduced"]["decode_tok_s"]
        / summary["full"]["decode_tok_s"],
        "per_prompt_ratio": {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "all": ratios,
        },  # fmt: skip
        "loadavg_end": loadavg(),
        "head_share": head_share(paths, args.threads),
    }


def _decode_rate(items: list) -> float:
    """Decode tokens over decode seconds of GenerationResults or GenerationStats."""
    stats = [getattr(x, "stats", x) for x in items]
    tokens = sum(max(s.new_tokens - 1, 0) for s in stats)
    secs = sum(max(s.new_tokens - 1, 0) / s.decode_tokens_per_s for s in stats)
    return tokens / secs


def _summary(items: list[dict]) -> dict[str, Any]:
    stats = [x["s"] for x in items]
    drafted = sum(s.drafted for s in stats)
    return {
        "runs": len(stats),
        "decode_tok_s": _decode_rate(stats),
        "acceptance": sum(s.accepted for s in stats) / drafted if drafted else None,
        "tokens_per_iteration": sum(s.new_tokens for s in stats) / sum(s.iterations for s in stats),
        "greedy_equal": sum(x["same"] for x in items),
    }


def render(report: dict[str, Any]) -> str:
    s, env = report["summary"], report["environment"]
    lines = [
        f"# Draft vocabulary: reduced vs full ({report['n_prompts']} HumanEval prompts, "
        f"{report['new_tokens']} new tokens, greedy, draft={report['draft']}, draft_len auto)",
        "",
        f"CPU {env['cpu']}, {env['threads']} threads; load average {env['loadavg_start']} at the "
        f"start, {report['loadavg_end']} at the end; commit {env['git_commit']}.",
        f"Engines: full `{report['engines']['full']}`, reduced `{report['engines']['reduced']}`; "
        f"{report['repeats']} interleaved runs per prompt and engine.",
        "",
        "| configuration | runs | decode tok/s | acceptance | tokens / iter | greedy = target |",
        "|---|---|---|---|---|---|",
    ]
    for k in ("target", "full", "reduced"):
        x = s[k]
        acc = f"{100 * x['acceptance']:.1f}%" if x["acceptance"] is not None else "-"
        lines.append(
            f"| {k} | {x['runs']} | {x['decode_tok_s']:.2f} | {acc} | "
            f"{x['tokens_per_iteration']:.2f} | {x['greedy_equal']}/{x['runs']} |"
        )
    pr = report["per_prompt_ratio"]
    lines += [
        "",
        f"Reduced / full decode tok/s: **{report['ratio_reduced_over_full']:.3f}x** (per prompt: "
        f"median {pr['median']:.3f}, min {pr['min']:.3f}, max {pr['max']:.3f}).",
        "",
        "Draft step (one row, context 128, minima of interleaved rounds):",
    ]
    for k, h in report["head_share"].items():
        lines.append(
            f"- {k}: {h['step_ms']:.2f} ms, {h['step_without_head_ms']:.2f} ms without the head: "
            f"the head is {100 * h['head_share']:.1f}% of the step"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", required=True, help="engine with the full draft head")
    ap.add_argument("--reduced", required=True, help="the same pair built with --draft-vocab")
    ap.add_argument("--n", type=int, default=20, help="HumanEval prompts (default 20)")
    ap.add_argument("--new", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per prompt and engine")
    ap.add_argument("--draft", default="auto", choices=["auto", "model"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="run")
    args = ap.parse_args()
    env = environment(args.threads, REPO)
    report = {"kind": "draft vocabulary", "environment": env, **run(args)}
    write_report(RESULTS / f"draft_vocab_{args.tag}", report, render(report))


if __name__ == "__main__":
    main()
