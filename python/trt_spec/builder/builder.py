"""``trt-spec build``: checkpoint(s) -> one engine file.

Reads the target (and optional draft) checkpoint, checks that they fit together, fuses the
attention q/k/v and the FFN gate/up projections, encodes every matrix in the chosen weight
format, records each tensor's error against the float32-decoded checkpoint, and writes one
engine file (``writer.py``).

Weight formats (``--weights``):
  f32, f16, bf16  every matrix in that type;
  q8              every matrix 8-bit (groups of 32, f16 scale);
  q4              matrices 4-bit (groups of 32, f16 scale and offset), except the output head
                  and any matrix a quantized checkpoint held at more than 4.5 bits per weight
                  (Q5_0, Q6_K, Q8_0...), which stay 8-bit (the way llama.cpp's Q4_K_M keeps some
                  tensors at 6 bits). Float checkpoints' matrices all become 4-bit.
Norm weights and biases stay float32. Matrices whose column count is not a multiple of 64
cannot be grouped and are stored f16 under q8/q4.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np

from trt_spec import _core
from trt_spec.builder.draft_heads import HeadsSource, check_heads, is_heads, open_heads
from trt_spec.builder.draft_vocab import (
    DraftVocab,
    choose_draft_vocab,
    file_corpus,
    stdlib_corpus,
)
from trt_spec.builder.schema import engine_tensors
from trt_spec.builder.source import BuildError, ModelSource, open_source, sha256_file
from trt_spec.builder.writer import EngineWriter

WEIGHT_FORMATS = tuple(_core.weight_type_name(t) for t in _core.WeightType)  # from C++
DEFAULT_MAX_SEQ_LEN = 4096
MAX_BATCH_LIMIT = 64
# Sequences an engine decodes together unless told: batch 1 to 4 is what trt-spec is for, and a
# server needs room to batch (the CPU backend's KV pages are only resident once used).
DEFAULT_MAX_BATCH = 4
DEFAULT_DRAFT_LEN = 8

Progress = Callable[[str], None]
#: Called after each engine tensor: (role, tensors done, tensors in the model, a line about it).
TensorProgress = Callable[[str, int, int, str], None]


@dataclass
class BuildReport:
    path: Path
    file_bytes: int
    seconds: float
    models: dict[str, dict] = field(default_factory=dict)  # role -> summary


def _plan(config: dict) -> list[tuple[str, list[str]]]:
    """Engine tensors in file order: (engine name, source parts concatenated along rows), by the
    schema (trt_spec.builder.schema, defined in C++)."""
    return [(t.name, list(t.sources)) for t in engine_tensors(config)]


def choose_type(
    weights: str,
    name: str,
    shape: tuple[int, ...],
    source_bits: float,
    head: bool,
    lean: bool = False,
) -> str:
    """The engine weight type of one tensor under a weight format (see module docstring).

    ``lean`` (the draft model): q4 keeps only the head at q8, whatever the source's bits: a
    draft step is pure weight streaming, and its precision only moves the acceptance rate.
    """
    if len(shape) == 1:
        return "f32"
    if weights in ("f32", "f16", "bf16"):
        return weights
    if shape[1] % _core.Q4_SUPER_BLOCK != 0:
        return "f16"
    if weights == "q8" or head or (4.5 < source_bits < 16 and not lean):
        return "q8"  # the head, or a checkpoint quantized with more than 4.5 bits per weight
    return "q4"


def _encode(w: np.ndarray, type_name: str) -> tuple[np.ndarray, float]:
    """Blob and relative RMS error against the float32 input (computed in C++, in double)."""
    w2 = w.reshape(1, -1) if w.ndim == 1 else w
    w2 = np.ascontiguousarray(w2, dtype=np.float32)
    t = _core.weight_type_from_name(type_name)
    blob = _core.quantize_weight(w2, t)
    if type_name == "f32":
        return blob, 0.0
    return blob, _core.weight_relative_error(blob, t, w2)


def _vocab_list(tokenizer_json: str) -> list[str | None]:
    tok = json.loads(tokenizer_json)
    vocab = dict(tok["model"]["vocab"])
    for a in tok.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    out: list[str | None] = [None] * (max(vocab.values()) + 1)
    for s, i in vocab.items():
        out[i] = s
    return out


def check_pair(target: ModelSource, draft: ModelSource) -> None:
    """The draft must share the target's tokenizer (embedding padding may differ)."""
    a, b = _vocab_list(target.tokenizer_json), _vocab_list(draft.tokenizer_json)
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            raise BuildError(
                f"target and draft tokenizers differ: token id {i} is {x!r} in the target "
                f"and {y!r} in the draft"
            )


