"""Per-request generation statistics: the scheduler's counters and token times
(``_core.RequestStats``, engine/scheduler.h) and the rates and latencies derived from them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from trt_spec import _core


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
    draft: str = "none"  # the request's draft source: auto, model, lookup or none
    draft_len: int | str = 0  # the request's draft_len: "auto", or a fixed k
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
    pruned: int = 0  # draft tokens a constraint forbade, removed before verification
    forced: int = 0  # draft steps a constraint forced (one token allowed), drawn without the draft
    queue_s: float = 0.0  # submission -> a KV slot
    draft_s: float = 0.0  # time in draft steps
    verify_s: float = 0.0  # time in verify passes (acceptance included)
    catch_up_s: float = 0.0  # the draft model reading tokens it skipped
    # draft="auto" left the draft model out: reading the prompt (and, after the first tokens,
    # the text so far) was not expected to pay
    draft_model_skipped: bool = False
    # the products prompt rows attended with: f32, or bf16 / int16 (q8 / q4 weights on a CPU)
    prompt_attention: str = "f32"
    cached_tokens: int = 0  # prompt tokens the prompt cache held (not prefilled)
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
        if self.pruned:
            pred += f", {self.pruned} pruned by the constraint"
        if self.forced:
            pred += f", {self.forced} forced by the constraint"
        return (
            f" | draft {self.draft}, draft_len {self.draft_len}: {self.iterations} iterations "
            f"({used}), acceptance {self.acceptance_rate:.1%} ({self.accepted}/{self.drafted}), "
            f"{self.tokens_per_iteration:.2f} tok/iteration{pred}"
        )


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else 0.0


def stats_from_request(r: _core.RequestStats, stop_reason: str) -> GenerationStats:
    """GenerationStats of a finished request from the scheduler's statistics."""
    times = np.asarray(r.token_times, dtype=np.float64)
    n = int(times.size)
    total = r.total_s
    first = float(times[0]) if n else total
    itl = np.diff(times) * 1e3
    after_first = float(times[-1] - times[0]) if n > 1 else 0.0
    return GenerationStats(
        prompt_tokens=r.prompt_tokens,
        cached_tokens=r.cached_tokens,
        new_tokens=n,
        iterations=r.iterations,
        ttft_s=first,
        total_s=total,
        tokens_per_s=n / total if total > 0 else 0.0,
        decode_tokens_per_s=(n - 1) / after_first if after_first > 0 else 0.0,
        prefill_tokens_per_s=r.prompt_tokens / first if first > 0 else 0.0,
        itl_p50_ms=_percentile(itl, 50),
        itl_p95_ms=_percentile(itl, 95),
        itl_p99_ms=_percentile(itl, 99),
        stop_reason=stop_reason,
        draft=r.draft,
        draft_len="auto" if r.draft_len is None else r.draft_len,
        spec_iterations=r.spec_iterations,
        drafted=r.drafted,
        accepted=r.accepted,
        acceptance_rate=r.accepted / r.drafted if r.drafted else 0.0,
        tokens_per_iteration=r.emitted / r.iterations if r.iterations else 0.0,
        accepted_hist=tuple(r.accepted_hist),
        accepted_hist_by_source={
            k: tuple(v) for k, v in r.accepted_hist_by_source.items() if any(v)
        },
        sources=r.sources,
        by_source=r.by_source,
        prediction_accepted=r.prediction_accepted,
        prediction_rejected=r.prediction_rejected,
        pruned=r.pruned,
        forced=r.forced,
        queue_s=r.queue_s,
        draft_s=r.draft_s,
        verify_s=r.verify_s,
        catch_up_s=r.catch_up_s,
        draft_model_skipped=r.draft_model_skipped,
        prompt_attention=r.prompt_attention,
        itl_ms=tuple(float(x) for x in itl),
    )
