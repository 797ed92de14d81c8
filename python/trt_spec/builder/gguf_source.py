"""Read a GGUF checkpoint (llama.cpp's format) into a :class:`ModelSource`.

Tensors are decoded with the ``gguf`` package's numpy dequantizers. llama.cpp stores the Q and K
projections of ``llama`` models permuted for its interleaved RoPE; they are permuted back here
so every engine uses the rotate-half convention of the Hugging Face models.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from trt_spec import _core
from trt_spec.builder.gguf_reader import GGUFFile, GGUFFormatError
from trt_spec.builder.schema import ARCHITECTURES
from trt_spec.builder.source import BuildError, ModelSource, SourceTensor
from trt_spec.builder.tokenizer_convert import special_tokens_from_gguf, tokenizer_json_from_gguf

Q = gguf.GGMLQuantizationType
SUPPORTED_TYPES = {
    Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0,
    Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K,
}  # fmt: skip


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K permutation (rows grouped per head, pairs interleaved)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _decoder(t, transform=None):
    def load() -> np.ndarray:
        if t.tensor_type == Q.F32:
            x = np.asarray(t.data, dtype=np.float32)
        elif t.tensor_type == Q.F16:
            x = np.asarray(t.data).astype(np.float32)
        elif _core.ggml_type_decodable(int(t.tensor_type)):  # C++, threaded; gguf's exact values
            cols = int(t.shape[0])
            x = _core.decode_ggml_rows(
                t.data.reshape(-1, t.data.shape[-1]), int(t.tensor_type), cols
            )
        else:
            x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        shape = tuple(int(d) for d in reversed(t.shape))
        x = x.reshape(shape)
        if transform is not None:
            x = transform(x)
        return np.ascontiguousarray(x)

    return load


def open_gguf(path: Path) -> ModelSource:
    try:
        reader = GGUFFile(path)
    except (GGUFFormatError, OSError, ValueError) as e:
        raise BuildError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from e
    fields = reader.fields
    try:
        src = _source_from_fields(path, reader, fields)
        src.check()
    except BuildError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as e:
        # A value of the wrong type or range (a list where a count belongs, a tokenizer that
        # cannot be converted, ...): the file is readable but not a model trt-spec can build.
        raise BuildError(f"{path}: malformed GGUF metadata ({type(e).__name__}: {e})") from e
    return src


def _source_from_fields(path: Path, reader: GGUFFile, fields: dict) -> ModelSource:
    """The model source described by a GGUF file's metadata `fields` and tensors."""
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise BuildError(
            f"{path}: unsupported architecture {arch!r} (supported: {', '.join(ARCHITECTURES)})"
        )

    def key(name: str, default=None):
        v = fields.get(f"{arch}.{name}", default)
        if v is None:
            raise BuildError(f"{path}: GGUF metadata lacks {arch}.{name}")
        return v

    scaling = fields.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none", "linear") or (
        scaling == "linear" and float(fields.get(f"{arch}.rope.scaling.factor", 1.0)) != 1.0
    ):
        raise BuildError(f"{path}: RoPE scaling {scaling!r} is not supported")

    tensors_raw = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
        if t.tensor_type not in SUPPORTED_TYPES:
            raise BuildError(
                f"{path}: tensor {t.name} has type {t.tensor_type.name}, which trt-spec "
                f"does not read (supported: {', '.join(sorted(x.name for x in SUPPORTED_TYPES))})"
            )
    dim = int(key("embedding_length"))
    n_heads = int(key("attention.head_count"))
    n_kv = int(key("attention.head_count_kv", n_heads))
    head_dim = int(fields.get(f"{arch}.attention.key_length", dim // n_heads))
    n_layers = int(key("block_count"))
    emb = tensors_raw.get("token_embd.weight")
    if emb is None:
        raise BuildError(f"{path}: no token_embd.weight tensor")
    config = {
        "arch": arch,
        "n_layers": n_layers,
        "dim": dim,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "head_dim": head_dim,
        "ffn_dim": int(key("feed_forward_length")),
        "vocab_size": int(emb.shape[1]),
        "rope_theta": float(fields.get(f"{arch}.rope.freq_base", 10000.0)),
        "rms_eps": float(key("attention.layer_norm_rms_epsilon")),
        "tied_embeddings": "output.weight" not in tensors_raw,
        "qkv_bias": "blk.0.attn_q.bias" in tensors_raw,
    }

    tensors: dict[str, SourceTensor] = {}
    for name, t in tensors_raw.items():
        name = name.replace("token_embd.", "tok_embd.")
        transform = None
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_q.bias")):
            transform = lambda x, n=n_heads: _unpermute(x, n)  # noqa: E731
        elif arch == "llama" and name.endswith(("attn_k.weight", "attn_k.bias")):
            transform = lambda x, n=n_kv: _unpermute(x, n)  # noqa: E731
        block, type_bytes = gguf.GGML_QUANT_SIZES[t.tensor_type]
        tensors[name] = SourceTensor(
            shape=tuple(int(d) for d in reversed(t.shape)),
            source_type=t.tensor_type.name,
            source_bits=8.0 * type_bytes / block,
            load=_decoder(t, transform),
        )

    special = special_tokens_from_gguf(fields)
    src = ModelSource(
        path=path,
        format="gguf",
        name=str(fields.get("general.name", path.stem)),
        config=config,
        tensors=tensors,
        tokenizer_json=tokenizer_json_from_gguf(fields),
        special=special,
        context_length=int(fields.get(f"{arch}.context_length", 4096)),
        extra={"reader": reader},  # keeps the memory map alive
    )
    return src
