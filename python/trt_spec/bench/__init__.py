"""``trt-spec bench``: speculative vs target-only decode speed per draft source and length, with
a cost model, per-prompt checks and optional peers.

For each engine (one per weight format, say) and temperature, the same prompts run target-only,
then for each draft source asked for (``--draft model,lookup,auto``; default ``model,auto`` on
an engine with a draft model, ``lookup,auto`` on one without) each fixed draft length and the
auto length, prompt by prompt (configurations of a prompt back to back). Prompts are HumanEval
or a file of text prompts or chat conversations with optional predictions
(:mod:`trt_spec.bench.prompts`). Writes ``<out-dir>/spec_<tag or date>.json``, ``.md`` and
``.png`` (if matplotlib is installed).

Modules: :mod:`.common` (environment, logging, helpers; imports nothing of trt-spec),
:mod:`.options`, :mod:`.prompts`, :mod:`.run` (configurations, runs, aggregation, checks),
:mod:`.report` (markdown, PNG, files), :mod:`.peers` (peer table, orchestration and runners).
Each imports only modules listed before it (and :mod:`.peers` only :mod:`.common`), never this
package's ``__init__``: no cycles.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
from pathlib import Path
from typing import Any

from trt_spec import _core
from trt_spec.bench.common import environment, loadavg, log
from trt_spec.bench.options import Options, default_sources, parse_options
from trt_spec.bench.peers.runs import PEERS, PeerSetup, peer_comparisons, resolve_gguf, run_peer
from trt_spec.bench.prompts import Prompt, load_prompts
from trt_spec.bench.report import write_report
from trt_spec.bench.run import BAR, bench_engine, engine_label, make_configs
from trt_spec.progress import Reporter, add_output_flags, mode_from_flags

__all__ = ["add_parser", "cmd_bench"]


def inspect_engine(path: str, opts: Options, prompts: list[Prompt]) -> dict[str, Any]:
    """Opens an engine briefly (no checksums) to check it against the options, and renders the
    prompts as text (chat template applied) for the peers."""
    from trt_spec.engine import Engine

    e = Engine(path, n_threads=1, verify=False)
    sources = opts.sources or default_sources(e.has_draft)
    if "model" in sources and not e.has_draft:
        raise ValueError(
            f"--draft model: {path} has no draft model (build it with --draft, "
            "or bench it with --draft lookup,auto)"
        )
    if e.max_draft_len == 0:
        raise ValueError(f"{path}: this engine does not speculate (built with --draft-len 0)")
    ks = opts.fixed if opts.fixed is not None else list(range(1, e.max_draft_len + 1))
    if ks and ks[-1] > e.max_draft_len:
        raise ValueError(
            f"--draft-lens {','.join(map(str, ks))}: {path} allows K up to {e.max_draft_len} "
            "(its build --draft-len)"
        )
    src = {r: m["source"] for r, m in e.metadata["models"].items()}
    texts = [
        p.prompt
        if isinstance(p.prompt, str)
        else e.tokenizer.apply_chat_template(p.prompt, add_generation_prompt=True)
        for p in prompts
    ]
    return {
        "path": str(path),
        "weights": e.weights,
        "draft_len": e.max_draft_len,
        "has_draft": e.has_draft,
        "target": src["target"].get("name") or src["target"]["path"],
        "draft": (src["draft"].get("name") or src["draft"]["path"]) if "draft" in src else None,
        "file_bytes": Path(path).stat().st_size,
        "sources": sources,
        "ks": ks,
        "prompt_tokens": [len(e.encode(p.prompt)) for p in prompts],
        "metadata": e.metadata,
        "texts": texts,
    }


def _peer_pairs(
    infos: list[dict[str, Any]], peers: list[str], args: argparse.Namespace
) -> list[tuple[Path, Path | None, dict[str, Any]]]:
    """(target GGUF, draft GGUF or None, the first engine built from them) per distinct pair."""
    for name in peers:
        PEERS[name].preflight()
    pairs: list[tuple[Path, Path | None, dict[str, Any]]] = []
    for info in infos:
        target = resolve_gguf(info["metadata"], "target", args.target_gguf)
        draft = None
        if info["has_draft"] or args.draft_gguf:
            draft = resolve_gguf(info["metadata"], "draft", args.draft_gguf)
        for name in peers:
            if PEERS[name].source == "model" and draft is None:
                raise ValueError(
                    f"--peers {name}: {info['path']} has no draft model; pass --draft-gguf"
                )
        if all((target, draft) != (t, d) for t, d, _ in pairs):
            pairs.append((target, draft, info))
    return pairs


def _run_peers(
    pairs: list[tuple[Path, Path | None, dict[str, Any]]],
    peers: list[str],
    prompts: list[Prompt],
    opts: Options,
    args: argparse.Namespace,
    notes: list[str],
) -> list[dict[str, Any]]:
    n = args.peer_n or len(prompts)
    out: list[dict[str, Any]] = []
    for target, draft, info in pairs:
        ks = opts.peer_ks or info["ks"]
        need = max(info["prompt_tokens"]) + args.max_new_tokens + max(ks, default=0) + 64
        ctx = -(-need // 256) * 256
        setup = PeerSetup(
            target, draft, opts.threads, ctx, args.seed, args.max_new_tokens, ks, args.auto
        )
        ids = [p.id for p in prompts[:n]]
        for name in peers:
            res = run_peer(PEERS[name], setup, info["texts"][:n], ids, notes)
            if res is not None:
                out.append(res)
    return out


def _one_or_each(values: list[Any]) -> Any:
    """The value shared by every engine, else the list of each engine's."""
    return values[0] if all(v == values[0] for v in values) else values


