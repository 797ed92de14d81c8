"""Medusa heads as the engine's draft (cpp/spec/medusa_proposer.h): heads trained here, for a few
seconds with torch, on a tiny target's own greedy outputs, saved in both published layouts
(FasterDecoding's medusa_lm_head.safetensors and vLLM's blocks.* / lm_heads.* in a .bin), built
into engines with the target, and checked against torch's forward of the heads, for acceptance
far above chance, for output equal to target-only decoding (greedy and sampled with a seed),
and through the CUDA emulation of their kernels."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spec_pairs
import torch
from cuda_helpers import SOURCE, emulation_library, fields, random_logits, seq_states
from native import T
from trained_drafts import (
    assert_seeded_runs_equal_target_only,
    greedy_runs,
    random_prompts,
    target_outputs,
)
from trt_spec import BuildError, Engine, build_engine

HEADS, LAYERS = 3, 1


class Heads(torch.nn.Module):
    """Medusa heads as the papers define them: per head, x + SiLU(W x + b), then [vocab, dim]."""

    def __init__(self, dim: int, vocab: int, heads: int = HEADS) -> None:
        super().__init__()
        self.res = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(heads))
        self.out = torch.nn.ModuleList(
            torch.nn.Linear(dim, vocab, bias=False) for _ in range(heads)
        )
        for lin in self.res:
            torch.nn.init.zeros_(lin.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [n, dim] -> [heads, n, vocab]
        return torch.stack(
            [o(x + torch.nn.functional.silu(r(x))) for r, o in zip(self.res, self.out, strict=True)]
        )


def _train(model, steps: int = 150) -> Heads:
    """Heads trained on the target's own outputs: head h at position p learns token p + 2 + h."""
    seqs = target_outputs(model, 48, 40, seed=1)
    with torch.no_grad():
        hid = model(seqs, output_hidden_states=True).hidden_states[-1]  # [n, T, dim], normed
    torch.manual_seed(0)
    heads = Heads(model.config.hidden_size, model.config.vocab_size)
    opt = torch.optim.Adam(heads.parameters(), lr=3e-3)
    Tn = seqs.shape[1]
    for _ in range(steps):
        logits = heads(hid.reshape(-1, hid.shape[-1])).reshape(HEADS, *hid.shape[:2], -1)
        loss = 0.0
        for h in range(HEADS):
            span = Tn - 2 - h
            loss = loss + torch.nn.functional.cross_entropy(
                logits[h, :, :span].reshape(-1, logits.shape[-1]), seqs[:, 2 + h :].reshape(-1)
            )
        opt.zero_grad()
        loss.backward()
        opt.step()
    heads.eval()
    return heads


def _save_fasterdecoding(heads: Heads, folder: Path) -> Path:
    blocks = [(r.weight, r.bias, o.weight) for r, o in zip(heads.res, heads.out, strict=True)]
    return spec_pairs.write_medusa_heads(folder, blocks)


def _save_vllm(heads: Heads, folder: Path, dim: int, vocab: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    state = {}
    for h in range(HEADS):
        state[f"blocks.{h}.layers.0.weight"] = heads.res[h].weight.detach().clone()
        state[f"blocks.{h}.layers.0.bias"] = heads.res[h].bias.detach().clone()
        state[f"lm_heads.{h}.weight"] = heads.out[h].weight.detach().clone()
    torch.save(state, folder / "pytorch_model.bin")
    cfg = {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "num_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "hidden_size": dim,
        "vocab_size": vocab,
        "truncated_vocab_size": vocab,
        "medusa_fc_bias": True,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """(target folder, torch target, trained heads, {layout: engine path})."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("medusa")
    target = spec_pairs.make_markov_target(root)
    model = AutoModelForCausalLM.from_pretrained(target, torch_dtype=torch.float32).eval()
    heads = _train(model)
    c = model.config
    dirs = {
        "fasterdecoding": _save_fasterdecoding(heads, root / "heads-fd"),
        "vllm": _save_vllm(heads, root / "heads-vllm", c.hidden_size, c.vocab_size),
    }
    engines = {}
    for layout, d in dirs.items():
        path = root / f"medusa-{layout}.engine"
        build_engine(
            target, path, draft=d, draft_len=6, max_batch=2, max_seq_len=160, weights="f32"
        )
        engines[layout] = path
    return target, model, heads, dirs, engines


@pytest.mark.parametrize("layout", ["fasterdecoding", "vllm"])
def test_heads_match_torch(setup, layout: str) -> None:
    """Both layouts load as the same heads; on the target's hidden states (ours equal torch's),
    the heads' logits equal torch's forward of them."""
    _, model, heads, _, engines = setup
    s = T.Session(str(engines[layout]), "cpu", 1)
    ids = [5, 17, 200, 33, 9, 250, 71]
    with torch.no_grad():
        want_h = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
        want = heads(want_h).numpy()
    got_h = s.hidden_states(ids)
    np.testing.assert_allclose(got_h, want_h.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        s.medusa_head_logits(np.ascontiguousarray(want_h.numpy()[:2])), want[:, :2], atol=1e-4
    )


def test_greedy_equals_target_only_with_acceptance_far_above_chance(setup) -> None:
    """On prompts the heads never saw: draft="model" (the Medusa heads) emits target-only's
    tokens, its length chosen or fixed, and at a fixed length (the chosen one follows the host's
    timing) accepts most of what it proposes (chance: about 1 in 384)."""
    _, _, _, _, engines = setup
    eng = Engine(engines["fasterdecoding"], device="cpu")
    assert eng.draft_kind == "medusa" and eng.has_draft
    acceptance, per_iteration = greedy_runs(eng, random_prompts(99, 6))
    assert acceptance > 0.3 and per_iteration > 1.6, (acceptance, per_iteration)


@pytest.mark.parametrize("draft_len", [1, 4, 6])
def test_sampled_equals_target_only_with_the_same_seed(setup, draft_len: int) -> None:
    """Medusa's nodes are one-hot: the target's own draws (at each position's generation index,
    as target-only decoding draws them) accept them or not, so a seeded sampled request emits
    target-only's tokens (whose distribution test_sampling checks)."""
    _, _, _, _, engines = setup
    eng = Engine(engines["vllm"], device="cpu")
    assert_seeded_runs_equal_target_only(eng, random_prompts(7, 4), 100, draft_len)


def test_batch_of_two_and_auto(setup) -> None:
    """Two sequences at once, draft="auto" weighing Medusa with lookup and plain steps: still
    target-only's tokens, and the Medusa source ran."""
    _, _, _, _, engines = setup
    eng = Engine(engines["fasterdecoding"], device="cpu")
    ps = random_prompts(5, 2)
    want = [eng.generate(p, max_new_tokens=30, draft="none").token_ids for p in ps]
    got = eng.generate(ps, max_new_tokens=30, draft="auto")
    assert [r.token_ids for r in got] == want
    assert sum(r.stats.sources.count("m") for r in got) > 0


def test_info_shows_the_kind(setup) -> None:
    _, _, _, _, engines = setup
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "info", str(engines["vllm"])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "draft kind: medusa" in out and "vllm layout" in out


def test_heads_that_do_not_fit_are_refused(setup, tmp_path: Path) -> None:
    target, model, _, dirs, _ = setup
    c = model.config
    wrong = _save_vllm(Heads(c.hidden_size * 2, c.vocab_size), tmp_path / "wide", 2 * 128, 384)
    with pytest.raises(BuildError, match="hidden size 256"):
        build_engine(target, tmp_path / "a.engine", draft=wrong, weights="f32")
    small = _save_vllm(Heads(c.hidden_size, 100), tmp_path / "small", 128, 100)
    with pytest.raises(BuildError, match="vocabulary 100"):
        build_engine(target, tmp_path / "b.engine", draft=small, weights="f32")
    broken = _save_fasterdecoding(Heads(c.hidden_size, c.vocab_size), tmp_path / "broken")
    cfg = json.loads((broken / "config.json").read_text())
    cfg["medusa_num_heads"] = HEADS + 1  # a head the file lacks
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BuildError, match="lack tensor 3.0.linear.weight"):
        build_engine(target, tmp_path / "c.engine", draft=broken, weights="f32")
    with pytest.raises(BuildError, match="--draft-vocab needs --draft with a draft model"):
        build_engine(target, tmp_path / "d.engine", draft=dirs["vllm"], draft_vocab=64)