def _load(src: ModelSource, name: str) -> np.ndarray:
    t = src.tensors[name]
    try:
        x = t.load()
    except BuildError:
        raise
    except Exception as e:
        raise BuildError(f"{src.path}: cannot read tensor {name} ({type(e).__name__}: {e})") from e
    if tuple(x.shape) != tuple(t.shape) or not np.isfinite(x).all():
        raise BuildError(f"{src.path}: tensor {name} is damaged (shape or non-finite values)")
    return x


@dataclass
class _Encoded:
    """One engine tensor, encoded: its blob, type, shape and error (None for vectors)."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    blob: np.ndarray
    error: float | None


def _encode_tensor(
    src: ModelSource,
    role: str,
    weights: str,
    name: str,
    parts: list[str],
    head_rows: np.ndarray | None = None,
) -> _Encoded:
    """Reads, fuses and encodes one engine tensor (runs on a worker thread); ``head_rows``: the
    output head's rows to keep (a reduced draft vocabulary; the tied table's if tied)."""
    arrays = [_load(src, p) for p in parts]
    w = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
    del arrays
    if head_rows is not None and name == "output.weight":
        w = w[head_rows]
    bits = max(src.tensors[p].source_bits for p in parts)
    head = name == "output.weight" or (name == "tok_embd.weight" and src.config["tied_embeddings"])
    type_name = choose_type(weights, name, w.shape, bits, head, lean=role == "draft")
    blob, err = _encode(w, type_name)
    return _Encoded(
        name, type_name, tuple(int(d) for d in w.shape), blob, err if w.ndim == 2 else None
    )


def _write_model(
    writer: EngineWriter,
    role: str,
    src: ModelSource,
    weights: str,
    on_tensor: TensorProgress,
    pool: ThreadPoolExecutor,
    ahead: int,
    vocab: DraftVocab | None = None,
) -> dict:
    """One model's tensors and metadata entry, encoded on the pool up to ``ahead`` tensors ahead
    of the writer and written in plan order (the bytes do not depend on the number of threads);
    with ``vocab``, a reduced output head of those tokens' rows (draft_vocab.py)."""
    config = dict(src.config)
    if vocab is not None:
        config["head_vocab"] = int(vocab.tokens.size)
    plan = _plan(config)
    sha = pool.submit(sha256_file, src.path) if src.path.is_file() else None
    tensors: dict[str, dict] = {}
    errors: dict[str, float] = {}
    types: dict[str, int] = {}
    weight_bytes = 0
    todo = iter(plan)
    rows = vocab.tokens if vocab is not None else None
    pending = deque(
        pool.submit(_encode_tensor, src, role, weights, *item, rows) for item in islice(todo, ahead)
    )
    for k in range(len(plan)):
        enc = pending.popleft().result()
        nxt = next(todo, None)
        if nxt is not None:
            pending.append(pool.submit(_encode_tensor, src, role, weights, *nxt, rows))
        tensors[enc.name] = writer.add(enc.blob, enc.type_name, enc.shape)
        weight_bytes += enc.blob.size
        types[enc.type_name] = types.get(enc.type_name, 0) + 1
        if enc.error is not None:
            errors[enc.name] = enc.error
        on_tensor(
            role,
            k + 1,
            len(plan),
            f"{role}: [{k + 1}/{len(plan)}] {enc.name} {list(enc.shape)} -> {enc.type_name}"
            + (
                f" (rel err {enc.error:.2e})"
                if enc.error is not None and enc.type_name != "f32"
                else ""
            ),
        )
    mats = list(errors.values())
    extra: dict = {}
    if vocab is not None:
        extra = {"head_tokens": vocab.tokens.tolist(), "draft_vocab": vocab.metadata()}
    if role == "draft" and "pard_token" in src.extra:  # a parallel draft (pard_proposer.h)
        extra["pard"] = {"token": int(src.extra["pard_token"])}
    return {
        "source": {
            "path": str(src.path.name),
            "format": src.format,
            "name": src.name,
            "sha256": sha.result() if sha is not None else None,
            "context_length": src.context_length,
            "tensor_types": sorted({t.source_type for t in src.tensors.values()}),
        },
        "config": config,
        "weights": weights,
        "weight_bytes": weight_bytes,
        "tensor_type_counts": types,
        "quant_error": {
            "metric": "||W_engine - W_checkpoint||_F / ||W_checkpoint||_F per matrix",
            "max": max(mats) if mats else 0.0,
            "mean": float(np.mean(mats)) if mats else 0.0,
            "per_tensor": errors,
        },
        "tensors": tensors,
        **extra,
    }


