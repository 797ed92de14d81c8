"""Serving benchmark: `trt-spec serve` against llama.cpp's `llama-server`, at several concurrencies.

For each runner and each concurrency C (default 1, 2, 4, 8), C client threads send the same
prompts (streaming OpenAI completions, greedy, a fixed number of new tokens: ``ignore_eos``) until
every prompt has been answered once, and the run reports:
  - output tokens/s over the run (all requests' new tokens / wall time);
  - time to first token (TTFT) p50/p95/p99;
  - inter-token latency (ITL) p50/p95/p99: the gaps between streamed chunks, as vLLM's
    benchmark_serving defines it (a speculative chunk may carry several tokens);
  - TPOT: (end - first token) / (tokens - 1) per request, p50.

Runners, in one run on the same prompts:
  - ``trt-spec spec``: our server, ``draft: auto`` (the engine's draft model and prompt lookup);
  - ``trt-spec target``: the same server, ``draft: none``;
  - ``llama-server spec``: ``llama-server -m TARGET --model-draft DRAFT --spec-type draft-simple``;
  - ``llama-server target``: ``llama-server -m TARGET``.
Both servers get the same threads, context per slot and parallel slots (the largest C).

    python benchmarks/bench_server.py --engine pair.engine --target T.gguf --draft D.gguf \
        [--concurrency 1,2,4,8] [--prompts humaneval] [--n-prompts 8] [--max-tokens 64] \
        [--threads 2] [--no-llama] [--tag NAME]

Writes ``benchmarks/results/server_<tag>.json``, ``.md`` (also printed) and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from peers.llama_spec_runner import find_binary
from trt_spec.bench.common import environment, percentile
from trt_spec.bench.prompts import load_prompts
from trt_spec.bench.servers import (
    ServerProcess,
    start_llama_server,
    start_trt_server,
)

RESULTS = Path(__file__).resolve().parent / "results"


def one_request(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Streams one completion; returns its send time, chunk times and token count."""
    t0 = time.perf_counter()
    times: list[float] = []
    tokens = None
    text = []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=3600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            msg = json.loads(line[6:])
            if msg.get("usage"):
                tokens = msg["usage"].get("completion_tokens", tokens)
            for c in msg.get("choices") or []:
                if c.get("text"):
                    times.append(time.perf_counter())
                    text.append(c["text"])
    if tokens is None:
        raise RuntimeError(f"{url}: no usage in the stream (stream_options.include_usage)")
    n = tokens
    return {"t0": t0, "times": times, "tokens": n, "text": "".join(text)}


