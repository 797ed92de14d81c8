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
        device: ``"cpu"`` (the CUDA backend comes with a later release).
        n_threads: CPU threads (default: one per core).
        verify: check every tensor's checksum while loading (about 0.2 s per GB).
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        device: str = "cpu",
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
        self._gen = _core.Generator(self._rt)

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
    def generate(
        self,
        prompt: PromptInput,
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop: str | int | Sequence[str | int] | None = None,
        ignore_eos: bool = False,
        stream: bool = False,
    ) -> GenerationResult | GenerationStream:
        """Generate a completion.

        ``prompt`` is text, token ids, or chat messages (``[{"role": ..., "content": ...}]``).
        ``temperature == 0`` is greedy; otherwise tokens are sampled with ``top_k`` (0: off)
        and ``top_p`` (1: off) from a generator seeded with ``seed``. ``stop`` holds strings
        and/or token ids that end the completion (the end-of-generation tokens always do,
        unless ``ignore_eos``). With ``stream=True`` the call returns a
        :class:`GenerationStream` yielding text pieces as they are generated.
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise ValueError("max_new_tokens must be an integer")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError("seed must be an integer in [0, 2**64)")
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise ValueError("top_k must be an integer")
        for name, v in (("temperature", temperature), ("top_p", top_p)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{name} must be a number")
        # No request can produce more than max_seq_len tokens; top_k >= vocab keeps everything.
        max_new_tokens = min(max_new_tokens, self.max_seq_len)
        top_k = min(top_k, self.vocab_size)
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
        stop_strings = [s for s in stops if isinstance(s, str)]
        stop_ids = self._checked_ids([s for s in stops if not isinstance(s, str)], "stop")
        if not ignore_eos:
            stop_ids += self._eog
        ids = self.encode(prompt)
        it = self._run(
            ids,
            max_new_tokens,
            float(temperature),
            top_k,
            float(top_p),
            seed,
            stop_ids,
            stop_strings,
        )
        next(it)  # runs start(): bad parameters raise here, not on the first read of a stream
        out = GenerationStream(it)
        if stream:
            return out
        for _ in out:
            pass
        assert out.result is not None
        return out.result

    def _run(
        self,
        ids: list[int],
        max_new_tokens: int,
        temperature: float,
        top_k: int,
        top_p: float,
        seed: int,
        stop_ids: list[int],
        stop_strings: list[str],
    ) -> Generator[str, None, GenerationResult]:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this Engine is already generating (one request at a time)")
        try:
            self._gen.start(ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids)
            yield ""  # validated
            clock = StatsClock(len(ids))
            decoder = self.tokenizer.stream_decoder(skip_special=True)
            matcher = _StopStrings(stop_strings)
            out: list[int] = []
            text_parts: list[str] = []
            reason = ""
            while not self._gen.done:
                new = self._gen.step()
                clock.tokens_arrived(len(new))
                out.extend(new)
                piece, hit = matcher.feed(decoder.push(new))
                if piece:
                    text_parts.append(piece)
                    yield piece
                if hit:
                    reason = "stop_string"
                    break
            if not reason:
                reason = self._gen.stop_reason
                tail, hit = matcher.feed(decoder.flush())
                tail += "" if hit else matcher.flush()
                if hit:
                    reason = "stop_string"
                if tail:
                    text_parts.append(tail)
                    yield tail
            stats = clock.finish(len(out), reason)
            return GenerationResult("".join(text_parts), out, list(ids), reason, stats)
        finally:
            self._lock.release()
