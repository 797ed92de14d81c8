"""Ray Serve replicas against one server: `trt-spec serve --replicas 2 --threads 1` vs
`trt-spec serve --threads 2` (throughput) and vs `trt-spec serve --threads 1`, one replica's
own server without Ray (latency).

Workloads (streamed completions, greedy, ``ignore_eos``, ``--max-tokens`` new tokens each, the
prompts HumanEval's: in a round every configuration gets the same prompts, each request one
its server has not seen, and each round new ones):
  - throughput: ``--requests`` requests from ``--concurrency`` client threads; output tokens/s
    over the run (all new tokens / wall time), and the requests' median end-to-end latency;
  - latency: ``--latency-requests`` requests one at a time; the median end-to-end latency
    (send to last byte) against a direct request to one replica's server.
One configuration runs at a time (started, warmed up with 2 other prompts, measured, stopped),
and the configurations alternate in ``--rounds`` rounds (the order rotating), so load from
other processes on the host (not controlled here: read the load averages in the report) spreads
over all of them; each figure is the median of its rounds. The CPU seconds each configuration's
process tree spent (Ray's processes included) are reported per output token.

    python benchmarks/bench_ray.py [--engine /tmp/pair.engine] [--rounds 3] [--concurrency 8]
        [--requests 16] [--latency-requests 4] [--max-tokens 64] [--json OUT.json]

Without --engine: /tmp/pair.engine if it exists, else a tiny random engine (written to a
temporary folder; a check of the machinery, not a measurement). Prints a markdown report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from trt_spec.bench.common import environment
from trt_spec.bench.prompts import load_prompts
from trt_spec.bench.servers import ServerProcess, start_trt_server

GOAL_THROUGHPUT = 0.9  # replicas' tokens/s at least this share of the single server's
GOAL_LATENCY = 1.10  # replicas' median latency at most this multiple of a direct request's


def one_request(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Streams one completion: its latency (send to last byte), tokens and text."""
    t0 = time.perf_counter()
    tokens, text = 0, []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=3600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            msg = json.loads(line[6:])
            if "error" in msg:
                raise RuntimeError(f"{url}: {msg['error']}")
            if msg.get("usage"):
                tokens = msg["usage"]["completion_tokens"]
            text += [c.get("text", "") for c in msg.get("choices") or []]
    return {"latency_s": time.perf_counter() - t0, "tokens": tokens, "text": "".join(text)}


