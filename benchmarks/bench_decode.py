"""Decode-throughput benchmark: trt-spec engines vs llama.cpp vs transformers (CPU, greedy).

Measures DECODE tokens/s -- the generation after the prompt, prompt processing excluded -- of
the target model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF) on a few HumanEval prompts, greedy,
``--n-new`` new tokens per prompt, with the same thread count for every runner:

* llama.cpp: ``llama_cpp.Llama`` from the peer venv built by ``benchmarks/peers/
  build_llama_cpp.sh``, run as a subprocess (the script ``benchmarks/peers/
  llama_cpp_runner.py`` under the peer venv's Python) so this environment is untouched. Q4_K_M
  weights as stored in the GGUF.
* transformers: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` (weights
  dequantized to fp32), ``generate(do_sample=False)`` with a timing streamer.
* trt-spec: each ``--engine PATH`` via ``trt_spec.Engine(path).generate(..., draft="none")``
  (the target alone: no draft model, no prompt lookup); its own ``stats.decode_tokens_per_s``
  is reported.

For llama.cpp and transformers the decode rate is ``(n_new - 1) / (t_last - t_first)``, where
``t_first`` is when the first new token is available (prefill + first sample) and ``t_last``
when the last one is; EOS is ignored so every prompt yields exactly ``n_new`` tokens. Each runner
does one short warm-up generation first.

Writes ``benchmarks/results/decode_<date>.md`` and ``.json`` (unless ``--no-save``) and prints
the markdown. This is a script, not a test: ``python benchmarks/bench_decode.py --help``.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from trt_spec.bench.common import cpu_info, git_commit, loadavg, version

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("TRT_SPEC_CACHE", Path.home() / ".cache" / "trt-spec"))
DEFAULT_MODEL = CACHE / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PEER_PYTHON = CACHE / "peers" / "llama-venv" / "bin" / "python"
PEER_STAMP = CACHE / "peers" / "llama_cpp.stamp"
RESULTS = REPO / "benchmarks" / "results"

# Used only when trt_spec.models.humaneval_prompts is unavailable (first three HumanEval tasks).
FALLBACK_PROMPTS: list[dict[str, str]] = [
    {
        "task_id": "HumanEval/0",
        "prompt": (
            "from typing import List\n\n\n"
            "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
            '    """ Check if in given list of numbers, are any two numbers closer to each '
            "other than\n    given threshold.\n"
            "    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
            "    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n"
            '    """\n'
        ),
    },
    {
        "task_id": "HumanEval/1",
        "prompt": (
            "from typing import List\n\n\n"
            "def separate_paren_groups(paren_string: str) -> List[str]:\n"
            '    """ Input to this function is a string containing multiple groups of nested '
            "parentheses. Your goal is to\n"
            "    separate those group into separate strings and return the list of those.\n"
            "    Separate groups are balanced (each open brace is properly closed) and not "
            "nested within each other\n"
            "    Ignore any spaces in the input string.\n"
            "    >>> separate_paren_groups('( ) (( )) (( )( ))')\n"
            "    ['()', '(())', '(()())']\n"
            '    """\n'
        ),
    },
    {
        "task_id": "HumanEval/2",
        "prompt": (
            "\n\ndef truncate_number(number: float) -> float:\n"
            '    """ Given a positive floating point number, it can be decomposed into\n'
            "    and integer part (largest integer smaller than given number) and decimals\n"
            "    (leftover part always smaller than 1).\n\n"
            "    Return the decimal part of the number.\n"
            "    >>> truncate_number(3.5)\n    0.5\n"
            '    """\n'
        ),
    },
]


# --------------------------------------------------------------------------- llama.cpp build stamp


def _peer_stamp() -> dict[str, str]:
    info: dict[str, str] = {}
    if PEER_STAMP.is_file():
        for line in PEER_STAMP.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                info[key] = value
    return info


# --------------------------------------------------------------------------- prompts


