"""The ingress of the Ray Serve application: the HTTP routes, forwarded to the engine replicas.

Every request is read whole, given its routing keys (trt_spec.ray.affinity: the session and the
prompt's prefix blocks) and sent through the engine deployment's handle, whose request router
picks the replica; the replica's response (trt_spec.ray.asgi) is passed on as it comes, so the
routes, their errors and their streaming are the replica's app's, ``trt-spec serve``'s. The
ingress answers itself:

* ``GET /metrics``: every replica's metrics (a ``replica`` label) and the router's
  (trt_spec.ray.metrics);
* 503 with ``Retry-After`` when no replica takes the request within :data:`ROUTE_TIMEOUT_S`, or
  its replica died before answering; a replica that dies mid-stream ends the stream with an
  error event (OpenAI's error body, code ``replica_unavailable``), which the openai client
  raises as an ``APIError``;
* 429 with ``Retry-After`` when every replica is full and the handle's queue too;
* 503 to every new request once draining (SIGTERM), while the requests in flight finish.
"""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from ray import serve
from ray.exceptions import RayError
from ray.serve.exceptions import BackPressureError
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response, StreamingResponse

from trt_spec.ray import affinity, metrics
from trt_spec.ray.asgi import Call, Head
from trt_spec.server.protocol import APIError

ROUTE_TIMEOUT_S = 60.0  # the longest a request waits for a replica to take it
_GENERATE = ("/v1/completions", "/v1/chat/completions")
_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
_HOP_HEADERS = {b"content-length", b"transfer-encoding", b"connection"}


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def _unavailable(message: str) -> APIError:
    return APIError(
        message,
        status=503,
        type="server_error",
        code="replica_unavailable",
        headers={"Retry-After": "1"},
    )


def _cancel(stream: Any) -> None:
    """Cancels a handle call (done or not); a call that failed may raise its error again."""
    try:
        stream.cancel()
    except Exception:  # noqa: BLE001 (its error was handled where it was raised)
        pass


def _sse_error(e: APIError) -> bytes:
    return b"data: " + json.dumps(e.body(), separators=(",", ":")).encode() + b"\n\n"


class _State:
    """This ingress replica's state (one per process): draining, and the requests in flight."""

    draining = False
    in_flight = 0


class _Gate:
    """ASGI middleware: counts the HTTP requests in flight (a stream until its last byte) and
    answers 503 once draining."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if _State.draining:
            e = _unavailable("the server is shutting down; retry on another server")
            return await _error(e)(scope, receive, send)
        _State.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            _State.in_flight -= 1


# (No `from __future__ import annotations` in this module: Serve rebinds the route's method, and
# FastAPI must see its `Request` annotation as a class.)
app = FastAPI(title="trt-spec", docs_url=None, redoc_url=None, openapi_url=None)
app.add_middleware(_Gate)


@serve.ingress(app)
class Ingress:
    """The ingress deployment's class: every route is :meth:`forward`."""

    def __init__(self, engines: Any, route_timeout: float = ROUTE_TIMEOUT_S) -> None:
        self.engines = engines.options(stream=True)
        self.route_timeout = route_timeout

    def drain(self) -> int:
        """Stops taking requests (503 from now on); returns the requests in flight."""
        _State.draining = True
        return _State.in_flight

    def requests_in_flight(self) -> int:
        return _State.in_flight

    # ---- routes -------------------------------------------------------------------------------
    @app.api_route("/{path:path}", methods=_METHODS, include_in_schema=False)
    async def forward(self, request: Request) -> Response:
        path = request.url.path
        if path == "/metrics" and request.method == "GET":
            return Response(await self._metrics(), media_type="text/plain; version=0.0.4")
        body = await request.body()
        call = Call(
            request.method,
            path,
            request.scope.get("query_string", b""),
            list(request.scope["headers"]),
            body,
        )
        if request.method == "POST" and path in _GENERATE:
            try:
                parsed = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                parsed = None  # (the replica answers 400)
            call.session = affinity.session_key(dict(request.headers), parsed)
            call.prefix = affinity.prefix_keys(affinity.prompt_text(parsed))
        try:
            replica, head, stream = await self._send(call)
        except APIError as e:
            return _error(e)
        if call.session or call.prefix:
            affinity.TABLE.remember(call, replica)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers
                   if k.lower() not in _HOP_HEADERS}  # fmt: skip
        if not head.more:
            return Response(head.body, status_code=head.status, headers=headers)
        sse = headers.get("content-type", "").startswith("text/event-stream")

        async def cancel() -> None:  # (after the response, also when the client hung up first)
            _cancel(stream)

        return StreamingResponse(
            self._rest(head.body, stream, sse),
            status_code=head.status,
            headers=headers,
            background=BackgroundTask(cancel),
        )

    async def _send(self, call: Call) -> tuple[str, Head, Any]:
        """Sends the call; returns the replica that took it, the response's Head and the
        response stream for the rest. A replica that is not found in time or dies before its
        Head is a 503; a full deployment a 429."""
        stream = self.engines.call.remote(call)
        try:
            replica = await asyncio.wait_for(stream.__anext__(), self.route_timeout)
            head = await stream.__anext__()
        except BackPressureError:  # (never sent: nothing to cancel)
            raise APIError(
                "every replica is at capacity; retry later",
                status=429,
                type="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": "1"},
            ) from None
        except asyncio.TimeoutError:
            _cancel(stream)
            raise _unavailable(f"no replica took the request in {self.route_timeout:g} s") from None
        except (RayError, StopAsyncIteration) as e:
            _cancel(stream)
            raise _unavailable(f"the replica failed before answering ({type(e).__name__})") from e
        except BaseException:  # (cancelled: the client hung up; the replica stops too)
            _cancel(stream)
            raise
        return replica, head, stream

    async def _rest(self, first: bytes, stream: Any, sse: bool) -> AsyncIterator[bytes]:
        """A streamed response's bytes; an error event if its replica dies mid-stream."""
        try:
            if first:
                yield first
            async for chunk in stream:
                yield chunk
        except RayError as e:
            if sse:
                yield _sse_error(_unavailable(f"the replica died mid-stream ({type(e).__name__})"))
        finally:
            _cancel(stream)  # (a client that hung up: the replica cancels the generation)

    async def _metrics(self) -> bytes:
        """The replicas' metrics, each asked of its own replica, and the router's. (One call at
        a time: Serve's router tells a request's concurrent handle calls apart by the request's
        id, which they share.)"""
        live = affinity.ROUTERS[-1].replica_ids() if affinity.ROUTERS else []
        if not live:  # (the handle's router starts with the first request)
            live = [None]

        async def one(replica: str | None) -> tuple[str, str] | None:
            call = Call("GET", "/metrics", replica=replica)
            try:
                got, head, stream = await asyncio.wait_for(self._send(call), 10.0)
            except (APIError, asyncio.TimeoutError):
                return None
            _cancel(stream)
            if replica is not None and got != replica:
                return None  # (that replica is gone; its call went to another)
            return got, head.body.decode()

        found = [r for r in [await one(r) for r in live] if r is not None]
        families = metrics.merge(dict(found))
        n = len(affinity.ROUTERS[-1].replica_ids()) if affinity.ROUTERS else len(found)
        families += metrics.router_families(
            n, affinity.ROUTED, len(affinity.TABLE), max(0, _State.in_flight - 1)
        )
        return metrics.render(families)
