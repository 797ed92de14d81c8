"""The HTTP app of ``trt-spec serve``: OpenAI-compatible routes over one :class:`Engine`.

Batching: every request runs ``Engine.generate`` on a worker thread. The engine's requests all
join one C++ scheduler, so concurrent requests decode together in one batch (in-flight
batching: a request joins at the next iteration and leaves when it is done, up to the engine's
``max_batch``; later ones wait in the scheduler's queue, long prompts prefill in chunks between
the others' iterations). Beyond ``max_batch + max_queue`` requests in flight the answer is 429
with ``Retry-After``.

Streaming: the worker pushes each piece of text to the response as it becomes final. A client
that disconnects sets a flag the worker checks after every piece, so its request is cancelled
(and its KV slot freed) within one iteration.

Errors: OpenAI's error body (protocol.APIError) for bad input (400), an unknown model (404),
a missing or wrong API key (401) and a full queue (429); the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trt_spec.engine import Engine, GenerationResult
from trt_spec.server import choices, protocol
from trt_spec.server.metrics import CONTENT_TYPE, ServerMetrics
from trt_spec.server.protocol import APIError


class _Admission:
    """Requests in flight (admitted, not finished) against the server's capacity."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_flight = 0
        self._mu = threading.Lock()

    def enter(self) -> None:
        with self._mu:
            if self.in_flight >= self.capacity:
                raise APIError(
                    f"the server is at capacity ({self.capacity} requests in flight); retry later",
                    status=429,
                    type="rate_limit_error",
                    code="queue_full",
                    headers={"Retry-After": "1"},
                )
            self.in_flight += 1

    def leave(self) -> None:
        with self._mu:
            self.in_flight -= 1


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def create_app(
    engine: Engine, *, model_name: str, max_queue: int = 64, api_key: str | None = None
) -> FastAPI:
    """The app serving ``engine`` as ``model_name``."""
    app = FastAPI(title="trt-spec", docs_url=None, redoc_url=None)
    admission = _Admission(engine.max_batch + max(0, max_queue))
    limiter = anyio.CapacityLimiter(admission.capacity + 4)
    metrics = ServerMetrics(
        running=lambda: engine.running_requests,
        waiting=lambda: engine.waiting_requests,
        max_batch=engine.max_batch,
        max_seq_len=engine.max_seq_len,
    )
    app.state.engine = engine
    app.state.admission = admission
    app.state.metrics = metrics

    def error_response(e: APIError) -> JSONResponse:
        metrics.error(e.status)
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    def authorize(request: Request) -> None:
        """With an API key, every /v1 route needs 'Authorization: Bearer KEY'. (A check in the
        routes, not an HTTP middleware: Starlette's would answer a streaming response's
        receive() with a disconnect once the body is read.)"""
        if api_key is not None and request.headers.get("authorization", "") != f"Bearer {api_key}":
            raise APIError(
                "missing or invalid API key",
                status=401,
                type="authentication_error",
                code="invalid_api_key",
            )

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def get_metrics() -> Response:
        # (on a worker thread: the engine's gauges wait for a running scheduler step)
        return Response(await anyio.to_thread.run_sync(metrics.render), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        try:
            authorize(request)
        except APIError as e:
            return error_response(e)
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "trt-spec",
                    "root": model_name,
                    "parent": None,
                    "max_model_len": engine.max_seq_len,
                }
            ],
        }

    async def handle(request: Request, chat: bool) -> Response:
        try:
            authorize(request)
            raw = await request.body()
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise APIError(f"the request body is not valid JSON ({e})") from None
            req = protocol.parse(
                body, chat=chat, model_name=model_name, max_seq_len=engine.max_seq_len
            )
            admission.enter()
        except APIError as e:
            return error_response(e)
        handed_off = False  # a stream's worker threads leave admission when they end
        try:
            if req.stream:
                response = await _stream(req)
                handed_off = True
                return response
            results = await anyio.to_thread.run_sync(_generate, req, limiter=limiter)
        except APIError as e:
            return error_response(e)
        finally:
            if not handed_off:
                admission.leave()
        for r in results:
            metrics.observe(r)
        return JSONResponse(protocol.response(req, results, engine.token_bytes))

    def _engine_error(req: protocol.Request, e: ValueError) -> APIError:
        """The engine's own checks (prompt too long, bad ids, a grammar llguidance refused) as a
        400 naming the field where the message tells it."""
        msg = str(e)
        param = next((f for f in ("logit_bias", "logprobs") if msg.startswith(f)), None)
        if msg.startswith("invalid") and req.constraint_field:
            param = req.constraint_field
        return APIError(msg, param=param)

    def _generate(req: protocol.Request) -> list[GenerationResult]:
        try:
            return choices.generate(engine, req)
        except ValueError as e:
            raise _engine_error(req, e) from None

    def _open_streams(req: protocol.Request) -> list[choices.ChoiceStream]:
        """The n choices' streams, submitted (errors still get their status)."""
        opened: list[choices.ChoiceStream] = []
        try:
            for i, seed in enumerate(choices.seeds(req, req.n)):
                opened.append(choices.ChoiceStream(engine, req, i, seed))
        except ValueError as e:
            for c in opened:
                c.stream.close()
            raise _engine_error(req, e) from None
        return opened

    async def _stream(req: protocol.Request) -> StreamingResponse:
        """Submits the request's choices, then streams their pieces as they come."""
        streams = await anyio.to_thread.run_sync(_open_streams, req, limiter=limiter)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, int, Any]] = asyncio.Queue()
        cancelled = threading.Event()
        left = [len(streams)]  # worker threads still running (the last leaves admission)
        mu = threading.Lock()

        def put(item: tuple[str, int, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work(c: choices.ChoiceStream) -> None:
            try:
                for piece in c.stream:
                    if cancelled.is_set():
                        metrics.request_cancelled.inc()
                        return
                    put(("text", c.index, (c.shown(piece), c.new_logprobs(None))))
                tail, calls = c.finish()
                res = c.stream.result
                put(("done", c.index, (res, c.new_logprobs(res), tail, calls)))
            except BaseException as e:  # reported to the client as a last error event
                put(("error", c.index, e))
            finally:
                c.stream.close()  # a cancelled request frees its slot at the next step
                with mu:
                    left[0] -= 1
                    if left[0] == 0:
                        admission.leave()

        for c in streams:
            threading.Thread(target=work, args=(c,), name=f"trt-spec {req.id}", daemon=True).start()

        async def events() -> AsyncIterator[bytes]:
            first = [True] * len(streams)
            done: list[GenerationResult] = []
            try:
                while True:
                    kind, i, value = await queue.get()
                    if kind == "text":
                        piece, logprobs = value
                        if not piece and logprobs is None:
                            continue  # (held back: it may begin a tool call)
                        yield _sse(
                            protocol.chunk(req, piece, first=first[i], logprobs=logprobs, index=i)
                        )
                        first[i] = False
                    elif kind == "done":
                        result: GenerationResult = value[0]
                        tail, calls = value[2], value[3]
                        metrics.observe(result)
                        if tail:
                            yield _sse(protocol.chunk(req, tail, first=first[i], index=i))
                            first[i] = False
                        if calls:
                            yield _sse(
                                protocol.tool_calls_chunk(req, calls, first=first[i], index=i)
                            )
                            first[i] = False
                        finish = "tool_calls" if calls else protocol.finish_reason(result)
                        yield _sse(
                            protocol.chunk(
                                req, None, finish, first=first[i], logprobs=value[1], index=i
                            )
                        )
                        done.append(result)
                        if len(done) == len(streams):
                            if req.include_usage:
                                yield _sse(protocol.usage_chunk(req, done))
                            yield b"data: [DONE]\n\n"
                            return
                    else:
                        metrics.error(500)
                        yield _sse(APIError(str(value), status=500, type="server_error").body())
                        return
            finally:
                cancelled.set()

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await handle(request, chat=True)

    return app
