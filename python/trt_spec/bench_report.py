"""Reports of ``trt-spec bench``: the markdown tables and the PNG plot (matplotlib, optional)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trt_spec.bench import _log


def _f(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _label(k: str) -> str:
    return {"0": "target-only", "auto": "auto"}.get(k, f"K={k}")


def render_markdown(rep: dict[str, Any]) -> str:
    env, s = rep["environment"], rep["settings"]
    lines = [
        f"# Speculative decoding benchmark ({rep['date']})",
        "",
        f"- device: {env['cpu']}, {env['logical_cpus']} logical CPUs, {env['threads']} threads; "
        f"1-min load average {_f(env['loadavg_start'])} at start, {_f(env.get('loadavg_end'))} "
        "at end (other processes share the cores)",
        f"- commit: {env['git_commit'] or 'n/a'}, trt-spec {env['trt_spec_version']}, "
        f"Python {env['python']}",
        f"- settings: {s['n_prompts']} prompts from {s['prompt_source']} "
        f"({s['prompt_ids'][0]} ... {s['prompt_ids'][-1]}), {s['max_new_tokens']} new tokens, "
        f"EOS ignored, temperatures {s['temperatures']} (top-k/top-p off), seed {s['seed']}, "
        f"draft lengths {s['draft_lens']}, auto {'on' if s['auto'] else 'off'}; configurations "
        "interleaved per prompt",
    ]
    for e in rep["engines"]:
        lines.append(
            f"- engine {e['path']} ({e['file_bytes'] / 1e6:.0f} MB): weights {e['weights']}, "
            f"draft_len {e['draft_len']}, "
            f"target {e['target']}, draft {e['draft']}"
        )
    lines += [
        "",
        "| weights | temperature | target-only tok/s | best fixed K | its tok/s | auto tok/s "
        "| auto / target-only | auto / best K | greedy mismatches |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in rep["results"]:
        c, by_k = res["checks"], {a["draft_len"]: a for a in res["configs"]}
        auto = by_k.get("auto", {}).get("decode_tok_s")
        lines.append(
            f"| {res['weights']} | {res['temperature']:g} | {_f(by_k[0]['decode_tok_s'])} "
            f"| {c['best_fixed_k']} | {_f(c['best_fixed_tok_s'])} | {_f(auto)} "
            f"| {_f(c.get('auto_vs_target_only'), '.3f')} "
            f"| {_f(c.get('auto_vs_best_fixed'), '.3f')} "
            f"| {'-' if c['greedy_mismatches'] is None else c['greedy_mismatches']} |"
        )
    lines += [
        "",
        "decode tok/s: decode tokens / decode seconds summed over prompts (first token and "
        "prefill excluded); mean: of the per-prompt rates. draft step = draft s / drafted "
        "tokens; verify = verify s / iterations (K+1 rows); predicted = tokens per iteration / "
        "(K x draft step + verify); meas/pred near 1: no time outside draft and verify. "
        "Histogram [n] = iterations that kept n draft tokens.",
    ]
    for res in rep["results"]:
        c = res["checks"]
        lines += [
            "",
            f"## {res['weights']} ({Path(res['engine']).name}), temperature {res['temperature']:g}",
            "",
            f"target step (target-only verify pass): {_f(res['target_step_ms'])} ms",
            "",
            "| config | decode tok/s | mean | speedup | acceptance | tok/iter | draft step ms "
            "| verify ms | predicted tok/s | meas/pred | TTFT s | greedy mismatches "
            "| accepted lengths |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for a in res["configs"]:
            lines.append(
                f"| {a['config']} | {_f(a['decode_tok_s'])} | {_f(a['decode_tok_s_mean'])} "
                f"| {_f(a.get('speedup'), '.3f')} | {_f(a['acceptance_rate'], '.1%')} "
                f"| {_f(a['tokens_per_iteration'])} | {_f(a['draft_step_ms'])} "
                f"| {_f(a['verify_ms'])} | {_f(a['predicted_tok_s'])} "
                f"| {_f(a['measured_over_predicted'], '.3f')} | {_f(a['ttft_s_mean'], '.3f')} "
                f"| {a.get('greedy_mismatches', '-')} | {a['accepted_hist']} |"
            )
        checks = [
            f"speculative meas/pred in [{_f(c['prediction_ratio_min'], '.3f')}, "
            f"{_f(c['prediction_ratio_max'], '.3f')}] "
            f"({'within' if c['prediction_within_10pct'] else 'NOT within'} 10%)",
            f"best fixed K = {c['best_fixed_k']} ({_f(c['best_fixed_tok_s'])} tok/s)",
        ]
        if "auto_ok" in c:
            checks.append(
                f"auto = {_f(c['auto_vs_target_only'], '.3f')}x target-only, "
                f"{_f(c['auto_vs_best_fixed'], '.3f')}x best fixed K "
                f"({'ok' if c['auto_ok'] else 'BELOW the 0.95 bar'})"
            )
        if c["greedy_mismatches"] is not None:
            checks.append(
                f"greedy exactness: {c['greedy_mismatches']} mismatching speculative runs"
                + ("" if c["greedy_mismatches"] == 0 else " -- **SPECULATION IS NOT EXACT**")
            )
        for key, cmp in c.items():
            if key.startswith("vs_") and cmp:
                vals = ", ".join(f"{_label(k)}: {_f(v, '.3f')}" for k, v in cmp.items())
                checks.append(f"trt-spec / {key[3:]} tok/s: {vals}")
        lines += ["", "Checks: " + "; ".join(checks) + "."]
    if rep["peers"]:
        lines += [
            "",
            "## Peers (greedy, same prompts and new-token budget)",
            "",
            "llama.cpp: `llama-speculative-simple` (decode = its 'decoded N tokens in S seconds', "
            "first token included) and `llama-completion` for target-only (its eval counter). "
            "transformers: assisted generation, fp32; decode after the first iteration.",
            "",
            "| runner | config | decode tok/s | mean | acceptance | speedup vs own target-only |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for p in rep["peers"]:
            for a in p["configs"]:
                lines.append(
                    f"| {p['runner']} | {a['config']} | {_f(a['decode_tok_s'])} "
                    f"| {_f(a['decode_tok_s_mean'])} | {_f(a['acceptance_rate'], '.1%')} "
                    f"| {_f(a.get('speedup'), '.3f')} |"
                )
        for p in rep["peers"]:
            extra = {k: v for k, v in p.items() if k not in ("configs", "runner")}
            text = ", ".join(
                f"{k} {_f(v) if isinstance(v, float) else v}" for k, v in extra.items()
            )
            lines.append(f"\n{p['runner']}: {text}")
    if rep["notes"]:
        lines += ["", "Notes:"] + [f"- {n}" for n in rep["notes"]]
    return "\n".join(lines) + "\n"


def write_plot(rep: dict[str, Any], path: Path) -> bool:
    """Tokens/s and acceptance against K; False (with a note) if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        rep["notes"].append("no PNG: matplotlib is not installed (pip install matplotlib)")
        _log(f"note: {rep['notes'][-1]}")
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    series = [(f"{r['weights']} T={r['temperature']:g}", r["configs"]) for r in rep["results"]]
    series += [(p["runner"], p["configs"]) for p in rep["peers"]]
    for i, (name, configs) in enumerate(series):
        color = f"C{i % 10}"
        fixed = [a for a in configs if isinstance(a["draft_len"], int) and a["draft_len"] > 0]
        ks = [a["draft_len"] for a in fixed]
        ax1.plot(ks, [a["decode_tok_s"] for a in fixed], "o-", color=color, label=name)
        ax2.plot(ks, [a["acceptance_rate"] for a in fixed], "o-", color=color, label=name)
        for a in configs:
            if a["draft_len"] in (0, "auto") and a["decode_tok_s"]:
                style = "--" if a["draft_len"] == 0 else ":"
                ax1.axhline(a["decode_tok_s"], color=color, linestyle=style, linewidth=1)
    ax1.set(xlabel="draft length K", ylabel="decode tokens/s", title="tokens/s vs K")
    ax1.plot([], [], "k--", linewidth=1, label="target-only")
    ax1.plot([], [], "k:", linewidth=1, label="auto")
    ax2.set(xlabel="draft length K", ylabel="acceptance rate", title="acceptance vs K")
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(0, 1.05)
    for ax in (ax1, ax2):
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    env = rep["environment"]
    fig.suptitle(
        f"trt-spec bench {rep['date']} ({env['cpu']}, {env['threads']} threads)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