def run_load(srv: ServerProcess, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Every body once from `concurrency` threads: tokens/s, median latency, CPU per token."""
    results: list[dict[str, Any] | None] = [None] * len(bodies)
    next_i = [0]
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= len(bodies):
                return
            results[i] = one_request(srv.url, bodies[i])

    cpu0 = srv.cpu_seconds()
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu = srv.cpu_seconds() - cpu0
    if any(r is None for r in results):
        raise RuntimeError("a request failed (see the traceback above)")
    done = [r for r in results if r is not None]
    tokens = sum(r["tokens"] for r in done)
    return {
        "wall_s": wall,
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "latency_p50_s": statistics.median(r["latency_s"] for r in done),
        "cpu_ms_per_token": 1e3 * cpu / max(tokens, 1),
        "texts": [r["text"] for r in done],
    }


def tiny_engine(folder: Path) -> tuple[str, list[str]]:
    """A small random engine and prompts in its word-level vocabulary."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from random_engine import write_random_engine

    cfg = dict(arch="qwen2", n_layers=4, dim=512, n_heads=8, n_kv_heads=2, head_dim=64,
               ffn_dim=1536, vocab_size=2048, rope_theta=10000.0, rms_eps=1e-6,
               tied_embeddings=False, qkv_bias=True)  # fmt: skip
    path = folder / "tiny.engine"
    write_random_engine(path, cfg, weights="f32", max_seq_len=1024, max_batch=4)
    prompts = [" ".join(f"<t{(i * 37 + j * 11) % 2000}>" for j in range(60)) for i in range(64)]
    return str(path), prompts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engine", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--latency-requests", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--json", default=None, help="also write the report's data here")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    engine = args.engine or ("/tmp/pair.engine" if Path("/tmp/pair.engine").is_file() else None)
    if engine is None:
        engine, texts = tiny_engine(tmp)
    else:
        texts = [pr.prompt for pr in load_prompts("humaneval", 164)[0]]
    per_round = args.requests + args.latency_requests
    if len(texts) < args.rounds * per_round + 2:
        p.error("not enough prompts for that many rounds and requests")
    base = {"model": "m", "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}  # fmt: skip
    configs = {
        "replicas": ["--replicas", "2", "--threads", "1"],
        "single": ["--threads", "2"],
        "direct": ["--threads", "1"],
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    order = list(configs)
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for name in order[r % 3 :] + order[: r % 3]:
            first = 2 + r * per_round  # (this round's prompts; a fresh server has seen none)
            mine = texts[first : first + per_round]
            srv = start_trt_server(engine, tmp / f"{name}-{r}.log", *configs[name])
            try:
                for t in texts[:2]:  # warm-up
                    one_request(srv.url, {**base, "prompt": t, "max_tokens": 8})
                run: dict[str, Any] = {}
                if name != "direct":
                    bodies = [{**base, "prompt": t} for t in mine[: args.requests]]
                    run["throughput"] = run_load(srv, bodies, args.concurrency)
                if name != "single":
                    bodies = [{**base, "prompt": t} for t in mine[args.requests :]]
                    run["latency"] = run_load(srv, bodies, 1)
                runs[name].append(run)
                print(f"round {r + 1} {name}: " + ", ".join(
                    f"{w} {v['tokens_per_s']:.2f} tok/s, p50 {v['latency_p50_s']:.2f} s, "
                    f"{v['cpu_ms_per_token']:.0f} CPU ms/token" for w, v in run.items()
                ), file=sys.stderr, flush=True)  # fmt: skip
            finally:
                srv.stop()
    report = summarize(runs, args, engine, load_before)
    print(markdown(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def summarize(runs: dict, args: argparse.Namespace, engine: str, load_before: tuple) -> dict:
    def med(name: str, work: str, key: str) -> float:
        return statistics.median(r[work][key] for r in runs[name])

    thr = med("replicas", "throughput", "tokens_per_s") / med(
        "single", "throughput", "tokens_per_s"
    )
    lat = med("replicas", "latency", "latency_p50_s") / med("direct", "latency", "latency_p50_s")
    env = environment(2, Path(__file__).resolve().parent)
    try:
        import ray

        ray_version = ray.__version__
    except ImportError:
        ray_version = None
    return {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "commit": env["git_commit"],
        "environment": env,
        "ray": ray_version,
        "engine": engine,
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "throughput_ratio": thr,
        "latency_ratio": lat,
        "goals": {
            f"throughput >= {GOAL_THROUGHPUT}x single": thr >= GOAL_THROUGHPUT,
            f"median latency <= {GOAL_LATENCY}x direct": lat <= GOAL_LATENCY,
        },
        "same_text": all(
            r["throughput"]["texts"] == s["throughput"]["texts"]
            for r, s in zip(runs["replicas"], runs["single"], strict=True)
        )
        and all(
            r["latency"]["texts"] == d["latency"]["texts"]
            for r, d in zip(runs["replicas"], runs["direct"], strict=True)
        ),
        "runs": {
            name: [
                {w: {k: v for k, v in x.items() if k != "texts"} for w, x in r.items()} for r in rs
            ]  # fmt: skip
            for name, rs in runs.items()
        },
    }


def markdown(rep: dict) -> str:
    env = rep["environment"]
    s = rep["settings"]
    lines = [
        "# Ray Serve replicas vs one server",
        "",
        f"- command: `{rep['command']}`; commit {rep['commit']}; ray {rep['ray']}",
        f"- host: {env['cpu']}, {env['logical_cpus']} CPUs; load average before "
        f"{rep['load_before'][0]:.2f}, after {rep['load_after'][0]:.2f}",
        f"- engine: `{rep['engine']}`; {s['max_tokens']}-token greedy streams; throughput: "
        f"{s['requests']} requests at concurrency {s['concurrency']}; latency: "
        f"{s['latency_requests']} requests one at a time; {s['rounds']} rounds, configurations "
        "alternating (one at a time; other processes on the host not controlled), figures the "
        "median of the rounds",
        "",
        "| configuration | tok/s at C | p50 latency at C | CPU ms/token at C | p50 latency at "
        "C=1 | CPU ms/token at C=1 |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in (
        ("replicas", "`--replicas 2 --threads 1` (Ray Serve)"),
        ("single", "`--threads 2` (one server)"),
        ("direct", "`--threads 1` (one replica's server, direct)"),
    ):
        runs = rep["runs"][name]
        cells = []
        for work, keys in (
            ("throughput", ("tokens_per_s", "latency_p50_s", "cpu_ms_per_token")),
            ("latency", ("latency_p50_s", "cpu_ms_per_token")),
        ):
            for k in keys:
                vals = [r[work][k] for r in runs if work in r]
                cells.append(f"{statistics.median(vals):.2f}" if vals else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"- throughput, replicas / single: **{rep['throughput_ratio']:.3f}** (goal >= "
        f"{GOAL_THROUGHPUT}); per round: "
        + ", ".join(
            f"{a['throughput']['tokens_per_s']:.2f}/{b['throughput']['tokens_per_s']:.2f}"
            for a, b in zip(rep["runs"]["replicas"], rep["runs"]["single"], strict=True)
        ),
        f"- median latency at C=1, replicas / direct: **{rep['latency_ratio']:.3f}** (goal <= "
        f"{GOAL_LATENCY}); per round: "
        + ", ".join(
            f"{a['latency']['latency_p50_s']:.2f}/{b['latency']['latency_p50_s']:.2f} s"
            for a, b in zip(rep["runs"]["replicas"], rep["runs"]["direct"], strict=True)
        ),
        f"- same greedy text in every configuration: {rep['same_text']}",
        f"- goals: {rep['goals']}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
