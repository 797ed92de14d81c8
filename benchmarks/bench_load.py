"""Serving load measured by a third-party tool: NVIDIA AIPerf against `trt-spec serve` and
llama.cpp's `llama-server`, on the same GGUFs, at several concurrencies.

Runners (all servers started at once, idle between their cells; the runners of one concurrency
run back to back, their order rotated from one concurrency to the next, so that load from other
processes hits them alike):
  - ``trt-spec auto``: ``trt-spec serve ENGINE`` with the request field ``draft: auto``;
  - ``trt-spec none``: the same server, ``draft: none`` (target only);
  - ``llama-server draft``: ``llama-server -m TARGET --model-draft DRAFT --spec-type
    draft-simple --metrics`` (its other draft settings its own defaults);
  - ``llama-server target``: ``llama-server -m TARGET --metrics``.
Equal threads, slots (the largest concurrency) and context per slot (the engine's max_seq_len);
no prompt cache on either (the same prompts come back at every concurrency).

Each cell is one ``aiperf profile`` run: streaming ``/v1/completions``, the first N HumanEval
prompts each sent once (``--custom-dataset-type single_turn``, sequential), a fixed number of
new tokens (``output_length``, ``ignore_eos``), greedy (``temperature: 0``), token counts from the
server's usage, sends paced (``--request-rate``) under the concurrency cap (AIPerf's burst mode
busy-polls a core). From its ``profile_export_aiperf.json``: output tokens/s, TTFT and ITL p50/p95
(AIPerf's ITL: (request latency - TTFT) / (output tokens - 1), per request). From its
``server_metrics_export.json`` (AIPerf scrapes each server's Prometheus ``/metrics``): the
speculative counters ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}`` (ours) and
``llamacpp:spec_decode_num_*`` (llama-server's), over the profiling phase; the script also
scrapes ``/metrics`` itself before and after each cell and checks that the deltas agree.

AIPerf runs as its own process (its own venv: ``pip install aiperf``); it needs a tokenizer
(local files: exported once from the target GGUF with transformers + gguf) and no network.

    python benchmarks/bench_load.py --engine pair8.engine --target T.gguf --draft D.gguf \
        [--concurrency 1,2,4,8] [--requests 8] [--max-tokens 64] [--threads 2] \
        [--aiperf PATH] [--out /tmp/trt-spec-bench-load] [--no-llama]

Writes ``OUT/bench_load.{md,json}`` (the markdown also printed) and each cell's AIPerf files
under ``OUT/aiperf/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

from peers.llama_spec_runner import CACHE, find_binary
from trt_spec.bench.common import environment
from trt_spec.bench.prompts import load_prompts
from trt_spec.bench.servers import (
    ServerProcess,
    start_llama_server,
    start_trt_server,
)

SPEC = ("drafts", "draft_tokens", "accepted_tokens")
# Server-wide speculative counter families (ours: vLLM's names; trt_spec:* splits them by source).
FAMILIES = ("vllm", "llamacpp")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


class Runner(NamedTuple):
    name: str
    server: str  # key of the server process it talks to
    extra: dict[str, Any]  # request fields of its own (in its dataset's turns)


# ---------------------------------------------------------------- parsers (tested on fixtures)


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text -> {``name{labels}``: value} (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def scrape_spec(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The server-wide speculative counters' increase between two scrapes."""
    out: dict[str, float] = {}
    for fam in FAMILIES:
        for c in SPEC:
            key = f"{fam}:spec_decode_num_{c}_total"
            if key in after:
                out[c] = out.get(c, 0.0) + after[key] - before.get(key, 0.0)
    return out


def aiperf_spec(server_metrics: dict[str, Any]) -> dict[str, float]:
    """The speculative counters' totals over the profiling phase, as AIPerf's
    ``server_metrics_export.json`` reports them (counter names with or without ``_total``)."""
    metrics = server_metrics.get("metrics", {})
    out: dict[str, float] = {}
    for fam in FAMILIES:
        for c in SPEC:
            base = f"{fam}:spec_decode_num_{c}"
            for name in (base, base + "_total"):
                for s in metrics.get(name, {}).get("series", []):
                    out[c] = out.get(c, 0.0) + float((s.get("stats") or {}).get("total", 0.0))
    return out


