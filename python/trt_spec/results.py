"""What a generation gives back: :class:`GenerationResult` (with :class:`TokenLogprob` entries
and tool calls), :class:`GenerationStream`, and ``_Pending``, the Engine's record of one submitted
request (its events turned into text, log-probabilities and the final result)."""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from trt_spec import _core
from trt_spec.stats import GenerationStats, stats_from_request
from trt_spec.tools import ToolCall, parse_tool_calls

__all__ = ["GenerationResult", "GenerationStream", "TokenLogprob"]


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability under the distribution it was drawn from (after
    temperature, top-k and top-p; a greedy request's at temperature 1), and the most likely
    candidates' as ``(token_id, logprob)``, most likely first. Tokens that top-k or top-p leave
    out have ``-inf``."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass(frozen=True)
class GenerationResult:
    text: str
    token_ids: list[int]  # new tokens (a final EOS / stop token included)
    prompt_token_ids: list[int]
    finish_reason: str  # one of _core.FINISH_REASONS
    stats: GenerationStats
    logprobs: list[TokenLogprob] | None = None  # one per token of token_ids, when asked for
    tool_calls: list[ToolCall] | None = None  # the calls parsed from text, when tools were given


class GenerationStream(Iterator[str]):
    """Iterates over the text as it is generated; ``result`` is set once it is exhausted."""

    def __init__(
        self, run: Generator[str, None, GenerationResult], pending: _Pending | None = None
    ) -> None:
        self._run = run
        self._pending = pending
        self.result: GenerationResult | None = None

    @property
    def final_result(self) -> GenerationResult | None:
        """The result as soon as the request's last tokens have arrived (the stream may still
        hold text to yield); None before."""
        return self._pending.result if self._pending is not None else None

    @property
    def logprobs(self) -> list[TokenLogprob] | None:
        """The log-probabilities of the tokens final so far (None when not asked for): a list
        that grows as the stream advances, one entry per token."""
        return self._pending.logprobs if self._pending is not None else None

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> str:
        try:
            return next(self._run)
        except StopIteration as fin:
            self.result = fin.value
            raise

    def close(self) -> None:
        """Stop early (also done when the stream is garbage-collected)."""
        self._run.close()


class _Pending:
    """One submitted request as this layer sees it: its events, text and final result."""

    def __init__(
        self, ids: list[int], logprobs: bool = False, tools: list[str] | None = None
    ) -> None:
        self.ids = ids
        self.tools = tools  # the tools' names (None: no tools)
        self.events: deque[_core.Event] = deque()
        self.tokens: list[int] = []
        self.logprobs: list[TokenLogprob] | None = [] if logprobs else None
        self.parts: list[str] = []
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.result: GenerationResult | None = None

    def take(self, event: _core.Event) -> str:
        """Applies one scheduler event; returns the new text."""
        self.tokens.extend(event.tokens)
        if self.logprobs is not None:
            self.logprobs.extend(TokenLogprob(t, lp, top) for t, lp, top in event.logprobs)
        piece = self.utf8.decode(event.text, final=event.finished)
        if piece:
            self.parts.append(piece)
        stats = event.stats  # (None until the request finishes)
        if stats is not None:
            st = stats_from_request(stats, event.reason)
            text = "".join(self.parts)
            calls = parse_tool_calls(text, self.tools)[1] if self.tools is not None else None
            self.result = GenerationResult(
                text, self.tokens, self.ids, event.reason, st, self.logprobs, calls
            )
        return piece
