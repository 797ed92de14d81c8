"""The GPU benchmark's projection and report (``bench_gpu.py`` measures, this file renders).

* Projected tokens/s per K: expected tokens per iteration from the CPU bench's accepted-length
  histograms (``--hist``; a truncated geometric model fitted to them where a K has none) or an
  ASSUMED per-token acceptance (``--alpha``), divided by the measured iteration time. A
  projection, not a measurement of real-model generation.
* ``markdown``: the report's tables (decode steps against the roofline, iterations against their
  parts, projections, n-row forwards and prefill chunks, transformers' rows, errors).
"""

from __future__ import annotations

import json
from pathlib import Path

from trt_spec.cost_model import expected_tokens, fit_alpha, load_histograms, tokens_per_iteration

PAIR_TITLES = {"pair": "1.5B target + 0.5B draft", "pair7b": "7B target + 0.5B draft"}


# ---- projection ----------------------------------------------------------------------------------
def projection(iters: list[dict], target_step_ms: float, args) -> dict:
    hists = load_histograms(Path(args.hist)) if args.hist else []
    if hists:
        alpha = fit_alpha(hists)
        source = f"measured histograms from {args.hist} (alpha fitted {alpha:.3f})"
    else:
        alpha = args.alpha
        source = f"ASSUMED per-token acceptance alpha = {alpha} (no --hist given)"
    rows = []
    for it in iters:
        k = it["k"]
        if hists:
            tokens, how = tokens_per_iteration(hists, k)
        else:
            tokens, how = expected_tokens(alpha, k), "geometric model"
        rows.append(
            {
                "k": k,
                "tokens_per_iteration": tokens,
                "from": how,
                "projected_tok_s": tokens / (it["iteration_ms"] / 1e3),
            }
        )
    return {
        "source": source,
        "alpha": alpha,
        "target_only_tok_s": 1e3 / target_step_ms,
        "rows": rows,
    }


# ---- report --------------------------------------------------------------------------------------
def fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def _arm(x: dict, a: str) -> str:
    """One arm of a switch comparison: median +- spread."""
    return f"{x[f'{a}_ms']:.3f} +- {x[f'{a}_spread_ms']:.3f}"


def _pair(x: dict, a: str = "dp4a", b: str = "imma") -> str:
    """Two arms of a switch comparison (median +- spread), or dashes."""
    if f"{a}_ms" not in x:
        return "- | - |"
    return f"{_arm(x, a)} | {_arm(x, b)} |"


