"""``trt-spec serve``: an OpenAI-compatible HTTP server over one engine.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both streaming as server-sent
events or not), ``GET /v1/models``, ``GET /health`` and ``GET /metrics`` (Prometheus). The
parts: :mod:`protocol` (the wire format and its checks), :mod:`metrics`, :mod:`app` (routes,
admission, streaming). Needs the ``server`` extra (FastAPI, uvicorn, prometheus-client).
"""

from __future__ import annotations

import signal
from pathlib import Path

from trt_spec.engine_options import EngineOptions

__all__ = ["serve"]


def serve(
    engine_path: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_queue: int = 64,
    api_key: str | None = None,
    model_name: str | None = None,
    options: EngineOptions | None = None,
    drain_timeout: float = 30.0,
    log_level: str = "info",
) -> None:
    """Loads the engine, then serves it until SIGINT / SIGTERM.

    On SIGTERM the server stops accepting connections, lets the running requests finish (at
    most ``drain_timeout`` seconds) and returns.
    """
    try:
        import uvicorn

        from trt_spec.server.app import create_app
    except ImportError as e:  # the optional dependencies
        raise RuntimeError(
            f"trt-spec serve needs the server extra: pip install 'trt-spec[server]' ({e})"
        ) from None
    if max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {max_queue}")
    engine = EngineOptions.coerce(options).open(engine_path)
    name = model_name or Path(engine_path).stem
    app = create_app(engine, model_name=name, max_queue=max_queue, api_key=api_key)
    # uvicorn drains on SIGTERM, then re-raises the signal to the handler it found: this one
    # ends the process with status 0 (a drained shutdown is a normal exit).
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=drain_timeout,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
