"""Read an EAGLE-3 head, a draft of kind ``eagle3``, in its published layout.

An EAGLE-3 head is one Llama decoder layer that reads, beside the target's embedding of the next
token, the target's residual stream entering three of its layers (the taps), fused by ``fc``;
its output head scores a draft vocabulary that maps into the target's. The layout the EAGLE
authors publish (``yuhuili/EAGLE3-*``), which vLLM and SGLang load:

  config.json   ``architectures: ["LlamaForCausalLMEagle3"]``, ``hidden_size``,
                ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
                ``intermediate_size``, ``vocab_size``, ``draft_vocab_size``, ``rms_norm_eps``,
                ``rope_theta``, ``rope_scaling`` (or transformers 5's ``rope_parameters``),
                ``norm_before_residual``; the taps in ``eagle_aux_hidden_state_layer_ids``
                (top level or in ``eagle_config``), by default (2, L // 2, L - 3) of the target's
                L layers, a tap t being the stream entering layer t (t = L: after the last one);
  weights       ``*.safetensors`` or ``pytorch_model.bin``: ``fc.weight`` [hidden, 3 hidden],
                ``midlayer.{input_layernorm, hidden_norm, post_attention_layernorm}.weight``,
                ``midlayer.self_attn.{q,k,v,o}_proj.weight`` (q, k, v over [embedding; feature],
                2 hidden columns), ``midlayer.mlp.{gate,up,down}_proj.weight``, ``norm.weight``,
                ``lm_head.weight`` [draft_vocab, hidden], ``d2t`` [draft_vocab] (draft token i is
                target token i + d2t[i]) and ``t2d``. A ``model.`` prefix and ``layers.0.`` for
                ``midlayer.`` (SpecForge's and vLLM's exports) are accepted; an ``embed_tokens``
                is ignored (the target's table is the head's); biases are not supported.

The engine's tensors (``eagle3.*``, cpp/spec/eagle3_proposer.h) split fc into its three column
blocks and q, k, v into their embedding and feature halves, so that the runtime needs no
concatenation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from trt_spec.builder.draft_heads import Arrays, HeadsSource, read_config, read_tensors
from trt_spec.builder.source import BuildError

KIND = "eagle3"
_LAYER_NAMES = ("layers.0.", "midlayer.")

Loader = Callable[[], np.ndarray]


def is_eagle3(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding an EAGLE-3 head."""
    folder = Path(path)
    if not folder.is_dir():
        return False
    cfg = read_config(folder)
    archs = [str(a) for a in cfg.get("architectures") or []]
    return any("eagle3" in a.lower() for a in archs) or cfg.get("model_type") == KIND


def _rename(name: str) -> str:
    if name.startswith("model."):
        name = name[len("model.") :]
    return "midlayer." + name[len(_LAYER_NAMES[0]) :] if name.startswith(_LAYER_NAMES[0]) else name


def rope_frequencies(head_dim: int, theta: float, scaling: dict | None) -> np.ndarray:
    """The inverse frequencies [head_dim / 2] (float32) of the head's RoPE, with Hugging Face's
    ``linear`` or ``llama3`` scaling applied."""
    inv = (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)).astype(
        np.float32
    )
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return inv
    if kind not in ("linear", "llama3"):
        raise BuildError(f"EAGLE-3 head: rope_scaling {kind!r} is not supported")
    try:
        factor = float(scaling["factor"])
        if kind == "linear":
            return (inv / factor).astype(np.float32)
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
    except (KeyError, TypeError, ValueError) as e:
        raise BuildError(f"EAGLE-3 head: rope_scaling {kind!r}: missing or bad {e}") from e
    wavelen = 2 * np.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, mid, scaled).astype(np.float32)


