"""Prometheus metrics of ``trt-spec serve`` (``GET /metrics``), named after vLLM's.

Two families:

* ``trt_spec:*``, the engine's own: vLLM's names with the ``trt_spec:`` prefix where vLLM has
  one (``vllm:num_requests_running`` becomes ``trt_spec:num_requests_running``); the
  speculative ones follow vLLM's ``spec_decode_*`` family, with a ``source`` label (model,
  lookup), and ``source`` and ``position`` labels for the per-position acceptance.
* ``vllm:*``, what routers read (the Gateway API Inference Extension's model-server protocol,
  llm-d, vLLM's production-stack router, vLLM dashboards): ``vllm:num_requests_waiting``
  (TotalQueuedRequests), ``vllm:num_requests_running`` (TotalRunningRequests),
  ``vllm:kv_cache_usage_perc`` (KVCacheUtilization; also under the older
  ``vllm:gpu_cache_usage_perc``), ``vllm:cache_config_info`` (labels ``block_size`` and
  ``num_gpu_blocks``), and vLLM's token, latency and ``spec_decode_*`` counters, summed over
  the draft sources. Those names are defined once, in :data:`PROTOCOL_GAUGES` and
  :data:`VLLM_NAMES`.

KV cache: each running request holds one sequence slot of ``max_seq_len`` positions (the
engine's allocation unit: a "block" of ``max_seq_len`` tokens, ``max_batch`` of them), so the
usage is running requests / ``max_batch``: 1.0 means a new request waits for a slot.

Each server has its own registry, so several apps in one process (the tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from trt_spec._core import DRAFT_SOURCES, FINISH_REASONS
from trt_spec.engine import GenerationResult

__all__ = ["CONTENT_TYPE", "PROTOCOL_GAUGES", "VLLM_NAMES", "ServerMetrics"]

# The model-server protocol's gauges (gateway-api-inference-extension, proposal 003).
PROTOCOL_GAUGES = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
)
# Every metric exported under vLLM's name, as the exposition names it (counters end in _total).
VLLM_NAMES = (
    *PROTOCOL_GAUGES,
    "vllm:gpu_cache_usage_perc",
    "vllm:cache_config_info",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
)

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)
# The draft sources, as GenerationStats.by_source names them (the names defined in C++).
_SOURCES = tuple(name for name in DRAFT_SOURCES if name != "none")
# The kinds of constraint_draft_tokens: GenerationStats fields of the same names.
_CONSTRAINT_KINDS = ("pruned", "forced")


class ServerMetrics:
    """The server's metrics; ``observe`` takes each finished request's result."""

    def __init__(
        self,
        running: Callable[[], int],
        waiting: Callable[[], int],
        *,
        max_batch: int = 1,
        max_seq_len: int = 0,
    ) -> None:
        r = self.registry = CollectorRegistry()

        def counter(name: str, doc: str, *labels: str, prefix: str = "trt_spec:") -> Counter:
            return Counter(prefix + name, doc, labels, registry=r)

        def histogram(
            name: str, doc: str, buckets: tuple[float, ...], prefix: str = "trt_spec:"
        ) -> Histogram:
            return Histogram(prefix + name, doc, buckets=buckets, registry=r)

        def usage() -> float:
            return running() / max(1, max_batch)

        for prefix in ("trt_spec:", "vllm:"):
            for name, doc, fn in (
                ("num_requests_running", "Requests in the batch (holding a KV slot).", running),
                ("num_requests_waiting", "Requests waiting for a slot.", waiting),
            ):
                Gauge(prefix + name, doc, registry=r).set_function(fn)
        for name in ("kv_cache_usage_perc", "gpu_cache_usage_perc"):
            Gauge(
                "vllm:" + name,
                "KV cache usage as a fraction: sequence slots held / max_batch (1 = full).",
                registry=r,
            ).set_function(usage)
        Gauge(
            "vllm:cache_config_info",
            "The KV cache's allocation unit: one slot of max_seq_len positions per request.",
            ["block_size", "num_gpu_blocks"],
            registry=r,
        ).labels(str(max_seq_len), str(max_batch)).set(1)
        v = "vllm:"
        self.vllm_prompt_tokens = counter("prompt_tokens", "Prefilled prompt tokens.", prefix=v)
        self.vllm_generation_tokens = counter("generation_tokens", "Generated tokens.", prefix=v)
        self.vllm_request_success = counter(
            "request_success", "Finished requests, by finish reason.", "finished_reason", prefix=v
        )
        self.vllm_ttft = histogram(
            "time_to_first_token_seconds", "Submission to first token.", _LATENCY_BUCKETS, v
        )
        self.vllm_e2e = histogram(
            "e2e_request_latency_seconds", "Submission to the last token.", _E2E_BUCKETS, v
        )
        self.vllm_drafts = counter(
            "spec_decode_num_drafts", "Iterations that verified draft tokens.", prefix=v
        )
        self.vllm_draft_tokens = counter(
            "spec_decode_num_draft_tokens", "Draft tokens verified.", prefix=v
        )
        self.vllm_accepted_tokens = counter(
            "spec_decode_num_accepted_tokens", "Draft tokens kept.", prefix=v
        )
        self.vllm_accepted_per_pos = counter(
            "spec_decode_num_accepted_tokens_per_pos",
            "Drafting iterations that kept at least position+1 draft tokens.",
            "position",
            prefix=v,
        )
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
        self.constraint_draft_tokens = counter(
            "constraint_draft_tokens",
            "Draft tokens of constrained requests that the grammar pruned before verification, or "
            "forced (drawn without a draft step).",
            "kind",
        )
        self.tokens_per_iteration = histogram(
            "tokens_per_iteration",
            "Tokens a request got per decode iteration (averaged over the request).",
            (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 17.0),
        )
        # Every labelled series exists from the start, at 0: a router or a rate() over the first
        # scrape sees each source and finish reason before its first increment.
        for name in _SOURCES:
            for c in (self.drafts, self.draft_tokens, self.accepted_tokens):
                c.labels(name)
        for kind in _CONSTRAINT_KINDS:
            self.constraint_draft_tokens.labels(kind)
        for reason in FINISH_REASONS:
            self.request_success.labels(reason)
            self.vllm_request_success.labels(reason)

    def observe(self, result: GenerationResult) -> None:
        s = result.stats
        for prompt, gen, success in (
            (self.prompt_tokens, self.generation_tokens, self.request_success),
            (self.vllm_prompt_tokens, self.vllm_generation_tokens, self.vllm_request_success),
        ):
            prompt.inc(s.prompt_tokens)
            gen.inc(s.new_tokens)
            success.labels(result.finish_reason).inc()
        if s.new_tokens:
            for ttft, e2e in ((self.ttft, self.e2e), (self.vllm_ttft, self.vllm_e2e)):
                ttft.observe(s.ttft_s)
                e2e.observe(s.total_s)
        for ms in s.itl_ms:
            self.itl.observe(ms / 1e3)
        if s.iterations:
            self.tokens_per_iteration.observe(s.tokens_per_iteration)
        for kind in _CONSTRAINT_KINDS:
            self.constraint_draft_tokens.labels(kind).inc(getattr(s, kind))
        for name in _SOURCES:
            src = s.by_source.get(name, {})
            if src.get("drafted", 0):
                self.drafts.labels(name).inc(src.get("iterations", 0))
                self.draft_tokens.labels(name).inc(src["drafted"])
                self.accepted_tokens.labels(name).inc(src.get("accepted", 0))
                self.vllm_drafts.inc(src.get("iterations", 0))
                self.vllm_draft_tokens.inc(src["drafted"])
                self.vllm_accepted_tokens.inc(src.get("accepted", 0))
        # hist[n]: the source's drafting iterations that kept n tokens -> position i was accepted
        # in every iteration that kept more than i.
        for name in _SOURCES:
            hist = s.accepted_hist_by_source.get(name, ())
            for i in range(max(0, len(hist) - 1)):
                kept = sum(hist[i + 1 :])
                if kept:
                    self.accepted_per_pos.labels(name, str(i)).inc(kept)
                    self.vllm_accepted_per_pos.labels(str(i)).inc(kept)

    def error(self, status: int) -> None:
        self.request_errors.labels(str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
