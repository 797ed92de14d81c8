"""How fast prompt lookup could ever be on a prompt set: a clairvoyant bound from measured costs.

For each prompt, in one run on the same CPU and threads:
  1. the greedy output (``generate(..., draft="lookup")``, whose tokens equal target-only's);
  2. at every decode position i (text = prompt + output[:i + 1]), prompt lookup's proposal
     there (the engine's own rule, ``lookup_propose`` of the test-only module) and, for each
     k = 0 .. K, how many of its first k nodes greedy verification accepts (the longest path
     of the tree that the output follows);
  3. the target's forward time for n = 1 .. K + 1 rows with the logits of every row (a verify
     pass) at context 600, ``T(n)``.
Then, per prompt, decode time in units of the measured costs:
  - target-only: one row per token;
  - ``fixed k``: every iteration verifies min(k, nodes ready) nodes (``draft_len=k``);
  - ``oracle``: every iteration picks the k that minimises the time to the end, knowing how many
    nodes each k would have accepted (dynamic programming over positions). No controller can
    beat it with these proposals and these costs: it bounds what lookup (and any choice of its
    draft length) can reach on the prompt set.
Reported as speed-ups over target-only (total tokens / total time over the prompts). Costs are
the forward's alone (no acceptance or proposal time), so the figures are upper estimates of the
``trt-spec bench`` ones.

    python benchmarks/lookup_bound.py --engine pair_q4.engine \
        [--prompts benchmarks/prompts/code_edits.jsonl] [--n 20] [--max-new-tokens 128] [--tag x]

The test-only module comes from ``$TRT_SPEC_TESTING_DIR`` or the checkout's ``build/<wheel tag>/``
(``native_testing.testing_module``). Writes ``benchmarks/results/lookup_bound_<tag>.json``
and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from native_testing import testing_module
from trt_spec import Engine
from trt_spec.bench.common import environment
from trt_spec.bench.prompts import load_prompts


def accepted(tok: list[int], par: list[int], k: int, future: list[int]) -> int:
    """Greedy acceptance of the first k nodes of a tree against the tokens that follow."""
    cur, a = -1, 0
    while a < len(future):
        kids = [i for i in range(min(k, len(tok))) if par[i] == cur and tok[i] == future[a]]
        nxt = kids[0] if kids else -1
        if nxt < 0:
            return a
        cur, a = nxt, a + 1
    return a


def trace(T: Any, prompt: list[int], pred: list[int], out: list[int], K: int) -> list[tuple]:
    """[position]: (nodes lookup has ready, [k]: nodes accepted verifying the first k)."""
    rows = []
    for i in range(len(out) - 1):
        tok, par, _, _, _ = T.lookup_propose(prompt + out[: i + 1], pred, K)
        rows.append((len(tok), [accepted(tok, par, k, out[i + 1 :]) for k in range(K + 1)]))
    return rows


def fixed_time(acc: list[tuple], k: int, cost: dict[int, float]) -> float:
    """draft_len = k: every iteration verifies min(k, nodes ready) (none ready: a plain step)."""
    i, t = 0, 0.0
    while i < len(acc):
        m, a = acc[i]
        j = min(k, m)
        t += cost[1 + j]
        i += a[j] + 1
    return t


def oracle_time(acc: list[tuple], cost: dict[int, float]) -> float:
    """The least time to the end, choosing k at every iteration knowing what it accepts."""
    n = len(acc)
    best = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        m, a = acc[i]
        best[i] = min(cost[1 + k] + best[min(n, i + a[k] + 1)] for k in range(m + 1))
    return best[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", required=True)
    ap.add_argument("--prompts", default="benchmarks/prompts/code_edits.jsonl")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="run")
    ap.add_argument("--out-dir", default="benchmarks/results")
    args = ap.parse_args()
    T = testing_module(Path(__file__).resolve().parents[1])  # noqa: N806
    env = environment(args.threads)
    eng = Engine(args.engine, n_threads=args.threads)
    K = eng.max_draft_len
    prompts, source = load_prompts(args.prompts, args.n)
    per: list[dict[str, Any]] = []
    for p in prompts:
        r = eng.generate(
            p.prompt,
            max_new_tokens=args.max_new_tokens,
            ignore_eos=True,
            draft="lookup",
            prediction=p.prediction,
        )
        pred = eng.tokenizer.encode(p.prediction, add_special=False) if p.prediction else []
        per.append({"id": p.id, "acc": trace(T, r.prompt_token_ids, pred, r.token_ids, K)})
        print(f"{p.id}: {len(r.token_ids)} tokens", file=sys.stderr, flush=True)
    s = T.Session(args.engine, "cpu", args.threads)
    t0 = time.perf_counter()
    # Each size timed in 7 interleaved rounds of 3 forwards, the median kept: a shared host's
    # load moves every size alike instead of one.
    sizes = range(1, K + 2)
    rounds = [{n: s.time_forward("target", n, n, 600, 3, False) for n in sizes} for _ in range(7)]
    cost = {n: statistics.median(r[n] for r in rounds) for n in sizes}
    rep: dict[str, Any] = {
        "environment": env,
        "engine": args.engine,
        "prompts": source,
        "n": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "K": K,
        "row_costs_ms": {n: c * 1e3 for n, c in cost.items()},
        "cost_seconds_measuring": time.perf_counter() - t0,
    }
    configs = [f"fixed {k}" for k in range(1, K + 1)] + ["oracle"]
    totals = {c: 0.0 for c in configs}
    base_total = 0.0
    for q in per:
        acc = q.pop("acc")
        base = len(acc) * cost[1]
        base_total += base
        q["speedup"] = {}
        for k in range(1, K + 1):
            t = fixed_time(acc, k, cost)
            totals[f"fixed {k}"] += t
            q["speedup"][f"fixed {k}"] = base / t
        t = oracle_time(acc, cost)
        totals["oracle"] += t
        q["speedup"]["oracle"] = base / t
    rep["speedup"] = {c: base_total / t for c, t in totals.items()}
    rep["per_prompt"] = per
    md = render(rep)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"lookup_bound_{args.tag}.json").write_text(json.dumps(rep, indent=1))
    (out / f"lookup_bound_{args.tag}.md").write_text(md)
    print(md)
    return 0


def render(rep: dict[str, Any]) -> str:
    env = rep["environment"]
    lines = [
        "# Prompt lookup: fixed draft lengths and the clairvoyant bound",
        "",
        f"- device: {env['cpu']}, {env['threads']} threads; commit {env['git_commit']}",
        f"- engine {rep['engine']}, prompts: {rep['n']} from {rep['prompts']}, "
        f"{rep['max_new_tokens']} greedy tokens, K = {rep['K']}",
        "- target forward ms for n rows (all logits, context 600; medians of 7 rounds): "
        + ", ".join(f"{n}: {v:.1f}" for n, v in rep["row_costs_ms"].items()),
        "",
        "Speed-up over target-only decode, in the measured forward costs (no acceptance or "
        "proposal time: upper estimates):",
        "",
        "| config | speed-up |",
        "|---|---:|",
    ]
    lines += [f"| {c} | {v:.3f} |" for c, v in rep["speedup"].items()]
    lines += ["", "| prompt | best fixed k | oracle |", "|---|---:|---:|"]
    for q in rep["per_prompt"]:
        fixed = max((v, c) for c, v in q["speedup"].items() if c != "oracle")
        lines.append(f"| {q['id']} | {fixed[0]:.3f} ({fixed[1]}) | {q['speedup']['oracle']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
