"""The OpenAI wire format of ``trt-spec serve``: request parsing and validation, response bodies.

Requests are checked here, before they reach the engine: a wrong type, an out-of-range value,
an unknown model or any field this server does not implement is an :class:`APIError` (HTTP 400
with OpenAI's error body), never silently ignored. What the engine itself refuses (a prompt
longer than the context, an id outside the vocabulary) comes back from it as ``ValueError`` and
is answered the same way by the app.

Supported: ``model``, ``prompt`` (completions: text or token ids) / ``messages`` (chat),
``max_tokens`` (chat also ``max_completion_tokens``), ``temperature``, ``top_p``, ``seed``,
``stop``, ``stream``, ``stream_options.include_usage``, ``logprobs`` (chat: with
``top_logprobs``; completions: the number of top entries, up to 20), ``prediction`` (OpenAI's
Predicted Outputs, drafted from by prompt lookup), ``presence_penalty``, ``frequency_penalty``,
``logit_bias``, ``response_format`` (``json_object``, ``json_schema``) and the extras ``regex`` and
``grammar`` (Lark or GBNF; structured output: trt_spec/grammar.py), ``repetition_penalty``,
``top_k``, ``draft``, ``draft_len`` and ``ignore_eos`` (as vLLM's: generate to ``max_tokens``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from trt_spec.engine import DRAFT_MODES, GenerationResult
from trt_spec.grammar import constraint_spec
from trt_spec.server import logprobs as lp
from trt_spec.tools import ToolCall, check_tools, parse_tool_calls

# Fields accepted with no effect on the output (OpenAI's bookkeeping).
_HARMLESS = {"user", "metadata", "store"}
# Fields refused unless they have their neutral value (name -> accepted values).
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "echo": (False, None),
    "suffix": (None, ""),
    "functions": (None,),
    "function_call": (None, "none"),
    "service_tier": (None, "auto", "default"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "reasoning_effort": (None,),
}
_COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "prediction",
    "top_k",
    "draft",
    "draft_len",
    "ignore_eos",
    "logprobs",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "response_format",
    "regex",
    "grammar",
}
COMPLETION_FIELDS = _COMMON | {"prompt", "best_of"} | _HARMLESS | set(_NEUTRAL)
CHAT_FIELDS = (
    _COMMON
    | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice"}
    | {"parallel_tool_calls"}
    | _HARMLESS
    | set(_NEUTRAL)
)


class APIError(Exception):
    """An error answered with OpenAI's body: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class Request:
    """A validated completion or chat request."""

    chat: bool
    prompt: Any  # text or token ids (completions) / the messages (chat)
    model: str
    max_tokens: int
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # top entries per token, or None: no log-probabilities
    constraint_field: str | None = None  # the field holding a structured-output spec
    tool_names: list[str] | None = None  # the request's tools (None: no tools)
    n: int = 1  # choices returned
    best_of: int = 1  # choices generated (the n of highest log-probability returned)
    gen: dict[str, Any] = field(default_factory=dict)  # Engine.generate keyword arguments
    id: str = ""
    created: int = 0


def _bad(message: str, param: str) -> APIError:
    return APIError(message, param=param)


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(f"'{name}' must be a number, got {type(v).__name__}", name)
    if not lo <= v <= hi:
        raise _bad(f"'{name}' must be in [{lo}, {hi}], got {v}", name)
    return float(v)


def _integer(body: dict, name: str, default: int | None, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"'{name}' must be an integer, got {type(v).__name__}", name)
    if not lo <= v <= hi:
        raise _bad(f"'{name}' must be in [{lo}, {hi}], got {v}", name)
    return v


def _flag(body: dict, name: str) -> bool:
    v = body.get(name, False)
    if not isinstance(v, bool):
        raise _bad(f"'{name}' must be a boolean", name)
    return v


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _bad("'stop' must be a non-empty string or a list of them", "stop")
    if len(stops) > 16:
        raise _bad("'stop' takes at most 16 strings", "stop")
    return stops


