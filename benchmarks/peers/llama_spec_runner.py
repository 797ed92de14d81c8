"""llama.cpp peer of ``trt-spec bench``: speculative and target-only decoding with llama.cpp's CLIs.

A benchmark peer only, never a dependency of the package. The binaries come from
``benchmarks/peers/build_llama_cpp.sh`` (step 3 of that script builds ``llama-speculative-simple``
and ``llama-completion`` into ``$TRT_SPEC_CACHE/peers/llama.cpp-build/bin``; set
``LLAMA_CPP_BIN_DIR`` to use another build). Standard library only.

* Speculative: ``llama-speculative-simple -m TARGET.gguf -md DRAFT.gguf --spec-type draft-simple
  --spec-draft-n-max K --spec-draft-n-min 0 --draft-p-min 0 --temp 0 --ignore-eos -n N
  -t T -td T -c CTX -p PROMPT --no-escape``: greedy, exactly K draft tokens per iteration
  (``--draft-p-min 0`` never cuts a draft short), EOS ignored as in ``trt-spec bench``. Its
  printed statistics are parsed: ``decoded N tokens in S seconds, speed: X t/s`` (the wall
  time from after the prompt to the end, so it includes the first new token and all
  sampling), ``n_drafted``, ``n_accept``. It may generate a few tokens more than ``-n`` (it
  stops after the iteration that passes it).
* Prompt lookup: ``llama-speculative-simple --spec-type ngram-simple --spec-ngram-simple-size-n 3
  --spec-ngram-simple-size-m K`` (no draft model), parsed the same way.
* Target-only: ``llama-completion`` (same build, same target) with the same settings; the rate
  is llama.cpp's own ``eval time = X ms / N runs`` counter (single-token evaluations only).

Usage on its own: ``python benchmarks/peers/llama_spec_runner.py --target T.gguf --draft
D.gguf --prompt "def fib(n):" --n 128 --draft-len 4 --threads 2`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("TRT_SPEC_CACHE", Path.home() / ".cache" / "trt-spec"))
DEFAULT_BIN_DIR = CACHE / "peers" / "llama.cpp-build" / "bin"
SPEC_BIN = "llama-speculative-simple"
COMPLETION_BIN = "llama-completion"
BUILD_HINT = "build it with: bash benchmarks/peers/build_llama_cpp.sh"
# Lookup key and draft lengths: the peer's fixed-K runs use LOOKUP_NGRAM (short keys match more
# often in an edit); its `auto` run uses llama.cpp's own ngram-simple defaults (n=12, m=48).
LOOKUP_NGRAM = 3
LOOKUP_DEFAULTS = (12, 48)

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_DECODED = re.compile(rf"decoded\s+(\d+) tokens in\s+{_NUM} seconds, speed:\s+{_NUM} t/s")
_ENCODED = re.compile(rf"encoded\s+(\d+) tokens in\s+{_NUM} seconds")
_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
_ACCEPT = re.compile(r"n_accept\s*=\s*(\d+)")
_EVAL = re.compile(rf"(?<!prompt )eval time =\s*{_NUM} ms /\s*(\d+) runs")
_PROMPT_EVAL = re.compile(rf"prompt eval time =\s*{_NUM} ms /\s*(\d+) tokens")


def bin_dir() -> Path:
    return Path(os.environ.get("LLAMA_CPP_BIN_DIR", DEFAULT_BIN_DIR)).expanduser()


def find_binary(name: str) -> Path:
    path = bin_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise RuntimeError(f"llama.cpp binary {path} not found; {BUILD_HINT}")
    return path


def version() -> str:
    """The build's version, e.g. ``0.5.0-dev (build 1, commit 0c1e570)``."""
    try:
        proc = subprocess.run(
            [str(find_binary(SPEC_BIN)), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return "unknown"
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "version" in ln]
    return lines[0].strip().removeprefix("version: ") if lines else "unknown"


def _run(cmd: list[str], threads: int, timeout: float | None) -> tuple[str, str, float]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{Path(cmd[0]).name} failed (rc={proc.returncode}): {' | '.join(tail)}")
    return proc.stdout, proc.stderr, wall


def _common_args(prompt: str, n_new: int, threads: int, ctx: int, seed: int) -> list[str]:
    return [
        "-p",
        prompt,
        "--no-escape",  # the prompt verbatim: code holds backslash sequences such as "\\n"
        "-n",
        str(n_new),
        "--temp",
        "0",
        "--ignore-eos",
        "-s",
        str(seed),
        "-t",
        str(threads),
        "-c",
        str(ctx),
    ]


def _run_spec(cmd: list[str], draft_len: int, threads: int, timeout: float | None) -> dict:
    """Runs ``llama-speculative-simple`` and parses its statistics (any ``--spec-type``)."""
    _, err, wall = _run(cmd, threads, timeout)
    dec, enc = _DECODED.search(err), _ENCODED.search(err)
    drafted, accepted = _DRAFTED.search(err), _ACCEPT.search(err)
    if not (dec and drafted and accepted):
        raise RuntimeError(f"{SPEC_BIN}: statistics not found in its output: {err[-400:]!r}")
    n_drafted, n_accept = int(drafted.group(1)), int(accepted.group(1))
    decoded, decode_s = int(dec.group(1)), float(dec.group(2))
    return {
        "draft_len": draft_len,
        "new_tokens": decoded,
        "decode_tokens": decoded,
        "decode_s": decode_s,
        "decode_tok_s": decoded / decode_s if decode_s > 0 else 0.0,
        "prompt_tokens": int(enc.group(1)) if enc else None,
        "prompt_s": float(enc.group(2)) if enc else None,
        "drafted": n_drafted,
        "accepted": n_accept,
        "acceptance_rate": n_accept / n_drafted if n_drafted else 0.0,
        "wall_s": wall,
    }


def run_speculative(
    target: str | Path,
    draft: str | Path,
    prompt: str,
    n_new: int,
    draft_len: int,
    *,
    threads: int,
    ctx: int = 4096,
    seed: int = 0,
    timeout: float | None = 1800,
) -> dict[str, Any]:
    """One greedy generation with ``llama-speculative-simple``, K = ``draft_len`` (>= 1)."""
    if draft_len < 1:
        raise ValueError("llama-speculative-simple needs a draft length >= 1")
    cmd = [
        str(find_binary(SPEC_BIN)),
        "-m",
        str(target),
        "-md",
        str(draft),
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        str(draft_len),
        "--spec-draft-n-min",
        "0",
        "--draft-p-min",
        "0",
        "-td",
        str(threads),
        *_common_args(prompt, n_new, threads, ctx, seed),
    ]
    return _run_spec(cmd, draft_len, threads, timeout)


def run_lookup(
    target: str | Path,
    prompt: str,
    n_new: int,
    draft_len: int,
    *,
    threads: int,
    ngram: int = LOOKUP_NGRAM,
    ctx: int = 4096,
    seed: int = 0,
    timeout: float | None = 1800,
) -> dict[str, Any]:
    """One greedy generation with llama.cpp's prompt lookup (``--spec-type ngram-simple``).

    The last ``ngram`` tokens are searched in the history (prompt and output); the
    ``draft_len`` tokens after the most recent earlier match are the draft. llama.cpp drafts
    nothing when fewer than ``ngram`` tokens follow a match, so ``draft_len >= ngram``.
    """
    if draft_len < ngram:
        raise ValueError(f"ngram-simple needs draft_len >= ngram ({draft_len} < {ngram})")
    cmd = [
        str(find_binary(SPEC_BIN)),
        "-m",
        str(target),
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        str(ngram),
        "--spec-ngram-simple-size-m",
        str(draft_len),
        *_common_args(prompt, n_new, threads, ctx, seed),
    ]
    return _run_spec(cmd, draft_len, threads, timeout)


def run_target_only(
    target: str | Path,
    prompt: str,
    n_new: int,
    *,
    threads: int,
    ctx: int = 4096,
    seed: int = 0,
    timeout: float | None = 1800,
) -> dict[str, Any]:
    """One greedy generation of the target alone with ``llama-completion``."""
    cmd = [
        str(find_binary(COMPLETION_BIN)),
        "-m",
        str(target),
        "-no-cnv",
        "--no-display-prompt",
        "--simple-io",
        *_common_args(prompt, n_new, threads, ctx, seed),
    ]
    _, err, wall = _run(cmd, threads, timeout)
    ev, pe = _EVAL.search(err), _PROMPT_EVAL.search(err)
    if not ev:
        raise RuntimeError(f"{COMPLETION_BIN}: 'eval time' not found in its output: {err[-400:]!r}")
    eval_ms, runs = float(ev.group(1)), int(ev.group(2))
    return {
        "draft_len": 0,
        "new_tokens": runs + 1,
        "decode_tokens": runs,
        "decode_s": eval_ms / 1e3,
        "decode_tok_s": runs / (eval_ms / 1e3) if eval_ms > 0 else 0.0,
        "prompt_tokens": int(pe.group(2)) if pe else None,
        "prompt_s": float(pe.group(1)) / 1e3 if pe else None,
        "drafted": 0,
        "accepted": 0,
        "acceptance_rate": 0.0,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--target", required=True, help="target GGUF")
    ap.add_argument("--draft", help="draft GGUF (omit with --draft-len 0)")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--n", type=int, default=128, help="new tokens")
    ap.add_argument("--draft-len", type=int, default=4, help="K; 0 = target-only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args(argv)
    if args.draft_len == 0:
        out = run_target_only(args.target, args.prompt, args.n, threads=args.threads, ctx=args.ctx)
    else:
        if not args.draft:
            ap.error("--draft is needed for --draft-len >= 1")
        out = run_speculative(
            args.target,
            args.draft,
            args.prompt,
            args.n,
            args.draft_len,
            threads=args.threads,
            ctx=args.ctx,
        )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
