"""``GET /metrics`` of the Ray Serve application: every replica's metrics and the router's.

Each replica's exposition (``trt-spec serve``'s metrics: trt_spec:* and the vllm:* names routers
read) comes back with a ``replica`` label on every sample, the families merged so each is
written once; the router adds its own:

* ``trt_spec:router_replicas``: replicas the router can send to;
* ``trt_spec:router_requests_total{route}``: requests routed, by why their replica was chosen
  (``session``, ``prefix``, ``least_loaded``, ``pinned``: the ingress's own per-replica calls);
* ``trt_spec:router_affinity_keys``: session and prefix keys the router remembers;
* ``trt_spec:router_requests_in_flight``: requests the ingress is serving.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class _Families:
    """A collector yielding fixed metric families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def merge(by_replica: Mapping[str, str]) -> list[Metric]:
    """The replicas' expositions as one list of families, each sample labelled with its
    replica."""
    merged: dict[tuple[str, str], Metric] = {}
    for replica, text in by_replica.items():
        for fam in text_string_to_metric_families(text):
            key = (fam.name, fam.type)
            if key not in merged:
                merged[key] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            merged[key].samples += [
                Sample(s.name, {"replica": replica, **s.labels}, s.value, s.timestamp, s.exemplar)
                for s in fam.samples
            ]
    return list(merged.values())


def router_families(
    replicas: int, routed: Mapping[str, int], affinity_keys: int, in_flight: int
) -> list[Metric]:
    n = GaugeMetricFamily(
        "trt_spec:router_replicas", "Replicas the router can send requests to.", value=replicas
    )
    by_route = CounterMetricFamily(
        "trt_spec:router_requests",
        "Requests routed, by why the replica was chosen.",
        labels=["route"],
    )
    for route, count in routed.items():
        by_route.add_metric([route], count)
    keys = GaugeMetricFamily(
        "trt_spec:router_affinity_keys",
        "Session and prompt-prefix keys the router remembers.",
        value=affinity_keys,
    )
    busy = GaugeMetricFamily(
        "trt_spec:router_requests_in_flight", "Requests the ingress is serving.", value=in_flight
    )
    return [n, by_route, keys, busy]


def render(families: Iterable[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]
    return generate_latest(registry)