def cmd_bench(args: argparse.Namespace) -> int:
    opts = parse_options(args, tuple(PEERS))
    prompts, source = load_prompts(args.prompts, args.n, args.skip)
    infos = [inspect_engine(p, opts, prompts) for p in args.engine]
    notes: list[str] = []
    peers = opts.peers
    if peers and 0 not in args.temperatures:
        notes.append("peers skipped: they run greedy only; add temperature 0")
        peers = []
    pairs = _peer_pairs(infos, peers, args) if peers else []
    gc.collect()

    env = environment(opts.threads)
    out = Reporter(mode_from_flags(args.quiet, args.verbose))
    now = dt.datetime.now()
    results: list[dict[str, Any]] = []
    for info in infos:
        configs = make_configs(info["sources"], info["ks"], args.auto)
        info["configs"] = [c.label for c in configs]
        results += bench_engine(
            info["path"], engine_label(info), prompts, configs, args, opts.threads, out
        )
    peer_results = _run_peers(pairs, peers, prompts, opts, args, notes) if peers else []
    peer_comparisons(results, peer_results)
    env["loadavg_end"] = loadavg()
    mismatches = sum(r["checks"]["greedy_mismatches"] or 0 for r in results)
    if mismatches:
        notes.insert(0, f"GREEDY EXACTNESS FAILED: {mismatches} speculative runs differ")
    described = [p.describe() for p in prompts]
    for d, n_tok in zip(described, infos[0]["prompt_tokens"], strict=True):
        d["prompt_tokens"] = n_tok
    hidden = ("metadata", "texts", "prompt_tokens")
    report = {
        "kind": "trt-spec bench",
        "date": now.isoformat(timespec="seconds"),
        "environment": env,
        "settings": {
            "prompt_source": source,
            "prompt_ids": [p.id for p in prompts],
            "prompts": described,
            "n_prompts": len(prompts),
            "skipped_prompts": args.skip,
            "use_prediction": args.use_prediction,
            "max_new_tokens": args.max_new_tokens,
            "temperatures": args.temperatures,
            "draft_sources": _one_or_each([i["sources"] for i in infos]),
            "draft_lens": _one_or_each([i["ks"] for i in infos]),
            "auto": args.auto,
            "seed": args.seed,
            "repeats": getattr(args, "repeats", 1),
            "threads": opts.threads,
            "bar": BAR,
            "peers": peers,
            "peer_n": args.peer_n,
            "peer_draft_lens": opts.peer_ks,
        },
        "engines": [{k: v for k, v in i.items() if k not in hidden} for i in infos],
        "results": results,
        "peers": peer_results,
        "notes": notes,
    }
    write_report(report, Path(args.out_dir), args.tag, now)
    if mismatches:
        log(f"WARNING: {mismatches} greedy speculative runs differ from target-only")
    return 0


