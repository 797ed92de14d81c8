"""llama.cpp side of benchmarks/bench_decode.py: greedy decode timing via llama_cpp.Llama.

Runs as a script inside the peer venv built by benchmarks/peers/build_llama_cpp.sh (its python
imports the from-source llama-cpp-python), so the main environment is never touched:
bench_decode.py starts ``PEER_PYTHON <this file> --config C --out O``. Only the standard
library and llama_cpp are imported; no torch, nothing of trt-spec.

Input: a JSON file (``--config``) with ``model``, ``prompts`` (list of str), ``n_new``,
``threads``, ``n_ctx``, ``warmup_tokens`` and ``repeats`` (each prompt is run that many times and
the run with the median decode rate is kept). Output: a JSON file (``--out``) with one entry per
prompt and the library / ISA details.

Timing: ``Llama.generate`` yields one greedily sampled token per step (it never stops by itself,
so EOS is ignored and every prompt yields exactly ``n_new`` tokens). ``t_first`` is taken after
the first token arrives (prompt processing + first sample), ``t_last`` after the last one; the
decode rate is ``(n_new - 1) / (t_last - t_first)``, i.e. the generation after the prompt,
excluding prompt processing, including per-token sampling overhead. llama.cpp's own perf
counters (pure ``llama_decode`` time of the single-token evals) are reported alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import llama_cpp


def _loaded_cpu_modules() -> list[str]:
    """ggml CPU backend shared objects mapped into this process (shows the chosen variant)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            for line in f:
                m = re.search(r"(/\S*libggml-cpu\S*\.so\S*)", line)
                if m:
                    found.add(m.group(1))
    except OSError:
        pass
    return sorted(found)


def _perf(llm: llama_cpp.Llama) -> dict[str, float]:
    data = llama_cpp.llama_perf_context(llm.ctx)
    return {
        "t_p_eval_ms": float(data.t_p_eval_ms),
        "n_p_eval": float(data.n_p_eval),
        "t_eval_ms": float(data.t_eval_ms),
        "n_eval": float(data.n_eval),
    }


def _run_one(llm: llama_cpp.Llama, prompt: str, n_new: int) -> dict[str, Any]:
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
    if len(tokens) + n_new > llm.n_ctx():
        raise ValueError(f"prompt ({len(tokens)} tokens) + {n_new} new tokens exceed n_ctx")
    llm.reset()
    llama_cpp.llama_perf_context_reset(llm.ctx)
    out: list[int] = []
    stamps: list[float] = []
    t0 = time.perf_counter()
    gen = llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    for tok in gen:
        stamps.append(time.perf_counter())
        out.append(int(tok))
        if len(out) >= n_new:
            break
    gen.close()
    perf = _perf(llm)
    decode_s = stamps[-1] - stamps[0]
    n_dec = len(out) - 1
    return {
        "prompt_tokens": len(tokens),
        "new_tokens": len(out),
        "ttft_s": stamps[0] - t0,
        "decode_s": decode_s,
        "decode_tok_s": n_dec / decode_s if decode_s > 0 else float("nan"),
        "decode_eval_only_tok_s": (
            perf["n_eval"] / (perf["t_eval_ms"] / 1000.0) if perf["t_eval_ms"] > 0 else None
        ),
        "perf": perf,
        "token_ids": out,
        "text": llm.detokenize(out).decode("utf-8", errors="replace"),
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median decode rate; all repeats' rates are kept alongside."""
    ordered = sorted(runs, key=lambda r: r["decode_tok_s"])
    best = dict(ordered[len(ordered) // 2])
    best["repeat_decode_tok_s"] = [r["decode_tok_s"] for r in runs]
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = json.loads(args.config.read_text(encoding="utf-8"))

    threads = int(cfg["threads"])
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    t_load = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=cfg["model"],
        n_ctx=int(cfg["n_ctx"]),
        n_threads=threads,
        n_threads_batch=threads,
        n_gpu_layers=0,
        seed=0,
        verbose=bool(cfg.get("verbose", False)),
    )
    load_s = time.perf_counter() - t_load

    warm = int(cfg.get("warmup_tokens", 0))
    if warm > 0:
        _run_one(llm, cfg["prompts"][0], warm)
    repeats = max(1, int(cfg.get("repeats", 1)))
    runs = [
        _median_run([_run_one(llm, p, int(cfg["n_new"])) for _ in range(repeats)])
        for p in cfg["prompts"]
    ]

    result = {
        "runner": "llama.cpp",
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", errors="replace"),
        "cpu_backend_modules": _loaded_cpu_modules(),
        "python": sys.version.split()[0],
        "load_s": load_s,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
