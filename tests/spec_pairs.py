"""Tiny target/draft pairs for the speculative-decoding tests.

Drafts come in kinds that pin down acceptance (and three other kinds of draft: ``pard``, a random
draft marked a PARD parallel draft, ``medusa``, three random Medusa heads, and ``eagle3``, a
random EAGLE-3 head with a reduced draft vocabulary): ``random``
(another random model: accepts some),
``same`` (the target's own weights: accepts everything greedy), ``negated`` (the target with its
output head negated: its argmax is the target's argmin, so greedy never accepts) and
``padded`` (a random model whose embedding and head have extra rows, the tokenizer unchanged) and
``noisy`` (the target plus weight noise: accepts part of each block, at random lengths) and
``narrow`` (the pair's target padded with extra embedding and head rows, the draft the unpadded
target: ids the target has and the draft lacks, as between Qwen2.5-7B and its 0.5B draft).
``small_vocab`` models have a 16-token word-level tokenizer, for distribution tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import tiny_models
import torch
from safetensors.torch import load_file, save_file
from trt_spec import build_engine

SMALL_VOCAB = 16


def _word_level_tokenizer(folder: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))


def _edit_weights(folder: Path, edit) -> None:
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def make_checkpoint(
    root: Path, name: str, *, seed: int, small_vocab: bool, layers: int = 2
) -> Path:
    folder = root / name
    if not (folder / "config.json").exists():
        vocab = SMALL_VOCAB if small_vocab else 384
        tiny_models.make_model(folder, "qwen2", vocab_size=vocab, seed=seed, layers=layers)
        if small_vocab:
            _word_level_tokenizer(folder, vocab)
    return folder


def _pad_vocab(folder: Path, extra: int) -> None:
    """Adds `extra` rows to the embedding and the head (the tokenizer unchanged)."""

    gen = torch.Generator().manual_seed(5)

    def pad(t: dict) -> None:
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            w = t[name]
            rows = 0.05 * torch.randn(extra, w.shape[1], generator=gen)
            t[name] = torch.cat([w, rows]).contiguous()

    _edit_weights(folder, pad)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["vocab_size"] += extra
    (folder / "config.json").write_text(json.dumps(cfg))


def make_markov_target(root: Path, layer_scale: float = 0.1) -> Path:
    """A tiny target whose next token is mostly a function of the current one (a random
    permutation's successor): attention and MLP outputs scaled down, the head's row of
    perm[x] along x's embedding. A random tiny model's continuations are a random function of
    the whole context, which no draft learns from a few thousand examples; these are
    learnable, as a trained model's largely are, while the layers still perturb them (the
    first positions after a prompt most). For drafts trained in the tests (Medusa, PARD).
    layer_scale: the attention and MLP outputs' factor (larger: the context weighs more)."""
    folder = root / ("target-markov" if layer_scale == 0.1 else f"target-markov-{layer_scale:g}")
    if (folder / "config.json").exists():
        return folder
    make_checkpoint(root, folder.name, seed=3, small_vocab=False)

    def markov(t: dict) -> None:
        g = torch.Generator().manual_seed(4)
        emb = t["model.embed_tokens.weight"]
        perm = torch.randperm(emb.shape[0], generator=g)
        head = torch.empty_like(t["lm_head.weight"])
        head[perm] = 4.0 * emb / emb.norm(dim=1, keepdim=True)
        t["lm_head.weight"] = head.contiguous()
        for name in list(t):
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                t[name] = (layer_scale * t[name]).contiguous()

    _edit_weights(folder, markov)
    return folder


def write_medusa_heads(folder: Path, heads: list[tuple[torch.Tensor, ...]]) -> Path:
    """Medusa heads of one residual block each, (W, b, output head) per head, in FasterDecoding's
    layout: medusa_lm_head.safetensors ({h}.0.linear.*, {h}.1.weight) and config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {}
    for h, (w, b, out) in enumerate(heads):
        state[f"{h}.0.linear.weight"] = w.detach().clone().contiguous()
        state[f"{h}.0.linear.bias"] = b.detach().clone().contiguous()
        state[f"{h}.1.weight"] = out.detach().clone().contiguous()
    save_file(state, str(folder / "medusa_lm_head.safetensors"))
    cfg = {"medusa_num_heads": len(heads), "medusa_num_layers": 1}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def write_random_eagle3_head(
    folder: Path, target: Path, *, draft_vocab: int, taps: list[int], seed: int = 17
) -> Path:
    """A random EAGLE-3 head for `target` in the published layout (config.json with
    LlamaForCausalLMEagle3, model.safetensors with fc, midlayer.*, norm, lm_head, d2t, t2d):
    its draft vocabulary every other token id from 0, its taps given."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((target / "config.json").read_text())
    D, V, F = cfg["hidden_size"], cfg["vocab_size"], 2 * cfg["hidden_size"]
    H, KV, hd = 4, 2, cfg["hidden_size"] // 4
    gen = torch.Generator().manual_seed(seed)

    def w(*shape: int, scale: float = 0.08) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=gen)

    ids = torch.arange(0, 2 * draft_vocab, 2)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    m = "midlayer."
    state = {
        "fc.weight": w(D, 3 * D),
        m + "input_layernorm.weight": 1.0 + w(D, scale=0.1),
        m + "hidden_norm.weight": 1.0 + w(D, scale=0.1),
        m + "post_attention_layernorm.weight": 1.0 + w(D, scale=0.1),
        m + "self_attn.q_proj.weight": w(H * hd, 2 * D),
        m + "self_attn.k_proj.weight": w(KV * hd, 2 * D),
        m + "self_attn.v_proj.weight": w(KV * hd, 2 * D),
        m + "self_attn.o_proj.weight": w(D, H * hd),
        m + "mlp.gate_proj.weight": w(F, D),
        m + "mlp.up_proj.weight": w(F, D),
        m + "mlp.down_proj.weight": w(D, F),
        "norm.weight": 1.0 + w(D, scale=0.1),
        "lm_head.weight": w(draft_vocab, D, scale=0.3),
        "d2t": ids - torch.arange(draft_vocab),
        "t2d": t2d,
    }
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    head_cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": D,
        "intermediate_size": F,
        "num_attention_heads": H,
        "num_key_value_heads": KV,
        "head_dim": hd,
        "num_hidden_layers": 1,
        "vocab_size": V,
        "draft_vocab_size": draft_vocab,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": taps},
    }
    (folder / "config.json").write_text(json.dumps(head_cfg))
    return folder


