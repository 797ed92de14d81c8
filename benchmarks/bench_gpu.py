"""GPU benchmark of the CUDA backend: decode steps against the roofline, the speculative
iteration per draft length K against its parts, transformers on the same shapes, and projected
tokens/s. Needs a CUDA GPU and a CUDA build of trt-spec; everything is measured in one run.

Engines hold random weights in real shapes (``benchmarks/random_engine.py``): the speed of a
decode step depends on shapes and weight format only.

* Decode step, one row: a forward of one row in a CUDA graph (``Session.time_forward`` of the
  test module ``_trt_spec_testing``) and launched op by op, and for targets the engine's own
  k=0 iteration (forward + sampling + SeqState read back, ``Session.time_iterations``): the
  Qwen2.5 1.5B target and 0.5B draft shapes in every ``--formats`` (q4, q8, f16) and the
  Qwen2.5-7B shape (3584 hidden, 18,944 FFN, 28 / 4 heads, 152,064 vocabulary) in every
  ``--big-formats`` (q4, f16). Roofline = bytes moved per step (every weight once + the KV
  cache read) / bandwidth, the bandwidth measured in the same run with a device-to-device copy.
* Iteration per K = 1..8 (batch 1) of the 1.5B + 0.5B pair and of the 7B + 0.5B pair in the
  ``--iter-weights`` format (q4): the whole iteration as one graph and launched op by op,
  against verify (K+1 rows) + draft step 0 (2 rows) + (K-1) draft steps (1 row), each timed
  alone in a graph. Graph overhead = iteration / parts - 1.
* The same pairs' targets: forwards of 1 to 16 rows (verify passes of one sequence; 9-16 rows
  are batches' verify passes and K = 8) against one row, and one prefill chunk of 256 prompt
  rows at contexts 0, 1,024 and 1,792 (prompt tokens/s).
* transformers (torch, fp16, random init, static KV cache, torch.compile if it works): decode
  tokens/s of the same shapes, when torch with CUDA and transformers are installed.
* Projected tokens/s per K = expected tokens per iteration / measured iteration time. The
  expectation comes from an accepted-length histogram (``--hist``: JSON of the CPU bench,
  ``trt-spec bench``); without one from an ASSUMED per-token acceptance (``--alpha``). It is a
  projection, not a measurement of real-model generation.

The test module is built beside ``trt_spec._core`` but not installed: it is found in
``$TRT_SPEC_TESTING_DIR`` or the package build folder ``build/<wheel tag>/`` (where
``pip install .`` leaves it), as ``tests/conftest.py`` finds it.

Writes ``benchmarks/results/gpu_<date>.{json,md}`` with device, commit and settings, after
every measurement (a run cut off by a time limit keeps what it measured). Engines are written
once into ``--workdir`` (generated and quantized on every core). ``--device cpu`` runs the same
script on the CPU backend: a smoke test of the script, not a benchmark.
``python benchmarks/bench_gpu.py --help``; ``benchmarks/run_gpu_checks.sh`` runs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from gpu_arms import (  # (benchmarks/, beside this script)
    attention_warps_arms,
    imma_arms,
    persistent_arms,
    repeat_arms,
    switch_compare,
    waves_arms,
)
from gpu_report import markdown, projection
from native_testing import testing_module
from trt_spec.bench.common import git_commit, log
from trt_spec.cost_model import decode_read_bytes

REPO = Path(__file__).resolve().parents[1]
_HEADER = struct.Struct("<8sIIQQ")  # magic, version, flags, json offset, json bytes


def engine_metadata(path: Path) -> dict[str, Any]:
    """The JSON metadata of an engine file, read from its header (no weights loaded)."""
    with open(path, "rb") as f:
        _, _, _, offset, size = _HEADER.unpack(f.read(_HEADER.size))
        f.seek(offset)
        return json.loads(f.read(size))


# ---- engines -------------------------------------------------------------------------------------
def engine_plan(args) -> dict[str, tuple[str, str | None, str]]:
    """Engine name -> (target shape, draft shape, weights), the iteration format's first (the
    numbers that matter most come first when a lease runs out)."""
    first = [args.iter_weights] if args.iter_weights in args.formats else []
    plan: dict[str, tuple[str, str | None, str]] = {}
    for w in first + [w for w in args.formats if w not in first]:
        plan[f"pair-{w}"] = ("qwen2.5-1.5b", "qwen2.5-0.5b", w)
    if not args.skip_7b:
        for w in args.big_formats:  # the 7B target with the 0.5B draft (its vocabulary narrower)
            plan[f"pair7b-{w}"] = ("qwen2.5-7b", "qwen2.5-0.5b", w)
    if not args.skip_pard:  # the 1.5B target with the 0.5B draft as a PARD parallel draft
        plan[f"pard-{args.iter_weights}"] = ("qwen2.5-1.5b", "qwen2.5-0.5b", args.iter_weights)
    return plan


def make_engines(workdir: Path, args) -> dict[str, Path]:
    from random_engine import SHAPES, write_random_engine

    workdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (target, draft, weights) in engine_plan(args).items():
        path = workdir / f"{name}-s{args.max_seq_len}.engine"
        if not path.exists():
            log(f"writing {path} (random weights, made on the device at load)")
            t0 = time.perf_counter()
            tmp = path.with_suffix(".partial")
            write_random_engine(
                tmp,
                SHAPES[target],
                draft=SHAPES[draft] if draft else None,
                weights=weights,
                max_seq_len=args.max_seq_len,
                max_batch=1,
                draft_len=8,
                data="random",
                pard_token=SHAPES[draft]["vocab_size"] - 1 if name.startswith("pard-") else None,
            )
            tmp.rename(path)  # (an engine cut off by a time limit is never taken for whole)
            log(f"  {path.stat().st_size / 1e3:.0f} KB in {time.perf_counter() - t0:.1f} s")
        out[name] = path
    return out


def kv_read_bytes(cfg: dict, context: int) -> int:
    return 2 * cfg["n_layers"] * cfg["n_kv_heads"] * cfg["head_dim"] * 4 * context


# ---- trt-spec measurements -----------------------------------------------------------------------
def decode_steps(engines: dict[str, Path], bw_gbps: float | None, args, save) -> list[dict]:
    """One-row forward of each model in each format (targets and drafts), against the roofline;
    rows are saved as they come (a time limit keeps what was measured)."""
    T = testing_module(REPO)  # noqa: N806
    rows: list[dict] = []
    plan = engine_plan(args)
    cases = []
    for name, (target, draft, weights) in plan.items():
        if name.startswith("pard-"):  # (the same models as pair-: timed there)
            continue
        cases.append((name, "target", target, weights))
        if name.startswith("pair-") and draft:
            cases.append((name, "draft", draft, weights))
    for eng, role, shape, weights in cases:
        log(f"decode step: {shape} {weights}")
        s = T.Session(str(engines[eng]), args.device)
        meta = engine_metadata(engines[eng])["models"][role]
        cfg = meta["config"]
        ctx = args.context
        pdl = s.set_cuda_pdl(False)  # on by default where the device has it (sm_90+)
        step = s.time_forward(role, 1, 1, ctx, args.iters, True)
        step_nograph = s.time_forward(role, 1, 1, ctx, args.iters, False)
        moved = meta["weight_bytes"] + kv_read_bytes(cfg, ctx)
        roof = moved / (bw_gbps * 1e9) if bw_gbps else None
        read = decode_read_bytes(meta, ctx)["bytes"]  # one embedding row, KV at f16
        roof_read = read / (bw_gbps * 1e9) if bw_gbps else None
        row = {
            "model": shape,
            "weights": weights,
            "context": ctx,
            "weight_bytes": meta["weight_bytes"],
            "bytes_moved": moved,
            "step_ms": step * 1e3,
            "step_no_graph_ms": step_nograph * 1e3,
            "roofline_ms": roof * 1e3 if roof else None,
            "of_roofline": roof / step if roof else None,
            "achieved_gbps": moved / step / 1e9,
            "bytes_read": read,
            "roofline_read_ms": roof_read * 1e3 if roof_read else None,
        }
        if s.set_cuda_pdl(True):  # the matmuls as programmatic dependents (sm_90+), same run
            row["step_pdl_ms"] = s.time_forward(role, 1, 1, ctx, args.iters, True) * 1e3
            row["of_roofline_pdl"] = roof / (row["step_pdl_ms"] / 1e3) if roof else None
            row["of_roofline_read_pdl"] = (
                roof_read / (row["step_pdl_ms"] / 1e3) if roof_read else None
            )
        s.set_cuda_pdl(pdl)  # the engine's default for what follows
        if s.set_cuda_imma_rows(0) > 0:  # earlier grids against one wave, interleaved
            row.update(
                switch_compare(
                    lambda role=role, s=s, ctx=ctx: s.time_forward(role, 1, 1, ctx, args.iters),
                    waves_arms(s),
                )
            )
            row.update(  # attention blocks of 4 warps against 8, interleaved
                switch_compare(
                    lambda role=role, s=s, ctx=ctx: s.time_forward(role, 1, 1, ctx, args.iters),
                    attention_warps_arms(s, one_row=True),
                )
            )
            row.update(  # each layer's attention or qkv projection launched twice in a row
                switch_compare(
                    lambda role=role, s=s, ctx=ctx: s.time_forward(role, 1, 1, ctx, args.iters),
                    repeat_arms(s),
                )
            )
            row["layers"] = cfg["n_layers"]
        if args.persistent and s.set_cuda_persistent(True):  # sm_90+, interleaved
            row.update(
                switch_compare(
                    lambda role=role, s=s, ctx=ctx: s.time_forward(role, 1, 1, ctx, args.iters),
                    persistent_arms(s, args.prefetch),
                )
            )
        if role == "target":  # the engine's own target-only iteration (sampling, read-back)
            row["engine_step_ms"] = engine_iteration(s, 0, args) * 1e3
        rows.append(row)
        save(rows)
        del s
        gc.collect()
    return rows


def engine_iteration(s: Any, k: int, args, graphs: bool = True) -> float:
    """Seconds per iteration of a test Session's scheduler with draft length k (the draft
    model's chain; k = 0: a plain target step), batch 1, greedy."""
    source = "model" if k else "none"
    s.use_graphs = graphs
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, s.vocab_size, args.context)]
    rid = s.submit(prompt, s.max_seq_len - args.context - 1, draft=source, draft_len=k)
    got = 0  # the prefill gives the first token, each iteration at least one more
    for _ in range(args.context + 8):
        got += sum(len(ev.tokens) for ev in s.step() if ev.id == rid)
        if got >= 2:
            break  # one iteration ran: it set the program's sequences (and captured the graph)
    else:
        raise RuntimeError("no decode iteration after the prefill")
    s.time_iterations(source, k, 3)  # warm-up
    sec, n = s.time_iterations(source, k, args.iters)
    s.cancel(rid)
    while s.has_work:
        s.step()
    if n < args.iters // 2:
        raise RuntimeError(f"only {n} iterations fit in max_seq_len")
    return sec


