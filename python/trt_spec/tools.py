"""Tool calls (OpenAI ``tools`` / ``tool_choice``) in the Hermes / Qwen format that the default
models' chat templates use: the template renders the tools into the prompt, and the model answers
a call as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

- ``tool_choice`` ``"auto"`` (the default with tools): the model decides; the answer is parsed.
- ``"none"``: the tools are left out of the prompt, so the answer is text.
- ``"required"``, or ``{"type": "function", "function": {"name": ...}}``: the answer is one or
  more calls (the named function only), each held to its parameters' JSON schema by a grammar
  (structured output, trt_spec/grammar.py), so it always parses.

``parse_tool_calls`` splits an answer into its text and its calls; ``ToolCallStream`` does the
same while streaming, holding back text that may begin a call.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ToolCall",
    "ToolCallStream",
    "check_tools",
    "parse_tool_calls",
    "tool_messages",
]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str

    def openai(self, index: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if index is not None:
            d["index"] = index
        return d


def check_tools(
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: Any,
    special_tags: bool = False,
    parallel: bool = True,
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """Validates OpenAI's tools and tool_choice. Returns the tools for the chat template (None:
    none) and the Lark grammar that a required or named choice imposes (None: free);
    special_tags: the tokenizer has <tool_call> and </tool_call> as special tokens (Qwen2.5),
    which the grammar then names as tokens, not text; parallel: a required choice may make
    several calls (a named one makes one)."""
    if tools is None:
        if tool_choice not in (None, "none", "auto"):
            raise ValueError("tool_choice needs tools")
        return None, None
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or not tools:
        raise ValueError("tools must be a non-empty list of {'type': 'function', ...} objects")
    funcs: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(tools):
        f = t.get("function") if isinstance(t, Mapping) else None
        if not isinstance(t, Mapping) or t.get("type") != "function" or not isinstance(f, Mapping):
            raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        name = f.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ValueError(f"tools[{i}].function.name must be 1-64 letters, digits, _ . -")
        params = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, Mapping):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema object")
        funcs[name] = dict(params)
    rendered = [{"type": "function", "function": dict(t["function"])} for t in tools]
    choice = "auto" if tool_choice is None else tool_choice
    if choice == "none":
        return None, None
    if choice == "auto":
        return rendered, None
    if choice == "required":
        return rendered, _grammar(funcs, special_tags, parallel)
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if name not in funcs:
            raise ValueError(f"tool_choice names the function {name!r}, which tools lack")
        return rendered, _grammar({name: funcs[name]}, special_tags, False)
    raise ValueError("tool_choice must be 'none', 'auto', 'required' or a named function")


def _grammar(funcs: Mapping[str, Mapping[str, Any]], special_tags: bool, several: bool) -> str:
    """Lark: one call (or, several, one or more), each {"name": <one of funcs>, "arguments": <its
    schema>}, then an optional newline."""
    schema = {
        "x-guidance": {"whitespace_flexible": False},  # (compact JSON: no runaway whitespace)
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for name, params in funcs.items()
        ],
    }
    body = f'"\\n" %json {json.dumps(schema)} "\\n"'
    call = f"{OPEN} {body} {CLOSE}" if special_tags else f'"{OPEN}" {body} "{CLOSE}"'
    more = ' ("\\n" call)*' if several else ""
    return f'start: call{more} "\\n"?\ncall: {call}\n'


def _call(body: str) -> ToolCall | None:
    try:
        v = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("name"), str):
        return None
    args = v.get("arguments", v.get("parameters", {}))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(v["name"], text, f"call_{uuid.uuid4().hex[:24]}")


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def parse_tool_calls(text: str, names: Sequence[str] | None = None) -> tuple[str, list[ToolCall]]:
    """The answer's text (the calls taken out, stripped) and its well-formed calls; an answer
    without any keeps its text unchanged. With the tools' names, an answer that is nothing but
    a call object (or a list of them) of a named tool, bare or in a ``` fence (what some models
    write instead of the tags), is a call too."""
    calls = []
    for m in _CALL.finditer(text):
        c = _call(m.group(1))
        if c is not None:
            calls.append(c)
    if calls:
        return _CALL.sub("", text).strip(), calls
    if names:
        m = _FENCE.match(text)
        body = (m.group(1) if m else text).strip()
        try:
            v = json.loads(body)
        except json.JSONDecodeError:
            return text, []
        items = v if isinstance(v, list) else [v]
        found = [_call(json.dumps(x)) for x in items if isinstance(x, dict)]
        if found and len(found) == len(items) and all(c and c.name in names for c in found):
            return "", [c for c in found if c is not None]
    return text, []


class ToolCallStream:
    """Splits streamed text: ``feed`` returns the text safe to show now (up to any possible
    start of a call); ``finish`` returns what is left of the text and the calls. With the tools'
    names, an answer that begins like a bare or fenced call object ("{", "```") is held back
    whole until it ends (then it is a call, or text)."""

    def __init__(self, names: Sequence[str] | None = None) -> None:
        self._names = names
        self._all = ""
        self._shown = 0
        self._held = False  # a call began, or may have: nothing more is shown

    def feed(self, piece: str) -> str:
        self._all += piece
        if self._held:
            return ""
        head = self._all.lstrip()
        if (
            self._names
            and not self._all[: self._shown].strip()
            and (
                head[:1] == "{" or (head and ("```".startswith(head[:3]) or head.startswith("```")))
            )
        ):
            self._held = True
            return ""
        start = self._all.find(OPEN, self._shown)
        end = len(self._all)
        if start >= 0:
            end, self._held = start, True
        else:  # hold back a tail that could begin "<tool_call>"
            for k in range(min(len(OPEN) - 1, len(self._all) - self._shown), 0, -1):
                if OPEN.startswith(self._all[-k:]):
                    end -= k
                    break
        out, self._shown = self._all[self._shown : end], end
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        _, calls = parse_tool_calls(self._all, self._names)
        if calls:
            return "", calls  # (the text before the first call was shown; after it, dropped)
        return self._all[self._shown :], []


def tool_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages for the chat template: an assistant message's tool_calls with their
    arguments as objects (the templates serialise them), a tool message's content as text."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                f = dict(c.get("function") or {})
                if isinstance(f.get("arguments"), str):
                    try:
                        f["arguments"] = json.loads(f["arguments"])
                    except json.JSONDecodeError:
                        pass
                calls.append({**c, "function": f})
            m["tool_calls"] = calls
            m.setdefault("content", "")
            if m["content"] is None:
                m["content"] = ""
        out.append(m)
    return out
