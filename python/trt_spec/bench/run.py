"""Runs of ``trt-spec bench`` on one engine: the configurations, the per-prompt runs, their
aggregation with the cost model, and the checks.

Configurations per engine and temperature: target-only (``draft="none"``), then for each draft
source asked for (``--draft``) the fixed draft lengths (``model K=2``, ``lookup K=4``) and the
auto length (``model auto``, ``lookup auto``); the source ``auto`` is ``draft="auto",
draft_len="auto"`` (label ``auto``). Every configuration of a prompt runs back to back (load
from other processes hits them alike), greedy or sampled with the same seed, EOS ignored.

Cost model (from the engine's own counters): draft step = draft seconds / drafted tokens,
verify = verify seconds / iterations, predicted tokens/s = tokens per iteration /
(K x draft step + verify) with K = drafted / iterations.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path
from typing import Any

from trt_spec.bench.common import Config, div, percentile
from trt_spec.bench.prompts import Prompt
from trt_spec.progress import Reporter

#: The bar every configuration should clear against target-only, on every prompt.
BAR = 0.95
#: A short warm-up prompt (a long benchmark prompt would only add prefill time).
WARM_UP = "def fibonacci(n):\n"

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
    "catch_up_s",
    "prediction_accepted",
    "prediction_rejected",
)


def make_configs(sources: list[str], ks: list[int], auto: bool) -> list[Config]:
    """Target-only, then per source its fixed K and (with ``auto``) its auto length."""
    configs = [Config("target-only", "none", 0)]
    for src in sources:
        if src == "auto":
            if auto:
                configs.append(Config("auto", "auto", "auto"))
            continue
        configs += [Config(f"{src} K={k}", src, k) for k in ks]
        if auto:
            configs.append(Config(f"{src} auto", src, "auto"))
    return configs


def source_names() -> dict[str, str]:
    """The letter of each draft source in ``GenerationStats.sources`` -> its name."""
    from trt_spec._core import DRAFT_SOURCES

    return {name[0]: name for name in DRAFT_SOURCES}


def record(stats: Any, prompt: Prompt, prediction_used: bool) -> dict[str, Any]:
    """The per-prompt numbers kept from a GenerationStats."""
    dec_tok = max(stats.new_tokens - 1, 0)
    rate = stats.decode_tokens_per_s
    letters = source_names()
    counts = {name: 0 for name in letters.values()}
    for ch in stats.sources:
        counts[letters.get(ch, ch)] = counts.get(letters.get(ch, ch), 0) + 1
    return {
        "id": prompt.id,
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
        "catch_up_s": stats.catch_up_s,
        "source_counts": counts,
        "by_source": {k: dict(v) for k, v in stats.by_source.items()},
        "prediction_used": prediction_used,
        "prediction_accepted": stats.prediction_accepted,
        "prediction_rejected": stats.prediction_rejected,
    }


def _sum_nested(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums dicts of numbers, or of dicts of numbers, key by key."""
    out: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, dict):
                inner = out.setdefault(k, {})
                for kk, vv in v.items():
                    inner[kk] = inner.get(kk, 0) + vv
            else:
                out[k] = out.get(k, 0) + v
    return out


def _sum_hists(recs: list[dict[str, Any]]) -> list[int]:
    """The records' accepted-length histograms added bin by bin (the longest's length)."""
    hist = [0] * max(len(r["accepted_hist"]) for r in recs)
    for r in recs:
        for i, c in enumerate(r["accepted_hist"]):
            hist[i] += c
    return hist