def _write_heads(
    writer: EngineWriter, src: HeadsSource, weights: str, on_tensor: TensorProgress
) -> dict:
    """The draft heads' tensors (their kind's reader's arrays) and metadata entry."""
    tensors: dict[str, dict] = {}
    types: dict[str, int] = {}
    weight_bytes = 0
    for k, (name, w, head) in enumerate(src.arrays()):
        type_name = choose_type(weights, name, w.shape, 16.0, head, lean=True)
        blob, err = _encode(w, type_name)
        tensors[name] = writer.add(blob, type_name, tuple(int(d) for d in w.shape))
        weight_bytes += blob.size
        types[type_name] = types.get(type_name, 0) + 1
        on_tensor("draft", k + 1, src.count, f"draft: [{k + 1}/{src.count}] {name} -> {type_name}")
    return {
        "kind": src.kind,
        "source": {"path": src.path.name, "format": src.layout, "name": src.name},
        "config": dict(src.config),
        "weights": weights,
        "weight_bytes": weight_bytes,
        "tensor_type_counts": types,
        "tensors": tensors,
        **src.extra,
    }


def _available_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _created() -> str:
    """The build time, or ``$SOURCE_DATE_EPOCH``'s (reproducible builds: identical bytes)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
        if epoch and epoch.isdigit()
        else datetime.datetime.now(datetime.timezone.utc)
    )
    return when.isoformat(timespec="seconds")


def build_engine(
    target: str | Path,
    output: str | Path,
    *,
    draft: str | Path | None = None,
    max_seq_len: int | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    weights: str = "q4",
    draft_len: int = DEFAULT_DRAFT_LEN,
    draft_vocab: int | None = None,
    draft_vocab_corpus: str | Path | None = None,
    progress: Progress | None = None,
    on_tensor: TensorProgress | None = None,
    threads: int | None = None,
) -> BuildReport:
    """Build one engine file from a target checkpoint and an optional draft.

    ``draft_len`` is the most draft tokens an iteration may propose, from the draft model or
    from prompt lookup (which needs no draft model); the runtime sizes its verify pass for it,
    and requests choose any length up to it. 0 builds an engine that never speculates.

    ``draft_vocab`` keeps the draft head's rows of that many tokens only, the most frequent in
    ``draft_vocab_corpus`` (a text file) or by default in the Python standard library's sources
    (``draft_vocab.py``): a cheaper draft step, the same output.

    ``progress`` receives status lines (reading, writing); ``on_tensor`` is called after each
    tensor is encoded. Without ``on_tensor``, its per-tensor lines go to ``progress`` too.
    ``threads`` tensors are read and encoded at once (default: the CPUs available, at most 4);
    the file's bytes do not depend on it.
    """
    say = progress or (lambda _msg: None)
    tensor_done = on_tensor or (lambda _role, _done, _total, line: say(line))
    if weights not in WEIGHT_FORMATS:
        raise BuildError(
            f"unknown weight format {weights!r} (choose from {', '.join(WEIGHT_FORMATS)})"
        )
    if not 1 <= max_batch <= MAX_BATCH_LIMIT:
        raise BuildError(f"max_batch must be in [1, {MAX_BATCH_LIMIT}], got {max_batch}")
    if isinstance(draft_len, bool) or not isinstance(draft_len, int):
        raise BuildError("draft_len must be an integer")
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise BuildError(f"threads must be an integer >= 1, got {threads!r}")
    workers = threads or min(4, _available_cpus())
    low = 1 if draft is not None else 0
    if not low <= draft_len <= _core.MAX_DRAFT_LEN:
        raise BuildError(f"draft_len must be in [{low}, {_core.MAX_DRAFT_LEN}], got {draft_len}")
    heads_dir = draft is not None and is_heads(draft)
    if draft_vocab is not None and (draft is None or heads_dir):
        raise BuildError("--draft-vocab needs --draft with a draft model: it reduces its head")
    if draft_vocab_corpus is not None and draft_vocab is None:
        raise BuildError("--draft-vocab-corpus needs --draft-vocab N")
    t0 = time.perf_counter()
    say(f"reading target {target}")
    tgt = open_source(target)
    dft = None
    heads = None
    if draft is not None and heads_dir:
        say(f"reading draft heads {draft}")
        heads = open_heads(draft)
        check_heads(tgt.config, heads)
    elif draft is not None:
        say(f"reading draft {draft}")
        dft = open_source(draft)
        check_pair(tgt, dft)
    limit = tgt.context_length
    seq = max_seq_len if max_seq_len is not None else min(DEFAULT_MAX_SEQ_LEN, limit)
    if not 1 <= seq <= limit:
        raise BuildError(f"max_seq_len must be in [1, {limit}] (the target's context), got {seq}")
    output = Path(output)
    if output.exists() and output.is_dir():
        raise BuildError(f"{output} is a folder")
    if not output.parent.exists():
        raise BuildError(f"output folder {output.parent} does not exist")
    hot = None
    if draft_vocab is not None:
        assert dft is not None
        shared = min(tgt.config["vocab_size"], dft.config["vocab_size"])
        corpus = (
            file_corpus(draft_vocab_corpus) if draft_vocab_corpus is not None else stdlib_corpus()
        )
        say(f"draft vocabulary: counting tokens in {corpus.path} ({corpus.bytes / 1e6:.1f} MB)")
        hot = choose_draft_vocab(draft_vocab, tgt.tokenizer_json, tgt.special, shared, corpus)
        say(
            f"draft vocabulary: {hot.tokens.size} tokens, {100 * hot.coverage:.2f}% of the "
            f"corpus's {hot.corpus_tokens} tokens"
        )

    from trt_spec import __version__

    meta: dict = {
        # Version 3 only where the file needs it (a reduced head): others stay readable by
        # readers of version 2 (cpp/format/engine_file.h).
        "format_version": (
            _core.ENGINE_FORMAT_DRAFT_HEADS_VERSION
            if heads is not None
            else _core.ENGINE_FORMAT_HEAD_VOCAB_VERSION
            if hot is not None
            else _core.ENGINE_FORMAT_OLDEST_VERSION
        ),
        "producer": {"name": "trt-spec", "version": __version__},
        "created": _created(),
        "build": {
            "max_seq_len": seq,
            "max_batch": max_batch,
            "weights": weights,
            "draft_len": draft_len,
        },
        "tokenizer": {"json": tgt.tokenizer_json, **tgt.special},
        "models": {},
    }
    with EngineWriter(output) as writer, ThreadPoolExecutor(workers) as pool:
        try:
            meta["models"]["target"] = _write_model(
                writer, "target", tgt, weights, tensor_done, pool, workers + 1
            )
            if dft is not None:
                meta["models"]["draft"] = _write_model(
                    writer, "draft", dft, weights, tensor_done, pool, workers + 1, hot
                )
            if heads is not None:
                meta["draft_heads"] = _write_heads(writer, heads, weights, tensor_done)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        writer.finish(meta)
    report = BuildReport(output, output.stat().st_size, time.perf_counter() - t0)
    for role, m in meta["models"].items():
        report.models[role] = {
            "arch": m["config"]["arch"],
            "weight_bytes": m["weight_bytes"],
            "quant_error_max": m["quant_error"]["max"],
            "quant_error_mean": m["quant_error"]["mean"],
            "types": m["tensor_type_counts"],
        }
    if heads is not None:
        report.models["draft"] = {
            "kind": heads.kind,
            "weight_bytes": meta["draft_heads"]["weight_bytes"],
            "types": meta["draft_heads"]["tensor_type_counts"],
        }
    say(f"wrote {output} ({report.file_bytes / 1e6:.1f} MB) in {report.seconds:.1f} s")
    return report