def _prediction(body: dict) -> str | None:
    v = body.get("prediction")
    if v is None:
        return None
    if not isinstance(v, dict) or v.get("type") != "content":
        raise _bad('\'prediction\' must be {"type": "content", "content": ...}', "prediction")
    content = v.get("content")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            raise _bad("'prediction.content' parts must be text parts", "prediction")
        content = "".join(str(p.get("text", "")) for p in content)
    if not isinstance(content, str):
        raise _bad("'prediction.content' must be text", "prediction")
    return content


def _logit_bias(body: dict) -> dict[int, float] | None:
    """OpenAI's ``{"token id": bias}`` (ids as strings) -> {id: bias}; the vocabulary range is
    the engine's check."""
    v = body.get("logit_bias")
    if v is None:
        return None
    if not isinstance(v, dict):
        raise _bad("'logit_bias' must be an object of token ids to numbers", "logit_bias")
    if len(v) > 300:
        raise _bad("'logit_bias' takes at most 300 entries", "logit_bias")
    out = {}
    for key, bias in v.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise _bad(f"'logit_bias' keys must be token ids, got {key!r}", "logit_bias") from None
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise _bad("'logit_bias' values must be numbers in [-100, 100]", "logit_bias")
        out[token] = float(bias)
    return out


def _logprobs(body: dict, chat: bool) -> int | None:
    """Top entries per token, or None. Chat: ``logprobs`` (bool) and ``top_logprobs``;
    completions: ``logprobs`` (an integer)."""
    if not chat:
        return _integer(body, "logprobs", None, 0, 20)
    want = body.get("logprobs")
    if want is not None and not isinstance(want, bool):
        raise _bad("'logprobs' must be a boolean", "logprobs")
    top = _integer(body, "top_logprobs", None, 0, 20)
    if top is not None and not want:
        raise _bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return (top or 0) if want else None


def _messages(body: dict) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("'messages' must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a 'role'", "messages")
        content = m.get("content")
        if isinstance(content, list):  # text content parts only
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise _bad(f"messages[{i}]: only text content is supported", "messages")
            content = "".join(str(p.get("text", "")) for p in content)
        calls = m.get("tool_calls")
        if content is None and m["role"] == "assistant" and calls:
            content = ""
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be text", "messages")
        msg: dict[str, Any] = {"role": m["role"], "content": content}
        if calls is not None:
            if not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls
            ):
                raise _bad(f"messages[{i}].tool_calls must be a list of calls", "messages")
            msg["tool_calls"] = calls
        if isinstance(m.get("tool_call_id"), str):
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


def _prompt(body: dict) -> str | list[int]:
    p = body.get("prompt")
    if isinstance(p, str):
        return p
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
        if isinstance(p, str):
            return p
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return list(p)
    raise _bad("'prompt' must be a string or a list of token ids (one prompt)", "prompt")


