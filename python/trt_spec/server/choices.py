"""The choices of one request (OpenAI's ``n`` and ``best_of``): their seeds, the ``best_of``
ranking, and the per-choice state of a streamed answer.

Choice i samples with seed ``seed + i`` (greedy choices are all the same answer, as OpenAI's
are). ``best_of`` m > n generates m choices and returns the n with the highest sum of their
answer tokens' log-probabilities, in that order. The choices are requests of the engine's one
batch, decoded together; those sharing the prompt copy its prefill from the first (the
scheduler's shared prompt prefix), so it is read once.
"""

from __future__ import annotations

from typing import Any

from trt_spec.engine import Engine, GenerationResult, GenerationStream
from trt_spec.server import logprobs as lp
from trt_spec.server import protocol
from trt_spec.tools import ToolCall, ToolCallStream


def seeds(req: protocol.Request, m: int) -> list[int]:
    return [(req.gen["seed"] + i) % (1 << 64) for i in range(m)]


def score(result: GenerationResult) -> float:
    """The sum of the answer tokens' log-probabilities (best_of's ranking)."""
    entries = lp.answer_entries(result.logprobs or [], result.token_ids, result.finish_reason)
    return sum(e.logprob for e in entries)


def generate(engine: Engine, req: protocol.Request) -> list[GenerationResult]:
    """The request's n answers (of best_of generated)."""
    m = max(req.n, req.best_of)
    gen = dict(req.gen, seed=seeds(req, m))
    if m > req.n and gen.get("logprobs") is None:
        gen["logprobs"] = 0  # (the ranking needs each token's)
    if m == 1:
        return [engine.generate(req.prompt, **dict(gen, seed=gen["seed"][0]))]
    results = engine.generate([req.prompt] * m, **gen)
    if m == req.n:
        return results
    order = sorted(range(m), key=lambda i: -score(results[i]))
    return [results[i] for i in order[: req.n]]


class ChoiceStream:
    """One streamed choice: its engine stream, the log-probability entries sent so far, and
    text that may begin a tool call held back."""

    def __init__(self, engine: Engine, req: protocol.Request, index: int, seed: int) -> None:
        self.engine = engine
        self.req = req
        self.index = index
        self.stream: GenerationStream = engine.generate(
            req.prompt, stream=True, **dict(req.gen, seed=seed)
        )
        self.sent = 0  # log-probability entries sent so far
        self.offset = 0  # (completions: the text offset of the next entry)
        self.splitter = ToolCallStream(req.tool_names) if req.tool_names is not None else None

    def new_logprobs(self, final: GenerationResult | None) -> dict[str, Any] | None:
        """The log-probability object of the entries that arrived since the last chunk (once
        finished, the answer's: a final stop token's left out)."""
        entries = self.stream.logprobs
        if self.req.logprobs is None or entries is None:
            return None
        res = final or self.stream.final_result
        if res is not None:
            entries = lp.answer_entries(entries, res.token_ids, res.finish_reason)
        new = entries[self.sent :]
        self.sent += len(new)
        tb = self.engine.token_bytes
        if self.req.chat:
            return lp.chat(new, tb) if new else None
        obj = lp.completion(new, tb, self.offset)
        self.offset += sum(len(t) for t in obj["tokens"])  # (the tokens' text, decoded once)
        return obj if new else None

    def shown(self, piece: str) -> str:
        return self.splitter.feed(piece) if self.splitter else piece

    def finish(self) -> tuple[str, list[ToolCall]]:
        return self.splitter.finish() if self.splitter else ("", [])