def send_all(
    url: str, bodies: list[dict[str, Any]], concurrency: int
) -> tuple[list[dict[str, Any] | None], list[str], float]:
    """Sends every body once from `concurrency` threads: (results in the bodies' order, None
    where a request failed; the errors; wall seconds)."""
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(bodies)):
        todo.put(i)
    done: list[dict[str, Any] | None] = [None] * len(bodies)
    errors: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done[i] = one_request(url, bodies[i])
            except Exception as e:  # noqa: BLE001 (counted and reported)
                with lock:
                    errors.append(repr(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done, errors, time.perf_counter() - start


def summarize(
    results: list[dict[str, Any] | None], errors: list[str], wall: float, concurrency: int
) -> dict[str, Any]:
    """A runner's statistics at one concurrency from its requests (in prompt order)."""
    done = [r for r in results if r is not None]
    ttft = [r["times"][0] - r["t0"] for r in done if r["times"]]
    itl = [b - a for r in done for a, b in zip(r["times"], r["times"][1:], strict=False)]
    tpot = [
        (r["times"][-1] - r["times"][0]) / (r["tokens"] - 1)
        for r in done
        if len(r["times"]) > 1 and r["tokens"] > 1
    ]
    tokens = sum(r["tokens"] for r in done)
    ms = 1e3
    return {
        "concurrency": concurrency,
        "requests": len(done),
        "errors": errors,
        "wall_s": wall,
        "tokens": tokens,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        **{f"ttft_p{q}_ms": (percentile(ttft, q) or 0.0) * ms for q in (50, 95, 99)},
        **{f"itl_p{q}_ms": (percentile(itl, q) or 0.0) * ms for q in (50, 95, 99)},
        "tpot_p50_ms": (percentile(tpot, 50) or 0.0) * ms,
        "texts": [r["text"] if r else None for r in results],
    }


def run_load(url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Sends every body once from `concurrency` threads; the run's statistics."""
    return summarize(*send_all(url, bodies, concurrency), concurrency)


def sweep(name: str, url: str, bodies: list[dict[str, Any]], cs: list[int]) -> list[dict]:
    """One runner at every concurrency, after a one-request warm-up."""
    warm_up(url, bodies[0])
    runs = []
    for c in cs:
        r = run_load(url, bodies, c)
        print(f"{name} C={c}: {r['tokens_per_s']:.2f} tok/s", file=sys.stderr)
        runs.append(r)
    return runs


def interleaved_sweep(
    url: str, runners: dict[str, list[dict[str, Any]]], cs: list[int]
) -> dict[str, list[dict]]:
    """Runners that share one server, interleaved: at each concurrency C the prompts go in waves
    of C, each wave sent by every runner in turn (their order alternating wave by wave), and a
    runner's figures are over its waves (tokens / the sum of its waves' wall times). A shared
    host's speed drifts by tens of percent over minutes; runners that take turns every few
    seconds see the same drift, where whole sweeps one after another do not."""
    names = list(runners)
    n = len(runners[names[0]])
    out: dict[str, list[dict]] = {name: [] for name in names}
    for c in cs:
        acc: dict[str, tuple[list, list, float]] = {name: ([], [], 0.0) for name in names}
        for w, first in enumerate(range(0, n, c)):
            for name in names if w % 2 == 0 else names[::-1]:
                done, errors, wall = send_all(url, runners[name][first : first + c], c)
                d, e, t = acc[name]
                acc[name] = (d + done, e + errors, t + wall)
        for name in names:
            r = summarize(*acc[name], c)
            print(f"{name} C={c}: {r['tokens_per_s']:.2f} tok/s", file=sys.stderr)
            out[name].append(r)
    return out


def combine(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One runner's sweeps over several rounds -> one sweep: each figure the median of its
    rounds (the host drifts between runners; alternating them in rounds spreads the drift over
    all of them), errors of every round, the first round's texts, every round's tokens/s."""
    out = []
    for runs in zip(*rounds, strict=True):
        r0 = runs[0]
        merged = dict(r0)
        for k, v in r0.items():
            if isinstance(v, (int, float)) and k != "concurrency":
                merged[k] = statistics.median(r[k] for r in runs)
        merged["errors"] = [e for r in runs for e in r["errors"]]
        merged["rounds_tokens_per_s"] = [r["tokens_per_s"] for r in runs]
        merged["texts_stable"] = all(r["texts"] == r0["texts"] for r in runs)
        out.append(merged)
    return out


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    s = report["settings"]
    lines = [
        f"# Serving benchmark ({report['tag']})",
        "",
        f"CPU {env['cpu']}, {s['threads']} threads, commit {env['git_commit']}, load at start "
        f"{env['loadavg_start']}. {s['n_prompts']} prompts ({s['prompts']}), {s['max_tokens']} "
        f"new tokens each (greedy, ignore_eos), streaming /v1/completions; llama.cpp "
        f"{s.get('llama_server') or 'not run'}.",
        "",
        "| runner | C | tok/s | TTFT p50 | p95 | p99 | ITL p50 | p95 | p99 | TPOT p50 | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_round = any(len(r.get("rounds_tokens_per_s", ())) > 1 for rs in report["runs"].values()
                   for r in rs)  # fmt: skip
    if by_round:
        lines[-2] += " tok/s by round |"
        lines[-1] += "---|"
    for name, runs in report["runs"].items():
        for r in runs:
            lines.append(
                f"| {name} | {r['concurrency']} | {r['tokens_per_s']:.2f} | "
                f"{r['ttft_p50_ms']:.0f} | {r['ttft_p95_ms']:.0f} | {r['ttft_p99_ms']:.0f} | "
                f"{r['itl_p50_ms']:.0f} | {r['itl_p95_ms']:.0f} | {r['itl_p99_ms']:.0f} | "
                f"{r['tpot_p50_ms']:.0f} | {len(r['errors'])} |"
            )
            if by_round:
                lines[-1] += " " + ", ".join(f"{x:.2f}" for x in r["rounds_tokens_per_s"]) + " |"
    lines += ["", "Times in ms. " + "; ".join(report["notes"]), ""]
    return "\n".join(lines)


def goals(report: dict[str, Any]) -> list[str]:
    """The issue's goals, checked on this run."""
    runs = {name: {r["concurrency"]: r for r in rs} for name, rs in report["runs"].items()}
    out = []
    ours = runs.get("trt-spec spec", {})
    peer = runs.get("llama-server spec", {})
    if 1 in ours and 1 in peer:
        a, b = ours[1], peer[1]
        out.append(
            f"C=1 tok/s {a['tokens_per_s']:.2f} vs llama-server {b['tokens_per_s']:.2f} "
            f"({a['tokens_per_s'] / b['tokens_per_s']:.2f}x); TTFT p50 {a['ttft_p50_ms']:.0f} vs "
            f"{b['ttft_p50_ms']:.0f} ms"
        )
    mine, theirs = runs.get("trt-spec target", {}), runs.get("llama-server target", {})
    for c in sorted(set(mine) & set(theirs)):
        x = mine[c]["tokens_per_s"] / theirs[c]["tokens_per_s"]
        out.append(f"target-only C={c}: trt-spec {x:.2f}x llama-server's tok/s")
    if 1 in ours and 4 in ours:
        x = ours[4]["tokens_per_s"] / ours[1]["tokens_per_s"]
        out.append(f"trt-spec spec C=4 / C=1 total tok/s: {x:.2f}x (goal 1.5x)")
    # Greedy outputs: identical across our runners (speculation and batching are exact);
    # llama.cpp's own quantized kernels give other texts, compared with each other only.
    for ref, other in (
        ("trt-spec spec", "trt-spec target"),
        ("llama-server spec", "llama-server target"),
    ):
        a, b = runs.get(ref, {}), runs.get(other, {})
        cs = sorted(set(a) & set(b))
        if cs:
            same = sum(a[c]["texts"] == b[c]["texts"] for c in cs)
            out.append(
                f"greedy texts of {ref} equal to {other}'s at {same} of {len(cs)} concurrencies"
            )
    for name in ("trt-spec spec", "trt-spec target"):
        unstable = [c for c, r in runs.get(name, {}).items() if not r.get("texts_stable", True)]
        if unstable:
            out.append(f"GREEDY TEXTS OF {name} DIFFER BETWEEN ROUNDS at C={unstable}")
    return out


def plot(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, runs in report["runs"].items():
        cs = [r["concurrency"] for r in runs]
        axes[0].plot(cs, [r["tokens_per_s"] for r in runs], "o-", label=name)
        axes[1].plot(cs, [r["ttft_p50_ms"] for r in runs], "o-", label=name)
        axes[2].plot(cs, [r["itl_p50_ms"] for r in runs], "o-", label=name)
    for ax, title in zip(axes, ["output tokens/s", "TTFT p50 (ms)", "ITL p50 (ms)"], strict=True):
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"Serving: {report['tag']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def render(report: dict[str, Any], stem: Path) -> str:
    """Writes the report's JSON, markdown and PNG next to `stem`; returns the markdown."""
    report["goals"] = goals(report)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    md = markdown(report) + "\n" + "\n".join(f"- {g}" for g in report["goals"]) + "\n"
    if plot(report, stem.with_suffix(".png")):
        md += f"\n![serving]({stem.name}.png)\n"
    stem.with_suffix(".md").write_text(md)
    return md


def _serve_trt(args: argparse.Namespace) -> ServerProcess:
    # No prompt cache: the same prompts come back for every runner and concurrency (llama-server
    # runs with cache_prompt false for the same reason).
    return start_trt_server(
        args.engine, RESULTS / ".trt-spec.log", "--threads", str(args.threads), "--no-prompt-cache"
    )


def _serve_llama(
    args: argparse.Namespace, binary: Path, name: str, draft: str | None, par: int
) -> ServerProcess:
    return start_llama_server(
        binary,
        args.target,
        name,
        RESULTS / f".{name.replace(' ', '_')}.log",
        threads=args.threads,
        slots=par,
        ctx_per_slot=args.ctx,
        draft=draft,
        draft_max=args.draft_max,
    )


def warm_up(url: str, body: dict[str, Any]) -> None:
    """One short request before a runner's timed sweep (first-use costs are not its figures)."""
    one_request(url, {**body, "max_tokens": 8})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engine", required=True, help="a pair engine built with --max-batch >= C")
    p.add_argument("--target", help="the target GGUF (for llama-server)")
    p.add_argument("--draft", help="the draft GGUF (for llama-server --model-draft)")
    p.add_argument("--concurrency", default="1,2,4,8")
    p.add_argument("--prompts", default="humaneval")
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048, help="context per slot")
    p.add_argument(
        "--draft-max", type=int, default=None, help="llama-server --spec-draft-n-max (its default)"
    )
    p.add_argument("--no-llama", action="store_true")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="every runner R times, alternating (each figure the median of its rounds)",
    )
    p.add_argument("--tag", default=time.strftime("%Y%m%d"))
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    cs = [int(c) for c in args.concurrency.split(",")]
    prompts, source = load_prompts(args.prompts, args.n_prompts)
    texts = [pr.prompt for pr in prompts if isinstance(pr.prompt, str)]
    RESULTS.mkdir(exist_ok=True)
    # include_usage: the token count comes from the server's usage, not from counting chunks (a
    # speculative chunk holds several tokens; a token whose text is empty sends none).
    base = {
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    report: dict[str, Any] = {
        "tag": args.tag,
        "environment": environment(args.threads),
        "settings": {
            "threads": args.threads,
            "concurrency": cs,
            "prompts": source,
            "n_prompts": len(texts),
            "max_tokens": args.max_tokens,
            "ctx": args.ctx,
            "engine": str(args.engine),
            "rounds": args.rounds,
        },
        "runs": {},
        "notes": [
            "ITL: gaps between streamed chunks (a speculative chunk may hold several tokens)",
            "TPOT: (last - first token) / (tokens - 1)",
            "runners one after another, each server alone on the machine; with rounds > 1 the"
            " runners alternate round by round and each figure is the median of its rounds",
            "llama-server with cache_prompt false and trt-spec with --no-prompt-cache (no reuse"
            " of a previous run's prompt KV); every runner warms up with one short request",
            "our two runners take turns on one server in waves of C requests (the order"
            " alternating wave by wave); each figure is over the runner's waves",
        ],
    }
    runners = [("trt-spec spec", {"draft": "auto"}), ("trt-spec target", {"draft": "none"})]
    binary = None
    if not args.no_llama and args.target:
        binary = find_binary("llama-server")
        report["settings"]["llama_server"] = str(binary)
        runners += [("llama-server spec", args.draft), ("llama-server target", None)]
    rounds: dict[str, list[list[dict]]] = {name: [] for name, _ in runners}
    for i in range(args.rounds):
        if args.rounds > 1:
            print(f"round {i + 1} of {args.rounds}", file=sys.stderr)
        # Our two runners share one server (the request's `draft` picks the mode): each warms
        # up, then they take turns wave by wave (interleaved_sweep).
        srv = _serve_trt(args)
        try:
            ours = runners[:2] if i % 2 == 0 else runners[1::-1]
            bodies = {
                name: [{"model": "m", "prompt": t, **base, **extra} for t in texts]
                for name, extra in ours
            }
            for b in bodies.values():
                warm_up(srv.url, b[0])
            for name, runs in interleaved_sweep(srv.url, bodies, cs).items():
                rounds[name].append(runs)
        finally:
            srv.stop()
        for name, draft in runners[2:]:
            srv = _serve_llama(args, binary, name, draft, max(cs))
            try:
                # cache_prompt off: the same prompts come back at every concurrency, and
                # llama-server would reuse their KV from the previous run
                bodies = [{"model": "m", "prompt": t, **base, "cache_prompt": False} for t in texts]
                rounds[name].append(sweep(name, srv.url, bodies, cs))
            finally:
                srv.stop()
    report["runs"] = {name: combine(rs) for name, rs in rounds.items()}
    md = render(report, RESULTS / f"server_{args.tag}")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