def aggregate(config: Config, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration over all prompts, with the cost model's prediction."""
    tot = {key: sum(r.get(key, 0) for r in runs) for key in _SUMMED}
    hist = _sum_hists(runs)
    iters = tot["iterations"]
    tpi = div(tot["emitted"], iters)
    draft_step = div(tot["draft_s"], tot["drafted"])
    verify = div(tot["verify_s"], iters)
    # K per iteration: drafted / iterations, the nominal K except where the token budget cut
    # the last draft short (and the mean length for auto lengths and sources)
    mean_k = div(tot["drafted"], iters) or 0.0
    cost = (mean_k * (draft_step or 0.0) + verify) if verify else None
    predicted = div(tpi, cost) if tpi and cost else None
    measured = div(tot["decode_tokens"], tot["decode_s"])
    ratios = [(r["ratio_vs_target"], r["id"]) for r in runs if r.get("ratio_vs_target")]
    worst = min(ratios) if ratios else (None, None)
    return {
        "config": config.label,
        "draft": config.draft,
        "draft_len": config.draft_len,
        "prompts": len(runs),
        "new_tokens": tot["new_tokens"],
        "decode_tok_s": measured,
        "decode_tok_s_mean": statistics.fmean(r["decode_tok_s"] for r in runs),
        "ttft_s_mean": statistics.fmean(r["ttft_s"] for r in runs),
        "iterations": iters,
        "mean_draft_len": mean_k,
        "drafted": tot["drafted"],
        "accepted": tot["accepted"],
        "acceptance_rate": div(tot["accepted"], tot["drafted"]),
        "tokens_per_iteration": tpi,
        "accepted_hist": hist,
        "source_counts": _sum_nested([r["source_counts"] for r in runs]),
        "by_source": _sum_nested([r["by_source"] for r in runs]),
        "prediction_accepted": tot["prediction_accepted"],
        "prediction_rejected": tot["prediction_rejected"],
        "draft_step_ms": draft_step * 1e3 if draft_step is not None else None,
        "verify_ms": verify * 1e3 if verify is not None else None,
        "catch_up_s": tot["catch_up_s"],
        "predicted_tok_s": predicted,
        "measured_over_predicted": div(measured, predicted),
        "overhead_ms_per_iteration": (
            (tot["decode_s"] - tot["draft_s"] - tot["verify_s"]) / iters * 1e3 if iters else None
        ),
        "per_prompt_ratio_min": worst[0],
        "per_prompt_ratio_min_id": worst[1],
        "per_prompt_ratio_median": percentile((r for r, _ in ratios), 50),
        "runs": runs,
    }


def merge_repeats(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One prompt's records of one configuration over its repeated runs, as one record: counts
    and seconds summed (so decode_tok_s is over all the runs' decode time), histograms and source
    counts added, the first token's time averaged; each run's decode rate kept."""
    if len(recs) == 1:
        return recs[0]
    out = dict(recs[0])
    for key in _SUMMED + ("spec_iterations",):
        out[key] = sum(r.get(key, 0) for r in recs)
    out["accepted_hist"] = _sum_hists(recs)
    out["source_counts"] = _sum_nested([r["source_counts"] for r in recs])
    out["by_source"] = _sum_nested([r["by_source"] for r in recs])
    out["ttft_s"] = statistics.fmean(r["ttft_s"] for r in recs)
    out["decode_tok_s"] = div(out["decode_tokens"], out["decode_s"]) or 0.0
    out["repeat_tok_s"] = [r["decode_tok_s"] for r in recs]
    if "greedy_mismatch_at" in recs[0]:
        at = [r["greedy_mismatch_at"] for r in recs if r["greedy_mismatch_at"] is not None]
        out["greedy_mismatch_at"] = min(at) if at else None
    return out


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists differ (None when equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def bench_engine(
    path: str,
    name: str,
    prompts: list[Prompt],
    configs: list[Config],
    args: argparse.Namespace,
    threads: int,
    out: Reporter | None = None,
) -> list[dict[str, Any]]:
    """Every temperature x configuration on one engine; one result per temperature.

    ``out`` shows one bar over every (temperature, prompt, configuration) run, or with
    ``verbose`` one line per prompt (default: a Reporter in its normal mode).
    """
    from trt_spec.engine import Engine

    out = out or Reporter()
    repeats = getattr(args, "repeats", 1)  # (>= 1: options.py)
    total = len(args.temperatures) * len(prompts) * len(configs) * repeats
    done = 0

    kv = getattr(args, "kv_cache_dtype", "auto")
    engine = Engine(path, n_threads=threads, kv_cache_dtype=kv)
    top = max((c.draft_len for c in configs if isinstance(c.draft_len, int)), default=0)
    for c in configs:  # warm-up: caches, thread pool, every model and source at its longest K
        if c.draft_len in (0, top):
            engine.generate(
                WARM_UP,
                max_new_tokens=8,
                ignore_eos=True,
                draft=c.draft,
                draft_len=c.draft_len,
            )
    # Each auto-length configuration decodes on an Engine of its own: its controllers learn the
    # costs and the acceptance from its own iterations only, not from the other runs.
    engines = {
        c.label: Engine(path, n_threads=threads, kv_cache_dtype=kv) for c in configs if c.auto_len
    }
    for c in configs:
        if c.auto_len:
            engines[c.label].generate(WARM_UP, max_new_tokens=8, ignore_eos=True, draft=c.draft)
    results = []
    for temp in args.temperatures:
        runs: dict[str, list[dict[str, Any]]] = {c.label: [] for c in configs}
        for i, p in enumerate(prompts):
            pred = p.prediction if args.use_prediction else None
            recs: dict[str, list[dict[str, Any]]] = {c.label: [] for c in configs}
            line = []
            for rep in range(repeats):  # the configurations alternate within each repeat
                ref: list[int] = []
                for c in configs:
                    r = engines.get(c.label, engine).generate(
                        p.prompt,
                        max_new_tokens=args.max_new_tokens,
                        temperature=temp,
                        seed=args.seed,
                        ignore_eos=True,
                        draft=c.draft,
                        draft_len=c.draft_len,
                        prediction=pred if c.speculative else None,
                    )
                    rec = record(r.stats, p, pred is not None and c.speculative)
                    if not c.speculative:
                        ref = list(r.token_ids)
                    elif temp == 0:
                        rec["greedy_mismatch_at"] = first_mismatch(list(r.token_ids), ref)
                    recs[c.label].append(rec)
                    line.append(f"{c.label} {rec['decode_tok_s']:.1f}")
                    done += 1
                    last = c is configs[-1] and rep == repeats - 1
                    out.step(
                        name,
                        done,
                        total,
                        _prompt_line(name, temp, i, prompts, line) if last else None,
                        "run",
                    )
            merged = {c.label: merge_repeats(recs[c.label]) for c in configs}
            base = next((merged[c.label] for c in configs if not c.speculative), None)
            for c in configs:
                rec = merged[c.label]
                rec["ratio_vs_target"] = (
                    div(rec["decode_tok_s"], base["decode_tok_s"]) if base else None
                )
                runs[c.label].append(rec)
        aggs = [aggregate(c, runs[c.label]) for c in configs]
        for a in aggs:
            if temp == 0 and a["draft"] != "none":
                a["greedy_mismatches"] = sum(r["greedy_mismatch_at"] is not None for r in a["runs"])
        results.append(
            {
                "engine": path,
                "weights": engine.weights,
                "temperature": temp,
                "target_step_ms": aggs[0]["verify_ms"],
                "configs": aggs,
                "checks": checks(aggs, temp),
            }
        )
    del engine, engines
    gc.collect()
    return results


def _prompt_line(name: str, temp: float, i: int, prompts: list[Prompt], runs: list[str]) -> str:
    """The line about one prompt: tokens/s per configuration."""
    return (
        f"[{time.strftime('%H:%M:%S')}] [{name} T={temp:g}] prompt {i + 1}/{len(prompts)} "
        f"({prompts[i].id}): {', '.join(runs)}"
    )


def _best(aggs: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(aggs, key=lambda a: a["decode_tok_s"] or 0.0) if aggs else None


def checks(aggs: list[dict[str, Any]], temp: float) -> dict[str, Any]:
    """Speedups, the per-prompt bar, the best configurations, auto against them, exactness."""
    base = aggs[0]["decode_tok_s"]
    spec = [a for a in aggs if a["draft"] != "none"]
    fixed = [a for a in spec if a["draft_len"] != "auto"]
    auto = next((a for a in spec if a["config"] == "auto"), None)
    for a in aggs:
        a["speedup"] = div(a["decode_tok_s"], base)
        if a["draft_len"] == "auto":  # against the best fixed K of its own source(s)
            same = [f for f in fixed if a["draft"] in ("auto", f["draft"])]
            best_same = _best(same)
            a["vs_best_fixed"] = div(a["decode_tok_s"], best_same and best_same["decode_tok_s"])
    ratios = [a["measured_over_predicted"] for a in spec if a["measured_over_predicted"]]
    best_fixed = _best(fixed)
    best_other = _best([a for a in spec if a is not auto])
    mins = {a["config"]: a["per_prompt_ratio_min"] for a in spec}
    worst = min(
        (a for a in spec if a["per_prompt_ratio_min"] is not None),
        key=lambda a: a["per_prompt_ratio_min"],
        default=None,
    )
    out: dict[str, Any] = {
        "greedy_mismatches": (
            sum(a.get("greedy_mismatches", 0) for a in spec) if temp == 0 else None
        ),
        "prediction_ratio_min": min(ratios) if ratios else None,
        "prediction_ratio_max": max(ratios) if ratios else None,
        "prediction_within_10pct": bool(ratios) and all(abs(r - 1) <= 0.10 for r in ratios),
        "best_fixed": best_fixed["config"] if best_fixed else None,
        "best_fixed_tok_s": best_fixed["decode_tok_s"] if best_fixed else None,
        "best_other": best_other["config"] if best_other else None,
        "best_other_tok_s": best_other["decode_tok_s"] if best_other else None,
        "bar": BAR,
        "per_prompt_ratio_min": mins,
        "below_bar_on_a_prompt": [k for k, v in mins.items() if v is not None and v < BAR],
        "worst_prompt": (
            {
                "config": worst["config"],
                "ratio": worst["per_prompt_ratio_min"],
                "id": worst["per_prompt_ratio_min_id"],
            }
            if worst
            else None
        ),
    }
    if auto is not None:
        out["auto_vs_target_only"] = div(auto["decode_tok_s"], base)
        out["auto_vs_best_other"] = div(
            auto["decode_tok_s"], best_other and best_other["decode_tok_s"]
        )
        out["auto_per_prompt_ratio_min"] = auto["per_prompt_ratio_min"]
        out["auto_ok"] = (out["auto_vs_target_only"] or 0) >= BAR and (
            out["auto_vs_best_other"] is None or out["auto_vs_best_other"] >= BAR
        )
        out["auto_prompt_min_ok"] = (auto["per_prompt_ratio_min"] or 0) >= BAR
    return out


def engine_label(info: dict[str, Any]) -> str:
    return f"{info['weights']} ({Path(info['path']).name})"