# ---- the CUDA kernels, through the host emulation ------------------------------------------


@pytest.fixture(scope="module")
def emu():
    so = emulation_library("cuda_emu_ops")
    so.emu_medusa_topk_bytes.restype = ctypes.c_size_t
    return so


def P(a: np.ndarray):
    return ctypes.c_void_p(a.ctypes.data)


I32 = ctypes.c_int


@pytest.mark.parametrize("k,heads", [(4, 3), (16, 5), (6, 1)])
def test_emulated_tree_and_keep_equal_the_cpu(emu, k: int, heads: int) -> None:
    rng = np.random.default_rng(k + heads)
    B, V, D = 3, 1000, 64
    cpu = T.OpRunner("cpu")
    seqs = seq_states(4, max_nodes=np.array([16, 3, 16, 8]), sources=1 << SOURCE["model"])
    slots = np.array([2, 0, 3], np.int32)
    logits = random_logits(rng, (heads, B, V))
    logits[0, 0, 10] = logits[0, 0, 11] = 50.0  # a tie: the lower id first, on both
    want = cpu.spec_medusa_tree(logits, k, seqs, list(slots))
    got = seqs.copy()
    top = np.zeros(emu.emu_medusa_topk_bytes(I32(B)), np.uint8)
    emu.emu_spec_medusa_tree(
        P(got), P(slots), I32(B), I32(k), P(logits), I32(heads), I32(V), P(top), I32(64)
    )
    np.testing.assert_array_equal(got, want)
    f = fields(want)
    for b, slot in enumerate(slots):
        n = int(f[slot]["tree_n"])
        assert n == min(k, int(f[slot]["max_nodes"]), sum(4**d for d in range(1, heads + 1)))
        par, dep = f[slot]["tree_parent"][:n], f[slot]["tree_depth"][:n]
        assert all(p < i for i, p in enumerate(par)) and dep.max() <= heads
        assert int(f[slot]["tree_token"][0]) == int(np.argmax(logits[0, b]))  # the best first
    assert int(f[2]["tree_token"][0]) == 10
    # keep: each sequence's stop row (root: nothing accepted; else its deepest accepted node)
    acc = fields(want)
    acc["n_acc"][[2, 0, 3]] = [0, 1, 2]
    acc["path"][0][:1] = [2]
    acc["path"][3][:2] = [0, 1]
    hidden = rng.standard_normal((B * (k + 1), D)).astype(np.float32)
    kept = cpu.spec_medusa_keep(hidden, k, want, list(slots))
    np.testing.assert_array_equal(kept[2], hidden[0 * (k + 1) + 0])
    np.testing.assert_array_equal(kept[0], hidden[1 * (k + 1) + 3])
    np.testing.assert_array_equal(kept[3], hidden[2 * (k + 1) + 2])
    kg = np.zeros_like(kept)
    emu.emu_spec_medusa_keep(P(want), P(slots), I32(B), I32(k), P(hidden), I32(D), P(kg))
    np.testing.assert_array_equal(kg, kept)
