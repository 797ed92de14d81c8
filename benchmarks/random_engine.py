"""Engines with random weights in a real model's shapes, written without any checkpoint.

A repository tool for the GPU tests and benchmarks (not in the wheel): the speed of a decode
step depends only on the shapes and the weight format, and backend-against-backend checks need
no trained weights. The file is the one
the builder writes (same metadata layout as ``builder._write_model``), with a word-level
tokenizer ``<t0> <t1> ...`` covering the vocabulary.

    write_random_engine("pair.engine", SHAPES["qwen2.5-1.5b"], draft=SHAPES["qwen2.5-0.5b"],
                        weights="f16")
"""

from __future__ import annotations

import datetime
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from trt_spec import _core
from trt_spec.builder.builder import choose_type
from trt_spec.builder.schema import engine_tensors
from trt_spec.builder.writer import EngineWriter

# Model configs in the engine schema (cpp/format/schema.h ModelConfig).
SHAPES: dict[str, dict] = {
    "qwen2.5-1.5b": dict(
        arch="qwen2", n_layers=28, dim=1536, n_heads=12, n_kv_heads=2, head_dim=128,
        ffn_dim=8960, vocab_size=151936, rope_theta=1000000.0, rms_eps=1e-6,
        tied_embeddings=True, qkv_bias=True,
    ),
    "qwen2.5-0.5b": dict(
        arch="qwen2", n_layers=24, dim=896, n_heads=14, n_kv_heads=2, head_dim=64,
        ffn_dim=4864, vocab_size=151936, rope_theta=1000000.0, rms_eps=1e-6,
        tied_embeddings=False, qkv_bias=True,
    ),
    "qwen2.5-7b": dict(
        arch="qwen2", n_layers=28, dim=3584, n_heads=28, n_kv_heads=4, head_dim=128,
        ffn_dim=18944, vocab_size=152064, rope_theta=1000000.0, rms_eps=1e-6,
        tied_embeddings=False, qkv_bias=True,
    ),
    "llama-7b": dict(
        arch="llama", n_layers=32, dim=4096, n_heads=32, n_kv_heads=32, head_dim=128,
        ffn_dim=11008, vocab_size=32000, rope_theta=10000.0, rms_eps=1e-5,
        tied_embeddings=False, qkv_bias=False,
    ),
}  # fmt: skip


def tensor_shapes(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Engine tensors of a config, in the builder's file order (the schema's)."""
    return [(t.name, t.shape) for t in engine_tensors(cfg)]


def parameter_count(cfg: dict) -> int:
    return sum(int(np.prod(s)) for _, s in tensor_shapes(cfg))


class _Random:
    """Random float32 arrays, one independent stream per tensor (drawn in file order, so the
    values do not depend on how many threads generate them); `fast` tiles one 16M-value pool
    from a random offset instead (enough for timing runs)."""

    def __init__(self, seed: int, fast: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.standard_normal(1 << 24, dtype=np.float32) if fast else None

    def source(self) -> int:
        """The next tensor's stream: a pool offset (fast) or a seed."""
        if self.pool is not None:
            return int(self.rng.integers(0, self.pool.size))
        return int(self.rng.integers(0, 2**63))

    def normal(self, shape: tuple[int, ...], source: int) -> np.ndarray:
        n = int(np.prod(shape))
        if self.pool is None:
            rng = np.random.default_rng(source)
            return rng.standard_normal(n, dtype=np.float32).reshape(shape)
        reps = (source + n + self.pool.size - 1) // self.pool.size
        return np.tile(self.pool, reps)[source : source + n].reshape(shape)


def _init(name: str, shape: tuple[int, ...], cfg: dict, rnd: _Random, source: int) -> np.ndarray:
    """Values that keep activations and logits in a realistic range through every layer."""
    x = rnd.normal(shape, source)
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * x).astype(np.float32)
    if name.endswith(".bias"):
        return 0.1 * x
    if name == "tok_embd.weight":
        return x * (3.0 / np.sqrt(cfg["dim"]))  # also the tied head: logits ~ 3
    return x * (1.0 / np.sqrt(shape[1]))


def _tensor_type(name: str, shape: tuple[int, ...], cfg: dict, weights: str) -> str:
    head = name == "output.weight" or (name == "tok_embd.weight" and cfg["tied_embeddings"])
    return choose_type(weights, name, shape, 16.0, head)


def _random_table(cfg: dict, weights: str) -> dict[str, dict]:
    """The tensor table of a model made at load (no data: type, shape and size only)."""
    table = {}
    for name, shape in tensor_shapes(cfg):
        type_name = _tensor_type(name, shape, cfg, weights)
        rows, cols = (1, shape[0]) if len(shape) == 1 else shape
        nbytes = _core.weight_blob_bytes(_core.weight_type_from_name(type_name), rows, cols)
        table[name] = {"type": type_name, "shape": list(shape), "bytes": int(nbytes)}
    return table


