"""An HTTP request carried over a Ray Serve handle, and run on a replica's ASGI app in process.

The ingress reads the client's request into a :class:`Call`; the replica runs it on the same
FastAPI app ``trt-spec serve`` runs (:func:`trt_spec.server.app.create_app`) with
:func:`run_asgi`, whose stream of items the ingress turns back into an HTTP response:

1. the replica's id (sent at once: the ingress knows where the request went before any output);
2. a :class:`Head`: the status, the headers and the first body bytes;
3. while ``Head.more``: the body's later bytes, each item everything the app had sent by then
   (a streamed response's server-sent events, coalesced so one handle message carries many).

When the consumer goes away (the client hung up, so the ingress cancelled the call), the app
sees ``http.disconnect``, as from uvicorn, and cancels the request's generation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Any]


@dataclass
class Call:
    """One HTTP request, as the ingress hands it to a replica."""

    method: str
    path: str
    query: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    session: str | None = None  # the session key (routing: trt_spec.ray.router)
    prefix: list[bytes] = field(default_factory=list)  # the prompt's prefix-block keys (routing)
    replica: str | None = None  # a replica's id: this call goes to that replica (/metrics)


@dataclass
class Head:
    """The start of a response: status, headers, the first body bytes, and whether more come."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    more: bool


def _scope(call: Call) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": call.path,
        "raw_path": call.path.encode(),
        "query_string": call.query,
        "root_path": "",
        "headers": call.headers,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": {},
    }


def _server_error(message: str) -> Head:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return Head(500, [(b"content-type", b"application/json")], json.dumps(body).encode(), False)


async def run_asgi(app: ASGIApp, call: Call) -> AsyncIterator[Head | bytes]:
    """Runs `call` on `app`; yields its Head, then (while more come) its later body bytes."""
    sent: asyncio.Queue[dict | None] = asyncio.Queue()  # the app's messages; None: it returned
    gone = asyncio.Event()  # the consumer went away
    body_read = False

    async def receive() -> dict:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.put_nowait(message)

    task = asyncio.ensure_future(app(_scope(call), receive, send))
    task.add_done_callback(lambda _: sent.put_nowait(None))
    status, headers, started = 500, [], False
    try:
        ended = False
        while not ended:
            message = await sent.get()
            if message is None:  # the app returned without finishing a response
                if not started:
                    exc = task.exception() if not task.cancelled() else None
                    yield _server_error(f"the replica's app failed: {exc!r}")
                return
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
                continue
            if message["type"] != "http.response.body":
                continue
            chunks = [message.get("body", b"")]
            more = bool(message.get("more_body", False))
            while more and not sent.empty():  # what else is ready goes in the same item
                nxt = sent.get_nowait()
                if nxt is None:
                    ended = True
                    break
                if nxt["type"] == "http.response.body":
                    chunks.append(nxt.get("body", b""))
                    more = bool(nxt.get("more_body", False))
            body = b"".join(chunks)
            if not started:
                started = True
                yield Head(status, headers, body, more)
            elif body:
                yield body
            ended = ended or not more
    finally:
        gone.set()  # a streaming response hears the disconnect and cancels its generation
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()  # (retrieved: the client already has its response or an error)
