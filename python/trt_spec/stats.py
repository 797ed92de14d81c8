"""Per-request generation statistics, measured on the host around the runtime's steps."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of a non-empty list."""
    s = sorted(values)
    if not s:
        return 0.0
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int
    new_tokens: int
    steps: int  # runtime steps (one target forward each, or one speculative iteration)
    ttft_s: float  # request start -> first new token (prefill included)
    total_s: float
    tokens_per_s: float  # new_tokens / total_s
    decode_tokens_per_s: float  # tokens after the first / time after the first
    prefill_tokens_per_s: float  # prompt_tokens / ttft_s
    itl_p50_ms: float  # inter-token latency percentiles (time between tokens reaching the host)
    itl_p95_ms: float
    itl_p99_ms: float
    stop_reason: str

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"prompt {self.prompt_tokens} tok, generated {self.new_tokens} tok in "
            f"{self.total_s:.2f} s | TTFT {self.ttft_s * 1e3:.0f} ms | "
            f"{self.tokens_per_s:.2f} tok/s overall, {self.decode_tokens_per_s:.2f} tok/s decode | "
            f"ITL p50 {self.itl_p50_ms:.1f} ms, p95 {self.itl_p95_ms:.1f} ms | "
            f"stop: {self.stop_reason}"
        )


class StatsClock:
    """Collects token arrival times during one request."""

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.t0 = time.perf_counter()
        self.arrivals: list[float] = []  # one entry per token
        self.steps = 0

    def tokens_arrived(self, n: int) -> None:
        self.steps += 1
        now = time.perf_counter()
        self.arrivals.extend([now] * n)

    def finish(self, new_tokens: int, stop_reason: str) -> GenerationStats:
        end = time.perf_counter()
        total = end - self.t0
        first = self.arrivals[0] - self.t0 if self.arrivals else total
        itl = [
            (b - a) * 1e3
            for a, b in zip(
                self.arrivals[: new_tokens - 1], self.arrivals[1:new_tokens], strict=True
            )
        ]
        after_first = (self.arrivals[new_tokens - 1] - self.arrivals[0]) if new_tokens > 1 else 0.0
        return GenerationStats(
            prompt_tokens=self.prompt_tokens,
            new_tokens=new_tokens,
            steps=self.steps,
            ttft_s=first,
            total_s=total,
            tokens_per_s=new_tokens / total if total > 0 else 0.0,
            decode_tokens_per_s=(new_tokens - 1) / after_first if after_first > 0 else 0.0,
            prefill_tokens_per_s=self.prompt_tokens / first if first > 0 else 0.0,
            itl_p50_ms=_percentile(itl, 50),
            itl_p95_ms=_percentile(itl, 95),
            itl_p99_ms=_percentile(itl, 99),
            stop_reason=stop_reason,
        )