def load_prompts(n: int) -> tuple[list[dict[str, str]], str]:
    try:
        from trt_spec import models

        rows = models.humaneval_prompts(n)
        if rows:
            return rows, "trt_spec.models.humaneval_prompts"
    except Exception as exc:  # noqa: BLE001 - network/cache problems must not stop the bench
        print(f"note: humaneval_prompts unavailable ({exc}); using built-in prompts")
    return FALLBACK_PROMPTS[:n], "built-in fallback (HumanEval/0..2)"


# --------------------------------------------------------------------------- runners


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median decode rate; all repeats' rates are kept alongside."""
    ordered = sorted(runs, key=lambda r: r["decode_tok_s"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["repeat_decode_tok_s"] = [r["decode_tok_s"] for r in runs]
    return chosen


def _summary_from_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["decode_tok_s"] for r in runs]
    ttfts = [r["ttft_s"] for r in runs if r.get("ttft_s") is not None]
    best = [max(r.get("repeat_decode_tok_s") or [r["decode_tok_s"]]) for r in runs]
    return {
        "decode_tok_s_mean": statistics.fmean(rates),
        "decode_tok_s_best_mean": statistics.fmean(best),
        "decode_tok_s_min": min(rates),
        "decode_tok_s_max": max(rates),
        "ttft_s_mean": statistics.fmean(ttfts) if ttfts else None,
        "new_tokens": [r["new_tokens"] for r in runs],
    }


def _llama_cpp_runner() -> Path:
    """The runner script, run by the peer venv's Python (which has no trt-spec)."""
    return Path(__file__).resolve().parent / "peers" / "llama_cpp_runner.py"


def run_llama_cpp(args: argparse.Namespace, prompts: list[str]) -> dict[str, Any]:
    python = Path(args.llama_python)
    if not python.is_file():
        raise RuntimeError(f"{python} missing; run benchmarks/peers/build_llama_cpp.sh first")
    runner = _llama_cpp_runner()
    cfg = {
        "model": str(args.model),
        "prompts": prompts,
        "n_new": args.n_new,
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "warmup_tokens": args.warmup_tokens,
        "repeats": args.repeats,
    }
    with tempfile.TemporaryDirectory(prefix="bench_decode_") as tmp:
        cfg_path = Path(tmp) / "config.json"
        out_path = Path(tmp) / "out.json"
        cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        proc = subprocess.run(
            [str(python), str(runner), "--config", str(cfg_path), "--out", str(out_path)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not out_path.is_file():
            tail = (proc.stderr or proc.stdout)[-3000:]
            raise RuntimeError(f"llama.cpp runner failed (rc={proc.returncode}):\n{tail}")
        result: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    modules = result.get("cpu_backend_modules") or []
    variant = ", ".join(Path(m).name for m in modules) or "static CPU backend"
    feats = result.get("system_info", "").strip()
    result["isa"] = f"{variant}; {feats}"
    result["weight_format"] = "Q4_K_M (GGUF)"
    result.update(_summary_from_runs(result["runs"]))
    return result


def run_transformers(args: argparse.Namespace, prompts: list[str]) -> dict[str, Any]:
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF de-quantization progress bar
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.streamers import BaseStreamer
    from transformers.utils import logging as hf_logging

    class _Clock(BaseStreamer):
        """Records when each generated token becomes available (skips the prompt put())."""

        def __init__(self) -> None:
            self.stamps: list[float] = []
            self._prompt_seen = False

        def put(self, value: Any) -> None:
            if not self._prompt_seen:
                self._prompt_seen = True
                return
            self.stamps.append(time.perf_counter())

        def end(self) -> None:
            pass

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    model_dir, gguf_name = str(args.model.parent), args.model.name
    t_load = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=gguf_name, dtype=torch.float32
    )
    model.eval()
    load_s = time.perf_counter() - t_load
    gen_cfg = model.generation_config
    gen_cfg.eos_token_id = None  # ignore EOS: always produce n_new tokens (same as llama.cpp)
    gen_cfg.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        if hasattr(gen_cfg, key):
            setattr(gen_cfg, key, None)
    gen_cfg.do_sample = False

    def one(prompt: str, n_new: int) -> dict[str, Any]:
        enc = tok(prompt, return_tensors="pt")
        cfg = copy.deepcopy(gen_cfg)
        cfg.max_new_tokens = n_new
        clock = _Clock()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**enc, generation_config=cfg, streamer=clock)
        new_ids = out[0, enc["input_ids"].shape[1] :].tolist()
        stamps = clock.stamps
        decode_s = stamps[-1] - stamps[0]
        return {
            "prompt_tokens": int(enc["input_ids"].shape[1]),
            "new_tokens": len(new_ids),
            "ttft_s": stamps[0] - t0,
            "decode_s": decode_s,
            "decode_tok_s": (len(new_ids) - 1) / decode_s if decode_s > 0 else float("nan"),
            "token_ids": new_ids,
            "text": tok.decode(new_ids),
        }

    if args.warmup_tokens > 0:
        one(prompts[0], args.warmup_tokens)
    runs = [_median_run([one(p, args.n_new) for _ in range(args.repeats)]) for p in prompts]
    result: dict[str, Any] = {
        "runner": "transformers",
        "weight_format": "fp32 (dequantized from Q4_K_M)",
        "isa": f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}",
        "load_s": load_s,
        "torch_threads": torch.get_num_threads(),
        "runs": runs,
    }
    result.update(_summary_from_runs(runs))
    return result


