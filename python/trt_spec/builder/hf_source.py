"""Read a Hugging Face model folder (config.json, *.safetensors, tokenizer.json).

Only ``Qwen2ForCausalLM`` and ``LlamaForCausalLM`` style checkpoints are accepted; tensors are
read lazily through ``safetensors`` and mapped to the builder's canonical names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from safetensors import safe_open

from trt_spec.builder.schema import ARCHITECTURES
from trt_spec.builder.source import BuildError, ModelSource, SourceTensor
from trt_spec.builder.tokenizer_convert import tokenizer_json_from_hf

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_TOP_NAMES = {
    "model.embed_tokens.weight": "tok_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_BITS = {"F32": 32.0, "F16": 16.0, "BF16": 16.0, "F64": 64.0}


def _canonical(name: str) -> str | None:
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _LAYER.match(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"blk.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def _loader(file: Path, name: str):
    def load() -> np.ndarray:
        with safe_open(str(file), framework="numpy") as f:
            x = f.get_tensor(name)
        return np.ascontiguousarray(x.astype(np.float32))

    return load


def _bf16_loader(file: Path, shape: tuple[int, ...], offset: int, nbytes: int):
    def load() -> np.ndarray:
        raw = np.fromfile(file, dtype=np.uint16, count=nbytes // 2, offset=offset)
        return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)

    return load


def _header(file: Path) -> tuple[dict, int]:
    size = file.stat().st_size
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > size - 8:
            raise BuildError(f"{file}: not a safetensors file (bad header length)")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise BuildError(f"{file}: not a safetensors file ({e})") from e
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info.get("data_offsets", (0, -1))
        if not 0 <= begin <= end <= size - 8 - n:
            raise BuildError(f"{file}: tensor {name} lies outside the file (truncated?)")
    return header, 8 + n


def safetensors_tensors(file: Path, *, integers: bool = False) -> dict[str, SourceTensor]:
    """Every tensor of a safetensors file, by its name, decoded to float32 on demand; with
    ``integers``, integer and boolean tensors too (as float32: exact below 2**24)."""
    header, data_start = _header(file)
    out: dict[str, SourceTensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info["dtype"], tuple(info["shape"])
        if integers and dtype in ("I64", "I32", "I16", "I8", "U8", "BOOL"):
            out[name] = SourceTensor(shape, dtype, 32.0, _loader(file, name))
            continue
        if dtype not in _BITS:
            raise BuildError(f"{file}: tensor {name} has dtype {dtype}, not supported")
        if dtype == "BF16":
            begin, end = info["data_offsets"]
            load = _bf16_loader(file, shape, data_start + begin, end - begin)
        else:
            load = _loader(file, name)
        out[name] = SourceTensor(shape, dtype, _BITS[dtype], load)
    return out


def open_hf(folder: Path) -> ModelSource:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise BuildError(f"{folder}: no config.json")
    try:
        hf = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise BuildError(f"{cfg_path}: invalid JSON ({e})") from e
    try:
        return _open_hf(folder, hf)
    except BuildError:
        raise
    except KeyError as e:
        raise BuildError(f"{cfg_path}: missing key {e}") from e
    except (TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as e:
        # A value of the wrong type or range in config.json or a safetensors header.
        raise BuildError(f"{folder}: malformed checkpoint ({type(e).__name__}: {e})") from e


def _open_hf(folder: Path, hf: dict) -> ModelSource:
    model_type = hf.get("model_type")
    if model_type not in ARCHITECTURES:
        raise BuildError(
            f"{folder}: unsupported architecture {model_type!r} "
            f"(supported: {', '.join(ARCHITECTURES)})"
        )
    scaling = hf.get("rope_scaling") or (hf.get("rope_parameters") or {})
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if rope_type not in ("default", None):
        raise BuildError(f"{folder}: RoPE scaling {rope_type!r} is not supported")
    theta = hf.get("rope_theta", (hf.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    n_heads = int(hf["num_attention_heads"])
    dim = int(hf["hidden_size"])
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BuildError(f"{folder}: no *.safetensors files")
    tensors: dict[str, SourceTensor] = {}
    for file in files:
        for name, t in safetensors_tensors(file).items():
            canon = _canonical(name)
            if canon is not None:
                tensors[canon] = t
    tied = bool(hf.get("tie_word_embeddings", False)) or "output.weight" not in tensors
    config = {
        "arch": model_type,
        "n_layers": int(hf["num_hidden_layers"]),
        "dim": dim,
        "n_heads": n_heads,
        "n_kv_heads": int(hf.get("num_key_value_heads", n_heads)),
        "head_dim": int(hf.get("head_dim") or dim // n_heads),
        "ffn_dim": int(hf["intermediate_size"]),
        "vocab_size": int(hf["vocab_size"]),
        "rope_theta": float(theta),
        "rms_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "tied_embeddings": tied,
        "qkv_bias": "blk.0.attn_q.bias" in tensors,
    }
    if tied:
        tensors.pop("output.weight", None)
    if not (folder / "tokenizer.json").is_file():
        raise BuildError(f"{folder}: no tokenizer.json")
    try:
        tok_json, special = tokenizer_json_from_hf(folder)
    except ValueError as e:
        raise BuildError(str(e)) from e
    extra = {}
    if hf.get("spd_type") == "pard" or "pard_token" in hf:  # a PARD parallel draft
        token = hf.get("pard_token")
        if not isinstance(token, int) or not 0 <= token < config["vocab_size"]:
            raise BuildError(f"{folder}: PARD draft's pard_token {token!r} is not a token id")
        extra["pard_token"] = token
    src = ModelSource(
        path=folder,
        format="hf",
        name=str(hf.get("_name_or_path") or folder.name),
        config=config,
        tensors=tensors,
        tokenizer_json=tok_json,
        special=special,
        context_length=int(hf.get("max_position_embeddings", 4096)),
        extra=extra,
    )
    src.check()
    return src