def iterations(engine: Path, args, save) -> list[dict]:
    """The speculative iteration of a pair (the draft model's chain) for K = 1..8, one graph and
    op by op, against its parts each timed alone."""
    T = testing_module(REPO)  # noqa: N806
    s = T.Session(str(engine), args.device)
    ctx = args.context
    draft1 = s.time_forward("draft", 1, 1, ctx, args.iters, True)
    draft0 = s.time_forward("draft", 2, 1, ctx, args.iters, True)
    sp = spp = None  # sessions whose graphs hold persistent forwards (sm_90+), prefetching
    if args.persistent and s.set_cuda_persistent(True):
        s.set_cuda_persistent(False)
        os.environ["TRT_SPEC_CUDA_PERSISTENT"] = "1"  # read when its backend is made
        sp = T.Session(str(engine), args.device)
        if args.prefetch:  # the first budget
            os.environ["TRT_SPEC_CUDA_PREFETCH"] = str(args.prefetch[0])
            spp = T.Session(str(engine), args.device)
            del os.environ["TRT_SPEC_CUDA_PREFETCH"]
        del os.environ["TRT_SPEC_CUDA_PERSISTENT"]
    rows = []
    for k in args.ks:
        log(f"iteration K={k}")
        verify = s.time_forward("target", k + 1, k + 1, ctx, args.iters, True)
        parts = verify + draft0 + (k - 1) * draft1
        it = engine_iteration(s, k, args, graphs=True)
        it_plain = engine_iteration(s, k, args, graphs=False) if args.op_by_op_iterations else None
        rows.append(
            {
                "k": k,
                "iteration_ms": it * 1e3,
                "iteration_persistent_ms": engine_iteration(sp, k, args) * 1e3 if sp else None,
                "iteration_persistent_prefetch_ms": (
                    engine_iteration(spp, k, args) * 1e3 if spp else None
                ),
                "iteration_no_graph_ms": it_plain * 1e3 if it_plain else None,
                "verify_ms": verify * 1e3,
                "draft_step0_ms": draft0 * 1e3,
                "draft_step_ms": draft1 * 1e3,
                "parts_ms": parts * 1e3,
                "graph_overhead": it / parts - 1.0,
                "graph_speedup": it_plain / it if it_plain else None,
            }
        )
        save(rows)
    return rows


