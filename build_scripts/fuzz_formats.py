"""The full format fuzz run: mutated engine files, GGUF files and safetensors folders.

    source /tmp/trt-spec-asan/asan_env.sh       # after bash build_scripts/build_asan.sh
    python build_scripts/fuzz_formats.py --engine 10000 --gguf 1000 --safetensors 1000 \\
        --report benchmarks/results/fuzz.md

Cases (tests/format_fuzz.py) run in-process in batches; each batch is a subprocess of this script
(``--worker``) that writes one line per finished case to a log, so a crash or a sanitizer abort
ends only that batch: the case it had started is recorded as a crash (with its seed and the
sanitizer's report) and the next batch starts after it. The report counts every outcome and
lists each crash and unexpected exception with the seed that replays it:

    python build_scripts/fuzz_formats.py --replay engine:1234
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def worker(target: str, first: int, count: int, seeds_dir: Path, log: Path) -> None:
    """Runs cases first..first+count-1, appending a JSON line as each starts and ends."""
    import format_fuzz

    seeds = format_fuzz.make_seeds(seeds_dir)
    work = Path(tempfile.mkdtemp(prefix="fuzz-case-"))
    with open(log, "a", buffering=1) as f:
        for seed in range(first, first + count):
            f.write(json.dumps({"start": seed}) + "\n")
            o = format_fuzz.run_case(target, seed, seeds, work)
            f.write(json.dumps({"seed": seed, "status": o.status, "detail": o.detail}) + "\n")


def run_target(target: str, n: int, batch: int, seeds_dir: Path, tmp: Path) -> dict:
    counts: collections.Counter[str] = collections.Counter()
    findings: list[dict] = []
    seed = 0
    while seed < n:
        log = tmp / f"{target}-{seed}.log"
        count = min(batch, n - seed)
        cmd = [sys.executable, __file__, "--worker", target, str(seed), str(count), str(seeds_dir)]
        proc = subprocess.run([*cmd, str(log)], capture_output=True, text=True)
        started, done = None, set()
        for line in log.read_text().splitlines() if log.exists() else []:
            rec = json.loads(line)
            if "start" in rec:
                started = rec["start"]
                continue
            done.add(rec["seed"])
            counts[rec["status"]] += 1
            if rec["status"] == "unexpected":
                findings.append({"kind": "unexpected", **rec})
        if proc.returncode != 0 or len(done) < count:
            crashed = started if started is not None and started not in done else seed
            counts["crash"] += 1
            tail = (proc.stderr or "")[-3000:]
            findings.append({"kind": "crash", "seed": crashed, "rc": proc.returncode, "log": tail})
            print(f"{target}:{crashed} crashed (rc {proc.returncode})", file=sys.stderr)
            seed = crashed + 1
        else:
            seed += count
        print(f"{target}: {seed}/{n} {dict(counts)}", file=sys.stderr, flush=True)
    return {"counts": dict(counts), "findings": findings}


def sanitizer_reports(results: dict) -> int:
    marks = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")
    return sum(
        1
        for r in results.values()
        for f in r["findings"]
        if f["kind"] == "crash" and any(m in f.get("log", "") for m in marks)
    )


def write_report(path: Path, results: dict, args: argparse.Namespace, seconds: float) -> None:
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    sanitized = os.environ.get("TRT_SPEC_SANITIZED") == "1"
    lines = [
        "# Format fuzz run",
        "",
        "Written by `build_scripts/fuzz_formats.py` (cases: `tests/format_fuzz.py`).",
        "",
        f"- commit: {commit}{' (with uncommitted changes)' if dirty else ''}",
        f"- sanitizer: {'yes (ASan + UBSan, build_scripts/build_asan.sh)' if sanitized else 'no'}",
        f"- seeds: 0..n-1 per target; batch size {args.batch} per subprocess",
        f"- duration: {seconds:.0f} s",
        f"- sanitizer reports: {sanitizer_reports(results)}",
        "",
        "| target | cases | accepted | rejected | skipped | unexpected | crash |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for target, r in results.items():
        c = r["counts"]
        total = sum(c.values())
        cols = [c.get(k, 0) for k in ("accepted", "rejected", "skipped", "unexpected", "crash")]
        lines.append(f"| {target} | {total} | " + " | ".join(map(str, cols)) + " |")
    lines += [
        "",
        "accepted: loaded and generated 2 tokens (engine) or built, loaded and generated (GGUF,",
        "safetensors); rejected: EngineFileError or BuildError; skipped: the mutation could not",
        "even be written (gguf's writer refused the value); unexpected: any other exception.",
        "",
    ]
    for target, r in results.items():
        for f in r["findings"]:
            lines.append(f"- {target}:{f['seed']} {f['kind']}: {f.get('detail', f.get('log'))}")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        t, first, count, seeds_dir, log = sys.argv[2:7]
        worker(t, int(first), int(count), Path(seeds_dir), Path(log))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", type=int, default=10_000)
    ap.add_argument("--gguf", type=int, default=1_000)
    ap.add_argument("--safetensors", type=int, default=1_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--replay", help="TARGET:SEED: run one case here and print its outcome")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trt-spec-fuzz-"))
    if args.replay:
        import format_fuzz

        target, seed = args.replay.split(":")
        seeds = format_fuzz.make_seeds(tmp / "seeds")
        print(format_fuzz.run_case(target, int(seed), seeds, tmp / "work"))
        return 0
    # The base inputs are written once here (torch and transformers load only in this process).
    import format_fuzz

    format_fuzz.make_seeds(tmp / "seeds")
    t0 = time.monotonic()
    plan = {"engine": args.engine, "gguf": args.gguf, "safetensors": args.safetensors}
    results = {
        target: run_target(target, n, args.batch, tmp / "seeds", tmp)
        for target, n in plan.items()
        if n > 0
    }
    seconds = time.monotonic() - t0
    if args.report:
        write_report(args.report, results, args, seconds)
    print(json.dumps({t: r["counts"] for t, r in results.items()}))
    bad = sum(
        c.get("unexpected", 0) + c.get("crash", 0) for c in (r["counts"] for r in results.values())
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