def parse(body: Any, *, chat: bool, model_name: str, max_seq_len: int) -> Request:
    """Validates a request body; raises APIError (400/404) on anything it cannot honour."""
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    allowed = CHAT_FIELDS if chat else COMPLETION_FIELDS
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise _bad(f"unsupported field(s): {', '.join(unknown)}", unknown[0])
    for name, ok in _NEUTRAL.items():
        if name in body and body[name] not in ok:
            raise _bad(f"'{name}' = {body[name]!r} is not supported by this server", name)
    model = body.get("model")
    if not isinstance(model, str):
        raise _bad("'model' must be a string", "model")
    if model != model_name:
        raise APIError(
            f"The model '{model}' does not exist (this server serves '{model_name}')",
            status=404,
            param="model",
            code="model_not_found",
        )
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict) or set(opts) - {"include_usage"}:
            raise _bad("'stream_options' supports only include_usage", "stream_options")
        include_usage = bool(opts.get("include_usage", False))
        if not stream:
            raise _bad("'stream_options' needs 'stream': true", "stream_options")
    max_tokens = _integer(body, "max_tokens", None, 1, max_seq_len)
    if chat:
        mct = _integer(body, "max_completion_tokens", None, 1, max_seq_len)
        if max_tokens is not None and mct is not None and mct != max_tokens:
            raise _bad("'max_tokens' and 'max_completion_tokens' disagree", "max_tokens")
        max_tokens = max_tokens if max_tokens is not None else mct
    if max_tokens is None:
        max_tokens = 16 if not chat else max_seq_len
    draft = body.get("draft", "auto")
    if draft not in DRAFT_MODES:
        raise _bad(f"'draft' must be one of {', '.join(DRAFT_MODES)}", "draft")
    draft_len = body.get("draft_len", "auto")
    if draft_len != "auto" and (
        isinstance(draft_len, bool) or not isinstance(draft_len, int) or draft_len < 0
    ):
        raise _bad("'draft_len' must be 'auto' or an integer >= 0", "draft_len")
    gen = {
        "max_new_tokens": max_tokens,
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0),
        "top_k": _integer(body, "top_k", 0, 0, 1 << 30),
        "seed": _integer(body, "seed", 0, -(1 << 63), (1 << 64) - 1) % (1 << 64),
        "stop": _stop(body) or None,
        "draft": draft,
        "draft_len": draft_len,
        "prediction": _prediction(body),
        "ignore_eos": _flag(body, "ignore_eos"),
    }
    if gen["top_p"] == 0.0:
        raise _bad("'top_p' must be > 0", "top_p")
    gen["logprobs"] = _logprobs(body, chat)
    gen["presence_penalty"] = _number(body, "presence_penalty", 0.0, -2.0, 2.0)
    gen["frequency_penalty"] = _number(body, "frequency_penalty", 0.0, -2.0, 2.0)
    gen["repetition_penalty"] = _number(body, "repetition_penalty", 1.0, 0.0, 100.0)
    if gen["repetition_penalty"] == 0.0:
        raise _bad("'repetition_penalty' must be > 0", "repetition_penalty")
    gen["logit_bias"] = _logit_bias(body)
    field_name = None
    for name in ("response_format", "regex", "grammar"):
        if body.get(name) is not None:
            if field_name is not None:
                raise _bad(f"'{name}' and '{field_name}' cannot be combined", name)
            field_name = name
            gen[name] = body[name]
    tool_names = None
    if chat and body.get("tools") is not None:
        try:
            check_tools(body["tools"], body.get("tool_choice"))
        except ValueError as e:
            raise _bad(str(e), "tool_choice" if "tool_choice" in str(e) else "tools") from None
        if body.get("tool_choice") not in (None, "none", "auto") and field_name is not None:
            raise _bad("a required or named tool_choice cannot take another constraint", field_name)
        parallel = body.get("parallel_tool_calls", True)
        if not isinstance(parallel, bool):
            raise _bad("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
        gen.update(tools=body["tools"], tool_choice=body.get("tool_choice"))
        gen["parallel_tool_calls"] = parallel
        if body.get("tool_choice") != "none":
            tool_names = [t["function"]["name"] for t in body["tools"]]
    elif chat and body.get("tool_choice") not in (None, "none", "auto"):
        raise _bad("'tool_choice' needs 'tools'", "tool_choice")
    if field_name is not None:
        try:  # (the structure here; the grammar itself is the engine's check)
            constraint_spec(**{field_name: body[field_name]})
        except ValueError as e:
            raise _bad(str(e), field_name) from None
    n = _integer(body, "n", 1, 1, 16)
    best_of = _integer(body, "best_of", n, 1, 16)
    if best_of < n:
        raise _bad("'best_of' must be at least 'n'", "best_of")
    if stream and best_of > n:
        raise _bad("'best_of' cannot be streamed", "best_of")
    prompt = _messages(body) if chat else _prompt(body)
    kind = "chatcmpl" if chat else "cmpl"
    return Request(
        chat=chat,
        prompt=prompt,
        model=model,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        logprobs=gen["logprobs"],
        constraint_field=field_name,
        tool_names=tool_names,
        n=n,
        best_of=best_of,
        gen=gen,
        id=f"{kind}-{uuid.uuid4().hex}",
        created=int(time.time()),
    )


def finish_reason(result: GenerationResult) -> str:
    """OpenAI's finish reason: ``length`` when a token limit cut the answer, else ``stop``."""
    return "length" if result.finish_reason in ("max_new_tokens", "max_seq_len") else "stop"


def usage(results: list[GenerationResult]) -> dict[str, Any]:
    """Usage of a request's choices: the prompt once, every choice's completion tokens."""
    s = results[0].stats
    completion = sum(r.stats.new_tokens for r in results)
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": s.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": sum(r.stats.prediction_accepted for r in results),
            "rejected_prediction_tokens": sum(r.stats.prediction_rejected for r in results),
        },
    }