def parse_profile(profile: dict[str, Any]) -> dict[str, float]:
    """The figures of AIPerf's ``profile_export_aiperf.json`` that the table shows."""

    def get(metric: str, stat: str) -> float:
        v = (profile.get(metric) or {}).get(stat)
        return float(v) if v is not None else float("nan")

    errors = sum(int(e.get("count", 1)) for e in profile.get("error_summary") or [])
    return {
        "requests": get("request_count", "avg"),
        "errors": float(errors),
        "output_tok_s": get("output_token_throughput", "avg"),
        "output_tokens": get("total_output_tokens", "avg"),
        "duration_s": get("benchmark_duration", "avg"),
        **{f"ttft_p{q}_ms": get("time_to_first_token", f"p{q}") for q in (50, 95)},
        **{f"itl_p{q}_ms": get("inter_token_latency", f"p{q}") for q in (50, 95)},
        **{f"icl_p{q}_ms": get("inter_chunk_latency", f"p{q}") for q in (50, 95)},
    }


def _n(x: float | None, fmt: str) -> str:
    return "-" if x is None or x != x else format(x, fmt)


def row(name: str, c: int, r: dict[str, Any]) -> str:
    """One table row: the tool's figures and the speculative counters it read."""
    p, s = r["profile"], r["spec_aiperf"]
    drafted, accepted, drafts = (s.get(k) for k in ("draft_tokens", "accepted_tokens", "drafts"))
    rate = accepted / drafted if drafted and accepted is not None else None
    length = 1 + accepted / drafts if drafts and accepted is not None else None
    return (
        f"| {name} | {c} | {_n(p['requests'], '.0f')} | {_n(p['output_tok_s'], '.2f')} | "
        f"{_n(p['ttft_p50_ms'], '.0f')} | {_n(p['ttft_p95_ms'], '.0f')} | "
        f"{_n(p['itl_p50_ms'], '.0f')} | {_n(p['itl_p95_ms'], '.0f')} | "
        f"{_n(p['icl_p50_ms'], '.0f')} | {_n(drafts, '.0f')} | {_n(drafted, '.0f')} | "
        f"{_n(accepted, '.0f')} | {_n(rate, '.2f')} | {_n(length, '.2f')} | "
        f"{_n(p['errors'], '.0f')} | {_n(r.get('loadavg_start'), '.1f')} |"
    )


def markdown(report: dict[str, Any]) -> str:
    env, s = report["environment"], report["settings"]
    lines = [
        "# Serving load measured with AIPerf",
        "",
        f"CPU {env['cpu']} ({env['logical_cpus']} logical CPUs), commit {env['git_commit']}, "
        f"load average at start {env['loadavg_start']:.2f}. AIPerf {s['aiperf_version']}; "
        f"llama.cpp {s.get('llama_version') or 'not run'}.",
        "",
        f"Settings: {s['threads']} threads per server, {s['slots']} slots, context {s['ctx']} "
        f"per slot, no prompt cache; {s['requests']} requests per cell (the first "
        f"{s['requests']} HumanEval prompts, each once), {s['max_tokens']} new tokens each "
        "(ignore_eos), greedy, streaming /v1/completions, token counts from the server's usage.",
        "",
        f"Command: `{report['command']}`",
        "",
        "| server | C | req | out tok/s | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 | ICL p50 | "
        "drafts | drafted | accepted | acceptance | tok/step | errors | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, cells in report["runs"].items():
        for c, r in sorted(cells.items(), key=lambda kv: int(kv[0])):
            lines.append(row(name, int(c), r))
    lines += ["", *(f"- {n}" for n in report["notes"]), ""]
    if report.get("checks"):
        lines += ["Checks:", "", *(f"- {c}" for c in report["checks"]), ""]
    lines += ["AIPerf command of each runner (C=1 shown; OUT = the cell's folder):", ""]
    lines += [f"- {name}: `{cmd}`" for name, cmd in report["aiperf_commands"].items()]
    return "\n".join(lines) + "\n"


def checks(report: dict[str, Any]) -> list[str]:
    """The tool's counters against the script's own scrapes; speculation where expected."""
    out, agree = [], 0
    for name, cells in report["runs"].items():
        for c, r in cells.items():
            a, b = r["spec_aiperf"], r.get("spec_scrape")
            if b is None:  # (a cell rebuilt from AIPerf's files alone)
                out.append(f"{name} C={c}: AIPerf's counters only, no scrape of its own")
                b = a
            elif any(abs(a.get(k, 0.0) - b.get(k, 0.0)) > 0.5 for k in SPEC):
                out.append(f"{name} C={c}: AIPerf's counters {a} differ from the scrape's {b}")
            else:
                agree += 1
            if name.endswith(("none", "target")) and b.get("draft_tokens"):
                out.append(f"{name} C={c}: drafted {b['draft_tokens']:.0f} tokens with no draft")
            if name.endswith(("auto", "draft")) and not b.get("draft_tokens"):
                out.append(f"{name} C={c}: NO SPECULATION (no draft tokens)")
    return [f"{agree} cells: AIPerf's speculative counters equal the /metrics scrape deltas", *out]


# ---------------------------------------------------------------- servers and the tool


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 600) -> str:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def export_tokenizer(gguf: Path, dest: Path) -> Path:
    """An HF-format tokenizer folder from the GGUF's own tokenizer (once; cached)."""
    if (dest / "tokenizer.json").is_file():
        return dest
    from transformers import AutoTokenizer  # needs the `gguf` package too

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(str(dest))
    return dest


