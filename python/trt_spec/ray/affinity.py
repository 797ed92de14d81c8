"""Which replica a request has affinity to: the keys, and the table of where they went.

A replica's prompt cache holds the prompts its slots served last, so a conversation's next turn
is cheapest on the replica that served the previous one. Two keys say where that is:

* the session: the ``X-Session-Id`` header, else the body's ``user`` field; a session stays on
  the replica that served it last;
* the prompt's prefix: the prompt's text (a chat's messages, each as canonical JSON, one after
  the other, so that a conversation's earlier turns are a prefix of its later ones) cut into
  blocks of :data:`BLOCK_CHARS` characters, each key a hash of all the blocks up to it. The
  replica that last served the longest matching run of blocks holds that prefix.

The ingress records where each request went (:data:`TABLE`); the request router
(trt_spec.ray.router, inside the ingress's deployment handle) reads it. That state lives here,
not in the router's module: Serve ships a request router's module to the handle by value, so
its own globals would be copies.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from trt_spec.ray.asgi import Call

BLOCK_CHARS = 64  # characters per prefix block
MAX_BLOCKS = 256  # at most the prompt's first 16 KiB characters are keyed
MAX_KEYS = 200_000  # affinity entries kept (least recently used dropped)
LOAD_SLACK = 1  # affinity wins while its replica has at most this many more requests in flight

ROUTE_SESSION = "session"
ROUTE_PREFIX = "prefix"
ROUTE_LEAST_LOADED = "least_loaded"
ROUTE_PINNED = "pinned"
ROUTES = (ROUTE_SESSION, ROUTE_PREFIX, ROUTE_LEAST_LOADED, ROUTE_PINNED)


def session_key(headers: dict[str, str], body: Any) -> str | None:
    """The request's session: the X-Session-Id header, else the body's ``user``."""
    sid = headers.get("x-session-id")
    if sid:
        return "h:" + sid
    if isinstance(body, dict) and isinstance(body.get("user"), str) and body["user"]:
        return "u:" + body["user"]
    return None


def prompt_text(body: Any) -> str:
    """The text a request's prompt cache entry starts with ('' when there is none)."""
    if not isinstance(body, dict):
        return ""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "".join(json.dumps(m, sort_keys=True, separators=(",", ":")) for m in messages)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]  # a batch of prompts: the first
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):  # token ids
        return ",".join(str(t) for t in prompt)
    return ""


def prefix_keys(text: str) -> list[bytes]:
    """The keys of the text's whole blocks: key i hashes blocks 0..i."""
    h = hashlib.blake2b(digest_size=8)
    keys = []
    for i in range(min(len(text) // BLOCK_CHARS, MAX_BLOCKS)):
        h.update(text[i * BLOCK_CHARS : (i + 1) * BLOCK_CHARS].encode("utf-8", "surrogatepass"))
        keys.append(h.copy().digest())
    return keys


class AffinityTable:
    """Session and prefix keys -> the replica that served them last (bounded, LRU)."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._map: OrderedDict[Any, str] = OrderedDict()
        self._max = max_keys
        self._mu = threading.Lock()

    def remember(self, call: Call, replica: str) -> None:
        with self._mu:
            for key in ([call.session] if call.session else []) + call.prefix:
                self._map[key] = replica
                self._map.move_to_end(key)
            while len(self._map) > self._max:
                self._map.popitem(last=False)

    def lookup(self, call: Call, live: set[str]) -> tuple[str | None, str]:
        """The live replica the call has affinity to and why (session / prefix), else
        (None, least_loaded)."""
        with self._mu:
            if call.session:
                r = self._map.get(call.session)
                if r in live:
                    return r, ROUTE_SESSION
            for key in reversed(call.prefix):  # the longest matching prefix first
                r = self._map.get(key)
                if r in live:
                    return r, ROUTE_PREFIX
        return None, ROUTE_LEAST_LOADED

    def forget(self, replica: str) -> None:
        with self._mu:
            for key in [k for k, r in self._map.items() if r == replica]:
                del self._map[key]

    def __len__(self) -> int:
        return len(self._map)


# The ingress process's routing state, shared by the ingress (which records where each request
# went) and the request router in its deployment handle (which reads it).
TABLE = AffinityTable()
ROUTERS: list[Any] = []  # the AffinityRouter instances of this process (the ingress lists replicas)
ROUTED: dict[str, int] = dict.fromkeys(ROUTES, 0)  # requests routed, by reason


def preference(
    preferred: str | None, loads: dict[str, float], slack: int = LOAD_SLACK
) -> list[str]:
    """Replica ids in the order to try: the preferred one if its load is within `slack` of the
    least loaded replica's, then the others, least loaded first."""
    order = sorted(loads, key=lambda r: loads[r])
    if preferred in loads and loads[preferred] <= loads[order[0]] + slack:
        order.remove(preferred)
        order.insert(0, preferred)
    return order
