"""EAGLE-3 heads in torch, in the layout the EAGLE authors publish (LlamaForCausalLMEagle3), for
the tests: the head's forward as vLLM and SGLang run it, the target's taps (its residual stream
entering given layers), a few seconds of training on a tiny target's own outputs, and a writer of
the published files (config.json, model.safetensors or pytorch_model.bin)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None = None) -> torch.Tensor:
    """RoPE's inverse frequencies [head_dim / 2] (float32), with Hugging Face's ``linear`` or
    ``llama3`` scaling (its _compute_llama3_parameters) when ``scaling`` names one."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind in (None, "default"):
        return inv
    factor = scaling["factor"]
    if kind == "linear":
        return inv / factor
    assert kind == "llama3", kind
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def _rotate(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x [..., T, heads, head_dim] at positions pos [T]."""
    ang = pos[:, None].float() * inv_freq[None, :]  # [T, hd / 2]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(2 * dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(2 * dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(2 * dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, dim, bias=False)


class Mlp(nn.Module):
    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)


class MidLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, ffn: int) -> None:
        super().__init__()
        self.input_layernorm = nn.Parameter(torch.ones(dim))
        self.hidden_norm = nn.Parameter(torch.ones(dim))
        self.post_attention_layernorm = nn.Parameter(torch.ones(dim))
        self.self_attn = Attention(dim, heads, kv_heads, head_dim)
        self.mlp = Mlp(dim, ffn)


class Eagle3Head(nn.Module):
    """fc over the 3 taps, one layer over [norm(embedding); norm(feature)], norm and lm_head over
    the draft vocabulary; d2t / t2d map it to the target's. ``norm_before_residual``: the
    layer's residual is hidden_norm(feature) instead of the feature; ``rope_scaling``: Hugging
    Face's ``linear`` or ``llama3`` dict (see rope_inv_freq)."""

    def __init__(
        self,
        dim: int,
        vocab: int,
        draft_tokens: torch.Tensor,
        heads: int = 4,
        kv_heads: int = 2,
        ffn: int = 256,
        eps: float = 1e-6,
        theta: float = 10000.0,
        norm_before_residual: bool = False,
        rope_scaling: dict | None = None,
    ) -> None:
        super().__init__()
        self.dim, self.vocab, self.eps = dim, vocab, eps
        self.norm_before_residual = norm_before_residual
        head_dim = dim // heads
        self.fc = nn.Linear(3 * dim, dim, bias=False)
        self.midlayer = MidLayer(dim, heads, kv_heads, head_dim, ffn)
        self.norm = nn.Parameter(torch.ones(dim))
        self.lm_head = nn.Linear(dim, draft_tokens.numel(), bias=False)
        ids = draft_tokens.long()
        self.register_buffer("d2t", ids - torch.arange(ids.numel()))
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[ids] = True
        self.register_buffer("t2d", t2d)
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, theta, rope_scaling))
        self.cfg = dict(
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            ffn=ffn,
            theta=theta,
            rope_scaling=rope_scaling,
        )

    def _qkv(self, embed: torch.Tensor, g: torch.Tensor, pos: torch.Tensor):
        m, a = self.midlayer, self.midlayer.self_attn
        e, f = _rms(embed, m.input_layernorm, self.eps), _rms(g, m.hidden_norm, self.eps)
        x = torch.cat([e, f], -1)
        lead, T = x.shape[:-2], x.shape[-2]
        q = _rotate(a.q_proj(x).view(*lead, T, a.h, a.hd), pos, self.inv_freq)
        k = _rotate(a.k_proj(x).view(*lead, T, a.kv, a.hd), pos, self.inv_freq)
        v = a.v_proj(x).view(*lead, T, a.kv, a.hd)
        rep = a.h // a.kv
        return q / a.hd**0.5, k.repeat_interleave(rep, -2), v.repeat_interleave(rep, -2)

    def _finish(self, g: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        m = self.midlayer
        r = _rms(g, m.hidden_norm, self.eps) if self.norm_before_residual else g
        h = r + m.self_attn.o_proj(att.flatten(-2))
        y = _rms(h, m.post_attention_layernorm, self.eps)
        return h + m.mlp.down_proj(nn.functional.silu(m.mlp.gate_proj(y)) * m.mlp.up_proj(y))

    def chain_step(
        self,
        embed: torch.Tensor,
        g: torch.Tensor,
        pos: torch.Tensor,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """Chain step d = len(cache) over rows [n, R] as the runtime runs it (d = 0: the first,
        causal pass over the positions): row p (position pos[p]) attends the first pass's keys
        of rows 0 .. p and the keys of row p at each later step (its own chain), its own
        included; cache: the earlier steps' (k, v) [n, >= R, h, hd], this step's appended."""
        q, k, v = self._qkv(embed, g, pos)
        R = q.shape[-3]
        cache.append((k, v))
        k0, v0 = cache[0][0][:, :R], cache[0][1][:, :R]
        causal = torch.ones(R, R, dtype=torch.bool).tril()
        s0 = torch.einsum("nihd,njhd->nhij", q, k0).masked_fill(~causal, float("-inf"))
        diag = [(q * kd[:, :R]).sum(-1).permute(0, 2, 1)[..., None] for kd, _ in cache[1:]]
        w = torch.cat([s0, *diag], -1).softmax(-1)  # [n, h, R, R + d]
        att = torch.einsum("nhij,njhd->nihd", w[..., :R], v0)
        for i, (_, vd) in enumerate(cache[1:]):
            att = att + w[..., R + i].permute(0, 2, 1)[..., None] * vd[:, :R]
        return self._finish(g, att)

    def logits(self, out: torch.Tensor) -> torch.Tensor:  # [T, draft_vocab]
        return self.lm_head(_rms(out, self.norm, self.eps))


def target_taps(model, ids: torch.Tensor, taps: list[int]) -> torch.Tensor:
    """The target's residual stream entering each tap layer, [batch, T, 3 dim] (a tap of the
    layer count: after the last layer, before the final norm, as the norm's input)."""
    seen: dict[str, torch.Tensor] = {}
    hook = model.model.norm.register_forward_hook(lambda _m, i, _o: seen.setdefault("x", i[0]))
    try:
        with torch.no_grad():
            hs = model(ids, output_hidden_states=True).hidden_states
    finally:
        hook.remove()
    n = model.config.num_hidden_layers
    return torch.cat([hs[t] if t < n else seen["x"] for t in taps], -1)


def _unroll(head: Eagle3Head, model, seqs: torch.Tensor, aux: torch.Tensor, depth: int):
    """The head's logits [depth][n, T - 1 - d, draft_vocab]: a first pass over every position
    (row p reads token p + 1 and the taps at p, at position p, causal), then depth - 1 chain
    steps as the runtime drafts them (training-time test): step d's row p reads token
    p + 1 + d and step d - 1's output at row p, at position p + d."""
    n, T = seqs.shape
    emb = model.get_input_embeddings()
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    pos = torch.arange(T)
    out = []
    g = head.fc(aux[:, : T - 1])  # [n, T - 1, dim]
    for d in range(depth):
        rows = T - 1 - d
        e = emb(seqs[:, 1 + d : T]).detach()
        g = head.chain_step(e, g[:, :rows], pos[d : d + rows], cache)
        out.append(head.logits(g))
    return out


def train_head(
    model,
    seqs: torch.Tensor,
    taps: list[int],
    draft_vocab: int | None = None,
    steps: int = 150,
    depth: int = 3,
    lr: float = 5e-3,
    batch: int = 16,
    ffn: int = 256,
    seed: int = 0,
    kv_heads: int = 2,
) -> Eagle3Head:
    """A head trained on the target's greedy sequences [n, T]: row p predicts token p + 2 + d at
    unrolled step d; the draft vocabulary is the most frequent tokens of seqs (all without
    draft_vocab); lm_head starts from the target's output rows of those tokens."""
    torch.manual_seed(seed)
    c = model.config
    V = c.vocab_size
    if draft_vocab is None or draft_vocab >= V:
        tokens = torch.arange(V)
    else:
        counts = torch.bincount(seqs.reshape(-1), minlength=V)
        tokens = counts.argsort(descending=True, stable=True)[:draft_vocab].sort().values
    head = Eagle3Head(c.hidden_size, V, tokens, ffn=ffn, kv_heads=kv_heads)
    with torch.no_grad():
        head.lm_head.weight.copy_(model.get_output_embeddings().weight[tokens])
    index = torch.full((V,), -100, dtype=torch.long)  # target id -> draft id (-100: outside)
    index[tokens] = torch.arange(tokens.numel())
    aux = target_taps(model, seqs, taps)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pick = torch.randperm(seqs.shape[0], generator=g)[:batch]  # a minibatch of sequences
        loss = 0.0
        for d, logits in enumerate(_unroll(head, model, seqs[pick], aux[pick], depth)):
            labels = index[seqs[pick, 2 + d :]]
            loss = loss + nn.functional.cross_entropy(
                logits[:, : labels.shape[1]].reshape(-1, logits.shape[-1]),
                labels.reshape(-1),
                ignore_index=-100,
            )
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.eval()
    return head


def reference_logits(
    head: Eagle3Head, model, ids: list[int], next_token: int, taps: list[int]
) -> np.ndarray:
    """The head's draft-vocabulary logits [n, draft_vocab] (numpy) over a prompt: row p reads
    the token at p + 1 (next_token after the last) and the target's taps at p, causal over rows
    <= p."""
    x = torch.tensor([ids])
    aux = target_taps(model, x, taps)[0]
    tok = torch.tensor(ids[1:] + [next_token])
    n = len(ids)
    with torch.no_grad():
        e = model.get_input_embeddings()(tok)
        out = head.chain_step(e[None], head.fc(aux)[None], torch.arange(n), [])  # (first pass)
        return head.logits(out[0]).numpy()


def reduce_vocab(head: Eagle3Head, seqs: torch.Tensor, draft_vocab: int) -> Eagle3Head:
    """A copy of the head whose output keeps the rows of the draft_vocab most frequent tokens of
    seqs (d2t mapping them back): a head with a reduced draft vocabulary."""
    import copy

    out = copy.deepcopy(head)
    counts = torch.bincount(seqs.reshape(-1), minlength=head.vocab)
    keep = counts.argsort(descending=True, stable=True)[:draft_vocab].sort().values
    rows = (head.d2t + torch.arange(head.d2t.numel())).tolist()
    with torch.no_grad():
        w = head.lm_head.weight[[rows.index(int(t)) for t in keep]]
    out.lm_head = nn.Linear(head.dim, draft_vocab, bias=False)
    with torch.no_grad():
        out.lm_head.weight.copy_(w)
    out.d2t = keep - torch.arange(draft_vocab)
    out.t2d = torch.zeros(head.vocab, dtype=torch.bool)
    out.t2d[keep] = True
    return out


def save_head(
    head: Eagle3Head,
    folder: Path,
    taps: list[int] | None,
    bin: bool = False,
    config_extra: dict | None = None,
) -> Path:
    """The head in the published layout: config.json (LlamaForCausalLMEagle3) and the weights
    (model.safetensors, or pytorch_model.bin); the taps, when given, in eagle_config;
    ``config_extra``: more config.json keys (replacing those written)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().clone().contiguous() for k, v in head.state_dict().items() if k != "inv_freq"
    }
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        state[f"midlayer.{n}.weight"] = state.pop(f"midlayer.{n}")
    state["norm.weight"] = state.pop("norm")
    if bin:
        torch.save(state, folder / "pytorch_model.bin")
    else:
        save_file(state, str(folder / "model.safetensors"))
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": head.dim,
        "intermediate_size": head.cfg["ffn"],
        "num_attention_heads": head.cfg["heads"],
        "num_key_value_heads": head.cfg["kv_heads"],
        "head_dim": head.cfg["head_dim"],
        "num_hidden_layers": 1,
        "vocab_size": head.vocab,
        "draft_vocab_size": int(head.d2t.numel()),
        "rms_norm_eps": head.eps,
        "rope_theta": head.cfg["theta"],
    }
    if head.norm_before_residual:
        cfg["norm_before_residual"] = True
    if head.cfg["rope_scaling"] is not None:
        cfg["rope_scaling"] = head.cfg["rope_scaling"]
    if taps is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": taps}
    cfg.update(config_extra or {})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder
