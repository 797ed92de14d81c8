"""``trt-spec bench``: speculative vs target-only decode speed per draft length, with a cost model.

For each engine (one per weight format, say) and temperature, the same prompts run target-only
(``draft_len=0``), with each fixed draft length K and with ``draft_len="auto"``, prompt by prompt
(every configuration of a prompt back to back, so load from other processes hits them alike),
greedy or sampled with the same seed, EOS ignored. Per configuration it reports decode tokens/s
(prefill and first token excluded; aggregate = decode tokens / decode seconds over all prompts,
and the mean of the per-prompt rates), acceptance, tokens per iteration, the accepted-length
histogram, TTFT, and the cost model:

* draft step = draft seconds / drafted tokens, verify = verify seconds / iterations (one target
  pass over K+1 rows, acceptance included), target step = verify / iterations of target-only;
* predicted tokens/s = tokens per iteration / (K * draft step + verify), K = drafted tokens /
  iterations (the fixed K, less where the token budget cut the last draft short; the mean for
  ``auto``); measured / predicted near 1 means no time is spent outside draft and verify.

At temperature 0 every speculative output must equal target-only token for token; mismatching
prompts are counted and reported. Peers (``--peers llama.cpp,transformers``, greedy only) run the
same GGUF pair from ``benchmarks/peers/`` (found from the working directory, ``--peers-dir`` or
``$TRT_SPEC_PEERS_DIR``); they are benchmark tools, never dependencies. Writes
``<out-dir>/spec_<tag or date>.json``, ``.md`` and ``.png`` (if matplotlib is installed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

PEER_NAMES = ("llama.cpp", "transformers")
Config = tuple[str, int | str]  # (label, draft_len: 0 = target-only, K, or "auto")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- arguments


def parse_draft_lens(text: str) -> list[int]:
    """``"1-8"``, ``"1,2,4"`` or ``"1-3,6"`` -> sorted distinct K >= 1."""
    ks: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if dash else (int(part), int(part))
        except ValueError:
            raise ValueError(
                f"--draft-lens: {part!r} is not K or A-B (e.g. 1-8 or 1,2,4)"
            ) from None
        if a > b:
            raise ValueError(f"--draft-lens: empty range {part!r}")
        if a < 1:
            raise ValueError("--draft-lens: draft lengths must be >= 1 (target-only always runs)")
        ks.update(range(a, b + 1))
    return sorted(ks)


def parse_temperatures(text: str) -> list[float]:
    temps: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            t = float(part)
        except ValueError:
            raise ValueError(f"--temperatures: {part!r} is not a number") from None
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"--temperatures: {part!r} must be finite and >= 0")
        if t not in temps:
            temps.append(t)
    return temps


def load_prompts(spec: str, n: int) -> tuple[list[str], list[str], str]:
    """(prompts, their ids, source). ``humaneval``, a ``.jsonl``/``.json`` file (strings or
    objects with "prompt"), or a text file with one prompt per non-empty line."""
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if spec == "humaneval":
        from trt_spec import models

        rows = models.humaneval_prompts(n)
        return [r["prompt"] for r in rows], [r["task_id"] for r in rows], "HumanEval"
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ValueError(f"--prompts: {spec!r} is neither 'humaneval' nor a readable file")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".jsonl", ".json"):
        items = json.loads(text) if path.suffix == ".json" else []
        if path.suffix == ".jsonl":
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        if not isinstance(items, list):
            raise ValueError(f"--prompts: {path} must hold a list of prompts")
        prompts = [it if isinstance(it, str) else (it or {}).get("prompt") for it in items]
        if not all(isinstance(p, str) and p for p in prompts):
            raise ValueError(f"--prompts: every entry of {path} needs a non-empty 'prompt'")
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"--prompts: no prompts in {path}")
    prompts = prompts[:n]
    return prompts, [f"{path.name}:{i}" for i in range(len(prompts))], str(path)


# --------------------------------------------------------------------------- environment


def _run_text(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(threads: int) -> dict[str, Any]:
    from trt_spec import __version__

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    head = _run_text(["git", "rev-parse", "--short", "HEAD"])
    dirty = head and _run_text(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "threads": threads,
        "loadavg_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "git_commit": (f"{head}+dirty" if dirty else head) if head else None,
        "trt_spec_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# --------------------------------------------------------------------------- trt-spec runs


def _record(stats: Any) -> dict[str, Any]:
    """The per-prompt numbers kept from a GenerationStats."""
    dec_tok = max(stats.new_tokens - 1, 0)
    rate = stats.decode_tokens_per_s
    return {
        "prompt_tokens": stats.prompt_tokens,
        "new_tokens": stats.new_tokens,
        "decode_tokens": dec_tok,
        "decode_s": dec_tok / rate if rate > 0 else 0.0,
        "decode_tok_s": rate,
        "ttft_s": stats.ttft_s,
        "iterations": stats.iterations,
        "spec_iterations": stats.spec_iterations,
        "emitted": round(stats.tokens_per_iteration * stats.iterations),
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "accepted_hist": list(stats.accepted_hist),
        "draft_s": stats.draft_s,
        "verify_s": stats.verify_s,
    }


_SUMMED = (
    "new_tokens",
    "decode_tokens",
    "decode_s",
    "iterations",
    "emitted",
    "drafted",
    "accepted",
    "draft_s",
    "verify_s",
)


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def aggregate(label: str, k: int | str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration over all prompts, with the cost model's prediction."""
    tot = {key: sum(r[key] for r in runs) for key in _SUMMED}
    hist = [0] * max(len(r["accepted_hist"]) for r in runs)
    for r in runs:
        for i, c in enumerate(r["accepted_hist"]):
            hist[i] += c
    iters = tot["iterations"]
    tpi = _div(tot["emitted"], iters)
    draft_step = _div(tot["draft_s"], tot["drafted"])
    verify = _div(tot["verify_s"], iters)
    # K per iteration: drafted / iterations, the nominal K except where the token budget cut
    # the last draft short (and the mean length for auto)
    mean_k = _div(tot["drafted"], iters) or 0.0
    cost = (mean_k * (draft_step or 0.0) + verify) if verify else None
    predicted = _div(tpi, cost) if tpi and cost else None
    measured = _div(tot["decode_tokens"], tot["decode_s"])
    return {
        "config": label,
        "draft_len": k,
        "prompts": len(runs),
        "new_tokens": tot["new_tokens"],
        "decode_tok_s": measured,
        "decode_tok_s_mean": statistics.fmean(r["decode_tok_s"] for r in runs),
        "ttft_s_mean": statistics.fmean(r["ttft_s"] for r in runs),
        "iterations": iters,
        "mean_draft_len": mean_k,
        "drafted": tot["drafted"],
        "accepted": tot["accepted"],
        "acceptance_rate": _div(tot["accepted"], tot["drafted"]),
        "tokens_per_iteration": tpi,
        "accepted_hist": hist,
        "draft_step_ms": draft_step * 1e3 if draft_step is not None else None,
        "verify_ms": verify * 1e3 if verify is not None else None,
        "predicted_tok_s": predicted,
        "measured_over_predicted": _div(measured or 0.0, predicted or 0.0),
        "overhead_ms_per_iteration": (
            (tot["decode_s"] - tot["draft_s"] - tot["verify_s"]) / iters * 1e3 if iters else None
        ),
        "runs": runs,
    }


def _first_mismatch(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def bench_engine(
    path: str, prompts: list[str], ks: list[int], args: argparse.Namespace, threads: int
) -> list[dict[str, Any]]:
    """Every temperature x configuration on one engine; one result per temperature."""
    from trt_spec.engine import Engine

    engine = Engine(path, n_threads=threads)
    configs: list[Config] = [("target-only", 0)] + [(f"K={k}", k) for k in ks]
    if args.auto:
        configs.append(("auto", "auto"))
    name = f"{engine.weights} ({Path(path).name})"
    for k in (0, ks[-1]):  # warm-up: caches, thread pool, both models
        engine.generate(prompts[0], max_new_tokens=8, ignore_eos=True, draft_len=k)
    # auto decodes on an Engine of its own: its controller learns the costs and the acceptance
    # from its own iterations only, not from the fixed-K runs.
    engines = {"auto": Engine(path, n_threads=threads)} if args.auto else {}
    for e in engines.values():
        e.generate(prompts[0], max_new_tokens=8, ignore_eos=True)
    results = []
    for temp in args.temperatures:
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in configs}
        for i, prompt in enumerate(prompts):
            ref: list[int] = []
            line = []
            for label, k in configs:
                r = engines.get(label, engine).generate(
                    prompt,
                    max_new_tokens=args.max_new_tokens,
                    temperature=temp,
                    seed=args.seed,
                    ignore_eos=True,
                    draft_len=k,
                    speculate=k != 0,
                )
                rec = _record(r.stats)
                if k == 0:
                    ref = list(r.token_ids)
                elif temp == 0:
                    rec["greedy_mismatch_at"] = _first_mismatch(list(r.token_ids), ref)
                runs[label].append(rec)
                line.append(f"{label} {rec['decode_tok_s']:.1f}")
            _log(f"[{name} T={temp:g}] prompt {i + 1}/{len(prompts)}: {', '.join(line)} tok/s")
        aggs = [aggregate(label, k, runs[label]) for label, k in configs]
        for a in aggs:
            if temp == 0 and a["draft_len"] != 0:
                a["greedy_mismatches"] = sum(r["greedy_mismatch_at"] is not None for r in a["runs"])
        results.append(
            {
                "engine": path,
                "weights": engine.weights,
                "temperature": temp,
                "target_step_ms": aggs[0]["verify_ms"],
                "configs": aggs,
                "checks": _checks(aggs, temp),
            }
        )
    del engine, engines
    gc.collect()
    return results


def _checks(aggs: list[dict[str, Any]], temp: float) -> dict[str, Any]:
    base = aggs[0]["decode_tok_s"] or 0.0
    fixed = [a for a in aggs if isinstance(a["draft_len"], int) and a["draft_len"] > 0]
    auto = next((a for a in aggs if a["draft_len"] == "auto"), None)
    spec = [a for a in aggs if a["draft_len"] != 0]
    ratios = [a["measured_over_predicted"] for a in spec if a["measured_over_predicted"]]
    best = max(fixed, key=lambda a: a["decode_tok_s"] or 0.0) if fixed else None
    for a in aggs:
        a["speedup"] = _div(a["decode_tok_s"] or 0.0, base)
    out: dict[str, Any] = {
        "greedy_mismatches": sum(a.get("greedy_mismatches", 0) for a in spec)
        if temp == 0
        else None,
        "prediction_ratio_min": min(ratios) if ratios else None,
        "prediction_ratio_max": max(ratios) if ratios else None,
        "prediction_within_10pct": bool(ratios) and all(abs(r - 1) <= 0.10 for r in ratios),
        "best_fixed_k": best["draft_len"] if best else None,
        "best_fixed_tok_s": best["decode_tok_s"] if best else None,
    }
    if auto is not None and best is not None:
        out["auto_vs_target_only"] = _div(auto["decode_tok_s"] or 0.0, base)
        out["auto_vs_best_fixed"] = _div(auto["decode_tok_s"] or 0.0, best["decode_tok_s"] or 0.0)
        out["auto_ok"] = (out["auto_vs_target_only"] or 0) >= 0.95 and (
            out["auto_vs_best_fixed"] or 0
        ) >= 0.95
    return out


# --------------------------------------------------------------------------- command


