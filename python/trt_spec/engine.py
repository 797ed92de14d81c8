"""The Python API: :class:`Engine` loads an engine file and generates text or tokens.

The C++ runtime (``trt_spec._core``) does the model work and token selection; this layer turns
prompts into token ids (tokenizer and chat template from the engine's metadata), decodes the
tokens as they come, applies stop strings, and measures the statistics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np

from trt_spec import _core
from trt_spec.stats import GenerationStats, StatsClock
from trt_spec.tokenizer import TextCodec

Message = Mapping[str, Any]
PromptInput = str | Sequence[int] | np.ndarray | Sequence[Message]

__all__ = ["Engine", "GenerationResult", "GenerationStats", "GenerationStream"]


@dataclass(frozen=True)
class GenerationResult:
    text: str
    token_ids: list[int]  # new tokens (a final EOS / stop token included)
    prompt_token_ids: list[int]
    finish_reason: str  # "stop_token", "stop_string", "max_new_tokens" or "max_seq_len"
    stats: GenerationStats


class GenerationStream(Iterator[str]):
    """Iterates over the text as it is generated; ``result`` is set once it is exhausted."""

    def __init__(self, run: Generator[str, None, GenerationResult]) -> None:
        self._run = run
        self.result: GenerationResult | None = None

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


class _StopStrings:
    """Finds stop strings in streamed text, holding back what could still become one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.text = ""
        self.emitted = 0

    def feed(self, piece: str) -> tuple[str, bool]:
        """Returns (text safe to emit now, whether a stop string was found)."""
        self.text += piece
        hits = [i for i in (self.text.find(s) for s in self.stops) if i >= 0]
        if hits:
            cut = min(hits)
            out = self.text[self.emitted : cut]
            self.text = self.text[:cut]
            self.emitted = cut
            return out, True
        safe = max(self.emitted, len(self.text) - self.hold) if self.stops else len(self.text)
        out = self.text[self.emitted : safe]
        self.emitted = safe
        return out, False

    def flush(self) -> str:
        out = self.text[self.emitted :]
        self.emitted = len(self.text)
        return out