# Target forwards of n rows (verify passes: K + 1, B (K + 1)).
ROW_COUNTS = (1, 2, 3, 5, 8, 9, 12, 16)
PREFILL_ROWS, PREFILL_CONTEXTS = 256, (0, 1024, 1792)  # one prefill chunk at these contexts


def forward_rows(engine: Path, target: str, args) -> dict:
    """The target's forward of n rows (a verify pass of n rows of one sequence, in a graph) for
    ROW_COUNTS, per row against one row; and one prefill chunk of PREFILL_ROWS prompt rows op by
    op at PREFILL_CONTEXTS (its attention reads context + rows entries), in prompt tokens/s."""
    T = testing_module(REPO)  # noqa: N806
    s = T.Session(str(engine), args.device)
    ctx = args.context
    s.time_forward("target", 1, 1, ctx, 2, True)  # warm-up (first launches, allocations)
    cuda = s.set_cuda_imma_rows(0) > 0  # a CUDA backend: its switches exist
    rows = []
    for n in ROW_COUNTS:
        ms = s.time_forward("target", n, n, ctx, args.iters, True) * 1e3
        row = {"rows": n, "ms": ms, "vs_one_row": ms / rows[0]["ms"] if rows else 1.0}
        if cuda:  # the same rows on the earlier grids, interleaved with one-wave ones
            row.update(
                switch_compare(
                    lambda n=n: s.time_forward("target", n, n, ctx, args.iters), waves_arms(s)
                )
            )
            row.update(  # and with attention blocks of 4 warps against 8
                switch_compare(
                    lambda n=n: s.time_forward("target", n, n, ctx, args.iters),
                    attention_warps_arms(s),
                )
            )
        if args.persistent and s.set_cuda_persistent(True):  # per operation against persistent
            row.update(
                switch_compare(
                    lambda n=n: s.time_forward("target", n, n, ctx, args.iters),
                    persistent_arms(s, args.prefetch),
                )
            )
        rows.append(row)
    prefill = []
    for c in PREFILL_CONTEXTS:
        if c + PREFILL_ROWS > s.max_seq_len:
            continue
        sec = s.time_forward("target", PREFILL_ROWS, 1, c, 3, False, True)
        item = {"context": c, "ms": sec * 1e3, "tok_s": PREFILL_ROWS / sec}
        if cuda:  # the dp4a 16-row tiles against the tensor-core kernel
            item.update(
                switch_compare(
                    lambda c=c: s.time_forward("target", PREFILL_ROWS, 1, c, 3, False, True),
                    imma_arms(s),
                )
            )
        prefill.append(item)
    s.set_cuda_imma_rows(0)
    return {"model": target, "verify_rows": rows, "prefill_rows": PREFILL_ROWS, "prefill": prefill}


