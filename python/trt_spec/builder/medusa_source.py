"""Read Medusa heads, a draft of kind ``medusa``, in either published layout.

Medusa heads read the target's final (normed) hidden state; head ``h`` predicts the token
``h + 2`` places after that state's position. Each head is ``L`` residual blocks
``x <- x + SiLU(W x + b)`` and an output head ``[vocab, hidden]``.

Layouts:
  FasterDecoding  ``config.json`` with ``medusa_num_heads`` and ``medusa_num_layers``;
                  ``medusa_lm_head.safetensors`` (or ``.pt`` / ``.bin``) holding
                  ``{h}.{l}.linear.weight`` / ``.bias`` (``l < L``) and ``{h}.{L}.weight``.
  vLLM            ``config.json`` with ``model_type: "medusa"``, ``num_heads``,
                  ``num_hidden_layers``, ``hidden_size``, ``vocab_size``; ``*.safetensors`` (or
                  ``pytorch_model.bin``) holding ``blocks.{h}.layers.{l}.weight`` (``.bias`` with
                  ``medusa_fc_bias``) and ``lm_heads.{h}.weight`` (one ``lm_head`` for all with
                  ``original_lm_head``).
A ``medusa_heads.`` or ``medusa_head.`` prefix on the names is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trt_spec.builder.draft_heads import HeadsSource, read_config, read_tensors
from trt_spec.builder.source import BuildError

KIND = "medusa"
_FD_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt", "medusa_lm_head.bin")
_PREFIXES = ("medusa_heads.", "medusa_head.")

Loader = Callable[[], np.ndarray]


@dataclass
class MedusaHeads:
    """Medusa heads: config, float32 loaders by engine tensor role."""

    config: dict  # n_heads, n_layers, dim, vocab_size
    res_weight: list[list[Loader]]  # [head][layer] -> [dim, dim]
    res_bias: list[list[Loader | None]]  # [head][layer] -> [dim], None: no bias
    head_weight: list[Loader]  # [head] -> [vocab, dim]


def is_medusa(path: str | Path) -> bool:
    """Whether ``path`` is a folder of Medusa heads (either layout)."""
    folder = Path(path)
    if not folder.is_dir():
        return False
    cfg = read_config(folder)
    return (
        "medusa_num_heads" in cfg
        or cfg.get("model_type") == KIND
        or "MedusaModel" in (cfg.get("architectures") or [])
        or any((folder / f).is_file() for f in _FD_FILES)
    )


def _strip(name: str) -> str:
    for p in _PREFIXES:
        if name.startswith(p):
            return name[len(p) :]
    return name


def _need(tensors: dict, name: str, folder: Path) -> tuple[tuple[int, ...], Loader]:
    if name not in tensors:
        raise BuildError(f"{folder}: Medusa heads lack tensor {name}")
    return tensors[name]


def open_medusa(path: str | Path) -> HeadsSource:
    """The Medusa heads in ``path`` (a folder), checked for consistent shapes."""
    folder = Path(path)
    cfg = read_config(folder)
    fd = [folder / f for f in _FD_FILES if (folder / f).is_file()]
    if fd:
        layout = "fasterdecoding"
        tensors = read_tensors(fd[:1], _strip)
        heads = int(cfg.get("medusa_num_heads", 0)) or 1 + max(
            (int(n.split(".")[0]) for n in tensors if n.split(".")[0].isdigit()), default=-1
        )
        layers = int(cfg.get("medusa_num_layers", 1))
        res_w = [[f"{h}.{lay}.linear.weight" for lay in range(layers)] for h in range(heads)]
        res_b = [[f"{h}.{lay}.linear.bias" for lay in range(layers)] for h in range(heads)]
        out = [f"{h}.{layers}.weight" for h in range(heads)]
    else:
        files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
        if not files:
            raise BuildError(f"{folder}: Medusa heads without *.safetensors or pytorch_model.bin")
        layout = "vllm"
        tensors = read_tensors(files, _strip)
        if "num_heads" not in cfg:
            raise BuildError(f"{folder}/config.json: Medusa heads need num_heads")
        heads = int(cfg["num_heads"])
        layers = int(cfg.get("num_hidden_layers", 1))
        vocab = int(cfg.get("vocab_size", 0))
        truncated = int(cfg.get("truncated_vocab_size") or vocab)
        if truncated != vocab:
            raise BuildError(
                f"{folder}: Medusa heads with a truncated vocabulary ({truncated} of {vocab}, "
                "token_map) are not supported"
            )
        res_w = [[f"blocks.{h}.layers.{lay}.weight" for lay in range(layers)] for h in range(heads)]
        res_b = [[f"blocks.{h}.layers.{lay}.bias" for lay in range(layers)] for h in range(heads)]
        shared = bool(cfg.get("original_lm_head", False))
        one = "lm_head.weight" if "lm_head.weight" in tensors else "lm_heads.0.weight"
        out = [one if shared else f"lm_heads.{h}.weight" for h in range(heads)]
    if not 1 <= heads <= 8 or not 0 <= layers <= 8:
        raise BuildError(f"{folder}: Medusa heads: {heads} heads of {layers} layers (1-8, 0-8)")
    vocab, dim = _need(tensors, out[0], folder)[0]
    res_weight: list[list[Loader]] = []
    res_bias: list[list[Loader | None]] = []
    head_weight: list[Loader] = []
    for h in range(heads):
        ws, bs = [], []
        for lay in range(layers):
            shape, load = _need(tensors, res_w[h][lay], folder)
            if shape != (dim, dim):
                raise BuildError(f"{folder}: {res_w[h][lay]} is {list(shape)}, not [{dim}, {dim}]")
            ws.append(load)
            bias = tensors.get(res_b[h][lay])
            if bias is not None and bias[0] != (dim,):
                raise BuildError(f"{folder}: {res_b[h][lay]} is {list(bias[0])}, not [{dim}]")
            bs.append(bias[1] if bias is not None else None)
        shape, load = _need(tensors, out[h], folder)
        if shape != (vocab, dim):
            raise BuildError(f"{folder}: {out[h]} is {list(shape)}, not [{vocab}, {dim}]")
        res_weight.append(ws)
        res_bias.append(bs)
        head_weight.append(load)
    m = MedusaHeads(
        config={"n_heads": heads, "n_layers": layers, "dim": int(dim), "vocab_size": int(vocab)},
        res_weight=res_weight,
        res_bias=res_bias,
        head_weight=head_weight,
    )
    return HeadsSource(
        path=folder,
        kind=KIND,
        layout=layout,
        name=str(cfg.get("_name_or_path") or folder.name),
        config=m.config,
        count=heads * (2 * layers + 1),
        arrays=lambda: engine_arrays(m),
    )


def engine_arrays(src: MedusaHeads) -> Iterator[tuple[str, np.ndarray, bool]]:
    """The engine's tensors of the heads, in file order, one at a time: (name, float32 array,
    whether it is an output head). A block's weight is stored [2 dim, dim] as rows [W; 0] and
    its bias [2 dim] as [b; 1]: the SiLU gate in the form the runtime's swiglu op takes
    (silu(Wx + b) * 1)."""
    dim = src.config["dim"]
    for h in range(src.config["n_heads"]):
        for lay in range(src.config["n_layers"]):
            w = src.res_weight[h][lay]()
            yield f"medusa.{h}.res.{lay}.weight", np.concatenate([w, np.zeros_like(w)]), False
            b = src.res_bias[h][lay]
            bias = b() if b is not None else np.zeros(dim, np.float32)
            gate = np.concatenate([bias, np.ones(dim, np.float32)])
            yield f"medusa.{h}.res.{lay}.bias", gate, False
        yield f"medusa.{h}.head.weight", src.head_weight[h](), True