def _taps(cfg: dict) -> list[int] | None:
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    inner = cfg.get("eagle_config")
    if ids is None and isinstance(inner, dict):
        ids = inner.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        return None
    if (
        not isinstance(ids, list)
        or len(ids) != 3
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise BuildError(f"EAGLE-3 head: eagle_aux_hidden_state_layer_ids must list 3 ints: {ids}")
    return ids


def open_eagle3(path: str | Path) -> HeadsSource:
    """The EAGLE-3 head in ``path`` (a folder), checked for consistent shapes."""
    folder = Path(path)
    cfg = read_config(folder)
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        raise BuildError(f"{folder}: an EAGLE-3 head without *.safetensors or pytorch_model.bin")
    layers = int(cfg.get("num_hidden_layers", 1))
    if layers != 1:
        raise BuildError(f"{folder}: EAGLE-3 heads of {layers} layers are not supported")
    try:
        D = int(cfg["hidden_size"])
        H = int(cfg["num_attention_heads"])
        F = int(cfg["intermediate_size"])
        V = int(cfg["vocab_size"])
    except KeyError as e:
        raise BuildError(f"{folder}/config.json: an EAGLE-3 head needs {e.args[0]}") from e
    KV = int(cfg.get("num_key_value_heads") or H)
    hd = int(cfg.get("head_dim") or D // H)
    Vd = int(cfg.get("draft_vocab_size") or V)
    if int(cfg.get("target_hidden_size") or D) != D:
        raise BuildError(
            f"{folder}: an EAGLE-3 head whose target_hidden_size ({cfg['target_hidden_size']}) "
            f"differs from its hidden_size ({D}) is not supported"
        )
    tensors = read_tensors(files, _rename, integers=True)
    biases = [n for n in tensors if n.endswith(".bias")]  # fc's, the layer's, lm_head's
    if biases:
        raise BuildError(f"{folder}: EAGLE-3 heads with biases ({biases[0]}) are not supported")

    def need(name: str, shape: tuple[int, ...]) -> Loader:
        if name not in tensors:
            raise BuildError(f"{folder}: the EAGLE-3 head lacks tensor {name}")
        got, load = tensors[name]
        if got != shape:
            raise BuildError(f"{folder}: {name} is {list(got)}, expected {list(shape)}")
        return load

    m = "midlayer."
    qkv = (H + 2 * KV) * hd
    L = {
        "fc": need("fc.weight", (D, 3 * D)),
        "input_norm": need(m + "input_layernorm.weight", (D,)),
        "hidden_norm": need(m + "hidden_norm.weight", (D,)),
        "post_norm": need(m + "post_attention_layernorm.weight", (D,)),
        "norm": need("norm.weight", (D,)),
        "q": need(m + "self_attn.q_proj.weight", (H * hd, 2 * D)),
        "k": need(m + "self_attn.k_proj.weight", (KV * hd, 2 * D)),
        "v": need(m + "self_attn.v_proj.weight", (KV * hd, 2 * D)),
        "o": need(m + "self_attn.o_proj.weight", (D, H * hd)),
        "gate": need(m + "mlp.gate_proj.weight", (F, D)),
        "up": need(m + "mlp.up_proj.weight", (F, D)),
        "down": need(m + "mlp.down_proj.weight", (D, F)),
        "head": need("lm_head.weight", (Vd, D)),
    }
    if "d2t" in tensors:
        offsets = need("d2t", (Vd,))().astype(np.int64)
    elif Vd == V:
        offsets = np.zeros(Vd, np.int64)
    else:
        raise BuildError(f"{folder}: a draft vocabulary of {Vd} of {V} tokens needs d2t")
    ids = np.arange(Vd, dtype=np.int64) + offsets
    if ids.min() < 0 or ids.max() >= V or np.unique(ids).size != Vd:
        raise BuildError(f"{folder}: d2t maps the draft vocabulary outside [0, {V}) or twice")
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    theta = float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0)))
    config = {
        "dim": D,
        "n_heads": H,
        "n_kv_heads": KV,
        "head_dim": hd,
        "ffn_dim": F,
        "vocab_size": V,
        "draft_vocab": Vd,
        "rms_eps": float(cfg.get("rms_norm_eps", 1e-6)),
        "taps": _taps(cfg),
        "norm_before_residual": bool(cfg.get("norm_before_residual", False)),
        "rope_freq": [
            float(f) for f in rope_frequencies(hd, theta, cfg.get("rope_scaling") or rope)
        ],
    }

    def fit(target: dict) -> None:  # the taps, by default from the target's depth
        n = int(target["n_layers"])
        taps = config["taps"] or [2, n // 2, n - 3]
        if not all(0 <= t <= n for t in taps):
            raise BuildError(
                f"{folder}: the EAGLE-3 head reads target layers {taps}, but the target has "
                f"{n} layers (0 to {n}); set eagle_aux_hidden_state_layer_ids in its config.json"
            )
        config["taps"] = taps

    def arrays() -> Arrays:
        fc = L["fc"]()
        for t in range(3):
            yield f"eagle3.fc.{t}.weight", np.ascontiguousarray(fc[:, t * D : (t + 1) * D]), False
        del fc
        for n in ("input_norm", "hidden_norm", "post_norm", "norm"):
            yield f"eagle3.{n}.weight", L[n](), False
        w = np.concatenate([L["q"](), L["k"](), L["v"]()])  # [qkv, 2 D]
        assert w.shape == (qkv, 2 * D)
        yield "eagle3.qkv_embed.weight", np.ascontiguousarray(w[:, :D]), False
        yield "eagle3.qkv_hidden.weight", np.ascontiguousarray(w[:, D:]), False
        del w
        yield "eagle3.o.weight", L["o"](), False
        yield "eagle3.gate_up.weight", np.concatenate([L["gate"](), L["up"]()]), False
        yield "eagle3.down.weight", L["down"](), False
        yield "eagle3.head.weight", L["head"](), True

    return HeadsSource(
        path=folder,
        kind=KIND,
        layout="eagle",
        name=str(cfg.get("_name_or_path") or folder.name),
        config=config,
        count=13,  # the tensors arrays() yields
        arrays=arrays,
        extra={"draft_tokens": [int(i) for i in ids]},
        fit=fit,
    )