class Engine:
    """An engine file opened on a backend.

    Args:
        path: the ``.engine`` file written by ``trt-spec build``.
        device: ``"auto"`` (a CUDA GPU when the build has CUDA and one is present, else the
            CPU), ``"cuda"`` / ``"cuda:N"`` or ``"cpu"``.
        n_threads: CPU threads (default: one per core).
        verify: check every tensor's checksum while loading (about 0.2 s per GB).
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        device: str = "auto",
        n_threads: int | None = None,
        verify: bool = True,
    ) -> None:
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        self.path = str(path)
        self._rt = _core.Runtime(self.path, device, n_threads or 0, verify)
        try:
            self.metadata: dict[str, Any] = json.loads(self._rt.metadata_json)
            tok = self.metadata["tokenizer"]
            special = {k: v for k, v in tok.items() if k != "json"}
            self.tokenizer = TextCodec(tok["json"], special)
            self._eog = [int(i) for i in special.get("eog_ids") or []]
        except Exception as e:  # the C++ side checked everything but the tokenizer section
            raise _core.EngineFileError(
                f"{self.path}: the engine's tokenizer metadata is missing or invalid ({e!r})"
            ) from e
        self._lock = threading.Lock()
        self._dec = _core.Decoder(self._rt)

    # ---- properties ---------------------------------------------------------------------------
    @property
    def max_seq_len(self) -> int:
        return self._rt.max_seq_len

    @property
    def vocab_size(self) -> int:
        return self._rt.vocab_size

    @property
    def backend(self) -> str:
        return self._rt.backend_name

    @property
    def weights(self) -> str:
        return self.metadata["build"]["weights"]

    @property
    def has_draft(self) -> bool:
        return "draft" in self.metadata["models"]

    def config(self, role: str = "target") -> dict[str, Any]:
        return dict(self.metadata["models"][role]["config"])

    def __repr__(self) -> str:
        c = self.config()
        return (
            f"Engine({self.path!r}, {c['arch']} {c['n_layers']}L d{c['dim']}, "
            f"weights={self.weights}, draft={self.has_draft}, backend={self.backend})"
        )

    # ---- tokens -------------------------------------------------------------------------------
    def encode(self, prompt: PromptInput) -> list[int]:
        """Token ids of a prompt: text, token ids, or chat messages (chat template applied)."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special=True)
        if isinstance(prompt, (bytes, bytearray, memoryview)):
            raise ValueError("prompt must be text (str), token ids or chat messages, not bytes")
        if isinstance(prompt, np.ndarray):
            if prompt.ndim != 1 or not np.issubdtype(prompt.dtype, np.integer):
                raise ValueError("a token-id array must be one-dimensional and integer")
            return self._checked_ids([int(t) for t in prompt], "the prompt")
        if isinstance(prompt, Sequence) and len(prompt) > 0 and isinstance(prompt[0], Mapping):
            for m in prompt:
                if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
                    raise ValueError(
                        "each chat message must be a mapping with 'role' and 'content'"
                    )
            text = self.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True)
            return self.tokenizer.encode(text, add_special=False)
        if isinstance(prompt, Sequence):
            ids = list(prompt)
            for t in ids:
                if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                    raise ValueError(f"token ids must be integers, got {type(t).__name__}")
            return self._checked_ids([int(t) for t in ids], "the prompt")
        raise ValueError(
            f"prompt must be a str, a sequence of token ids or a list of chat messages, "
            f"got {type(prompt).__name__}"
        )

    def _checked_ids(self, ids: list[int], what: str) -> list[int]:
        """Range check here too: ids beyond int32 could not even reach the runtime's check."""
        for i, t in enumerate(ids):
            if not 0 <= t < self.vocab_size:
                raise ValueError(
                    f"{what} holds token id {t} at index {i}, outside the vocabulary "
                    f"[0, {self.vocab_size})"
                )
        return ids

    def decode(self, token_ids: Sequence[int], skip_special: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special=skip_special)

    def logits(self, prompt: PromptInput) -> np.ndarray:
        """Target logits [n, vocab] at every prompt position (float32)."""
        ids = self.encode(prompt)
        with self._lock:
            return self._rt.prompt_logits(ids)

    # ---- generation ---------------------------------------------------------------------------
    @property
    def draft_len(self) -> int:
        """The most draft tokens per iteration this engine allows (0: no draft model)."""
        return self._rt.draft_len

    @property
    def max_batch(self) -> int:
        return self._rt.max_batch

    def generate(
        self,
        prompt: PromptInput | Sequence[PromptInput],
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
        stop: str | int | Sequence[str | int] | None = None,
        ignore_eos: bool = False,
        stream: bool = False,
        draft_len: int | str = "auto",
        speculate: bool = True,
    ) -> GenerationResult | list[GenerationResult] | GenerationStream:
        """Generate a completion, or one per prompt of a batch.

        ``prompt`` is text, token ids, or chat messages (``[{"role": ..., "content": ...}]``);
        a list of such prompts is a batch, decoded together (at most ``max_batch`` at a time,
        the rest as slots free up) and answered with a list of results. ``temperature == 0``
        is greedy; otherwise tokens are sampled with ``top_k`` (0: off) and ``top_p`` (1: off)
        from a generator seeded with ``seed`` (one per prompt, or one for all). ``stop`` holds
        strings and/or token ids that end the completion (the end-of-generation tokens always
        do, unless ``ignore_eos``).

        Speculation (engines with a draft model): each iteration drafts ``draft_len`` tokens
        and verifies them in one target pass; ``"auto"`` picks the length per iteration from
        measured costs and acceptance (0 included), an integer fixes it (at most the engine's
        ``draft_len``), and ``speculate=False`` decodes target-only. The output follows the
        target's distribution either way (greedy: token for token the same).

        With ``stream=True`` (one prompt) the call returns a :class:`GenerationStream` that
        yields text as each iteration's tokens are accepted.
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise ValueError("max_new_tokens must be an integer")
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise ValueError("top_k must be an integer")
        for name, v in (("temperature", temperature), ("top_p", top_p)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{name} must be a number")
        k = self._draft_len_code(draft_len, speculate)
        prompts = self._batch(prompt)
        single = prompts is None
        if single:
            prompts = [prompt]
        seeds = self._seeds(seed, len(prompts))
        if stream and not single:
            raise ValueError("stream=True takes one prompt, not a batch")
        # No request can produce more than max_seq_len tokens; top_k >= vocab keeps everything.
        max_new_tokens = min(max_new_tokens, self.max_seq_len)
        top_k = min(top_k, self.vocab_size)
        stop_strings, stop_ids = self._stops(stop, ignore_eos)
        reqs = [_Request(self.encode(p), seeds[i], stop_strings) for i, p in enumerate(prompts)]
        sampling = (max_new_tokens, float(temperature), top_k, float(top_p))
        it = self._run(reqs, sampling, stop_ids, k, "auto" if k < 0 else str(k))
        next(it)  # validates: bad parameters raise here, not on the first read of a stream
        if stream:
            return GenerationStream(_texts(it, reqs))
        for _ in it:
            pass
        results = [r.result for r in reqs]
        assert all(r is not None for r in results)
        return results[0] if single else results  # type: ignore[return-value]

    def _draft_len_code(self, draft_len: int | str, speculate: bool) -> int:
        """-1 for auto, else the fixed draft length (0: target-only)."""
        if not isinstance(speculate, bool):
            raise ValueError("speculate must be True or False")
        if draft_len == "auto":
            code = -1
        elif isinstance(draft_len, int) and not isinstance(draft_len, bool):
            code = draft_len
            if code < 0 or code > self.draft_len:
                have = (
                    f"in [0, {self.draft_len}] (the engine's --draft-len)"
                    if self.draft_len
                    else "0: this engine has no draft model"
                )
                raise ValueError(f"draft_len must be 'auto' or {have}, got {code}")
        else:
            raise ValueError(f"draft_len must be 'auto' or an integer, got {draft_len!r}")
        return code if speculate and self.draft_len > 0 else 0

    @staticmethod
    def _batch(prompt: Any) -> list[PromptInput] | None:
        """The prompts of a batch, or None for a single prompt."""
        if isinstance(prompt, (str, np.ndarray)) or not isinstance(prompt, Sequence):
            return None
        items = list(prompt)
        if items and all(isinstance(p, (str, np.ndarray)) for p in items):
            return items
        if items and all(
            isinstance(p, Sequence) and not isinstance(p, (str, bytes, Mapping)) for p in items
        ):
            return items  # token-id lists or chat conversations
        return None

    @staticmethod
    def _seeds(seed: int | Sequence[int], n: int) -> list[int]:
        if isinstance(seed, (list, tuple)):
            seeds = list(seed)
        elif isinstance(seed, int):
            seeds = [seed] * n
        else:
            raise ValueError("seed must be an integer in [0, 2**64), or a list of them")
        if len(seeds) != n:
            raise ValueError(f"got {len(seeds)} seeds for {n} prompts")
        for s in seeds:
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**64:
                raise ValueError("seed must be an integer in [0, 2**64)")
        return seeds

    def _stops(
        self, stop: str | int | Sequence[str | int] | None, ignore_eos: bool
    ) -> tuple[list[str], list[int]]:
        if stop is None:
            stops: list = []
        elif isinstance(stop, (str, int)) and not isinstance(stop, bool):
            stops = [stop]
        elif isinstance(stop, (list, tuple)):
            stops = list(stop)
        else:
            raise ValueError("stop must be a string, a token id, or a list of them")
        for s in stops:
            if isinstance(s, bool) or not isinstance(s, (str, int)):
                raise ValueError(f"stop entries must be strings or token ids, got {s!r}")
        stop_ids = self._checked_ids([s for s in stops if not isinstance(s, str)], "stop")
        if not ignore_eos:
            stop_ids += self._eog
        return [s for s in stops if isinstance(s, str)], stop_ids

    def _run(
        self,
        reqs: list[_Request],
        sampling: tuple[int, float, int, float],
        stop_ids: list[int],
        k: int,
        k_name: str,
    ) -> Generator[tuple[int, str], None, None]:
        """Decodes every request, at most max_batch at a time; yields (request, text piece)."""
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this Engine is already generating (one request at a time)")
        dec = self._dec
        by_slot: dict[int, int] = {}  # running slot -> request index
        try:
            dec.draft_len = k
            pending = list(range(len(reqs)))

            def admit() -> None:
                while pending and len(by_slot) < self.max_batch:
                    i = pending.pop(0)
                    r = reqs[i]
                    slot = dec.add(r.ids, *sampling[:4], r.seed, stop_ids)
                    r.begin(self.tokenizer)
                    if dec.done(slot):  # max_new_tokens == 0
                        r.end(dec.stop_reason(slot), dec.stats(slot), k_name)
                    else:
                        by_slot[slot] = i

            admit()  # validates the first request
            yield (-1, "")
            while by_slot or pending:
                for slot, new in dec.step():
                    r = reqs[by_slot[slot]]
                    piece, hit = r.feed(new)
                    if piece:
                        yield (by_slot[slot], piece)
                    if hit and not dec.done(slot):
                        dec.cancel(slot)
                    if hit or dec.done(slot):
                        tail = r.end(
                            "stop_string" if hit else dec.stop_reason(slot), dec.stats(slot), k_name
                        )
                        if tail:
                            yield (by_slot[slot], tail)
                        del by_slot[slot]
                admit()
        finally:
            for slot in by_slot:  # an abandoned stream or an error: free the slots
                dec.cancel(slot)
            self._lock.release()


class _Request:
    """One prompt of a generate() call: its tokens, text, stop strings and clock."""

    def __init__(self, ids: list[int], seed: int, stop_strings: list[str]) -> None:
        self.ids = ids
        self.seed = seed
        self.stop_strings = stop_strings
        self.out: list[int] = []
        self.parts: list[str] = []
        self.result: GenerationResult | None = None

    def begin(self, tokenizer: TextCodec) -> None:
        self.clock = StatsClock(len(self.ids))
        self.decoder = tokenizer.stream_decoder(skip_special=True)
        self.matcher = _StopStrings(self.stop_strings)

    def feed(self, new: list[int]) -> tuple[str, bool]:
        """Takes an iteration's tokens; a stop string cuts them after the token completing it."""
        pieces: list[str] = []
        kept, hit = 0, False
        for t in new:
            kept += 1
            piece, hit = self.matcher.feed(self.decoder.push([t]))
            pieces.append(piece)
            if hit:
                break
        self.clock.tokens_arrived(kept)
        self.out.extend(new[:kept])
        text = "".join(pieces)
        if text:
            self.parts.append(text)
        return text, hit

    def end(self, reason: str, runtime: dict, k_name: str) -> str:
        tail = ""
        if reason != "stop_string":
            tail, hit = self.matcher.feed(self.decoder.flush())
            tail += "" if hit else self.matcher.flush()
            reason = "stop_string" if hit else reason
            if tail:
                self.parts.append(tail)
        stats = self.clock.finish(len(self.out), reason, runtime, k_name)
        self.result = GenerationResult("".join(self.parts), self.out, list(self.ids), reason, stats)
        return tail


def _texts(
    run: Generator[tuple[int, str], None, None], reqs: list[_Request]
) -> Generator[str, None, GenerationResult]:
    for _, piece in run:
        if piece:
            yield piece
    assert reqs[0].result is not None
    return reqs[0].result
