"""Per-request generation statistics, from the scheduler's counters and token times (C++)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int
    new_tokens: int
    iterations: int  # decode iterations after the prefill (each: a proposal + one verify pass)
    ttft_s: float  # submission -> first new token (queue and prefill included)
    total_s: float  # submission -> the last token
    tokens_per_s: float  # new_tokens / total_s
    decode_tokens_per_s: float  # tokens after the first / time after the first
    prefill_tokens_per_s: float  # prompt_tokens / ttft_s
    itl_p50_ms: float  # inter-token latency percentiles (time between tokens becoming final)
    itl_p95_ms: float
    itl_p99_ms: float
    stop_reason: str
    # Speculation (zero / empty without it)
    draft: str = "none"  # the draft source asked for: auto, model, lookup or none
    draft_len: str = "0"  # what was asked: "auto", or a fixed k
    spec_iterations: int = 0  # iterations that verified draft tokens
    drafted: int = 0  # draft tokens verified
    accepted: int = 0  # draft tokens kept
    acceptance_rate: float = 0.0  # accepted / drafted
    tokens_per_iteration: float = 0.0  # tokens emitted per decode iteration
    accepted_hist: tuple[int, ...] = ()  # [n]: drafting iterations that kept n draft tokens
    accepted_hist_by_source: dict[str, tuple[int, ...]] = field(default_factory=dict)  # per source
    sources: str = ""  # the draft source of each iteration: n(one), m(odel), l(ookup)
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)  # iterations/drafted/
    # accepted per source
    prediction_accepted: int = 0  # draft tokens taken from `prediction` that were kept
    prediction_rejected: int = 0  # ... that were verified and not kept
    queue_s: float = 0.0  # submission -> a KV slot
    draft_s: float = 0.0  # time in draft steps
    verify_s: float = 0.0  # time in verify passes (acceptance included)
    catch_up_s: float = 0.0  # the draft model reading tokens it skipped
    # draft="auto" left the draft model out: reading the prompt (and, after the first tokens,
    # the text so far) was not expected to pay
    draft_model_skipped: bool = False
    # the products prompt rows attended with: f32, or bf16 / int16 (q8 / q4 weights on a CPU)
    prompt_attention: str = "f32"
    itl_ms: tuple[float, ...] = field(default=(), repr=False)  # each inter-token latency

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
        used = ", ".join(
            f"{name} {c['iterations']} it ({c['accepted']}/{c['drafted']} kept)"
            for name, c in self.by_source.items()
            if c.get("iterations")
        )
        pred = ""
        if self.prediction_accepted or self.prediction_rejected:
            pred = (
                f", prediction {self.prediction_accepted} accepted / "
                f"{self.prediction_rejected} rejected"
            )
        return (
            f" | draft {self.draft}, draft_len {self.draft_len}: {self.iterations} iterations "
            f"({used}), acceptance {self.acceptance_rate:.1%} ({self.accepted}/{self.drafted}), "
            f"{self.tokens_per_iteration:.2f} tok/iteration{pred}"
        )


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else 0.0


def stats_from_runtime(
    r: dict[str, Any], stop_reason: str, draft: str = "none", draft_len: str = "0"
) -> GenerationStats:
    """GenerationStats of a finished request from the scheduler's counters (engine/scheduler.h
    RequestStats)."""
    times = np.asarray(r.get("token_times", ()), dtype=np.float64)
    n = int(times.size)
    total = float(r.get("total_s", 0.0))
    first = float(times[0]) if n else total
    itl = np.diff(times) * 1e3
    after_first = float(times[-1] - times[0]) if n > 1 else 0.0
    drafted, accepted = int(r.get("drafted", 0)), int(r.get("accepted", 0))
    iterations = int(r.get("iterations", 0))
    prompt = int(r.get("prompt_tokens", 0))
    return GenerationStats(
        prompt_tokens=prompt,
        new_tokens=n,
        iterations=iterations,
        ttft_s=first,
        total_s=total,
        tokens_per_s=n / total if total > 0 else 0.0,
        decode_tokens_per_s=(n - 1) / after_first if after_first > 0 else 0.0,
        prefill_tokens_per_s=prompt / first if first > 0 else 0.0,
        itl_p50_ms=_percentile(itl, 50),
        itl_p95_ms=_percentile(itl, 95),
        itl_p99_ms=_percentile(itl, 99),
        stop_reason=stop_reason,
        draft=draft,
        draft_len=draft_len,
        spec_iterations=int(r.get("spec_iterations", 0)),
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        tokens_per_iteration=int(r.get("emitted", 0)) / iterations if iterations else 0.0,
        accepted_hist=tuple(r.get("accepted_hist", ())),
        accepted_hist_by_source={
            k: tuple(int(x) for x in v)
            for k, v in dict(r.get("accepted_hist_by_source", {})).items()
            if any(v)
        },
        sources=str(r.get("sources", "")),
        by_source={k: dict(v) for k, v in dict(r.get("by_source", {})).items()},
        prediction_accepted=int(r.get("prediction_accepted", 0)),
        prediction_rejected=int(r.get("prediction_rejected", 0)),
        queue_s=float(r.get("queue_s", 0.0)),
        draft_s=float(r.get("draft_s", 0.0)),
        verify_s=float(r.get("verify_s", 0.0)),
        catch_up_s=float(r.get("catch_up_s", 0.0)),
        draft_model_skipped=bool(r.get("draft_model_skipped", False)),
        prompt_attention=str(r.get("prompt_attention", "f32")),
        itl_ms=tuple(float(x) for x in itl),
    )
