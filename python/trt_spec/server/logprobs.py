"""OpenAI's log-probability objects, from the engine's :class:`~trt_spec.TokenLogprob` entries.

Chat completions (``logprobs: true``, ``top_logprobs: n``)::

    "logprobs": {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
    "bytes"}]}], "refusal": null}

Completions (``logprobs: n``)::

    "logprobs": {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
    "text_offset": [...]}

A token's text is its bytes decoded as UTF-8 (a token holding part of a character shows U+FFFD;
``bytes`` keeps the exact bytes). The entries cover the tokens of the answer's text: a final
stop token, which the text leaves out, has none. JSON has no infinity: a token that top-k or
top-p left out (never one that was generated) would read ``-9999.0``, as OpenAI writes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from trt_spec.engine import TokenLogprob

TokenBytes = Callable[[int], bytes]
_FLOOR = -9999.0


def _value(lp: float) -> float:
    return lp if math.isfinite(lp) else _FLOOR


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def chat(entries: Sequence[TokenLogprob], token_bytes: TokenBytes) -> dict[str, Any]:
    """The chat ``logprobs`` object of a message or a streamed delta."""

    def one(token: int, lp: float) -> dict[str, Any]:
        b = token_bytes(token)
        return {"token": _text(b), "logprob": _value(lp), "bytes": list(b)}

    content = []
    for e in entries:
        item = one(e.token_id, e.logprob)
        item["top_logprobs"] = [one(t, v) for t, v in e.top]
        content.append(item)
    return {"content": content, "refusal": None}


def completion(
    entries: Sequence[TokenLogprob], token_bytes: TokenBytes, offset: int = 0
) -> dict[str, Any]:
    """The completions ``logprobs`` object; ``offset``: characters of text before these tokens
    (a stream's earlier chunks)."""
    tokens, values, tops, offsets = [], [], [], []
    for e in entries:
        text = _text(token_bytes(e.token_id))
        tokens.append(text)
        values.append(_value(e.logprob))
        top: dict[str, float] = {}
        for t, v in e.top:
            top.setdefault(_text(token_bytes(t)), _value(v))
        tops.append(top)
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def answer_entries(
    entries: Sequence[TokenLogprob], token_ids: Sequence[int], finish_reason: str
) -> list[TokenLogprob]:
    """The entries of the answer's text: all but a final stop token's."""
    n = len(token_ids) - (1 if finish_reason == "stop_token" and token_ids else 0)
    return list(entries[:n])