def run_trt_spec(args: argparse.Namespace, prompts: list[str]) -> list[dict[str, Any]]:
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from trt_spec import Engine

    # Same semantics as the peers: the target alone (no draft source), greedy, EOS ignored.
    gen_kw: dict[str, Any] = {"temperature": 0.0, "ignore_eos": True, "draft": "none"}
    results: list[dict[str, Any]] = []
    for path in args.engine:
        engine = Engine(str(path), n_threads=args.threads)
        if args.warmup_tokens > 0:
            engine.generate(prompts[0], max_new_tokens=args.warmup_tokens, **gen_kw)
        runs: list[dict[str, Any]] = []
        for prompt in prompts:
            reps: list[dict[str, Any]] = []
            for _ in range(args.repeats):
                r = engine.generate(prompt, max_new_tokens=args.n_new, **gen_kw)
                ids = [int(t) for t in r.token_ids]
                reps.append(
                    {
                        "new_tokens": len(ids),
                        "ttft_s": float(r.stats.ttft_s),
                        "decode_tok_s": float(r.stats.decode_tokens_per_s),
                        "token_ids": ids,
                    }
                )
            runs.append(_median_run(reps))
        result: dict[str, Any] = {
            "runner": f"trt-spec ({path.name})",
            "engine": str(path),
            "weight_format": engine.weights,
            "isa": f"backend {engine.backend}",
            "runs": runs,
        }
        result.update(_summary_from_runs(runs))
        results.append(result)
        del engine
        gc.collect()
    return results


