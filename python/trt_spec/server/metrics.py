"""Prometheus metrics of ``trt-spec serve`` (``GET /metrics``), named after vLLM's.

vLLM's names with the ``trt_spec:`` prefix where vLLM has one (``vllm:num_requests_running``
becomes ``trt_spec:num_requests_running``); the speculative ones follow vLLM's
``spec_decode_*`` family, with a ``source`` label (model, lookup), and ``source`` and
``position`` labels for the per-position acceptance. Each server has its own registry, so
several apps in one process (the tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from trt_spec.engine import GenerationResult

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)
_SOURCES = ("model", "lookup")  # the draft sources, as GenerationStats.by_source names them


class ServerMetrics:
    """The server's metrics; ``observe`` takes each finished request's result."""

    def __init__(self, running: Callable[[], int], waiting: Callable[[], int]) -> None:
        r = self.registry = CollectorRegistry()

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter("trt_spec:" + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram("trt_spec:" + name, doc, buckets=buckets, registry=r)

        for name, doc, fn in (
            ("num_requests_running", "Requests in the batch.", running),
            ("num_requests_waiting", "Requests waiting for a slot.", waiting),
        ):
            Gauge("trt_spec:" + name, doc, registry=r).set_function(fn)
        self.prompt_tokens = counter("prompt_tokens", "Prefilled prompt tokens.")
        self.generation_tokens = counter("generation_tokens", "Generated tokens.")
        self.request_success = counter(
            "request_success", "Finished requests, by finish reason.", "finished_reason"
        )
        self.request_cancelled = counter(
            "request_cancelled", "Requests cancelled because the client went away."
        )
        self.request_errors = counter(
            "request_errors", "Requests answered with an error, by status.", "status"
        )
        self.ttft = histogram(
            "time_to_first_token_seconds", "Submission to first token.", _LATENCY_BUCKETS
        )
        self.itl = histogram(
            "inter_token_latency_seconds",
            "Time between successive tokens becoming final.",
            _LATENCY_BUCKETS,
        )
        self.e2e = histogram(
            "e2e_request_latency_seconds", "Submission to the last token.", _E2E_BUCKETS
        )
        self.drafts = counter(
            "spec_decode_num_drafts", "Iterations that verified draft tokens.", "source"
        )
        self.draft_tokens = counter(
            "spec_decode_num_draft_tokens", "Draft tokens verified.", "source"
        )
        self.accepted_tokens = counter(
            "spec_decode_num_accepted_tokens", "Draft tokens kept.", "source"
        )
        self.accepted_per_pos = counter(
            "spec_decode_num_accepted_tokens_per_pos",
            "Drafting iterations that kept at least position+1 draft tokens, by draft source.",
            "source",
            "position",
        )
        self.tokens_per_iteration = histogram(
            "tokens_per_iteration",
            "Tokens a request got per decode iteration (averaged over the request).",
            (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 17.0),
        )

    def observe(self, result: GenerationResult) -> None:
        s = result.stats
        self.prompt_tokens.inc(s.prompt_tokens)
        self.generation_tokens.inc(s.new_tokens)
        self.request_success.labels(result.finish_reason).inc()
        if s.new_tokens:
            self.ttft.observe(s.ttft_s)
            self.e2e.observe(s.total_s)
        for ms in s.itl_ms:
            self.itl.observe(ms / 1e3)
        if s.iterations:
            self.tokens_per_iteration.observe(s.tokens_per_iteration)
        for name in _SOURCES:
            src = s.by_source.get(name, {})
            if src.get("drafted", 0):
                self.drafts.labels(name).inc(src.get("iterations", 0))
                self.draft_tokens.labels(name).inc(src["drafted"])
                self.accepted_tokens.labels(name).inc(src.get("accepted", 0))
        # hist[n]: the source's drafting iterations that kept n tokens -> position i was accepted
        # in every iteration that kept more than i.
        for name in _SOURCES:
            hist = s.accepted_hist_by_source.get(name, ())
            for i in range(max(0, len(hist) - 1)):
                kept = sum(hist[i + 1 :])
                if kept:
                    self.accepted_per_pos.labels(name, str(i)).inc(kept)

    def error(self, status: int) -> None:
        self.request_errors.labels(str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
