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
    iterations: int  # decode iterations after the prefill (each: k draft steps + one verify)
    ttft_s: float  # request start -> first new token (prefill included)
    total_s: float
    tokens_per_s: float  # new_tokens / total_s
    decode_tokens_per_s: float  # tokens after the first / time after the first
    prefill_tokens_per_s: float  # prompt_tokens / ttft_s
    itl_p50_ms: float  # inter-token latency percentiles (time between tokens reaching the host)
    itl_p95_ms: float
    itl_p99_ms: float
    stop_reason: str
    # Speculation (zero / empty for target-only decoding)
    draft_len: str = "0"  # what was asked: "auto", or a fixed k
    spec_iterations: int = 0  # iterations that drafted (k > 0)
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens kept
    acceptance_rate: float = 0.0  # accepted / drafted
    tokens_per_iteration: float = 0.0  # tokens emitted per decode iteration
    accepted_hist: tuple[int, ...] = ()  # [n]: drafting iterations that kept n draft tokens
    draft_s: float = 0.0  # time in draft steps
    verify_s: float = 0.0  # time in verify passes (acceptance included)

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"prompt {self.prompt_tokens} tok, generated {self.new_tokens} tok in "
            f"{self.total_s:.2f} s | TTFT {self.ttft_s * 1e3:.0f} ms | "
            f"{self.tokens_per_s:.2f} tok/s overall, {self.decode_tokens_per_s:.2f} tok/s decode | "
            f"ITL p50 {self.itl_p50_ms:.1f} ms, p95 {self.itl_p95_ms:.1f} ms | "
            f"stop: {self.stop_reason}" + self._spec_str()
        )

    def _spec_str(self) -> str:
        if self.spec_iterations == 0:
            return ""
        return (
            f" | draft_len {self.draft_len}: {self.iterations} iterations, acceptance "
            f"{self.acceptance_rate:.1%} ({self.accepted}/{self.drafted}), "
            f"{self.tokens_per_iteration:.2f} tok/iteration, accepted lengths "
            f"{list(self.accepted_hist)}"
        )


class StatsClock:
    """Collects token arrival times during one request."""

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.t0 = time.perf_counter()
        self.arrivals: list[float] = []  # one entry per token

    def tokens_arrived(self, n: int) -> None:
        now = time.perf_counter()
        self.arrivals.extend([now] * n)

    def finish(
        self, new_tokens: int, stop_reason: str, runtime: dict | None = None, draft_len: str = "0"
    ) -> GenerationStats:
        """``runtime``: the decoder's counters for the request (``_core.Decoder.stats``)."""
        r = runtime or {}
        drafted, accepted = int(r.get("drafted", 0)), int(r.get("accepted", 0))
        iterations = int(r.get("iterations", 0))
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
            iterations=iterations,
            ttft_s=first,
            total_s=total,
            tokens_per_s=new_tokens / total if total > 0 else 0.0,
            decode_tokens_per_s=(new_tokens - 1) / after_first if after_first > 0 else 0.0,
            prefill_tokens_per_s=self.prompt_tokens / first if first > 0 else 0.0,
            itl_p50_ms=_percentile(itl, 50),
            itl_p95_ms=_percentile(itl, 95),
            itl_p99_ms=_percentile(itl, 99),
            stop_reason=stop_reason,
            draft_len=draft_len,
            spec_iterations=int(r.get("spec_iterations", 0)),
            drafted=drafted,
            accepted=accepted,
            acceptance_rate=accepted / drafted if drafted else 0.0,
            tokens_per_iteration=int(r.get("emitted", 0)) / iterations if iterations else 0.0,
            accepted_hist=tuple(r.get("accepted_hist", ())),
            draft_s=float(r.get("draft_s", 0.0)),
            verify_s=float(r.get("verify_s", 0.0)),
        )