# --------------------------------------------------------------------------- report


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def render_markdown(report: dict[str, Any]) -> str:
    env, settings = report["environment"], report["settings"]
    cpu = env["cpu"]
    lines = [
        f"# Decode throughput ({report['date']})",
        "",
        f"- device: {cpu['model']} ({cpu['logical_cpus']} logical CPUs, "
        f"{settings['threads']} threads used), ISA flags: {' '.join(cpu['isa_flags'])}",
        f"- git commit: {env['git_commit']}",
        f"- settings: {settings['n_new']} new tokens, greedy, EOS ignored, "
        f"{len(settings['prompts'])} prompts ({', '.join(settings['prompts'])}; source: "
        f"{settings['prompt_source']}), threads {settings['threads']}, "
        f"n_ctx {settings['n_ctx']}, warm-up {settings['warmup_tokens']} tokens, "
        f"{settings.get('repeats', 1)} run(s) per prompt (median kept)",
        f"- model: {settings['model']}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v),
    ]
    load = env.get("loadavg_1min")
    if load:
        lines.append(
            f"- 1-min load average: {load['start']:.2f} at start, {load['end']:.2f} at end "
            "(a shared machine: other processes compete for the same cores)"
        )
    for row in report["runners"]:
        lines.append(f"- ISA in use, {row['runner']}: {row.get('isa', 'n/a')}")
    lines += [
        "",
        "decode tok/s = (new tokens - 1) / time from first to last new token "
        "(prompt processing excluded); trt-spec rows report Engine stats.decode_tokens_per_s.",
        "",
        "Columns: mean over prompts of the median run per prompt; min / max over prompts; "
        "mean over prompts of the best run per prompt (least disturbed by other processes).",
        "",
        "| runner | weight format | decode tok/s (mean) | min / max | best-run mean "
        "| TTFT mean (s) | ratio to llama.cpp |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    base = report.get("baseline_tok_s")
    for row in report["runners"]:
        ratio = row["decode_tok_s_mean"] / base if base else None
        lines.append(
            f"| {row['runner']} | {row['weight_format']} | {row['decode_tok_s_mean']:.2f} "
            f"| {row['decode_tok_s_min']:.2f} / {row['decode_tok_s_max']:.2f} "
            f"| {_fmt(row.get('decode_tok_s_best_mean'))} "
            f"| {_fmt(row.get('ttft_s_mean'), '.3f')} | {_fmt(ratio, '.3f')} |"
        )
    if report["runners"]:
        ids = settings["prompts"]
        lines += [
            "",
            "Per prompt decode tok/s (median run; all runs in brackets):",
            "",
            "| runner | " + " | ".join(ids) + " |",
            "|---|" + "---:|" * len(ids),
        ]
        for row in report["runners"]:
            vals = " | ".join(
                f"{r['decode_tok_s']:.2f}"
                + (
                    f" ({', '.join(f'{v:.2f}' for v in r['repeat_decode_tok_s'])})"
                    if len(r.get("repeat_decode_tok_s") or []) > 1
                    else ""
                )
                for r in row["runs"]
            )
            lines.append(f"| {row['runner']} | {vals} |")
    extra = [r for r in report["runners"] if r["runner"] == "llama.cpp" and r.get("runs")]
    if extra:
        eo = [r.get("decode_eval_only_tok_s") for r in extra[0]["runs"]]
        if all(v is not None for v in eo):
            lines += [
                "",
                "llama.cpp perf counters (llama_decode time only, no sampling/Python): "
                f"{statistics.fmean(eo):.2f} tok/s mean.",
            ]
    if report.get("agreement"):
        lines += ["", "Greedy agreement (common token prefix of the new tokens):"]
        for name, vals in report["agreement"].items():
            lines.append(f"- {name}: {vals}")
    if report.get("notes"):
        lines += ["", "Notes:"] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def _out_stem(out_dir: Path, date: str) -> Path:
    stem = out_dir / f"decode_{date}"
    k = 2
    while stem.with_suffix(".md").exists() or stem.with_suffix(".json").exists():
        stem = out_dir / f"decode_{date}-{k}"
        k += 1
    return stem


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Decode tokens/s of trt-spec vs llama.cpp vs transformers (CPU, greedy)."
    )
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="target GGUF file")
    ap.add_argument("--n-new", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--prompts", type=int, default=3, help="number of HumanEval prompts")
    ap.add_argument("--threads", type=int, default=2, help="threads for every runner")
    ap.add_argument("--n-ctx", type=int, default=1024, help="llama.cpp context size")
    ap.add_argument("--warmup-tokens", type=int, default=8, help="warm-up generation length")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per prompt; the median-rate run counts (steadier on a shared machine)",
    )
    ap.add_argument(
        "--engine", type=Path, action="append", default=[], help="trt-spec engine (repeatable)"
    )
    ap.add_argument(
        "--runners",
        default="llama.cpp,transformers,trt-spec",
        help="comma-separated subset of llama.cpp,transformers,trt-spec",
    )
    ap.add_argument("--llama-python", default=str(PEER_PYTHON), help="peer venv python")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--no-save", action="store_true", help="print only, write no files")
    args = ap.parse_args(argv)
    if args.n_new < 2:
        ap.error("--n-new must be >= 2")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if not args.model.is_file():
        ap.error(f"model not found: {args.model}")
    wanted = {r.strip() for r in args.runners.split(",") if r.strip()}

    load_start = loadavg()
    rows, source = load_prompts(args.prompts)
    prompts = [r["prompt"] for r in rows]
    now = dt.datetime.now()
    notes: list[str] = []
    runners: list[dict[str, Any]] = []

    if "llama.cpp" in wanted:
        print("running llama.cpp ...", flush=True)
        try:
            runners.append(run_llama_cpp(args, prompts))
        except Exception as exc:  # noqa: BLE001 - report and go on with the other runners
            notes.append(f"llama.cpp skipped: {exc}")
    if "transformers" in wanted:
        print("running transformers ...", flush=True)
        try:
            runners.append(run_transformers(args, prompts))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            notes.append(f"transformers skipped: {type(exc).__name__}: {exc}")
    if "trt-spec" in wanted:
        if not args.engine:
            notes.append("trt-spec skipped: no --engine given")
        else:
            print("running trt-spec ...", flush=True)
            try:
                runners.extend(run_trt_spec(args, prompts))
            except Exception as exc:  # noqa: BLE001 - report and keep the peers' results
                traceback.print_exc()
                notes.append(f"trt-spec skipped: {type(exc).__name__}: {exc}")

    for row in runners:
        short = [n for n in row["new_tokens"] if n != args.n_new]
        if short:
            notes.append(f"{row['runner']}: generated {row['new_tokens']} tokens, not {args.n_new}")

    base = next((r["decode_tok_s_mean"] for r in runners if r["runner"] == "llama.cpp"), None)
    agreement: dict[str, list[int]] = {}
    ref = next((r for r in runners if r["runner"] == "llama.cpp"), None)
    if ref is not None:
        for row in runners:
            if row is ref:
                continue
            agreement[f"{row['runner']} vs llama.cpp"] = [
                _common_prefix(a["token_ids"], b["token_ids"])
                for a, b in zip(row["runs"], ref["runs"], strict=False)
            ]

    stamp = _peer_stamp()
    versions = {
        "python": platform.python_version(),
        "llama-cpp-python": next(
            (r.get("llama_cpp_python") for r in runners if r["runner"] == "llama.cpp"), None
        )
        or stamp.get("version"),
        "llama.cpp": stamp.get("llama_cpp_commit"),
        "llama.cpp build": stamp.get("mode"),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "gguf": version("gguf"),
        "numpy": version("numpy"),
        "trt-spec": version("trt-spec"),
    }
    report: dict[str, Any] = {
        "date": now.isoformat(timespec="seconds"),
        "environment": {
            "cpu": cpu_info(),
            "git_commit": git_commit(REPO) or "uncommitted",
            "versions": versions,
            "platform": platform.platform(),
            "loadavg_1min": (
                {"start": load_start, "end": loadavg()} if load_start is not None else None
            ),
        },
        "settings": {
            "model": str(args.model),
            "n_new": args.n_new,
            "threads": args.threads,
            "n_ctx": args.n_ctx,
            "warmup_tokens": args.warmup_tokens,
            "repeats": args.repeats,
            "prompts": [r.get("task_id", f"prompt{i}") for i, r in enumerate(rows)],
            "prompt_source": source,
        },
        "baseline_tok_s": base,
        "runners": runners,
        "agreement": agreement,
        "notes": notes,
    }
    md = render_markdown(report)
    print(md)
    if not args.no_save:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        stem = _out_stem(args.out_dir, now.strftime("%Y-%m-%d"))
        stem.with_suffix(".md").write_text(md, encoding="utf-8")
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(f"wrote {stem}.md and {stem}.json")
    return 0 if runners else 1


if __name__ == "__main__":
    sys.exit(main())
