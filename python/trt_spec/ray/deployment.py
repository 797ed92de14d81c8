"""The engine replicas of the Ray Serve application: each owns one :class:`Engine`.

A replica runs the same FastAPI app as ``trt-spec serve`` (``server.app.create_app``: routes,
validation, OpenAI errors, admission, streaming) in its own process, called by the ingress
through a Serve handle (:mod:`trt_spec.ray.asgi`). Its Serve settings
(:func:`deployment_options`):

* resources: ``num_cpus`` = its engine's threads, ``num_gpus`` = 1 when it runs on a GPU;
* ``max_ongoing_requests`` = the engine's ``max_batch`` + ``--max-queue``: the app's own
  capacity, so Serve never sends a replica more than it admits; beyond every replica's capacity
  requests wait at the ingress's handle, at most ``max(--max-queue, max_batch)`` of them, then
  get 429;
* autoscaling, when ``--max-replicas`` > ``--min-replicas``: Serve's policy on the requests in
  flight and queued per replica (queue depth), with a target of ``max_batch`` per replica (a
  replica whose batch is full and has requests waiting asks for another);
* ``graceful_shutdown_timeout_s`` = ``--drain-timeout``: a stopping replica finishes its
  requests first;
* the request router :class:`trt_spec.ray.router.AffinityRouter`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from trt_spec.engine_options import EngineOptions
from trt_spec.ray.asgi import Call, Head, run_asgi

REPLICA_HEADER = "x-trt-spec-replica"  # the response header naming the replica that served it
ROUTER_CLASS = "trt_spec.ray.router:AffinityRouter"


@dataclass
class ReplicaConfig:
    """What each replica opens and serves (``trt-spec serve``'s engine options)."""

    engine: str
    model_name: str
    options: EngineOptions = field(default_factory=EngineOptions)
    max_queue: int = 64
    api_key: str | None = None

    def __post_init__(self) -> None:  # (a dict where the config travelled as one)
        self.options = EngineOptions.coerce(self.options)


class EngineReplica:
    """One engine and its app. ``call`` streams a request's response (trt_spec.ray.asgi)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from ray import serve

        from trt_spec.server.app import create_app

        c = ReplicaConfig(**config)
        self.id = serve.get_replica_context().replica_id.unique_id
        self.engine = c.options.open(c.engine)
        self.app = create_app(
            self.engine, model_name=c.model_name, max_queue=c.max_queue, api_key=c.api_key
        )
        self._tag = (REPLICA_HEADER.encode(), self.id.encode())

    async def call(self, call: Call) -> AsyncIterator[str | Head | bytes]:
        yield self.id
        async for item in run_asgi(self.app, call):
            if isinstance(item, Head):
                item.headers.append(self._tag)
            yield item


def deployment_options(
    *,
    max_batch: int,
    max_queue: int,
    replicas: int,
    min_replicas: int,
    max_replicas: int,
    n_threads: int,
    gpus: int,
    drain_timeout: float,
) -> dict[str, Any]:
    """The engine deployment's Serve options (see the module's docstring)."""
    from ray.serve.config import RequestRouterConfig

    opts: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": n_threads, "num_gpus": gpus},
        "max_ongoing_requests": max_batch + max_queue,
        "max_queued_requests": max(max_queue, max_batch),
        "graceful_shutdown_timeout_s": drain_timeout,
        "graceful_shutdown_wait_loop_s": 0.5,
        "request_router_config": RequestRouterConfig(request_router_class=ROUTER_CLASS),
    }
    if max_replicas > min_replicas:
        opts["autoscaling_config"] = {
            "min_replicas": min_replicas,
            "initial_replicas": replicas,
            "max_replicas": max_replicas,
            "target_ongoing_requests": max_batch,
            "upscale_delay_s": 10.0,
            "downscale_delay_s": 120.0,
        }
    else:
        opts["num_replicas"] = replicas
    return opts
