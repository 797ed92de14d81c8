"""The prompt cache on a multi-turn chat: time to first token of a second turn that repeats the
first turn's history, with the cache on and off, in one run.

Per conversation (``--n``, from HumanEval prompts after ``--skip``): a history of about
``--history`` tokens (HumanEval prompts joined as one user message), turn 1 = the history and
a question, ``--new`` greedy tokens; turn 2 = turn 1 with its answer and a follow-up question.
Each conversation runs on an engine with the cache (``prompt_cache=True``) and on one without,
the order alternating; the report gives the median TTFT of each turn, the ratio turn 2 /
turn 1 (the issue's goal: at most 0.2 with the cache), the cached tokens, and whether turn 2's
tokens are the same on both engines.

    python benchmarks/bench_prompt_cache.py --engine pair.engine [--n 4] [--history 1500]
        [--new 32] [--threads 2] [--tag NAME]

Writes ``benchmarks/results/prompt_cache_<tag>.json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from trt_spec import Engine
from trt_spec.bench.common import environment, loadavg, log, write_report
from trt_spec.bench.prompts import load_prompts

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
QUESTION = "Which of the functions above is the hardest to test, and why?"
FOLLOW_UP = "Write a unit test for it."


def history_text(engine: Engine, skip: int, tokens: int) -> str:
    """HumanEval prompts from `skip` on, joined until about `tokens` tokens."""
    parts: list[str] = []
    prompts, _ = load_prompts("humaneval", 60, skip=skip)
    for p in prompts:
        parts.append(str(p.prompt))
        if len(engine.encode("\n\n".join(parts))) >= tokens:
            break
    return "\n\n".join(parts)


def conversation(engine: Engine, history: str, new: int) -> dict[str, Any]:
    turn1 = [{"role": "user", "content": history + "\n\n" + QUESTION}]
    a = engine.generate(turn1, max_new_tokens=new, temperature=0.0)
    turn2 = turn1 + [
        {"role": "assistant", "content": a.text},
        {"role": "user", "content": FOLLOW_UP},
    ]
    b = engine.generate(turn2, max_new_tokens=new, temperature=0.0)
    return {
        "turn1_ttft_s": a.stats.ttft_s,
        "turn2_ttft_s": b.stats.ttft_s,
        "turn1_prompt": a.stats.prompt_tokens,
        "turn2_prompt": b.stats.prompt_tokens,
        "turn2_cached": b.stats.cached_tokens,
        "turn2_tokens": b.token_ids,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    engines = {
        "cache": Engine(args.engine, n_threads=args.threads, prompt_cache=True),
        "no_cache": Engine(args.engine, n_threads=args.threads, prompt_cache=False),
    }
    load0 = loadavg()
    rows: list[dict[str, Any]] = []
    for i in range(args.n):
        history = history_text(engines["cache"], args.skip + 12 * i, args.history)
        order = ["cache", "no_cache"] if i % 2 == 0 else ["no_cache", "cache"]
        got = {k: conversation(engines[k], history, args.new) for k in order}
        same = got["cache"]["turn2_tokens"] == got["no_cache"]["turn2_tokens"]
        row = {"conversation": i, "same_tokens": same}
        for k, g in got.items():
            row[k] = {key: v for key, v in g.items() if key != "turn2_tokens"}
        rows.append(row)
        c, n = row["cache"], row["no_cache"]
        log(
            f"[{i + 1}/{args.n}] history {c['turn1_prompt']} tok: turn 2 TTFT "
            f"{c['turn2_ttft_s']:.2f} s cached ({c['turn2_cached']} tok) vs "
            f"{n['turn2_ttft_s']:.2f} s; turn 1 {c['turn1_ttft_s']:.2f} s; same tokens {same}"
        )

    def med(k: str, key: str) -> float:
        return statistics.median(r[k][key] for r in rows)

    summary = {
        k: {
            "turn1_ttft_s": med(k, "turn1_ttft_s"),
            "turn2_ttft_s": med(k, "turn2_ttft_s"),
            "turn2_over_turn1": statistics.median(
                r[k]["turn2_ttft_s"] / r[k]["turn1_ttft_s"] for r in rows
            ),
            "turn2_cached": med(k, "turn2_cached"),
        }
        for k in ("cache", "no_cache")
    }
    return {
        "engine": str(args.engine),
        "n": args.n,
        "history_tokens": args.history,
        "new_tokens": args.new,
        "rows": rows,
        "summary": summary,
        "same_tokens": sum(r["same_tokens"] for r in rows),
        "loadavg_start": load0,
        "loadavg_end": loadavg(),
    }


def render(report: dict[str, Any]) -> str:
    env, s = report["environment"], report["summary"]
    lines = [
        f"# Prompt cache: a second chat turn ({report['n']} conversations, history of about "
        f"{report['history_tokens']} tokens, {report['new_tokens']} new tokens, greedy)",
        "",
        f"CPU {env['cpu']}, {env['threads']} threads; load average {report['loadavg_start']} at "
        f"the start, {report['loadavg_end']} at the end; commit {env['git_commit']}; engine "
        f"`{report['engine']}`.",
        "",
        "| engine | turn 1 TTFT (s) | turn 2 TTFT (s) | turn 2 / turn 1 | turn 2 cached tokens |",
        "|---|---|---|---|---|",
    ]
    for k in ("cache", "no_cache"):
        x = s[k]
        lines.append(
            f"| {k} | {x['turn1_ttft_s']:.2f} | {x['turn2_ttft_s']:.2f} | "
            f"{x['turn2_over_turn1']:.3f} | {x['turn2_cached']:.0f} |"
        )
    lines += [
        "",
        f"Medians over conversations. Turn 2's tokens equal with and without the cache: "
        f"{report['same_tokens']}/{report['n']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", required=True, help="an engine (the default pair)")
    ap.add_argument("--n", type=int, default=4, help="conversations (default 4)")
    ap.add_argument("--skip", type=int, default=100, help="HumanEval prompts skipped first")
    ap.add_argument("--history", type=int, default=1500, help="history tokens, about")
    ap.add_argument("--new", type=int, default=32, help="new tokens per turn (default 32)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="run")
    args = ap.parse_args()
    report = {"kind": "prompt cache", "environment": environment(args.threads, REPO), **run(args)}
    write_report(RESULTS / f"prompt_cache_{args.tag}", report, render(report))


if __name__ == "__main__":
    main()
