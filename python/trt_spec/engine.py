"""The Python API: :class:`Engine` loads an engine file and generates text or tokens.

The C++ scheduler (``trt_spec._core.Scheduler``) owns every request: validation, the queue and
KV slots, prefill, speculative iterations, stop ids and stop strings, cancellation and the
statistics. This layer turns prompts into token ids (tokenizer and chat template from the
engine's metadata) and arguments into the binding's types (a ``_core.Request``: a value that is
not of its type raises here, a value the engine cannot take raises in ``Scheduler.submit``),
and turns the scheduler's events (``_core.Event``) into text, results and streams.

Threads: one Engine may be used from several threads at once (``generate``, streams,
``logits`` and the properties). Every call's requests join the same scheduler: concurrent calls
decode together in one batch, up to the engine's ``max_batch`` sequences, and the rest wait in
its FIFO queue for a slot. There is no scheduler thread: whichever caller is waiting steps the
scheduler (under ``_lock``, with the GIL released inside the step) and files every request's
events in its inbox (under ``_mu``, a condition the other callers wait on), so one step serves
all callers and each takes its events as soon as they are filed. Each request's output is
what it would be alone (greedy: the same tokens; sampled: the same tokens for the same seed).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np

from trt_spec import _core
from trt_spec._args import as_int, as_number, draft_len_arg, int_list, seeds_arg
from trt_spec.grammar import Grammars, constraint_spec
from trt_spec.results import GenerationResult, GenerationStream, TokenLogprob, _Pending
from trt_spec.stats import GenerationStats
from trt_spec.tokenizer import TextCodec
from trt_spec.tools import check_tools, tool_messages

Message = Mapping[str, Any]
PromptInput = str | Sequence[int] | np.ndarray | Sequence[Message]

__all__ = ["Engine", "GenerationResult", "GenerationStats", "GenerationStream", "TokenLogprob"]

DRAFT_MODES: tuple[str, ...] = tuple(_core.DRAFT_MODES)
KV_CACHE_DTYPES: tuple[str, ...] = tuple(_core.KV_CACHE_DTYPES)
DEFAULT_DRAFT_WINDOW: int = _core.DEFAULT_DRAFT_WINDOW
DEFAULT_DRAFT_READ_CHUNK: int = _core.DEFAULT_DRAFT_READ_CHUNK


class Engine:
    """An engine file opened on a backend.

    Args:
        path: the ``.engine`` file written by ``trt-spec build``.
        device: ``"auto"`` (a CUDA GPU when the build has CUDA and one is present, else the
            CPU), ``"cuda"`` / ``"cuda:N"`` or ``"cpu"``.
        n_threads: CPU threads (default: one per core).
        verify: check every tensor's checksum while loading (about 0.2 s per GB).
        prefill_chunk: prompt rows per forward while nothing else decodes.
        interleave_chunk: prompt rows per scheduler step, at most, while other requests decode.
            Fewer are taken where rows are slow: as many as cost about one of their iterations
            (measured), so a long prompt about doubles their inter-token latency meanwhile
            instead of stalling them.
        carry_prefill: on the CPU, let the decoding requests' iteration carry those prompt rows
            in its own pass over the weights, instead of a separate forward (same results).
        kv_cache_dtype: element type of the KV caches: ``"f32"``, ``"f16"``, ``"bf16"`` or
            ``"auto"`` (f16 on a GPU, f32 on the CPU).
        draft_window: the draft model reads at most this many tokens of a prompt, its end
            (``0``: all of them), so a long prompt costs the draft ``draft_window`` rows instead
            of the whole prompt (prompt lookup still sees it all). With a window and no other
            request decoding, the draft reads them after the first token: the time to first
            token is the target's prefill alone. While others decode it reads them as the
            prompt's chunks pass, so that none of their steps waits for the whole window.
        draft_read_chunk: ``0``: the draft model reads a prompt as the target does, chunk by
            chunk, so a long prompt's time to first token holds both models' reads. ``N > 0``:
            it reads the prompt (or its window) only after the first token, at most ``N`` rows
            per decode step, while the request decodes without it (plain target steps or prompt
            lookup); then it catches up and drafts. The time to first token is the target's
            prefill alone and the draft still sees the whole prompt; the first steps' inter-token
            latency carries the read instead.
        prompt_cache: a request takes the free KV slot whose cache still holds the longest
            prefix of its prompt, left by the slot's previous request's prompt (a multi-turn
            chat's history, an agent's system prompt and tools), and prefills only the rest;
            the draft model keeps what it read of it. The output is the same either way
            (``stats.cached_tokens`` counts what was reused).
        eagle_topk: an EAGLE-3 head's proposals. ``1``: chains (the head's best token at each
            step). ``2`` to ``4``: EAGLE-2's dynamic trees: each head step expands the ``W``
            nodes of best path probability under the head, and the ``draft_len`` best nodes
            found are verified in one pass (more rows per pass for more accepted tokens; each
            step runs ``W`` rows of the head). Engines with other drafts accept only ``1``.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        device: str = "auto",
        n_threads: int | None = None,
        verify: bool = True,
        prefill_chunk: int = 256,
        interleave_chunk: int = 64,
        carry_prefill: bool = True,
        kv_cache_dtype: str = "auto",
        draft_window: int = DEFAULT_DRAFT_WINDOW,
        draft_read_chunk: int = DEFAULT_DRAFT_READ_CHUNK,
        prompt_cache: bool = True,
        eagle_topk: int = 1,
    ) -> None:
        if n_threads is not None and n_threads < 1:  # (the runtime takes 0 for one per core)
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        self.path = str(path)
        self._rt = _core.Runtime(
            self.path, device, n_threads or 0, verify, prefill_chunk, kv_cache_dtype
        )
        try:
            self.metadata: dict[str, Any] = json.loads(self._rt.metadata_json)
            tok = self.metadata["tokenizer"]
            special = {k: v for k, v in tok.items() if k != "json"}
            self.tokenizer = TextCodec(tok["json"], special)
            self._eog = [int(i) for i in special.get("eog_ids") or []]
            table = self.tokenizer.output_bytes()
        except Exception as e:  # the C++ side checked everything but the tokenizer section
            raise _core.EngineFileError(
                f"{self.path}: the engine's tokenizer metadata is missing or invalid ({e!r})"
            ) from e
        # Ids the tokenizer lacks (padded embeddings) have no text; ids past the model's
        # vocabulary are never generated.
        table = table[: self.vocab_size] + [b""] * (self.vocab_size - len(table))
        self._token_table = table
        if eagle_topk != 1 and self.draft_kind != "eagle3":
            raise ValueError(
                f"eagle_topk={eagle_topk}: trees of an EAGLE-3 head; this engine's draft is "
                f"{self.draft_kind or 'none'} (leave eagle_topk at 1)"
            )
        self._grammars = Grammars(tok["json"], self.vocab_size, self._eog)
        self._sched = _core.Scheduler(
            self._rt,
            table,
            prefill_chunk,
            interleave_chunk,
            carry_prefill,
            draft_window,
            draft_read_chunk,
            bool(prompt_cache),
            eagle_topk,
        )
        self._prefill_chunk = prefill_chunk
        self._lock = threading.Lock()  # the scheduler: one caller at a time
        self._mu = threading.Condition()  # the inboxes (notified when events are filed)
        self._stepping = False  # a caller is stepping the scheduler for everyone (under _mu)
        self._inbox: dict[int, _Pending] = {}

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
    def kv_cache_dtype(self) -> str:
        """The KV caches' element type: ``"f32"``, ``"f16"`` or ``"bf16"``."""
        return self._rt.kv_type

    @property
    def prompt_attention(self) -> str:
        """The products prompt rows attend with: ``"f32"`` for f32, f16 and bf16 weights (every
        row as a decode row, the same text on every host); for q8 and q4 weights the CPU's faster
        ones, ``"bf16"`` where it has AVX512_BF16, else ``"int16"``
        (``TRT_SPEC_CPU_PROMPT_ATTENTION`` overrides it)."""
        return self._rt.prompt_attention

    @property
    def kv_bytes(self) -> int:
        """Bytes of the KV caches (target and draft) in that type."""
        return self._rt.kv_bytes

    @property
    def weights(self) -> str:
        return self.metadata["build"]["weights"]

    @property
    def has_draft(self) -> bool:
        """Whether the engine holds a draft (a draft model or draft heads; ``draft="model"``
        asks for it)."""
        return "draft" in self.metadata["models"] or "draft_heads" in self.metadata

    @property
    def draft_kind(self) -> str | None:
        """The kind of the engine's draft: ``"model"`` (a draft model), ``"pard"`` (a PARD
        parallel draft model), ``"eagle3"`` (an EAGLE-3 head), ``"medusa"`` (Medusa heads), or
        None without one."""
        draft = self.metadata["models"].get("draft")
        if draft is not None:
            return "pard" if "pard" in draft else "model"
        heads = self.metadata.get("draft_heads")
        return str(heads["kind"]) if heads else None

    @property
    def max_draft_len(self) -> int:
        """The most draft tokens per iteration this engine allows (its build's ``--draft-len``;
        0: it never speculates): the bound of a request's ``draft_len``."""
        return self._rt.max_draft_len

    @property
    def max_batch(self) -> int:
        return self._rt.max_batch

    @property
    def running_requests(self) -> int:
        """Requests holding a KV slot (prefilling or decoding)."""
        with self._lock:  # not while another thread's step changes it
            return self._sched.running

    @property
    def waiting_requests(self) -> int:
        """Requests queued for a slot."""
        with self._lock:
            return self._sched.waiting

    @property
    def use_graphs(self) -> bool:
        """Replay each speculative iteration as one captured graph (CUDA; default True).
        False launches the same kernels one by one (for debugging and comparisons)."""
        with self._lock:
            return self._sched.use_graphs

    @use_graphs.setter
    def use_graphs(self, on: bool) -> None:
        with self._lock:
            self._sched.use_graphs = bool(on)

    @property
    def graphs_captured(self) -> int:
        """Iteration graphs captured so far (one per draft source, batch size and length)."""
        with self._lock:
            return self._sched.graphs_captured

    def config(self, role: str = "target") -> dict[str, Any]:
        return dict(self.metadata["models"][role]["config"])

    def __repr__(self) -> str:
        c = self.config()
        return (
            f"Engine({self.path!r}, {c['arch']} {c['n_layers']}L d{c['dim']}, "
            f"weights={self.weights}, draft={self.has_draft}, backend={self.backend}, "
            f"kv={self.kv_cache_dtype} {self.kv_bytes / 1e6:.1f} MB)"
        )

    # ---- tokens -------------------------------------------------------------------------------
    def encode(
        self, prompt: PromptInput, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """Token ids of a prompt: text, token ids, or chat messages (chat template applied, with
        ``tools`` where given)."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special=True)
        if isinstance(prompt, (bytes, bytearray, memoryview)):
            raise ValueError("prompt must be text (str), token ids or chat messages, not bytes")
        if isinstance(prompt, np.ndarray):
            if prompt.ndim != 1 or not np.issubdtype(prompt.dtype, np.integer):
                raise ValueError("a token-id array must be one-dimensional and integer")
            return self._token_ids([int(t) for t in prompt], "the prompt")
        if isinstance(prompt, Sequence) and len(prompt) > 0 and isinstance(prompt[0], Mapping):
            for m in prompt:
                if (
                    not isinstance(m, Mapping)
                    or "role" not in m
                    or ("content" not in m and "tool_calls" not in m)
                ):
                    raise ValueError(
                        "each chat message must be a mapping with 'role' and 'content'"
                    )
            text = self.tokenizer.apply_chat_template(
                tool_messages(prompt), add_generation_prompt=True, tools=list(tools or []) or None
            )
            return self.tokenizer.encode(text, add_special=False)
        if isinstance(prompt, Sequence):
            return self._token_ids(int_list(prompt, "token ids"), "the prompt")
        raise ValueError(
            f"prompt must be a str, a sequence of token ids or a list of chat messages, "
            f"got {type(prompt).__name__}"
        )

    def _token_ids(self, ids: list[int], what: str) -> list[int]:
        """The ids as the binding takes them (int32). The scheduler checks them against the
        vocabulary; one no int32 holds could not reach that check, and is outside it too."""
        for i, t in enumerate(ids):
            if not -(2**31) <= t < 2**31:
                raise ValueError(
                    f"{what} holds token id {t} at index {i}, outside the vocabulary "
                    f"[0, {self.vocab_size})"
                )
        return ids

    def decode(self, token_ids: Sequence[int], skip_special: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special=skip_special)

    def logits(self, prompt: PromptInput) -> np.ndarray:
        """Target logits [n, vocab] at every prompt position (float32).

        Runs once no request is decoding (it borrows KV slot 0), finishing any in flight first.
        """
        ids = self.encode(prompt)
        with self._lock:
            while self._sched.has_work:
                self._dispatch(self._sched.step())
            self._sched.clear_prompt_cache()  # slot 0's cache is about to hold these rows
            return self._rt.prompt_logits(ids, self._prefill_chunk)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token adds to the output text; a special token's own text (which the
        output leaves out)."""
        b = self._token_table[token_id]
        if b:
            return b
        return (self.tokenizer.id_to_token(token_id) or "").encode()

    # ---- generation ---------------------------------------------------------------------------
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
        draft: str = "auto",
        draft_len: int | str = "auto",
        speculate: bool = True,
        prediction: str | Sequence[int] | None = None,
        logprobs: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        logit_bias: Mapping[int, float] | None = None,
        response_format: Mapping[str, Any] | None = None,
        regex: str | None = None,
        grammar: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        parallel_tool_calls: bool = True,
    ) -> GenerationResult | list[GenerationResult] | GenerationStream:
        """Generate a completion, or one per prompt of a batch.

        ``prompt`` is text, token ids, or chat messages (``[{"role": ..., "content": ...}]``);
        a list of such prompts is a batch, decoded together (at most ``max_batch`` at a time,
        the rest as slots free up) and answered with a list of results. ``temperature == 0``
        is greedy; otherwise tokens are sampled with ``top_k`` (0: off) and ``top_p`` (1: off)
        from a generator seeded with ``seed`` (one per prompt, or one for all). ``stop`` holds
        strings and/or token ids that end the completion (the end-of-generation tokens always
        do, unless ``ignore_eos``).

        Speculation: each iteration a draft source proposes tokens and the target verifies them
        in one pass. ``draft`` picks the source: ``"model"`` (the engine's draft model),
        ``"lookup"`` (prompt lookup: continuations of the newest n-gram found earlier in the
        prompt, the text so far or ``prediction``), ``"auto"`` (per iteration, whichever the
        measured costs and acceptance favour, or none) or ``"none"``. ``draft_len`` fixes the
        draft tokens per iteration (at most the engine's ``max_draft_len``) or lets ``"auto"`` pick
        them; ``speculate=False`` is ``draft="none"``. ``prediction``: text (or token ids) the
        answer will probably repeat, such as the file being edited (OpenAI's Predicted
        Outputs); lookup drafts from it. The output follows the target's distribution whatever
        the source (greedy: token for token the same).

        ``logprobs``: None, or n in [0, 20]: each result then carries, per generated token, its
        log-probability and those of the n most likely candidates (:class:`TokenLogprob`), under
        the distribution the token was drawn from. Accepted draft tokens get theirs from the
        verify pass; they equal target-only decoding's.

        Penalties, from the text up to each position (the prompt and what was generated
        before it): ``repetition_penalty`` (> 0, 1: off; divides a positive logit of a token
        seen in the prompt or the output, multiplies a negative one), ``frequency_penalty`` and
        ``presence_penalty`` (in [-2, 2]; subtract count x frequency, and presence once, for
        tokens generated so far), then ``logit_bias`` ({token id: bias in [-100, 100]}, at most
        300). Speculation changes none of them: a verify row counts the draft tokens above it.

        Structured output (at most one): ``response_format`` (OpenAI's ``{"type":
        "json_object"}`` or ``{"type": "json_schema", "json_schema": {"schema": {...}}}``),
        ``regex``, or ``grammar`` (Lark, or GBNF). Every token, draft tokens included, is
        checked against it at its position: the output is the constrained target-only output.

        Tools (chat prompts; OpenAI's ``tools`` and ``tool_choice``, trt_spec/tools.py): the chat
        template renders them; ``result.tool_calls`` holds the calls parsed from the answer
        (``<tool_call>`` blocks); ``tool_choice="required"`` or a named function holds the
        answer to calls of the tools' parameter schemas.

        With ``stream=True`` (one prompt) the call returns a :class:`GenerationStream` that
        yields text as each iteration's tokens become final.

        Thread-safe: calls from several threads join the running batch (up to ``max_batch``
        sequences; further requests queue, first come first served) and each gets the output it
        would get alone; a call's bad arguments raise in that thread only.
        """
        max_new_tokens = as_int(max_new_tokens, "max_new_tokens")
        top_k = as_int(top_k, "top_k")
        temperature = as_number(temperature, "temperature")
        top_p = as_number(top_p, "top_p")
        if not isinstance(speculate, bool):
            raise ValueError("speculate must be True or False")
        if not isinstance(draft, str):
            raise ValueError(f"draft must be one of {DRAFT_MODES}, got {draft!r}")
        k = draft_len_arg(draft_len)
        n_logprobs = -1 if logprobs is None else as_int(logprobs, "logprobs")
        if not 0 <= n_logprobs <= 20 and logprobs is not None:
            raise ValueError(f"logprobs must be None or an integer in [0, 20], got {logprobs!r}")
        mode = draft if speculate else "none"
        penalties = {
            "repetition_penalty": as_number(repetition_penalty, "repetition_penalty"),
            "frequency_penalty": as_number(frequency_penalty, "frequency_penalty"),
            "presence_penalty": as_number(presence_penalty, "presence_penalty"),
            "logit_bias": self._logit_bias(logit_bias),
        }
        spec = constraint_spec(response_format, regex, grammar)
        special = tools is not None and all(
            self._grammars.is_special_text(t) for t in ("<tool_call>", "</tool_call>")
        )
        template_tools, tool_grammar = check_tools(
            tools, tool_choice, special, bool(parallel_tool_calls)
        )
        tool_names = [t["function"]["name"] for t in tools] if tools is not None else None
        if tool_grammar is not None:
            if spec is not None:
                raise ValueError("a required or named tool_choice cannot take another constraint")
            spec = constraint_spec(grammar=tool_grammar)
        prompts = self._batch(prompt)
        single = prompts is None
        if single:
            prompts = [prompt]
        if stream and not single:
            raise ValueError("stream=True takes one prompt, not a batch")
        seeds = seeds_arg(seed, len(prompts))
        stop_strings, stop_ids = self._stops(stop, ignore_eos)
        pred = self._prediction(prediction)
        # No request can produce more than max_seq_len tokens; top_k >= vocab keeps everything.
        max_new_tokens = min(max_new_tokens, self.max_seq_len)
        top_k = min(top_k, self.vocab_size)
        encoded = [self.encode(p, tools=template_tools) for p in prompts]
        rids: list[int] = []
        try:
            for ids, s in zip(encoded, seeds, strict=True):
                request = _core.Request(
                    ids,
                    max_new_tokens,
                    temperature=temperature,
                    top_k=top_k,
                    top_p=top_p,
                    seed=s,
                    stop_ids=stop_ids,
                    stop_strings=stop_strings,
                    prediction=pred,
                    draft=mode,
                    draft_len=k,
                    logprobs=n_logprobs,
                    **penalties,
                )
                if spec is not None:
                    request.constraint = self._grammars.constraint(spec)
                pending = _Pending(ids, n_logprobs >= 0, tool_names)
                rids.append(self._submit(pending, request))
        except BaseException:
            for r in rids:
                self._abandon(r)
            raise
        if stream:
            return GenerationStream(self._stream(rids[0]), self._inbox[rids[0]])
        try:
            results = [self._result(r) for r in rids]
        finally:
            for r in rids:
                self._abandon(r)
        return results[0] if single else results

    # ---- the scheduler, shared by every thread ---------------------------------------------------
    def _submit(self, pending: _Pending, request: _core.Request) -> int:
        with self._lock:
            rid = self._sched.submit(request)
            with self._mu:
                self._inbox[rid] = pending
        return rid

    def _dispatch(self, events: list[_core.Event]) -> None:
        with self._mu:
            for ev in events:
                p = self._inbox.get(ev.id)
                if p is not None:  # (an abandoned request's last events are dropped)
                    p.events.append(ev)
            self._mu.notify_all()

    def _events(self, rid: int) -> list[_core.Event]:
        """Waits for the request's next events, stepping the scheduler when nobody else is.

        A caller whose events another caller's step filed takes them at once: it waits on the
        inbox condition, never behind the scheduler lock, which the stepping caller takes again
        and again (a lock is not fair: a waiter there could starve for a whole generation)."""
        while True:
            with self._mu:
                p = self._inbox[rid]
                if p.events:
                    out = list(p.events)
                    p.events.clear()
                    return out
                if self._stepping:
                    self._mu.wait(timeout=0.5)  # (notified by the stepper's dispatch)
                    continue
                self._stepping = True
            try:
                with self._lock:
                    events = self._sched.step()
                self._dispatch(events)
            finally:
                with self._mu:
                    self._stepping = False
                    self._mu.notify_all()

    def _abandon(self, rid: int) -> None:
        """Forgets a request; one still running is cancelled and its slot freed now (one
        scheduler step, which also advances the other requests, whose events are kept)."""
        with self._mu:
            p = self._inbox.pop(rid, None)
        if p is not None and p.result is None:
            with self._lock:
                self._sched.cancel(rid)
                self._dispatch(self._sched.step())

    def _result(self, rid: int) -> GenerationResult:
        p = self._inbox[rid]
        while p.result is None:
            for ev in self._events(rid):
                p.take(ev)
        return p.result

    def _stream(self, rid: int) -> Generator[str, None, GenerationResult]:
        p = self._inbox[rid]
        try:
            while p.result is None:
                for ev in self._events(rid):
                    piece = p.take(ev)
                    if piece:
                        yield piece
            return p.result
        finally:
            self._abandon(rid)

    # ---- arguments ------------------------------------------------------------------------------
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
        stop_ids = self._token_ids([s for s in stops if not isinstance(s, str)], "stop")
        if not ignore_eos:
            stop_ids += self._eog
        return [s for s in stops if isinstance(s, str)], stop_ids

    @staticmethod
    def _logit_bias(bias: Mapping[int, float] | None) -> dict[int, float]:
        """{token id: bias} with ints and floats (ids and ranges: the scheduler's check)."""
        if bias is None:
            return {}
        if not isinstance(bias, Mapping):
            raise ValueError("logit_bias must be a mapping of token ids to numbers")
        out = {}
        for k, v in bias.items():
            out[as_int(k, "logit_bias token id")] = as_number(v, f"logit_bias[{k}]")
        return out

    def _prediction(self, prediction: str | Sequence[int] | None) -> list[int]:
        if prediction is None:
            return []
        if isinstance(prediction, str):
            return self.tokenizer.encode(prediction, add_special=False)
        if isinstance(prediction, (list, tuple, np.ndarray)):
            return self._token_ids(int_list(prediction, "prediction ids"), "the prediction")
        raise ValueError("prediction must be text, a list of token ids, or None")