def warm_launch_markdown(steps: list[dict]) -> list[str]:
    """The repeat arms of the decode steps: what an attention and a qkv launch cost warm."""
    rows = [s for s in steps if "attn_x2_ms" in s and s.get("layers")]
    if not rows:
        return []
    out = [
        "",
        "Warm launches (bench_gpu.py repeat_arms): each layer's attention, or its qkv projection, "
        "launched twice in a row in the same graph; (twice - once) / layers is what a launch "
        "costs when its code, data and translations are warm from the launch before.",
        "",
        "| model | weights | once ms | attention x2 ms | qkv x2 ms | warm attention us | "
        "warm qkv us |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in rows:
        per = 1e3 / s["layers"]
        out.append(
            f"| {s['model']} | {s['weights']} | {_arm(s, 'once')} | {_arm(s, 'attn_x2')} | "
            f"{_arm(s, 'qkv_x2')} | {(s['attn_x2_ms'] - s['once_ms']) * per:.2f} | "
            f"{(s['qkv_x2_ms'] - s['once_ms']) * per:.2f} |"
        )
    return out


def markdown(r: dict) -> str:
    d = r["device"]
    r.setdefault("bandwidth_gbps", None)
    out = [
        f"# GPU benchmark, {r['date']}",
        "",
        f"Device: {d.get('name')} (cc {d.get('compute_capability')}, {d.get('sm_count')} SMs, "
        f"{d.get('total_bytes', 0) / 2**30:.0f} GiB). Commit {r['commit']}. "
        f"Copy bandwidth measured in this run: {fmt(r['bandwidth_gbps'], '.0f')} GB/s "
        f"(spec sheet peak {fmt(d.get('peak_bandwidth_gbps'), '.0f')} GB/s).",
        f"Settings: {json.dumps(r['settings'])}. Random weights in the real shapes.",
        "",
        "## Decode step, one row (batch 1)",
        "",
        "| model | weights | step ms (graph) | no graph | with PDL | engine step ms | "
        "roofline ms | of roofline | with PDL | achieved GB/s | bytes read roofline ms | "
        "of it, PDL | earlier grids ms | one wave ms | attention 4 warps ms | 8 warps ms | "
        "one-row kernel, 4 warps ms | 8 warps ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in r.get("decode_steps", []):
        out.append(
            f"| {s['model']} | {s['weights']} | {fmt(s['step_ms'])} | "
            f"{fmt(s['step_no_graph_ms'])} | {fmt(s.get('step_pdl_ms'))} | "
            f"{fmt(s.get('engine_step_ms'))} | "
            f"{fmt(s['roofline_ms'])} | {fmt(s['of_roofline'], '.0%')} | "
            f"{fmt(s.get('of_roofline_pdl'), '.0%')} | {fmt(s['achieved_gbps'], '.0f')} | "
            f"{fmt(s.get('roofline_read_ms'))} | {fmt(s.get('of_roofline_read_pdl'), '.0%')} | "
            f"{_pair(s, 'earlier_grids', 'one_wave')} {_pair(s, 'attn_4w', 'attn_8w')} "
            f"{_pair(s, 'attn_4w_1r', 'attn_8w_1r')}"
        )
    out += [
        "",
        "Roofline: (weight bytes + KV bytes at 4 bytes) / measured copy bandwidth; bytes read: "
        "what a decode reads (one row of the embedding table, the KV at its stored f16), the same "
        "bandwidth. Engine step: "
        "the decoder's k=0 iteration (forward, sampling, SeqState read back). With PDL: the same "
        "graph with the matmuls launched as programmatic dependents (TRT_SPEC_CUDA_PDL; sm_90+; "
        "'-' where the device lacks it).",
    ]
    out += warm_launch_markdown(r.get("decode_steps", []))
    iters = r.get("iterations") or {}
    if isinstance(iters, list):  # (reports before 2026-11-26: the f16 pair's table)
        iters = {"pair-f16": iters}
    for name, rows in iters.items():
        out += [
            "",
            f"## Speculative iteration, {PAIR_TITLES.get(name.split('-')[0], name)}, "
            f"{name.split('-')[-1]}, batch 1",
            "",
            "| K | iteration ms (graph) | no graph | verify | draft step 0 | draft step | "
            "verify + K drafts | graph overhead | graph speedup |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for it in rows:
            out.append(
                f"| {it['k']} | {fmt(it['iteration_ms'])} | {fmt(it['iteration_no_graph_ms'])} "
                f"| {fmt(it['verify_ms'])} | {fmt(it['draft_step0_ms'])} | "
                f"{fmt(it['draft_step_ms'])} | {fmt(it['parts_ms'])} | "
                f"{fmt(it['graph_overhead'], '+.1%')} | {fmt(it['graph_speedup'], '.2f')}x |"
            )
        p = (r.get("projections") or {}).get(name)
        if name == "pair-f16" and r.get("projection"):
            p = r["projection"]
        if not p:
            continue
        out += [
            "",
            f"Projected tokens/s of {name} (a PROJECTION, not a measurement): expected tokens "
            f"per iteration from {p['source']}, divided by the measured iteration time. "
            f"Target-only: {p['target_only_tok_s']:.0f} tok/s.",
            "",
            "| K | tokens / iteration | from | projected tok/s | vs target-only |",
            "|---:|---:|---|---:|---:|",
        ]
        for row in p["rows"]:
            out.append(
                f"| {row['k']} | {row['tokens_per_iteration']:.2f} | {row['from']} | "
                f"{row['projected_tok_s']:.0f} | "
                f"{row['projected_tok_s'] / p['target_only_tok_s']:.2f}x |"
            )
    for name, fr in (r.get("forward_rows") or {}).items():
        chunk_rows = fr.get("prefill_rows", 256)  # (reports before 2026-11-27 s28: always 256)
        out += [
            "",
            f"## Target forward of n rows and a prefill chunk, {name}",
            "",
            "Verify-like forwards of n rows of one sequence in a graph (context "
            f"{r['settings'].get('trt', {}).get('context', '?')}); the chunk: "
            f"{chunk_rows} prompt rows op by op.",
            "",
            "Earlier grids / one wave: decode and verify launches on the earlier grids or in "
            "one wave (set_cuda_one_wave); attention 4 / 8 warps: attention blocks of 4 or 8 "
            "warps (set_cuda_attention_warps); dp4a / tensor cores: every q8 / q4 matmul of the "
            "chunk on the dp4a tiles or the tensor-core kernel; each alternating 3 times in the "
            "same process (median, spread).",
            "",
            "| rows | ms | vs one row | earlier grids ms | one wave ms | attention 4 warps ms | "
            "8 warps ms |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {x['rows']} | {fmt(x['ms'])} | {x['vs_one_row']:.2f}x | "
            f"{_pair(x, 'earlier_grids', 'one_wave')} {_pair(x, 'attn_4w', 'attn_8w')}"
            for x in fr["verify_rows"]
        ]
        out += [
            "",
            "| chunk at context | ms | prompt tok/s | dp4a ms | tensor cores ms |",
            "|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {x['context']} | {fmt(x['ms'])} | {x['tok_s']:.0f} | {_pair(x)}"
            for x in fr["prefill"]
        ]
    if r.get("transformers"):
        out += [
            "",
            "## transformers on the same shapes (fp16, static KV cache)",
            "",
            "| model | torch.compile | step ms | decode tok/s | note |",
            "|---|---|---:|---:|---|",
        ]
        for t in r["transformers"]:
            out.append(
                f"| {t.get('model', '-')} | {t.get('torch_compile', '-')} | "
                f"{fmt(t.get('step_ms'))} | {fmt(t.get('decode_tok_s'), '.0f')} | "
                f"{t.get('error', '')} |"
            )
    if r.get("errors"):
        out += ["", "## Errors", ""] + [f"- {e}" for e in r["errors"]]
    return "\n".join(out) + "\n"
