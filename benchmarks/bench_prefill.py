"""Prefill benchmark: time to first token and prefill tokens/s at long prompts, against llama.cpp.

For each prompt length N (default 512, 2048, 4096), in one run on the same CPU and threads:
  - trt-spec, target alone: ``generate(prompt, max_new_tokens=1, draft="none")``; TTFT is the
    target's prefill of N rows (chunks of the engine's ``prefill_chunk``) and the first token;
  - trt-spec, the pair: ``draft="model"``, 2 new tokens, the draft reading the whole prompt
    (``draft_window=0``, the default; a window reads only its end: bench_draft_window.py); the
    draft reads each prompt chunk after the target's, the last one after the first token (which
    does not wait for it): that last read is the next step's time less its iteration (stats:
    total - ttft - draft - verify - catch-up), and the pair's rate is N / (its TTFT + that
    read);
  - llama.cpp: ``llama-bench -p N -n 0`` on the target GGUF and on the draft GGUF (the pair:
    both prompt passes added).
With ``--reps R`` each is measured R times: ours in R rounds over the lengths (each figure the
median of its rounds), llama-bench with ``-r R`` (its mean). One pass each (the default) reads
10-15% apart between runs on a shared host.
With low-precision prompt attention (the backend name ends "+bf16-prompt" or "+int16-prompt"), the
target alone is also timed with f32 prompts (TRT_SPEC_CPU_PROMPT_ATTENTION=f32) in the same rounds.
It also reports the peak resident memory of this process (the engine's weights and KV cache
included) after the longest prefill, and, where the test-only native module is importable
(``TRT_SPEC_TESTING_DIR``), the target's cost for 1 to 16 rows at context 600 against one row:
with one logit row (the forward) and with logits for every row (what a verify pass of k + 1 rows
computes, the output head's rows included).

With ``--rate-rounds R`` it also measures the target's rate at the longest prompt against the
shortest in R bracketed rounds: each round times the short prompt F times, the long prompt once,
then the short prompt F times again, with F = ceil(long / short / 2), so the short runs take
about as long as the long one and sit on both sides of it; the round's rate is the long prompt's
tokens/s over the median of its 2F short runs. A host whose speed drifts over minutes moves both
sides of a round alike, where the rounds over the lengths above compare one short run with a long
run minutes away.

The prompt is real text: HumanEval prompts joined and tokenized, cut to N tokens.

    python benchmarks/bench_prefill.py --engine pair_8k.engine --target T.gguf --draft D.gguf \
        [--lengths 512,2048,4096] [--threads 2] [--reps 1] [--rate-rounds 0] [--tag q4]

The engine needs max_seq_len > the longest N (``trt-spec build ... --max-seq-len 8192``).
Writes ``benchmarks/results/prefill_<tag>.json`` and ``.md`` (also printed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from native_testing import testing_module
from peers.llama_spec_runner import find_binary
from trt_spec import Engine, models
from trt_spec.bench.common import environment, write_report

RESULTS = Path(__file__).resolve().parent / "results"
PROMPT_VAR = "TRT_SPEC_CPU_PROMPT_ATTENTION"


def prompt_ids(eng: Engine, n: int) -> list[int]:
    """n token ids of real code: HumanEval prompts joined, as many as it takes."""
    rows = models.humaneval_prompts(164)
    ids: list[int] = []
    for r in rows:
        ids += eng.encode(r["prompt"])
        if len(ids) >= n:
            return ids[:n]
    raise RuntimeError(f"HumanEval has fewer than {n} prompt tokens")


def ours(eng: Engine, ids: list[int]) -> dict[str, float]:
    n = len(ids)
    t = eng.generate(ids, max_new_tokens=1, draft="none", ignore_eos=True).stats
    p = eng.generate(ids, max_new_tokens=2, draft="model", draft_len=1, ignore_eos=True).stats
    read = p.total_s - p.ttft_s - p.draft_s - p.verify_s - p.catch_up_s
    return {
        "target_ttft_s": t.ttft_s,
        "target_tok_s": n / t.ttft_s,
        "pair_ttft_s": p.ttft_s,
        "draft_read_s": read,
        "pair_tok_s": n / (p.ttft_s + read),
    }


def target_tok_s(eng: Engine, ids: list[int]) -> float:
    """The target alone: prefill tokens/s of one prompt (its TTFT)."""
    stats = eng.generate(ids, max_new_tokens=1, draft="none", ignore_eos=True).stats
    return len(ids) / stats.ttft_s


def bracketed_rate(eng: Engine, short: list[int], long: list[int]) -> dict[str, Any]:
    """One bracketed round: the short prompt F times, the long one once, the short F times again
    (F = ceil(len(long) / len(short) / 2)); the rate is the long tok/s over the short runs'
    median."""
    f = -(-len(long) // (2 * len(short)))
    before = [target_tok_s(eng, short) for _ in range(f)]
    mid = target_tok_s(eng, long)
    after = [target_tok_s(eng, short) for _ in range(f)]
    rate = mid / statistics.median(before + after)
    return {"short_tok_s": before + after, "long_tok_s": mid, "rate": rate}


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def llama_bench(gguf: str, lengths: list[int], threads: int, reps: int) -> dict[int, float]:
    """llama-bench's prompt tokens/s for each length (its mean over `reps` repetitions)."""
    binary = find_binary("llama-bench")
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    cmd = [str(binary), "-m", gguf, "-t", str(threads), "-n", "0", "-r", str(reps), "-o", "json"]
    cmd += ["-p", ",".join(str(n) for n in lengths)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    rows = json.loads(out[out.index("[") :])
    return {int(r["n_prompt"]): float(r["avg_ts"]) for r in rows if r["n_prompt"] > 0}


ROW_COUNTS = (1, 2, 3, 5, 9, 12, 16)


def row_costs(path: str, threads: int, rounds: int = 3) -> dict[str, dict[str, float]] | None:
    """The target forward's seconds for 1..16 rows at context 600: with one logit row ("forward")
    and with logits for every row ("verify": what a verify pass of k + 1 rows computes, the
    head's rows included); each the median of `rounds` alternating rounds."""
    if not os.environ.get("TRT_SPEC_TESTING_DIR"):
        return None
    T = testing_module(Path(__file__).resolve().parents[1])  # noqa: N806
    s = T.Session(path, "cpu", threads)
    got: dict[str, dict[int, list[float]]] = {"forward": {}, "verify": {}}
    for _ in range(rounds):
        for n in ROW_COUNTS:
            for kind, logits in (("forward", 1), ("verify", n)):
                t = s.time_forward("target", n, logits, 600, 2, False)
                got[kind].setdefault(n, []).append(t)
    return {k: {str(n): statistics.median(v) for n, v in d.items()} for k, d in got.items()}


def render(rep: dict[str, Any]) -> str:
    env, st = rep["environment"], rep["settings"]
    cpu = env.get("cpu") or "CPU"
    lines = [
        f"# Prefill benchmark ({rep['tag']})",
        "",
        f"{cpu}, {st['threads']} threads, commit {env.get('git_commit')}, backend "
        f"{st.get('backend', 'cpu')}; engine {st['engine']} "
        f"(max_seq_len {st['max_seq_len']}); prompts: HumanEval prompts joined, cut to N tokens; "
        f"llama.cpp `llama-bench -p N -n 0 -r {st.get('reps', 1)}`; each trt-spec figure the "
        f"median of {st.get('reps', 1)} round(s) over the lengths; load at start "
        f"{env.get('loadavg_start')}.",
        "",
        "| N | trt-spec target TTFT s | tok/s | llama.cpp target tok/s | ratio | "
        "trt-spec pair tok/s (TTFT s) | llama.cpp pair tok/s | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rep["runs"]:
        lt, lp = r.get("llama_target_tok_s"), r.get("llama_pair_tok_s")
        lines.append(
            f"| {r['n']} | {r['target_ttft_s']:.2f} | {r['target_tok_s']:.1f} | "
            f"{lt:.1f} | {r['target_tok_s'] / lt:.2f}x | "
            f"{r['pair_tok_s']:.1f} ({r['pair_ttft_s']:.2f}) | {lp:.1f} | "
            f"{r['pair_tok_s'] / lp:.2f}x |"
            if lt and lp
            else f"| {r['n']} | {r['target_ttft_s']:.2f} | {r['target_tok_s']:.1f} | - | - | "
            f"{r['pair_tok_s']:.1f} ({r['pair_ttft_s']:.2f}) | - | - |"
        )
    runs = rep["runs"]
    lines.append("")
    if len(runs) > 1:
        first, last = runs[0], runs[-1]
        lines.append(
            f"- target rate at {last['n']} / at {first['n']}: "
            f"{last['target_tok_s'] / first['target_tok_s']:.2f} (goal >= 0.85)"
        )
        if "f32_target_tok_s" in first:
            cells = ", ".join(f"{r['n']}: {r['f32_target_tok_s']:.1f}" for r in runs)
            lines.append(
                f"- target alone with f32 prompt attention ({PROMPT_VAR}=f32), same rounds, "
                f"tok/s: {cells}; rate at {last['n']} / at {first['n']}: "
                f"{last['f32_target_tok_s'] / first['f32_target_tok_s']:.2f}"
            )
    rr = rep.get("rate_rounds")
    if rr and len(runs) > 1:
        n0, n1 = runs[0]["n"], runs[-1]["n"]
        rates = [r["rate"] for r in rr]
        cells = ", ".join(
            f"{r['rate']:.2f} ({r['long_tok_s']:.1f} / {statistics.median(r['short_tok_s']):.1f})"
            for r in rr
        )
        lines.append(
            f"- target rate at {n1} / at {n0}, bracketed rounds (the {n0}-token prompt "
            f"{len(rr[0]['short_tok_s']) // 2} times before and after each {n1}-token one; "
            f"rate = {n1} tok/s / median of the round's {n0} tok/s): median "
            f"{statistics.median(rates):.2f} (goal >= 0.85); rounds {cells}"
        )
    lines.append(
        "- pair: the draft reads each prompt chunk after the target's, but the last chunk after "
        "the first token (so the pair's TTFT holds all but that read); pair tok/s = N / (pair "
        "TTFT + that last read), i.e. both models' whole prompt passes"
    )
    both = " (two engines loaded: the f32-prompt one too)" if "f32_target_tok_s" in runs[0] else ""
    lines.append(f"- peak resident memory after the prefills: {rep['peak_rss_mb']:.0f} MB{both}")
    rc = rep.get("row_costs_s")
    if rc:
        if "1" in rc:  # (files before s26: one logit row only)
            rc = {"forward": rc}
        what = {
            "forward": "target forward of n rows at context 600, one logit row (x one row)",
            "verify": "a verify pass of n rows at context 600, logits for every row (x one row)",
        }
        for kind, costs in rc.items():
            one = costs["1"]
            cells = ", ".join(f"{n}: {t * 1e3:.0f} ms ({t / one:.2f})" for n, t in costs.items())
            lines.append(f"- {what[kind]}: {cells}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", required=True, help="a pair engine, max_seq_len > longest N")
    ap.add_argument("--target", help="the target GGUF (llama-bench)")
    ap.add_argument("--draft", help="the draft GGUF (llama-bench)")
    ap.add_argument("--lengths", default="512,2048,4096")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1, help="measurements per figure (median)")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument(
        "--rate-rounds",
        type=int,
        default=0,
        help="bracketed rounds of the target's rate at the longest length against the shortest",
    )
    ap.add_argument("--tag", default="q4")
    args = ap.parse_args()
    args.reps = max(1, args.reps)
    lengths = [int(x) for x in args.lengths.split(",")]
    rep: dict[str, Any] = {
        "tag": args.tag,
        "environment": environment(args.threads),
        "settings": {
            "threads": args.threads,
            "engine": args.engine,
            "lengths": lengths,
            "reps": args.reps,
            "rate_rounds": args.rate_rounds,
        },
        "runs": [],
    }
    # The pair's draft reads the whole prompt (draft_window=0), as llama-bench's draft pass does:
    # both models' whole prompt passes.
    eng = Engine(args.engine, device="cpu", n_threads=args.threads, draft_window=0)
    rep["settings"]["max_seq_len"] = eng.max_seq_len
    rep["settings"]["backend"] = eng.backend
    # With bf16 / int16 prompt attention (the default: bf16 where the CPU has AVX512_BF16, else
    # int16), the target alone with f32 prompts too, in the same rounds.
    f32 = None
    if eng.backend.endswith("-prompt"):
        mode = os.environ.get(PROMPT_VAR)
        os.environ[PROMPT_VAR] = "f32"
        f32 = Engine(args.engine, device="cpu", n_threads=args.threads)
        if mode is None:
            del os.environ[PROMPT_VAR]
        else:  # (as the caller set it)
            os.environ[PROMPT_VAR] = mode
    if max(lengths) >= eng.max_seq_len:
        raise SystemExit(f"--lengths: the engine holds {eng.max_seq_len} positions")
    eng.generate(prompt_ids(eng, 64), max_new_tokens=2, draft="model", ignore_eos=True)  # warm-up
    rounds: dict[int, list[dict[str, float]]] = {n: [] for n in lengths}
    for _ in range(args.reps):  # rounds over the lengths: drifts hit every length alike
        for n in lengths:
            t0 = time.perf_counter()
            ids = prompt_ids(eng, n)
            rounds[n].append(ours(eng, ids))
            if f32 is not None:
                rounds[n][-1]["f32_target_tok_s"] = target_tok_s(f32, ids)
            print(f"trt-spec N={n}: {rounds[n][-1]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    rep["runs"] = [{"n": n, **median_of(rounds[n]), "rounds": rounds[n]} for n in lengths]
    if args.rate_rounds > 0 and len(lengths) > 1:
        short, long = prompt_ids(eng, min(lengths)), prompt_ids(eng, max(lengths))
        rep["rate_rounds"] = []
        for _ in range(args.rate_rounds):
            rep["rate_rounds"].append(bracketed_rate(eng, short, long))
            print(f"bracketed round: {rep['rate_rounds'][-1]}", flush=True)
    rep["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del eng, f32
    if not args.no_llama and args.target and args.draft:
        lt = llama_bench(args.target, lengths, args.threads, args.reps)
        ld = llama_bench(args.draft, lengths, args.threads, args.reps)
        print(f"llama-bench target {lt} draft {ld}", flush=True)
        for r in rep["runs"]:
            n = r["n"]
            r["llama_target_tok_s"] = lt[n]
            r["llama_draft_tok_s"] = ld[n]
            r["llama_pair_tok_s"] = n / (n / lt[n] + n / ld[n])
    rc = row_costs(args.engine, args.threads, max(3, args.reps))
    if rc:
        rep["row_costs_s"] = rc
    write_report(RESULTS / f"prefill_{args.tag}", rep, render(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