def aiperf_command(
    args: argparse.Namespace,
    url: str,
    c: int,
    out: Path,
    dataset: Path,
    tokenizer: Path,
) -> list[str]:
    cmd = [args.aiperf, "profile", "-m", "m", "--url", url, "--endpoint-type", "completions"]
    cmd += ["--streaming", "--use-server-token-count", "--tokenizer", str(tokenizer)]
    cmd += ["--input-file", str(dataset), "--custom-dataset-type", "single_turn"]
    cmd += ["--dataset-sampling-strategy", "sequential", "--random-seed", "0"]
    cmd += ["--concurrency", str(c), "--request-count", str(args.requests)]
    # Paced sends under the concurrency cap: with --concurrency alone (AIPerf's
    # concurrency-burst mode) its timing manager polls for a free slot without sleeping and
    # keeps a third of a core busy for the whole run, on the host of the servers it measures.
    cmd += ["--request-rate", str(args.pace), "--arrival-pattern", "constant"]
    cmd += ["--workers-max", "1", "--record-processors", "1", "--no-gpu-telemetry"]
    cmd += ["--ui-type", "none", "--artifact-dir", str(out)]
    return cmd


def write_dataset(path: Path, prompts: list[str], max_tokens: int, extra: dict[str, Any]) -> None:
    """AIPerf's single_turn JSONL; the request fields go in each turn's ``extra`` (AIPerf's
    --extra-inputs turns the string "none" into null, and `draft: none` is a string)."""
    body = {"temperature": 0, "ignore_eos": True, **extra}
    rows = [{"text": t, "output_length": max_tokens, "extra": body} for t in prompts]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run_cell(
    args: argparse.Namespace,
    srv: ServerProcess,
    c: int,
    out: Path,
    dataset: Path,
    tokenizer: Path,
) -> dict[str, Any]:
    cmd = aiperf_command(args, srv.url, c, out, dataset, tokenizer)
    # (not HF_HUB_OFFLINE: AIPerf 0.13 then looks a local tokenizer folder up as a Hub id)
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    # AIPerf scrapes /metrics at ~3 Hz by default; the counters need only the phase's first
    # and last scrape, so scrape rarely (less work for a server on a 2-core host).
    env["AIPERF_SERVER_METRICS_COLLECTION_INTERVAL"] = str(args.scrape_interval)
    before = parse_prometheus(http(srv.url + "/metrics"))
    load = os.getloadavg()[0]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(out / "aiperf_console.log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    wall = time.monotonic() - t0
    after = parse_prometheus(http(srv.url + "/metrics"))
    if proc.returncode != 0:
        raise RuntimeError(f"aiperf exited {proc.returncode}; see {out / 'aiperf_console.log'}")
    profile = json.loads((out / "profile_export_aiperf.json").read_text())
    metrics_file = out / "server_metrics_export.json"
    sm = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    return {
        "profile": parse_profile(profile),
        "spec_aiperf": aiperf_spec(sm),
        "spec_scrape": scrape_spec(before, after),
        "aiperf_wall_s": wall,
        "loadavg_start": load,
        "aiperf_command": shlex.join(cmd),
    }


def _version(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    hits = [ln for ln in lines if "version" in ln.lower()] or lines
    return hits[0] if hits else "unknown"


def start_servers(args: argparse.Namespace, slots: int, logs: Path) -> dict[str, ServerProcess]:
    servers: dict[str, ServerProcess] = {}
    servers["trt-spec"] = start_trt_server(
        args.engine, logs / "trt-spec.log", "--threads", str(args.threads), "--no-prompt-cache"
    )
    models = json.loads(http(servers["trt-spec"].url + "/v1/models"))
    args.ctx = args.ctx or int(models["data"][0]["max_model_len"])
    if args.no_llama:
        return servers
    binary = find_binary("llama-server")
    for key, draft in (("llama-draft", args.draft), ("llama-target", None)):
        servers[key] = start_llama_server(
            binary,
            args.target,
            key,
            logs / f"{key}.log",
            wait=False,
            threads=args.threads,
            slots=slots,
            ctx_per_slot=args.ctx,
            draft=draft,
            draft_max=args.llama_draft_max or None,
            metrics=True,
        )
    try:
        for srv in servers.values():
            srv.wait_ready()
    except BaseException:
        for srv in servers.values():
            srv.stop()
        raise
    return servers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engine", required=True, help="a pair engine built with --max-batch >= C")
    p.add_argument("--target", help="the target GGUF (llama-server; the tokenizer's source)")
    p.add_argument("--draft", help="the draft GGUF (llama-server --model-draft)")
    p.add_argument("--concurrency", default="1,2,4,8")
    p.add_argument("--requests", type=int, default=8, help="requests per cell (prompts, once)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=0, help="context per slot (default: the engine's)")
    p.add_argument(
        "--aiperf",
        default=os.environ.get("AIPERF") or shutil.which("aiperf"),
        help="the aiperf executable (default: $AIPERF, else on PATH)",
    )
    p.add_argument("--tokenizer", help="an HF tokenizer folder (default: exported from --target)")
    p.add_argument("--scrape-interval", type=float, default=5.0, help="AIPerf's /metrics period")
    p.add_argument(
        "--pace", type=float, default=20.0, help="AIPerf's request rate cap (req/s) under C"
    )
    p.add_argument("--llama-draft-max", type=int, help="--spec-draft-n-max (default: its own)")
    p.add_argument("--no-llama", action="store_true")
    p.add_argument("--resume", action="store_true", help="keep the cells --out already holds")
    p.add_argument("--out", default="/tmp/trt-spec-bench-load")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (the servers stop in `finally`)
    if not args.aiperf:
        p.error(
            "aiperf not found: python -m venv V && V/bin/pip install aiperf; --aiperf V/bin/aiperf"
        )
    if not args.no_llama and not (args.target and args.draft):
        p.error("--target and --draft are needed for llama-server (or --no-llama)")
    cs = [int(c) for c in args.concurrency.split(",")]
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    prompts, source = load_prompts("humaneval", args.requests)
    if args.tokenizer:
        tokenizer = Path(args.tokenizer)
    elif args.target:
        tokenizer = export_tokenizer(
            Path(args.target), CACHE / "tokenizers" / Path(args.target).stem
        )
    else:
        p.error("--tokenizer or --target is needed (AIPerf loads a tokenizer)")
    runners = [
        Runner("trt-spec auto", "trt-spec", {"draft": "auto"}),
        Runner("trt-spec none", "trt-spec", {"draft": "none"}),
    ]
    if not args.no_llama:
        nocache = {"cache_prompt": False}
        runners += [
            Runner("llama-server draft", "llama-draft", nocache),
            Runner("llama-server target", "llama-target", nocache),
        ]
    datasets = {r.name: out / f"prompts_{r.name.replace(' ', '_')}.jsonl" for r in runners}
    for r in runners:
        write_dataset(datasets[r.name], [pr.prompt for pr in prompts], args.max_tokens, r.extra)
    report: dict[str, Any] = {
        "command": "python " + shlex.join(sys.argv if argv is None else ["bench_load.py", *argv]),
        "environment": environment(args.threads),
        "runs": {r.name: {} for r in runners},
        "aiperf_commands": {},
        "notes": [
            "out tok/s: AIPerf's output token throughput (all requests' new tokens / the "
            "benchmark's duration); TTFT, ITL, ICL in ms",
            "ITL: AIPerf's inter_token_latency, (latency - TTFT) / (tokens - 1) per request, "
            "percentiles over requests; ICL: inter_chunk_latency p50, the gaps between streamed "
            "chunks (a speculative chunk may hold several tokens)",
            "drafts / drafted / accepted: the servers' spec_decode_num_{drafts,draft_tokens,"
            "accepted_tokens} counters (vllm:* ours, llamacpp:* llama-server's) over the profiling "
            "phase, as AIPerf's server-metrics export reads them from /metrics; acceptance = "
            "accepted / drafted; tok/step = 1 + accepted / drafts",
            "every server started at once, idle outside its cells; each concurrency's runners "
            "back to back, in an order rotated per concurrency; one warm-up request per server; "
            f"AIPerf sends at most {args.pace:g} requests/s under the concurrency cap (a free "
            "slot waits at most one interval), not its busy-polling burst mode; "
            "load: the host's 1-minute load average as the cell started",
        ],
    }
    slots = max(cs)
    servers = start_servers(args, slots, out / "logs")
    try:
        report["settings"] = {
            "threads": args.threads,
            "slots": slots,
            "ctx": args.ctx,
            "requests": args.requests,
            "max_tokens": args.max_tokens,
            "prompts": source,
            "concurrency": cs,
            "engine": args.engine,
            "target": args.target,
            "draft": args.draft,
            "aiperf_version": _version([args.aiperf, "--version"]),
            "tokenizer": str(tokenizer),
        }
        if not args.no_llama:
            report["settings"]["llama_version"] = _version(
                [str(find_binary("llama-server")), "--version"]
            )
            report["settings"]["llama_commands"] = {
                k: shlex.join(s.cmd) for k, s in servers.items() if k != "trt-spec"
            }
        report["settings"]["trt_spec_command"] = shlex.join(servers["trt-spec"].cmd)
        for srv in servers.values():  # warm-up: one short request each
            body = {"model": "m", "prompt": prompts[0].prompt, "max_tokens": 8, "temperature": 0}
            http(srv.url + "/v1/completions", body)
        for i, c in enumerate(cs):
            order = runners[i % len(runners) :] + runners[: i % len(runners)]
            for r in order:
                cell = out / "aiperf" / f"{r.name.replace(' ', '_')}_c{c}"
                saved = cell / "cell.json"
                if args.resume and saved.is_file():  # a previous run's cell (same --out)
                    res = json.loads(saved.read_text())
                else:
                    if cell.exists():
                        shutil.rmtree(cell)
                    res = run_cell(args, servers[r.server], c, cell, datasets[r.name], tokenizer)
                    saved.write_text(json.dumps(res, indent=1) + "\n")
                report["runs"][r.name][str(c)] = res
                if c == cs[0]:
                    report["aiperf_commands"][r.name] = res["aiperf_command"]
                pr = res["profile"]
                print(
                    f"{r.name} C={c}: {pr['output_tok_s']:.2f} tok/s, spec "
                    f"{res['spec_aiperf']} (aiperf {res['aiperf_wall_s']:.0f} s)",
                    file=sys.stderr,
                )
                write_report(report, out)  # after every cell: a killed run leaves its table
    finally:
        for srv in servers.values():
            srv.stop()
    print(write_report(report, out))
    return 0


def write_report(report: dict[str, Any], out: Path) -> str:
    report["checks"] = checks(report)
    md = markdown(report)
    (out / "bench_load.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "bench_load.md").write_text(md)
    return md


if __name__ == "__main__":
    sys.exit(main())
