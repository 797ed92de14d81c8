"""A model checkpoint as the builder sees it, whatever the file format.

A reader (``gguf_source``, ``hf_source``) turns a checkpoint into a :class:`ModelSource`: the
architecture config in the engine's schema, the tokenizer, and the tensors under canonical
names, each decoded to float32 on demand (so a 1.5B model never sits in memory whole).

Canonical tensor names (Linear weights are [out_features, in_features]):
``tok_embd.weight``, ``output_norm.weight``, ``output.weight`` (absent when tied),
``blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}.weight``
and ``blk.N.attn_{q,k,v}.bias``. The builder fuses q/k/v and gate/up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trt_spec.builder.schema import (
    ARCHITECTURES,
    checkpoint_tensors,
    config_problems,
    engine_tensors,
)


class BuildError(ValueError):
    """The checkpoint or the build options cannot make an engine."""


@dataclass
class SourceTensor:
    """One tensor of a checkpoint: shape, where its bits came from and how to decode it."""

    shape: tuple[int, ...]
    source_type: str  # e.g. "Q4_K", "F16", "BF16"
    source_bits: float  # bits per weight in the checkpoint
    load: Callable[[], np.ndarray]  # -> float32 array of `shape`


@dataclass
class ModelSource:
    path: Path
    format: str  # "gguf" or "hf"
    name: str
    config: dict  # the engine schema's model config (see cpp/format/schema.h)
    tensors: dict[str, SourceTensor]
    tokenizer_json: str
    special: dict  # bos_id, eos_id, pad_id, eog_ids, add_bos, chat_template
    context_length: int
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        """Validate the config and that every tensor the runtime needs is present."""
        c = self.config
        problems = config_problems(c)
        if problems:
            raise BuildError(f"{self.path}: bad model config ({'; '.join(problems)})")
        if c["arch"] not in ARCHITECTURES:
            raise BuildError(
                f"{self.path}: unsupported architecture {c['arch']!r} "
                f"(supported: {', '.join(ARCHITECTURES)})"
            )
        if c["n_heads"] % c["n_kv_heads"] != 0:
            raise BuildError(f"{self.path}: n_heads must be a multiple of n_kv_heads")
        need = checkpoint_tensors(c)
        missing = [n for n in need if n not in self.tensors]
        if missing:
            raise BuildError(f"{self.path}: missing tensors {missing[:5]}")
        emb = self.tensors["tok_embd.weight"].shape
        if emb != (c["vocab_size"], c["dim"]):
            raise BuildError(f"{self.path}: token embedding has shape {emb}")
        for t in engine_tensors(c):  # parts concatenate along rows into the engine's shape
            shapes = [tuple(self.tensors[s].shape) for s in t.sources]
            cols_ok = all(len(s) == len(t.shape) and s[1:] == t.shape[1:] for s in shapes)
            if not cols_ok or sum(s[0] for s in shapes) != t.shape[0]:
                raise BuildError(
                    f"{self.path}: tensor(s) {', '.join(t.sources)} have shapes {shapes}; the "
                    f"config needs {t.shape} (together, along rows)"
                )
        for key, value in self.special.items():
            ids = value if key == "eog_ids" else [value] if key.endswith("_id") else []
            for i in ids or []:
                if i is not None and not (isinstance(i, int) and 0 <= i < c["vocab_size"]):
                    raise BuildError(
                        f"{self.path}: special token {key} = {i!r} is outside the vocabulary "
                        f"[0, {c['vocab_size']})"
                    )


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def open_source(path: str | Path) -> ModelSource:
    """A GGUF file or a Hugging Face model folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        from trt_spec.builder.hf_source import open_hf

        return open_hf(p)
    if p.is_file():
        with open(p, "rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            from trt_spec.builder.gguf_source import open_gguf

            return open_gguf(p)
        raise BuildError(f"{p}: neither a GGUF file nor a Hugging Face model folder")
    raise BuildError(f"{p}: no such file or folder")
