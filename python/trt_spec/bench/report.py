"""Reports of ``trt-spec bench``: the markdown tables, the PNG plot (matplotlib, optional) and
the files ``spec_<tag or date>.json/.md/.png``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from trt_spec.bench.common import log


def _f(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _counts(a: dict[str, Any]) -> str:
    """Iterations per draft source, e.g. ``m 40 / l 3 / n 2``."""
    c = a.get("source_counts") or {}
    order = ["model", "lookup", "none"] + [k for k in c if k not in ("model", "lookup", "none")]
    return " / ".join(f"{k[0]} {c[k]}" for k in order if c.get(k)) or "-"


def _worst(a: dict[str, Any]) -> str:
    if a.get("per_prompt_ratio_min") is None:
        return "n/a"
    return f"{a['per_prompt_ratio_min']:.3f} ({a['per_prompt_ratio_min_id']})"


def _header(rep: dict[str, Any]) -> list[str]:
    env, s = rep["environment"], rep["settings"]
    kinds = [p["kind"] for p in s["prompts"]]
    preds = sum(p["prediction_chars"] is not None for p in s["prompts"])
    passed = "passed as prediction=" if s["use_prediction"] else "NOT passed (--no-use-prediction)"
    lines = [
        f"# Speculative decoding benchmark ({rep['date']})",
        "",
        f"- device: {env['cpu']}, {env['logical_cpus']} logical CPUs, {env['threads']} threads; "
        f"1-min load average {_f(env['loadavg_start'])} at start, {_f(env.get('loadavg_end'))} "
        "at end (other processes share the cores)",
        f"- commit: {env['git_commit'] or 'n/a'}, trt-spec {env['trt_spec_version']}, "
        f"Python {env['python']}",
        f"- prompts: {s['n_prompts']} from {s['prompt_source']} "
        f"({s['prompt_ids'][0]} ... {s['prompt_ids'][-1]}; {kinds.count('chat')} chat, "
        f"{kinds.count('text')} text; {preds} with a prediction, "
        f"{passed})",
        f"- settings: {s['max_new_tokens']} new tokens, EOS ignored, temperatures "
        f"{s['temperatures']} (top-k/top-p off), seed {s['seed']}, draft sources "
        f"{s['draft_sources']}, draft lengths {s['draft_lens']}, auto lengths "
        f"{'on' if s['auto'] else 'off'}; configurations interleaved per prompt"
        + (
            f", {s['repeats']} runs of each in turn (each prompt's figures over all its runs)"
            if s.get("repeats", 1) > 1
            else ""
        ),
    ]
    for e in rep["engines"]:
        lines.append(
            f"- engine {e['path']} ({e['file_bytes'] / 1e6:.0f} MB): weights {e['weights']}, "
            f"draft_len {e['draft_len']}, target {e['target']}, draft {e['draft'] or 'none'}, "
            f"sources {e['sources']}"
        )
    return lines


def _summary(rep: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "| weights | temperature | target-only tok/s | best other config | its tok/s "
        "| auto tok/s | auto / target-only | auto / best other | worst prompt ratio "
        "| greedy mismatches |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for res in rep["results"]:
        c, by = res["checks"], {a["config"]: a for a in res["configs"]}
        auto = by.get("auto", {}).get("decode_tok_s")
        w = c["worst_prompt"]
        worst = f"{w['ratio']:.3f} ({w['config']}, {w['id']})" if w else "n/a"
        lines.append(
            f"| {res['weights']} | {res['temperature']:g} "
            f"| {_f(by['target-only']['decode_tok_s'])} | {c['best_other'] or '-'} "
            f"| {_f(c['best_other_tok_s'])} | {_f(auto)} "
            f"| {_f(c.get('auto_vs_target_only'), '.3f')} "
            f"| {_f(c.get('auto_vs_best_other'), '.3f')} | {worst} "
            f"| {'-' if c['greedy_mismatches'] is None else c['greedy_mismatches']} |"
        )
    return lines


def _result(res: dict[str, Any]) -> list[str]:
    c = res["checks"]
    lines = [
        "",
        f"## {res['weights']} ({Path(res['engine']).name}), temperature {res['temperature']:g}",
        "",
        f"target step (target-only verify pass): {_f(res['target_step_ms'])} ms",
        "",
        "| config | decode tok/s | mean | speedup | min prompt ratio (prompt) | median "
        "| acceptance | tok/iter | iterations m/l/n | prediction kept / rejected "
        "| draft step ms | verify ms | predicted tok/s | meas/pred | TTFT s | greedy mismatches "
        "| accepted lengths |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for a in res["configs"]:
        lines.append(
            f"| {a['config']} | {_f(a['decode_tok_s'])} | {_f(a['decode_tok_s_mean'])} "
            f"| {_f(a.get('speedup'), '.3f')} | {_worst(a)} "
            f"| {_f(a['per_prompt_ratio_median'], '.3f')} | {_f(a['acceptance_rate'], '.1%')} "
            f"| {_f(a['tokens_per_iteration'])} | {_counts(a)} "
            f"| {a['prediction_accepted']} / {a['prediction_rejected']} "
            f"| {_f(a['draft_step_ms'])} | {_f(a['verify_ms'])} | {_f(a['predicted_tok_s'])} "
            f"| {_f(a['measured_over_predicted'], '.3f')} | {_f(a['ttft_s_mean'], '.3f')} "
            f"| {a.get('greedy_mismatches', '-')} | {a['accepted_hist']} |"
        )
    checks = [
        f"speculative meas/pred in [{_f(c['prediction_ratio_min'], '.3f')}, "
        f"{_f(c['prediction_ratio_max'], '.3f')}] "
        f"({'within' if c['prediction_within_10pct'] else 'NOT within'} 10%)",
        f"best fixed K = {c['best_fixed'] or '-'} ({_f(c['best_fixed_tok_s'])} tok/s)",
        f"best config other than auto = {c['best_other'] or '-'} "
        f"({_f(c['best_other_tok_s'])} tok/s)",
    ]
    if "auto_ok" in c:
        verdict = "ok" if c["auto_ok"] else f"BELOW the {c['bar']} bar"
        checks.append(
            f"auto = {_f(c['auto_vs_target_only'], '.3f')}x target-only, "
            f"{_f(c['auto_vs_best_other'], '.3f')}x the best other config ({verdict}); "
            f"on its worst prompt {_f(c['auto_per_prompt_ratio_min'], '.3f')}x target-only"
        )
    below = c["below_bar_on_a_prompt"]
    checks.append(
        f"configs below {c['bar']}x target-only on some prompt: {', '.join(below) or 'none'}"
    )
    if c["greedy_mismatches"] is not None:
        checks.append(
            f"greedy exactness: {c['greedy_mismatches']} mismatching speculative runs"
            + ("" if c["greedy_mismatches"] == 0 else " -- **SPECULATION IS NOT EXACT**")
        )
    for key, cmp in c.items():
        if key.startswith("vs_") and cmp:
            vals = ", ".join(f"{k}: {_f(v, '.3f')}" for k, v in cmp.items())
            checks.append(f"trt-spec / {key[3:]} tok/s: {vals}")
    lines += ["", "Checks: " + "; ".join(checks) + "."]
    return lines + _per_prompt(res)


def _per_prompt(res: dict[str, Any]) -> list[str]:
    """Per prompt: target-only tok/s and every speculative config's ratio to it."""
    base, spec = res["configs"][0], res["configs"][1:]
    lines = [
        "",
        "<details><summary>per prompt: target-only tok/s and each config's decode rate / "
        "target-only's</summary>",
        "",
        "| prompt | target-only tok/s | " + " | ".join(a["config"] for a in spec) + " |",
        "|---|---:|" + "---:|" * len(spec),
    ]
    for i, r in enumerate(base["runs"]):
        ratios = " | ".join(_f(a["runs"][i].get("ratio_vs_target"), ".3f") for a in spec)
        lines.append(f"| {r['id']} | {_f(r['decode_tok_s'])} | {ratios} |")
    return lines + ["", "</details>"]