def _write_model(
    writer: EngineWriter | None, role: str, cfg: dict, weights: str, rnd: _Random, progress
) -> dict:
    tensors: dict[str, dict] = {}
    types: dict[str, int] = {}
    total = 0
    if writer is None:  # data="random": the runtime makes every tensor (engine format 4)
        tensors = _random_table(cfg, weights)
        for t in tensors.values():
            types[t["type"]] = types.get(t["type"], 0) + 1
            total += t["bytes"]

    def blob(name: str, shape: tuple[int, ...], source: int) -> tuple[np.ndarray, str]:
        w = _init(name, shape, cfg, rnd, source)
        type_name = _tensor_type(name, shape, cfg, weights)
        w2 = np.ascontiguousarray(w.reshape(1, -1) if w.ndim == 1 else w, dtype=np.float32)
        return _core.quantize_weight(w2, _core.weight_type_from_name(type_name)), type_name

    # Tensors are generated and quantized on every core (numpy and quantize_weight release the
    # GIL) and written in file order; a bounded window keeps memory to a few tensors per thread.
    jobs = [(n, shape, rnd.source()) for n, shape in tensor_shapes(cfg)] if writer else []
    workers = max(1, min(16, os.cpu_count() or 1))
    pending: deque = deque()

    def write_done(keep: int) -> None:  # writes the oldest until `keep` are in flight
        nonlocal total
        while len(pending) > keep:
            (name, shape, _), fut = pending.popleft()
            data, type_name = fut.result()
            tensors[name] = writer.add(data, type_name, shape)
            types[type_name] = types.get(type_name, 0) + 1
            total += data.size
            if progress:
                progress(f"{role}: {name} {list(shape)} -> {type_name}")

    with ThreadPoolExecutor(workers) as pool:
        for job in jobs:
            pending.append((job, pool.submit(blob, *job)))
            write_done(2 * workers)
        write_done(0)
    return {
        "source": {
            "path": "random",
            "format": "random",
            "name": f"random {cfg['arch']} {cfg['n_layers']}L d{cfg['dim']}",
            "sha256": None,
            "context_length": 32768,
            "tensor_types": ["F32"],
        },
        "config": dict(cfg),
        "weights": weights,
        "weight_bytes": total,
        "tensor_type_counts": types,
        "quant_error": {"metric": "none (random weights)", "max": 0.0, "mean": 0.0,
                        "per_tensor": {}},
        "tensors": tensors,
        **({"random_weights": {"seed": rnd.source() % 2**62}} if writer is None else {}),
        # A reduced head (config head_vocab, e.g. a 32k draft vocabulary): the first ids' rows.
        **({"head_tokens": list(range(cfg["head_vocab"]))} if "head_vocab" in cfg else {}),
    }  # fmt: skip


def _tokenizer(vocab: int) -> tuple[str, dict]:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"<t{i}>": i for i in range(vocab)}, unk_token="<t0>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    special = {
        "bos_id": None, "eos_id": None, "pad_id": None, "unk_id": 0, "chat_template": None,
        "add_bos": False, "add_eos": False, "eog_ids": [],
    }  # fmt: skip
    return tok.to_str(), special


def write_random_engine(
    path: str | Path,
    target: dict,
    *,
    draft: dict | None = None,
    weights: str = "f16",
    max_seq_len: int = 1024,
    max_batch: int = 1,
    draft_len: int = 8,
    seed: int = 0,
    fast: bool = False,
    data: str = "file",
    progress=None,
    pard_token: int | None = None,
) -> Path:
    """Write an engine of random weights: `target` (and `draft`) are configs like SHAPES'.

    pard_token marks the draft a PARD parallel draft with that mask token
    (cpp/spec/pard_proposer.h): one forward drafts k tokens.

    data="file" writes the weights (drawn here, quantized to `weights`); data="random" writes
    none: the runtime makes each tensor where it runs (on a GPU, on the device) from the seed
    (engine format 4, kernels/random_fill.h), so a 7B engine is written in a second, not a
    minute. Timing runs need only the shapes and the format.
    """
    if data not in ("file", "random"):
        raise ValueError(f"data must be 'file' or 'random', got {data!r}")
    path = Path(path)
    rnd = _Random(seed, fast)
    tok_json, special = _tokenizer(target["vocab_size"])
    reduced = any("head_vocab" in c for c in (target, draft) if c is not None)
    version = (
        _core.ENGINE_FORMAT_RANDOM_WEIGHTS_VERSION if data == "random"
        else _core.ENGINE_FORMAT_HEAD_VOCAB_VERSION if reduced
        else _core.ENGINE_FORMAT_OLDEST_VERSION
    )  # fmt: skip
    meta: dict = {
        "format_version": version,
        "producer": {"name": "trt-spec random_engine", "version": "0"},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build": {
            "max_seq_len": max_seq_len,
            "max_batch": max_batch,
            "weights": weights,
            "draft_len": draft_len,
        },
        "tokenizer": {"json": tok_json, **special},
        "models": {},
    }
    with EngineWriter(path) as writer:
        w = writer if data == "file" else None
        meta["models"]["target"] = _write_model(w, "target", target, weights, rnd, progress)
        if draft is not None:
            meta["models"]["draft"] = _write_model(w, "draft", draft, weights, rnd, progress)
            if pard_token is not None:
                meta["models"]["draft"]["pard"] = {"token": int(pard_token)}
        writer.finish(meta)
    return path
