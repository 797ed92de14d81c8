"""Prompts of ``trt-spec bench``: HumanEval, or a file of text prompts, chat conversations and
predictions.

A prompt file is one of

* ``.jsonl``: one entry per line; ``.json``: a list of entries. An entry is a string (the prompt
  text), ``{"prompt": "..."}`` or ``{"messages": [{"role": ..., "content": ...}, ...]}`` (a chat
  conversation: the engine applies its chat template), either object optionally with
  ``"prediction"`` (text the answer will probably repeat, e.g. the file being edited; passed as
  ``generate(prediction=...)``), ``"id"`` and ``"task"``; other string or number fields (such
  as ``"language"``) are kept in the report's prompt list;
* any other file: one text prompt per non-empty line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Messages = list[dict[str, str]]
_DESCRIBED = ("kind", "chars", "messages", "prediction_chars", "prompt_tokens")


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: text or chat messages, with an optional prediction."""

    id: str
    prompt: str | Messages
    prediction: str | None = None
    task: str | None = None
    extra: dict[str, str | int | float] = field(default_factory=dict)

    @property
    def is_chat(self) -> bool:
        return not isinstance(self.prompt, str)

    def describe(self) -> dict[str, Any]:
        """What the report keeps of the prompt (not its text)."""
        return {
            "id": self.id,
            "task": self.task,
            "kind": "chat" if self.is_chat else "text",
            "chars": len(self.prompt) if isinstance(self.prompt, str) else None,
            "messages": len(self.prompt) if self.is_chat else None,
            "prediction_chars": len(self.prediction) if self.prediction is not None else None,
            **self.extra,
        }


def _messages(value: Any, where: str) -> Messages:
    if not isinstance(value, list) or not value:
        raise ValueError(f"--prompts: {where}: 'messages' must be a non-empty list")
    for m in value:
        if not (
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
        ):
            raise ValueError(f"--prompts: {where}: each message needs string 'role' and 'content'")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _entry(item: Any, where: str, default_id: str) -> Prompt:
    if isinstance(item, str):
        if not item:
            raise ValueError(f"--prompts: {where}: empty prompt")
        return Prompt(default_id, item)
    if not isinstance(item, dict):
        raise ValueError(f"--prompts: {where}: expected a string or an object")
    if "messages" in item and "prompt" in item:
        raise ValueError(f"--prompts: {where}: give 'prompt' or 'messages', not both")
    if "messages" in item:
        prompt: str | Messages = _messages(item["messages"], where)
    else:
        prompt = item.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"--prompts: {where}: needs a non-empty 'prompt' or 'messages'")
    prediction = item.get("prediction")
    if prediction is not None and not isinstance(prediction, str):
        raise ValueError(f"--prompts: {where}: 'prediction' must be a string")
    task = item.get("task")
    known = ("prompt", "messages", "prediction", "id", "task")
    extra = {
        k: v
        for k, v in item.items()
        if k not in known and isinstance(v, str | int | float) and k not in _DESCRIBED
    }
    return Prompt(
        str(item.get("id", default_id)),
        prompt,
        prediction,
        None if task is None else str(task),
        extra,
    )


def read_prompt_file(path: Path) -> list[Prompt]:
    """Every prompt of a prompt file (format in the module docstring)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        items: list[tuple[Any, str]] = []
        for no, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append((json.loads(line), f"{path.name} line {no}"))
                except json.JSONDecodeError as e:
                    raise ValueError(f"--prompts: {path.name} line {no}: {e}") from None
    elif path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"--prompts: {path} must hold a list of prompts")
        items = [(it, f"{path.name} entry {i}") for i, it in enumerate(data)]
    else:
        items = [(line, path.name) for line in text.splitlines() if line.strip()]
    prompts = [_entry(it, where, f"{path.name}:{i}") for i, (it, where) in enumerate(items)]
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"--prompts: {path} repeats an id")
    return prompts


def load_prompts(spec: str, n: int, skip: int = 0) -> tuple[list[Prompt], str]:
    """(``n`` prompts after the first ``skip``, their source): ``humaneval`` or a prompt file.
    ``skip`` picks prompts a tuning run did not see (held-out)."""
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if skip < 0:
        raise ValueError(f"--skip must be >= 0, got {skip}")
    if spec == "humaneval":
        from trt_spec import models

        rows = models.humaneval_prompts(skip + n)[skip:]
        if not rows:
            raise ValueError(f"--skip {skip}: HumanEval has no prompts after it")
        return [Prompt(r["task_id"], r["prompt"], task="humaneval") for r in rows], "HumanEval"
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ValueError(f"--prompts: {spec!r} is neither 'humaneval' nor a readable file")
    prompts = read_prompt_file(path)
    if not prompts:
        raise ValueError(f"--prompts: no prompts in {path}")
    if skip >= len(prompts):
        raise ValueError(f"--skip {skip}: {path} holds {len(prompts)} prompts")
    return prompts[skip : skip + n], str(path)