def spec_stats(result: GenerationResult) -> dict[str, Any]:
    """The speculative statistics of the extension field ``trt_spec``."""
    s = result.stats
    return {
        "draft": s.draft,
        "draft_len": str(s.draft_len),  # ("auto" or a fixed k, as text)
        "iterations": s.iterations,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "acceptance_rate": s.acceptance_rate,
        "tokens_per_iteration": s.tokens_per_iteration,
        "sources": s.sources,
        "draft_model_skipped": s.draft_model_skipped,
        "ttft_s": s.ttft_s,
        "tokens_per_s": s.tokens_per_s,
        "itl_p50_ms": s.itl_p50_ms,
        "itl_p95_ms": s.itl_p95_ms,
        "stop_reason": s.stop_reason,
    }


def _envelope(req: Request, streamed: bool, choices: list, **rest: Any) -> dict[str, Any]:
    """The fields every answer and chunk shares."""
    kind = ("chat.completion.chunk" if streamed else "chat.completion") if req.chat else None
    return {
        "id": req.id,
        "object": kind or "text_completion",
        "created": req.created,
        "model": req.model,
        "choices": choices,
        **rest,
    }


def response(
    req: Request, results: list[GenerationResult], token_bytes: lp.TokenBytes | None = None
) -> dict[str, Any]:
    """The non-streaming answer, one choice per result (``token_bytes``: the engine's, for
    log-probabilities)."""
    out = [_choice(req, i, r, token_bytes) for i, r in enumerate(results)]
    return _envelope(req, False, out, usage=usage(results), trt_spec=spec_stats(results[0]))


def _choice(
    req: Request, index: int, result: GenerationResult, token_bytes: lp.TokenBytes | None
) -> dict[str, Any]:
    logprobs = None
    if req.logprobs is not None and result.logprobs is not None and token_bytes is not None:
        entries = lp.answer_entries(result.logprobs, result.token_ids, result.finish_reason)
        logprobs = (lp.chat if req.chat else lp.completion)(entries, token_bytes)
    finish = finish_reason(result)
    if not req.chat:
        return {"index": index, "text": result.text, "logprobs": logprobs, "finish_reason": finish}
    message: dict[str, Any] = {"role": "assistant", "content": result.text}
    if req.tool_names is not None:
        content, calls = parse_tool_calls(result.text, req.tool_names)
        if calls:
            message = {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [c.openai() for c in calls],
            }
            finish = "tool_calls"
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish}


def chunk(
    req: Request,
    text: str | None,
    finish: str | None = None,
    *,
    first: bool = False,
    logprobs: dict[str, Any] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """One streamed chunk of choice ``index`` (text, or the final one carrying the finish
    reason); ``logprobs``: the chunk's log-probability object (server/logprobs.py), if any."""
    if req.chat:
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish,
        }
    else:
        choice = {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
    return _envelope(req, True, [choice])


def tool_calls_chunk(
    req: Request, calls: list[ToolCall], *, first: bool = False, index: int = 0
) -> dict[str, Any]:
    """A streamed delta holding choice ``index``'s tool calls (sent once they are complete)."""
    delta: dict[str, Any] = {"role": "assistant"} if first else {}
    delta["tool_calls"] = [c.openai(index=i) for i, c in enumerate(calls)]
    return _envelope(req, True, [{"index": index, "delta": delta, "finish_reason": None}])


def usage_chunk(req: Request, results: list[GenerationResult]) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage``: no choices, the usage."""
    return _envelope(req, True, [], usage=usage(results), trt_spec=spec_stats(results[0]))