def make_draft(root: Path, target: Path, kind: str, *, small_vocab: bool) -> Path:
    folder = root / f"{target.name}-draft-{kind}"
    if (folder / "config.json").exists():
        return folder
    if kind == "random":
        return make_checkpoint(root, folder.name, seed=7, small_vocab=small_vocab, layers=1)
    if kind == "pard":  # a random 1-layer draft marked PARD (exactness needs no training)
        folder = make_checkpoint(root, folder.name, seed=7, small_vocab=small_vocab, layers=1)
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(pard_token=cfg["vocab_size"] - 2, spd_type="pard")
        (folder / "config.json").write_text(json.dumps(cfg))
        return folder
    if kind == "medusa":  # 3 random Medusa heads, FasterDecoding's layout
        cfg = json.loads((target / "config.json").read_text())
        dim, vocab = cfg["hidden_size"], cfg["vocab_size"]
        gen = torch.Generator().manual_seed(13)
        heads = [
            (
                0.05 * torch.randn(dim, dim, generator=gen),
                0.05 * torch.randn(dim, generator=gen),
                0.1 * torch.randn(vocab, dim, generator=gen),
            )
            for _ in range(3)
        ]
        return write_medusa_heads(folder, heads)
    if kind == "eagle3":  # a random EAGLE-3 head reading all three of the target's depths
        vocab = json.loads((target / "config.json").read_text())["vocab_size"]
        return write_random_eagle3_head(folder, target, draft_vocab=vocab // 2, taps=[0, 1, 2])
    if kind == "padded":
        folder = make_checkpoint(root, folder.name, seed=7, small_vocab=small_vocab, layers=1)
        _pad_vocab(folder, 24)
        return folder
    shutil.copytree(target, folder)
    if kind == "negated":

        def negate(t: dict) -> None:
            t["lm_head.weight"] = (-t["lm_head.weight"]).contiguous()

        _edit_weights(folder, negate)
    elif kind == "noisy":
        gen = torch.Generator().manual_seed(11)

        def perturb(t: dict) -> None:
            for name, w in t.items():
                if w.ndim == 2:
                    t[name] = (w + 0.012 * torch.randn(w.shape, generator=gen)).contiguous()

        _edit_weights(folder, perturb)
    elif kind not in ("same", "narrow"):  # (narrow: the target is the padded one)
        raise ValueError(kind)
    return folder


def make_pair(
    root: Path,
    kind: str = "random",
    *,
    draft_len: int = 4,
    max_batch: int = 1,
    max_seq_len: int = 128,
    small_vocab: bool = False,
    weights: str = "f32",
) -> Path:
    """An engine holding a tiny target and a draft of the given kind (cached under root)."""
    tag = f"{kind}-k{draft_len}-b{max_batch}-s{max_seq_len}-{'v16' if small_vocab else 'v384'}"
    path = root / f"pair-{tag}-{weights}.engine"
    if not path.exists():
        target = make_checkpoint(
            root, f"target-{'v16' if small_vocab else 'v384'}", seed=3, small_vocab=small_vocab
        )
        draft = make_draft(root, target, kind, small_vocab=small_vocab)
        if kind == "narrow":  # the draft is the plain target; the target gets 24 more ids
            wide = root / f"{target.name}-wide"
            if not (wide / "config.json").exists():
                shutil.copytree(target, wide)
                _pad_vocab(wide, 24)
            target = wide
        build_engine(
            target,
            path,
            draft=draft,
            draft_len=draft_len,
            max_batch=max_batch,
            max_seq_len=max_seq_len,
            weights=weights,
        )
    return path
