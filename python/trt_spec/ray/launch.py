"""``trt-spec serve ENGINE --replicas N``: the Ray Serve application, started and stopped.

The command checks its options and the engine file, starts a local Ray instance (or joins a
cluster with ``--address``), deploys the application (the ingress in front of the engine
replicas: trt_spec.ray.ingress, trt_spec.ray.deployment) under the name ``trt-spec``, prints
where it serves, and waits. On SIGTERM or SIGINT it drains: the ingress answers new requests
503, the requests in flight finish (at most ``--drain-timeout`` seconds), then the application
is deleted (with a local Ray instance, Serve and Ray are shut down) and the command exits 0.

On a cluster (``--address``) every node that may host a replica needs trt-spec installed and the
engine file at the same path; Serve's HTTP options (host, port) apply only if this command is the
first to start Serve there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_spec.ray.deployment import ReplicaConfig

APP_NAME = "trt-spec"
_HEADER = struct.Struct("<8sIIQQQQQQ")  # the engine file's header (cpp/format/engine_file.h)


@dataclass
class RayOptions:
    """How many replicas, where, and how to stop (the replicas' engine: ``replica``)."""

    replica: ReplicaConfig
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    address: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    drain_timeout: float = 30.0
    log_level: str = "info"


@dataclass
class Plan:
    """The checked replica counts and each replica's resources."""

    replicas: int
    min_replicas: int
    max_replicas: int
    n_threads: int
    gpus: int
    max_batch: int


def read_build(path: str) -> dict:
    """The engine file's build options (``max_batch``, ``max_seq_len``...), read from its header
    and metadata without loading it; a missing or foreign file is a ValueError."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"engine file not found: {path}")
    with p.open("rb") as f:
        raw = f.read(_HEADER.size)
        if len(raw) < _HEADER.size or not raw.startswith(b"TRTSPEC\0"):
            raise ValueError(f"{path} is not a trt-spec engine file")
        _, _, _, json_offset, json_bytes, *_ = _HEADER.unpack(raw)
        f.seek(json_offset)
        try:
            return dict(json.loads(f.read(json_bytes))["build"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: unreadable engine metadata ({e})") from None


def plan(opts: RayOptions, cpu_count: int | None = None, gpus_available: int = 0) -> Plan:
    """Checks the replica options (ValueError with the flag's name) and sizes the replicas:
    ``--replicas`` alone is a fixed count; ``--min-replicas`` / ``--max-replicas`` bound
    autoscaling, starting at ``--replicas`` (default: the minimum)."""
    for name, v in (
        ("--replicas", opts.replicas),
        ("--min-replicas", opts.min_replicas),
        ("--max-replicas", opts.max_replicas),
    ):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    lo = opts.min_replicas if opts.min_replicas is not None else 1
    hi = opts.max_replicas if opts.max_replicas is not None else max(opts.replicas or lo, lo)
    if opts.min_replicas is None and opts.max_replicas is None:
        lo = hi = opts.replicas or 1
    if lo > hi:
        raise ValueError(f"--min-replicas ({lo}) must be at most --max-replicas ({hi})")
    n = opts.replicas if opts.replicas is not None else lo
    if not lo <= n <= hi:
        raise ValueError(f"--replicas ({n}) must be between --min-replicas ({lo}) and "
                         f"--max-replicas ({hi})")  # fmt: skip
    if opts.drain_timeout < 0:
        raise ValueError(f"--drain-timeout must be >= 0, got {opts.drain_timeout}")
    device = opts.replica.options.device
    if device.startswith("cuda:"):
        raise ValueError(
            "--device cuda:N names one GPU; with --replicas Ray gives each replica its own GPU "
            "(use --device cuda or auto)"
        )
    gpus = 1 if device == "cuda" or (device == "auto" and gpus_available > 0) else 0
    threads = opts.replica.options.n_threads
    if threads is None:  # the cores, shared by the replicas that start
        threads = 1 if gpus else max(1, (cpu_count or os.cpu_count() or 1) // n)
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    max_batch = int(read_build(opts.replica.engine)["max_batch"])
    return Plan(n, lo, hi, threads, gpus, max_batch)


def _check_port(host: str, port: int) -> None:
    """A port another process listens on is an error here, not a Serve proxy failing later."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _import_ray() -> None:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            f"trt-spec serve --replicas needs Ray Serve: pip install 'trt-spec[ray]' ({e})"
        ) from None


def serve(opts: RayOptions) -> int:
    """Runs the application until SIGTERM / SIGINT, then drains it (module docstring)."""
    _import_ray()
    import ray

    first = plan(opts)  # (the options' errors before Ray starts)
    if opts.address is None:
        _check_port(opts.host, opts.port)
    quiet = opts.log_level in ("critical", "error", "warning")
    local = opts.address is None
    init: dict = dict(
        address=opts.address,
        include_dashboard=False,
        log_to_driver=not quiet,
        logging_level=opts.log_level.upper(),
    )
    if local:  # (logical CPUs: every replica fits; the cores are shared as --threads says)
        init["num_cpus"] = max(os.cpu_count() or 1, first.max_replicas * first.n_threads)
    ray.init(**init)
    stop = threading.Event()
    handlers = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    ingress = None
    try:
        p = plan(opts, gpus_available=int(ray.cluster_resources().get("GPU", 0)))
        ingress = _deploy(opts, p)
        print(
            f"trt-spec: serving {opts.replica.model_name} at http://{opts.host}:{opts.port}/v1 "
            f"with {p.replicas} replica(s) (min {p.min_replicas}, max {p.max_replicas}; "
            f"{p.n_threads} thread(s){', 1 GPU' if p.gpus else ''} each)",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        # Bounded: a SIGTERM sent to the whole process group has stopped Ray's own processes too.
        t = threading.Thread(target=_shutdown, args=(opts, ingress, local), daemon=True)
        t.start()
        t.join(opts.drain_timeout + 30)
        if t.is_alive():
            print("trt-spec: error: Ray did not shut down in time", file=sys.stderr, flush=True)
            os._exit(1)
    return 0


def _shutdown(opts: RayOptions, ingress: object, local: bool) -> None:
    """Drains the ingress (if it was deployed), then removes the application and stops Serve
    and Ray where this command started them."""
    import ray
    from ray import serve

    try:
        if ingress is not None:
            _drain(opts, ingress)
        if local:
            serve.shutdown()
        elif ingress is not None:
            serve.delete(APP_NAME)
    except Exception as e:  # (reported; Ray is shut down all the same)
        print(f"trt-spec: shutting down: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()


def _deploy(opts: RayOptions, p: Plan) -> Any:
    """Deploys the application; returns the ingress's handle."""
    from dataclasses import asdict, replace

    from ray import serve

    from trt_spec.ray.deployment import EngineReplica, deployment_options
    from trt_spec.ray.ingress import Ingress

    device = "cuda" if p.gpus else opts.replica.options.device
    options = replace(opts.replica.options, n_threads=p.n_threads, device=device)
    config = replace(opts.replica, options=options)
    engines = serve.deployment(EngineReplica, name="Engine").options(
        **deployment_options(
            max_batch=p.max_batch,
            max_queue=config.max_queue,
            replicas=p.replicas,
            min_replicas=p.min_replicas,
            max_replicas=p.max_replicas,
            n_threads=p.n_threads,
            gpus=p.gpus,
            drain_timeout=opts.drain_timeout,
        )
    )
    ingress = serve.deployment(
        Ingress,
        name="Ingress",
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=100_000,  # (the engines' limits apply; the ingress only forwards)
        graceful_shutdown_timeout_s=opts.drain_timeout + 5,
    )
    level = "INFO" if opts.log_level == "info" else opts.log_level.upper()
    serve.start(
        http_options={"host": opts.host, "port": opts.port},
        logging_config={"log_level": level, "enable_access_log": level == "INFO"},
    )
    return serve.run(
        ingress.bind(engines.bind(asdict(config))),
        name=APP_NAME,
        route_prefix="/",
        logging_config={"log_level": level, "enable_access_log": level == "INFO"},
    )


def _drain(opts: RayOptions, ingress: Any) -> None:
    """New requests get 503; the requests in flight finish (at most --drain-timeout)."""
    deadline = time.monotonic() + opts.drain_timeout
    left = ingress.drain.remote().result(timeout_s=10)
    while left > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        left = ingress.requests_in_flight.remote().result(timeout_s=10)
    if left:
        print(
            f"trt-spec: {left} request(s) still running after --drain-timeout",
            file=sys.stderr,
            flush=True,
        )