def _options(args: argparse.Namespace) -> tuple[list[int] | None, list[str], int]:
    """Checks the plain options: (fixed K or None, peers, threads)."""
    args.temperatures = parse_temperatures(args.temperatures)
    fixed = parse_draft_lens(args.draft_lens) if args.draft_lens else None
    peers = [p.strip() for p in (args.peers or "").split(",") if p.strip()]
    for p in peers:
        if p not in PEER_NAMES:
            raise ValueError(f"--peers: unknown peer {p!r} (known: {', '.join(PEER_NAMES)})")
    if args.max_new_tokens < 2:
        raise ValueError("--max-new-tokens must be >= 2 (decode starts after the first token)")
    for name in ("threads", "peer_n"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    threads = args.threads or (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    return fixed, peers, threads


def _engine_info(path: str, fixed: list[int] | None, draft_lens: str | None) -> dict[str, Any]:
    """Opens an engine briefly (no checksums) to check it and the K asked for."""
    from trt_spec.engine import Engine

    e = Engine(path, n_threads=1, verify=False)
    if e.draft_len == 0:
        raise ValueError(f"{path}: this engine has no draft model (build it with --draft)")
    ks = fixed or list(range(1, e.draft_len + 1))
    if ks[-1] > e.draft_len:
        raise ValueError(
            f"--draft-lens {draft_lens}: {path} allows K up to {e.draft_len} "
            "(its build --draft-len)"
        )
    src = {r: e.metadata["models"][r]["source"] for r in ("target", "draft")}
    return {
        "path": str(path),
        "weights": e.weights,
        "draft_len": e.draft_len,
        "target": src["target"].get("name") or src["target"]["path"],
        "draft": src["draft"].get("name") or src["draft"]["path"],
        "file_bytes": Path(path).stat().st_size,
        "ks": ks,
        "metadata": e.metadata,
        "encode": e.encode,
    }


def cmd_bench(args: argparse.Namespace) -> int:
    fixed, peers, threads = _options(args)
    prompts, ids, source = load_prompts(args.prompts, args.n)
    infos = [_engine_info(p, fixed, args.draft_lens) for p in args.engine]
    max_prompt = max(len(infos[0]["encode"](p)) for p in prompts)
    notes: list[str] = []
    pairs: list[tuple[Path, Path]] = []
    if peers and 0 not in args.temperatures:
        notes.append("peers skipped: they run greedy only; add temperature 0")
        peers = []
    if peers:  # resolve everything the peers need before the long runs
        from trt_spec.bench_peers import find_peers_dir, resolve_gguf

        find_peers_dir(args.peers_dir)
        peer_ks = parse_draft_lens(args.peer_draft_lens) if args.peer_draft_lens else infos[0]["ks"]
        for info in infos:
            pair = tuple(
                resolve_gguf(info["metadata"], role, getattr(args, f"{role}_gguf"))
                for role in ("target", "draft")
            )
            if pair not in pairs:
                pairs.append(pair)  # type: ignore[arg-type]
    engines = [{k: v for k, v in i.items() if k not in ("metadata", "encode", "ks")} for i in infos]
    per_engine_ks = [i["ks"] for i in infos]
    del infos
    gc.collect()

    env = environment(threads)
    now = dt.datetime.now()
    results: list[dict[str, Any]] = []
    for e, ks in zip(engines, per_engine_ks, strict=True):
        results += bench_engine(e["path"], prompts, ks, args, threads)
    peer_results: list[dict[str, Any]] = []
    if peers:
        from trt_spec.bench_peers import peer_comparisons, run_peers

        ctx = -(-(max_prompt + args.max_new_tokens + peer_ks[-1] + 64) // 256) * 256
        peer_prompts = prompts[: args.peer_n or len(prompts)]
        for pair in pairs:
            peer_results += run_peers(peers, pair, peer_prompts, peer_ks, args, threads, ctx, notes)
        peer_comparisons(results, peer_results)
    env["loadavg_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    mismatches = sum(r["checks"]["greedy_mismatches"] or 0 for r in results)
    if mismatches:
        notes.insert(0, f"GREEDY EXACTNESS FAILED: {mismatches} speculative runs differ")
    report = {
        "kind": "trt-spec bench",
        "date": now.isoformat(timespec="seconds"),
        "environment": env,
        "settings": {
            "prompt_source": source,
            "prompt_ids": ids,
            "n_prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "temperatures": args.temperatures,
            "draft_lens": per_engine_ks[0]
            if len(set(map(tuple, per_engine_ks))) == 1
            else per_engine_ks,
            "auto": args.auto,
            "seed": args.seed,
            "peers": peers,
            "peer_n": args.peer_n,
        },
        "engines": engines,
        "results": results,
        "peers": peer_results,
        "notes": notes,
    }
    _write(report, Path(args.out_dir), args.tag, now)
    if mismatches:
        _log(
            f"trt-spec bench: WARNING: {mismatches} greedy speculative runs differ from target-only"
        )
    return 0


def _write(report: dict[str, Any], out_dir: Path, tag: str | None, now: dt.datetime) -> None:
    """spec_<tag>.* (replaced) or spec_<date>[-n].* (never overwrites) under out_dir."""
    from trt_spec.bench_report import render_markdown, write_plot

    out_dir.mkdir(parents=True, exist_ok=True)
    day = now.strftime("%Y-%m-%d")
    stem = out_dir / f"spec_{tag or day}"
    n = 2
    while not tag and (stem.with_suffix(".json").exists() or stem.with_suffix(".md").exists()):
        stem, n = out_dir / f"spec_{day}-{n}", n + 1
    png = write_plot(report, stem.with_suffix(".png"))
    md = render_markdown(report)
    stem.with_suffix(".md").write_text(md, encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(md)
    written = [str(stem.with_suffix(x)) for x in (".json", ".md") + ((".png",) if png else ())]
    print("wrote " + ", ".join(written))


def add_parser(sub: Any) -> None:
    """Registers ``trt-spec bench`` on the CLI's subparsers."""
    b = sub.add_parser(
        "bench",
        help="speculative vs target-only decode speed per draft length (JSON, markdown, PNG)",
        description=(
            "Runs target-only, each fixed draft length and draft_len='auto' on the same prompts "
            "and reports decode tokens/s, acceptance and the cost model (draft step, verify, "
            "predicted tokens/s) per K; checks greedy exactness; optional llama.cpp and "
            "transformers peers. Writes spec_<tag>.json/.md/.png under --out-dir."
        ),
    )
    b.add_argument("engine", nargs="+", help="engine file(s) with a draft, e.g. one per --weights")
    b.add_argument("--prompts", default="humaneval", help="'humaneval' (default) or a prompts file")
    b.add_argument("--n", type=int, default=50, help="number of prompts (default 50)")
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--temperatures", default="0,0.7", help="comma list (default 0,0.7)")
    b.add_argument(
        "--draft-lens", default=None, help="fixed K to run: 1-8, 1,2,4 (default 1..engine's max)"
    )
    b.add_argument(
        "--auto",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run draft_len='auto' (default on)",
    )
    b.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--out-dir", default="benchmarks/results", help="default benchmarks/results")
    b.add_argument("--tag", default=None, help="file name: spec_<tag> (default: the date)")
    b.add_argument(
        "--peers", default="", help="comma list of llama.cpp,transformers (default none)"
    )
    b.add_argument("--peer-n", type=int, default=None, help="prompts for peers (default --n)")
    b.add_argument("--peer-draft-lens", default=None, help="K for peers (default: --draft-lens)")
    b.add_argument("--peers-dir", default=None, help="benchmarks/peers of the repository")
    b.add_argument("--target-gguf", default=None, help="target GGUF for peers (default: found)")
    b.add_argument("--draft-gguf", default=None, help="draft GGUF for peers (default: found)")
    b.set_defaults(func=cmd_bench)