def bandwidth(T, args) -> float | None:  # noqa: N803
    """Device-to-device copy bandwidth in GB/s (None on the CPU smoke run)."""
    return T.cuda_bandwidth_gbps(0, 1 << 30, 20) if args.device == "cuda" else None


# ---- transformers --------------------------------------------------------------------------------
def transformers_rows(args, keep=None) -> list[dict]:
    """transformers' decode step on each shape, eager and / or torch.compile (--hf-modes); keep:
    called with the rows so far after each one (a time limit keeps what was measured)."""
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config
    except Exception as e:
        return [{"error": f"transformers/torch not importable: {e!r}"}]
    if not torch.cuda.is_available():
        return [{"error": "torch has no CUDA device"}]
    from random_engine import SHAPES

    def hf_config(cfg: dict):
        common = dict(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["dim"],
            intermediate_size=cfg["ffn_dim"],
            num_hidden_layers=cfg["n_layers"],
            num_attention_heads=cfg["n_heads"],
            num_key_value_heads=cfg["n_kv_heads"],
            rms_norm_eps=cfg["rms_eps"],
            rope_theta=cfg["rope_theta"],
            tie_word_embeddings=cfg["tied_embeddings"],
            max_position_embeddings=4096,
        )
        return Qwen2Config(**common) if cfg["arch"] == "qwen2" else LlamaConfig(**common)

    names = ["qwen2.5-1.5b", "qwen2.5-0.5b"] + ([] if args.skip_7b else ["qwen2.5-7b"])
    rows = []
    for name in names:
        for compiled in [m == "compile" for m in args.hf_modes.split(",")]:
            row = {
                "model": name,
                "weights": "fp16",
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "torch_compile": compiled,
            }
            try:
                with torch.device("cuda"):
                    model = AutoModelForCausalLM.from_config(
                        hf_config(SHAPES[name]), torch_dtype=torch.float16
                    )
                model.eval()
                # transformers' own compile-on-static-cache off: the compiled row compiles here.
                model.generation_config.disable_compile = True
                if compiled:
                    model.forward = torch.compile(
                        model.forward, mode="reduce-overhead", fullgraph=True
                    )
                ids = torch.randint(0, SHAPES[name]["vocab_size"], (1, args.context), device="cuda")
                n = args.hf_new_tokens

                def run(new: int, model=model, ids=ids) -> float:
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        model.generate(
                            ids,
                            max_new_tokens=new,
                            min_new_tokens=new,
                            do_sample=False,
                            cache_implementation="static",
                            pad_token_id=0,
                        )
                    torch.cuda.synchronize()
                    return time.perf_counter() - t0

                run(n + 1)  # warm-up (and compilation)
                run(n + 1)
                t_full = min(run(n + 1) for _ in range(2))
                t_first = min(run(1) for _ in range(2))
                step = (t_full - t_first) / n
                row.update(step_ms=step * 1e3, decode_tok_s=1.0 / step)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:500]
            rows.append(row)
            model = None
            gc.collect()
            torch.cuda.empty_cache()
            log(f"transformers {name} compile={compiled}: {row.get('step_ms', row.get('error'))}")
            if keep:
                keep(rows)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/trt-spec-gpu-bench", help="engine files")
    ap.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    ap.add_argument("--tag", default=None, help="file name tag (default: the date)")
    ap.add_argument("--context", type=int, default=128, help="positions in the KV cache")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--max-seq-len", type=int, default=2048)
    ap.add_argument("--hist", default=None, help="JSON with accepted_hist entries (CPU bench)")
    ap.add_argument("--alpha", type=float, default=0.7, help="assumed acceptance without --hist")
    ap.add_argument("--hf-new-tokens", type=int, default=64)
    ap.add_argument(
        "--hf-modes", default="eager,compile", help="transformers rows: eager and / or compile"
    )
    ap.add_argument("--formats", default="q4,q8,f16", help="weight formats of the 1.5B / 0.5B pair")
    ap.add_argument("--big-formats", default="q4,f16", help="weight formats of the 7B pair")
    ap.add_argument("--iter-weights", default="q4", help="the pairs' format for the K sweep")
    ap.add_argument("--skip-7b", action="store_true")
    ap.add_argument(
        "--skip-pard",
        action="store_true",
        help="leave out the 1.5B target with the 0.5B draft as a PARD parallel draft",
    )
    ap.add_argument(
        "--ks",
        type=lambda v: [int(k) for k in v.split(",")],
        default=list(range(1, 9)),
        help="draft lengths of the iteration sweep (comma-separated)",
    )
    ap.add_argument(
        "--persistent",
        action="store_true",
        help="also time each forward (steps, verify rows, iterations) as one persistent launch "
        "against its per-operation launches, in the same process (sm_90+)",
    )
    ap.add_argument(
        "--prefetch",
        type=lambda v: [int(b) for b in v.split(",")],
        default=[],
        metavar="BYTES[,BYTES..]",
        help="with --persistent: also time each forward with up to BYTES (each budget given) of "
        "each matmul block's weights prefetched toward L2 ahead of their use "
        "(TRT_SPEC_CUDA_PREFETCH), per operation and persistent",
    )
    ap.add_argument(
        "--op-by-op-iterations",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time each iteration launched op by op (graph overhead read 1.2-4.8%%)",
    )
    ap.add_argument(
        "--device",
        default="cuda",
        help="cuda; cpu runs the same script on the CPU backend (a smoke test: no bandwidth, "
        "no roofline)",
    )
    ap.add_argument("--skip-transformers", action="store_true")
    ap.add_argument(
        "--part",
        choices=["all", "engines", "trt", "transformers"],
        default="all",
        help="engines: only write the engine files; trt / transformers: only those measurements, "
        "merged into the report of the same --tag (to split a run into shorter commands)",
    )
    args = ap.parse_args()
    args.formats = [w for w in args.formats.split(",") if w]
    args.big_formats = [w for w in args.big_formats.split(",") if w]

    from trt_spec import _core

    if args.device == "cuda" and not _core.cuda_available():
        print("bench_gpu: needs a CUDA GPU and a CUDA build of trt-spec", file=sys.stderr)
        return 2
    T = testing_module(REPO)  # noqa: N806
    date = dt.date.today().isoformat()
    out = Path(args.out_dir)
    stem = out / f"gpu_{args.tag or date}"
    if args.part == "engines":
        make_engines(Path(args.workdir), args)
        return 0
    r: dict = {}
    if args.part != "all" and stem.with_suffix(".json").exists():
        r = json.loads(stem.with_suffix(".json").read_text())  # the other part of this run
    r.update(
        date=date,
        commit=git_commit(REPO, paths=["cpp"]) or "unknown",
        host=platform.node(),
        device=dict(T.cuda_device_info(0)) if args.device == "cuda" else {"name": "CPU"},
    )
    r.setdefault("settings", {})[args.part] = vars(args)
    r.setdefault("errors", [])
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every measurement: a time limit keeps what was measured
        stem.with_suffix(".json").write_text(json.dumps(r, indent=1, default=str))
        stem.with_suffix(".md").write_text(markdown(r))

    def keep(key: str, name: str | None = None):  # a setter of r[key] (or r[key][name]) that saves
        def put(rows: list[dict]) -> None:
            if name is None:
                r[key] = rows
            else:
                r[key][name] = rows
            save()

        return put

    if args.part in ("all", "trt"):
        r["bandwidth_gbps"] = bandwidth(T, args)
        log(f"{r['device'].get('name')}: copy bandwidth {r['bandwidth_gbps']} GB/s")
        engines = make_engines(Path(args.workdir), args)
        r["decode_steps"], r["iterations"], r["projections"] = [], {}, {}
        r.pop("projection", None)

        try:
            decode_steps(engines, r["bandwidth_gbps"], args, keep("decode_steps"))
        except Exception:
            r["errors"].append(f"decode_steps: {traceback.format_exc()[-1500:]}")
            log(r["errors"][-1])
        w = args.iter_weights
        for name in (f"pair-{w}", f"pair7b-{w}", f"pard-{w}"):
            if name not in engines:
                continue
            try:
                rows = iterations(engines[name], args, keep("iterations", name))
            except Exception:
                r["errors"].append(f"iterations {name}: {traceback.format_exc()[-1500:]}")
                log(r["errors"][-1])
                continue
            if name.startswith("pard-"):  # (beside the chain; no acceptance histogram of its own)
                save()
                continue
            target, _, weights = engine_plan(args)[name]
            step = next(
                (x for x in r["decode_steps"] if x["model"] == target and x["weights"] == weights),
                None,
            )
            if step:
                ms = step.get("engine_step_ms", step["step_ms"])
                r["projections"][name] = projection(rows, ms, args)
            save()
            try:
                r.setdefault("forward_rows", {})[name] = forward_rows(engines[name], target, args)
            except Exception:
                r["errors"].append(f"forward_rows {name}: {traceback.format_exc()[-1500:]}")
                log(r["errors"][-1])
            save()
        r["bandwidth_gbps_end"] = bandwidth(T, args)
    if args.part in ("all", "transformers") and not args.skip_transformers:
        r["transformers"] = transformers_rows(args, keep("transformers"))

    save()
    md = markdown(r)
    print(md)
    log(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
