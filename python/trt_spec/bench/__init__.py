"""``trt-spec bench``: speculative vs target-only decode speed per draft source and length, with
a cost model and per-prompt checks.

For each engine (one per weight format, say) and temperature, the same prompts run target-only,
then for each draft source asked for (``--draft model,lookup,auto``; default ``model,auto`` on
an engine with a draft model, ``lookup,auto`` on one without) each fixed draft length and the
auto length, prompt by prompt (configurations of a prompt back to back). Prompts are HumanEval
or a file of text prompts or chat conversations with optional predictions
(:mod:`trt_spec.bench.prompts`). Writes ``<out-dir>/spec_<tag or date>.json``, ``.md`` and
``.png`` (if matplotlib is installed).

Modules: :mod:`.common` (environment, logging, helpers; imports nothing of trt-spec),
:mod:`.options`, :mod:`.prompts`, :mod:`.run` (configurations, runs, aggregation, checks),
:mod:`.report` (markdown, PNG, files). Each imports only modules listed before it, never this
package's ``__init__``: no cycles. Peers (other engines on the same prompts) run beside it from
the repository (``benchmarks/bench_peers.py``, through :class:`BenchExtra`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
from pathlib import Path
from typing import Any, Protocol

from trt_spec import _core
from trt_spec.bench.common import environment, loadavg, log
from trt_spec.bench.options import Options, default_sources, parse_options
from trt_spec.bench.prompts import Prompt, load_prompts
from trt_spec.bench.report import write_report
from trt_spec.bench.run import BAR, bench_engine, engine_label, make_configs
from trt_spec.progress import Reporter, add_output_flags, mode_from_flags

__all__ = ["BenchExtra", "add_arguments", "add_parser", "cmd_bench"]


class BenchExtra(Protocol):
    """Runs beside trt-spec's own in one bench (``benchmarks/bench_peers.py``'s peers): checked
    before the engines run, run after them; its results land in the report's ``peers``."""

    def prepare(self, infos: list[dict[str, Any]], prompts: list[Prompt], notes: list[str]) -> None:
        """Checks everything it needs (errors are ``ValueError``) before the long runs."""

    def run(self, results: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
        """Its runs, after trt-spec's ``results`` (which it may annotate in their checks)."""

    def settings(self) -> dict[str, Any]:
        """Its settings, merged into the report's."""


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


def _one_or_each(values: list[Any]) -> Any:
    """The value shared by every engine, else the list of each engine's."""
    return values[0] if all(v == values[0] for v in values) else values


def cmd_bench(args: argparse.Namespace, extra: BenchExtra | None = None) -> int:
    opts = parse_options(args)
    prompts, source = load_prompts(args.prompts, args.n, args.skip)
    infos = [inspect_engine(p, opts, prompts) for p in args.engine]
    notes: list[str] = []
    if extra is not None:
        extra.prepare(infos, prompts, notes)
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
    peer_results = extra.run(results, notes) if extra is not None else []
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
            **(extra.settings() if extra is not None else {}),
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
            "cost model; checks greedy exactness. Writes spec_<tag>.json/.md/.png under "
            "--out-dir. Peers (llama.cpp, transformers) run beside it from the repository: "
            "python benchmarks/bench_peers.py."
        ),
    )
    add_arguments(b)
    add_output_flags(b, "one line per prompt")
    b.set_defaults(func=cmd_bench)


def add_arguments(b: argparse.ArgumentParser) -> None:
    """``trt-spec bench``'s arguments (output flags aside), on any parser."""
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