def _peers(rep: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Peers (greedy, same prompt texts and new-token budget)",
        "",
    ]
    lines += [f"- {p['runner']}: {p['method']}" for p in rep["peers"]]
    lines += [
        "",
        "| runner | config | decode tok/s | mean | acceptance | speedup vs own target-only "
        "| min prompt ratio (prompt) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for p in rep["peers"]:
        for a in p["configs"]:
            lines.append(
                f"| {p['runner']} | {a['config']} | {_f(a['decode_tok_s'])} "
                f"| {_f(a['decode_tok_s_mean'])} | {_f(a['acceptance_rate'], '.1%')} "
                f"| {_f(a.get('speedup'), '.3f')} | {_worst(a)} |"
            )
    for p in rep["peers"]:
        skip = ("configs", "runner", "method", "source")
        extra = {k: v for k, v in p.items() if k not in skip}
        text = ", ".join(f"{k} {_f(v) if isinstance(v, float) else v}" for k, v in extra.items())
        lines.append(f"\n{p['runner']}: {text}")
    return lines


def render_markdown(rep: dict[str, Any]) -> str:
    lines = _header(rep) + _summary(rep)
    lines += [
        "",
        "decode tok/s: decode tokens / decode seconds summed over prompts (first token and "
        "prefill excluded); mean: of the per-prompt rates; min prompt ratio: the lowest, over "
        "prompts, of the config's decode rate / target-only's on the same prompt (the goal: "
        f"never below {rep['settings']['bar']}). iterations m/l/n: decode iterations drafted "
        "by the model, by lookup, by neither. draft step = draft s / drafted tokens; verify = "
        "verify s / iterations; predicted = tokens per iteration / (K x draft step + verify); "
        "meas/pred near 1: no time outside draft and verify. Histogram [n] = iterations that "
        "kept n draft tokens.",
    ]
    for res in rep["results"]:
        lines += _result(res)
    if rep["peers"]:
        lines += _peers(rep)
    if rep["notes"]:
        lines += ["", "Notes:"] + [f"- {n}" for n in rep["notes"]]
    return "\n".join(lines) + "\n"


def write_plot(rep: dict[str, Any], path: Path) -> bool:
    """Tokens/s and acceptance against K per draft source (auto lengths and target-only as
    horizontal lines); False (with a note) if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        rep["notes"].append("no PNG: matplotlib is not installed (pip install matplotlib)")
        log(f"note: {rep['notes'][-1]}")
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    series = [(f"{r['weights']} T={r['temperature']:g}", r["configs"]) for r in rep["results"]]
    series += [(p["runner"], p["configs"]) for p in rep["peers"]]
    markers = {"model": "o-", "lookup": "s-"}
    flat = {"none": "--", "model": ":", "lookup": "-.", "auto": (0, (6, 2, 1, 2, 1, 2))}
    for i, (name, configs) in enumerate(series):
        color = f"C{i % 10}"
        for src, style in markers.items():
            fixed = [a for a in configs if a["draft"] == src and a["draft_len"] != "auto"]
            if not fixed:
                continue
            ks = [a["draft_len"] for a in fixed]
            label = f"{name} {src}"
            ax1.plot(ks, [a["decode_tok_s"] for a in fixed], style, color=color, label=label)
            ax2.plot(ks, [a["acceptance_rate"] for a in fixed], style, color=color, label=label)
        for a in configs:
            if a["draft_len"] in (0, "auto") and a["decode_tok_s"]:
                ax1.axhline(a["decode_tok_s"], color=color, linestyle=flat[a["draft"]], lw=1)
    ax1.set(xlabel="draft length K", ylabel="decode tokens/s", title="tokens/s vs K")
    for src, style in flat.items():
        label = "target-only" if src == "none" else f"{src} auto" if src != "auto" else "auto"
        ax1.plot([], [], color="k", linestyle=style, linewidth=1, label=label)
    ax2.set(xlabel="draft length K", ylabel="acceptance rate", title="acceptance vs K")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(0, 1.05)
    for ax in (ax1, ax2):
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    env = rep["environment"]
    fig.suptitle(
        f"trt-spec bench {rep['date']} ({env['cpu']}, {env['threads']} threads)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(rep: dict[str, Any], out_dir: Path, tag: str | None, now: dt.datetime) -> None:
    """spec_<tag>.* (replaced) or spec_<date>[-n].* (never overwrites) under out_dir; prints
    the markdown and the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    day = now.strftime("%Y-%m-%d")
    stem = out_dir / f"spec_{tag or day}"
    n = 2
    while not tag and (stem.with_suffix(".json").exists() or stem.with_suffix(".md").exists()):
        stem, n = out_dir / f"spec_{day}-{n}", n + 1
    png = write_plot(rep, stem.with_suffix(".png"))
    md = render_markdown(rep)
    stem.with_suffix(".md").write_text(md, encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps(rep, indent=1), encoding="utf-8")
    print(md)
    written = [str(stem.with_suffix(x)) for x in (".json", ".md") + ((".png",) if png else ())]
    print("wrote " + ", ".join(written))