def add_parser(sub: Any) -> None:
    """Registers ``trt-spec bench`` on the CLI's subparsers."""
    b = sub.add_parser(
        "bench",
        help="speculative vs target-only decode speed per draft source and length "
        "(JSON, markdown, PNG)",
        description=(
            "Runs target-only, then per draft source (--draft) each fixed draft length and the "
            "auto length on the same prompts, and reports decode tokens/s, the lowest per-prompt "
            "ratio to target-only, acceptance, iterations per source, predictions kept and the "
            "cost model; checks greedy exactness; optional peers (llama.cpp, transformers). "
            "Writes spec_<tag>.json/.md/.png under --out-dir."
        ),
    )
    b.add_argument("engine", nargs="+", help="engine file(s), e.g. one per --weights")
    b.add_argument(
        "--prompts",
        default="humaneval",
        help="'humaneval' (default), a .jsonl/.json file (strings, {'prompt'} or {'messages'} "
        "objects with optional 'prediction', 'id', 'task') or a text file (one per line)",
    )
    b.add_argument("--n", type=int, default=50, help="number of prompts (default 50)")
    b.add_argument(
        "--skip",
        type=int,
        default=0,
        help="leave out the first SKIP prompts (default 0): e.g. a held-out part of a set",
    )
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--temperatures", default="0,0.7", help="comma list (default 0,0.7)")
    b.add_argument(
        "--draft",
        default=None,
        help="draft sources, a comma list of model,lookup,auto (default: model,auto on an "
        "engine with a draft model, lookup,auto without); target-only always runs",
    )
    b.add_argument(
        "--draft-lens",
        default=None,
        help="fixed K for model and lookup: 1-8, 1,2,4, or none (only the auto lengths; default "
        "1..engine's max)",
    )
    b.add_argument(
        "--auto",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run draft_len='auto' per source, and the source 'auto' (default on)",
    )
    b.add_argument(
        "--use-prediction",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pass a prompt's 'prediction' as generate(prediction=...) (default: when present)",
    )
    b.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    b.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=list(_core.KV_CACHE_DTYPES),
        help="KV cache element type (default auto: f16 on a GPU, f32 on the CPU)",
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each prompt's configurations, alternating (default 1): each prompt's "
        "figures are then over all its runs (summed decode time), so that a host's drift "
        "during one run weighs less in the per-prompt ratios",
    )
    b.add_argument("--out-dir", default="benchmarks/results", help="default benchmarks/results")
    b.add_argument("--tag", default=None, help="file name: spec_<tag> (default: the date)")
    b.add_argument("--peers", default="", help=f"comma list of {','.join(PEERS)} (default none)")
    b.add_argument("--peer-n", type=int, default=None, help="prompts for peers (default --n)")
    b.add_argument("--peer-draft-lens", default=None, help="K for peers (default: --draft-lens)")
    b.add_argument("--target-gguf", default=None, help="target GGUF for peers (default: found)")
    b.add_argument("--draft-gguf", default=None, help="draft GGUF for peers (default: found)")
    add_output_flags(b, "one line per prompt")
    b.set_defaults(func=cmd_bench)
