"""Structured output's cost and speculation's gain on JSON extraction, in one run.

For each prompt (a chat asking to extract fields as JSON), four greedy generations on one
engine: unconstrained and constrained by a JSON schema, each target-only (draft "none") and
speculative (draft "auto" by default), the modes interleaved in each round. Reports decode tok/s
per mode (median over rounds of the tokens after each prompt's first / the seconds after it) and
end-to-end tok/s (all tokens / all seconds, prompt reads included), the ratios between modes
(median over rounds of the ratio within a round; the headline ratios on decode), and checks that
the constrained outputs parse and that speculation changed no token.

    python benchmarks/bench_structured.py pair.engine [--rounds 3] [--draft auto] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from trt_spec import Engine
from trt_spec.bench.common import available_cpus, environment

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "skills": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "city", "skills"],
    "additionalProperties": False,
}
TEXTS = [
    "Maria Gonzalez, 34, is a data engineer in Madrid who works with Python, Spark and SQL.",
    "Born 51 years ago, Kenji Watanabe runs a bakery in Osaka; he knows baking and accounting.",
    "Our new hire, Priya Nair (27), relocated to Toronto. She is fluent in Go, Rust and Kotlin.",
    "Tom Becker lives in Hamburg. At 45 he still coaches football and teaches chemistry.",
    "Ana Silva, a 29-year-old nurse from Lisbon, speaks Portuguese, English and French.",
    "The speaker, Dr. Lars Nilsson, 62, of Uppsala, specialises in genetics and statistics.",
]


def prompt(text: str) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": "Extract the person's name, age, city and skills as JSON with the keys "
            f"name, age, city, skills.\n\nText: {text}",
        }
    ]


def run(engine: Engine, draft: str, constrained: bool, max_new: int):
    """(end-to-end tok/s, decode tok/s, results) over the prompts: all tokens / all seconds, and
    the tokens after each first one / the seconds after it (what the prompt read leaves)."""
    fmt = {"type": "json_schema", "json_schema": {"schema": SCHEMA}} if constrained else None
    tokens, seconds, dec_tokens, dec_seconds, outs = 0, 0.0, 0, 0.0, []
    for t in TEXTS:
        t0 = time.perf_counter()
        r = engine.generate(prompt(t), max_new_tokens=max_new, draft=draft, response_format=fmt)
        seconds += time.perf_counter() - t0
        tokens += len(r.token_ids)
        dec_tokens += max(0, len(r.token_ids) - 1)
        dec_seconds += r.stats.total_s - r.stats.ttft_s
        outs.append(r)
    return tokens / seconds, dec_tokens / dec_seconds, outs


def ratio(rates: dict[str, list[float]], a: str, b: str) -> float:
    """The median over rounds of mode a's rate over mode b's in the same round."""
    return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--draft", default="auto")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    engine = Engine(a.engine, n_threads=a.threads)
    modes = [(d, c) for c in (False, True) for d in ("none", a.draft)]
    rates: dict[str, list[float]] = {}  # end to end
    decode: dict[str, list[float]] = {}
    outs: dict[str, list] = {}
    run(engine, "none", True, 8)  # (warm-up: the grammar tokenizer, caches)
    for _ in range(a.rounds):
        for d, c in modes:  # interleaved: every round measures every mode
            key = f"{'json' if c else 'free'}/{d}"
            rate, dec, outs[key] = run(engine, d, c, a.max_new_tokens)
            rates.setdefault(key, []).append(rate)
            decode.setdefault(key, []).append(dec)
    med = {k: statistics.median(v) for k, v in rates.items()}
    med_decode = {k: statistics.median(v) for k, v in decode.items()}
    spec = f"json/{a.draft}"
    same = [x.token_ids for x in outs["json/none"]] == [x.token_ids for x in outs[spec]]
    done = [r for r in outs["json/none"] if r.finish_reason == "stop_token"]
    parsed = sum(1 for r in done if isinstance(json.loads(r.text), dict))
    report = {
        "engine": a.engine,
        "backend": engine.backend,
        "environment": environment(a.threads or available_cpus()),
        "rounds": a.rounds,
        "max_new_tokens": a.max_new_tokens,
        "decode_tok_s": med_decode,
        "tok_s": med,
        "rounds_decode_tok_s": decode,
        "rounds_tok_s": rates,
        # (ratios within each round, then their median: a shared host's load drifts between
        # rounds more than between the modes of one round); decode: after the first token
        "constrained_cost": 1 - ratio(decode, "json/none", "free/none"),
        "constrained_speculative_speedup": ratio(decode, spec, "json/none"),
        "free_speculative_speedup": ratio(decode, f"free/{a.draft}", "free/none"),
        "end_to_end": {
            "constrained_cost": 1 - ratio(rates, "json/none", "free/none"),
            "constrained_speculative_speedup": ratio(rates, spec, "json/none"),
            "free_speculative_speedup": ratio(rates, f"free/{a.draft}", "free/none"),
        },
        "speculation_changed_no_token": same,
        "constrained_outputs_parsed": f"{parsed}/{len(TEXTS)}",
        "tokens_per_iteration_json": statistics.mean(
            r.stats.tokens_per_iteration for r in outs[spec]
        ),
    }
    print(f"| mode | decode tok/s | end-to-end tok/s (medians of {a.rounds}) |")
    print("|---|---:|---:|")
    for k in rates:
        print(f"| {k} | {med_decode[k]:.2f} | {med[k]:.2f} |")
    rounds = ("rounds_tok_s", "rounds_decode_tok_s")
    print(json.dumps({k: v for k, v in report.items() if k not in rounds}, indent=1))
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    if not same:
        sys.exit("speculation changed the constrained output")


if __name__ == "__main__":
    main()
