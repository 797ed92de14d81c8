"""PARD parallel drafts (cpp/spec/pard_proposer.h): a tiny Qwen2 draft trained here for a few
seconds with torch on a tiny target's own outputs, with PARD's objective (after the context,
K - 1 mask tokens; each of the K rows predicts its own later token), saved as an ordinary
Hugging Face draft whose config carries pard_token and spd_type, and built into an engine. One
draft forward proposes all k tokens: its acceptance is far above chance, its output is
target-only's (greedy token for token; sampled in distribution, chi-square), and the CUDA plan
of an iteration holds one draft forward where the draft model's holds k."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spec_pairs
import tiny_models
import torch
from native import T
from test_speculative import assert_sampled_follows_target
from trained_drafts import greedy_runs, random_prompts, target_outputs
from trt_spec import Engine, _core, build_engine

MASK, K = 382, 4


def _train_pard(target_model, folder: Path, steps: int = 200) -> Path:
    """A 1-layer draft trained with the AR loss on the context rows and PARD's on the K rows
    [last, mask x (K - 1)], on the target's greedy continuations."""
    seqs = target_outputs(target_model, 48, 40, seed=1)
    draft = tiny_models.make_model(folder, "qwen2", vocab_size=384, layers=1, seed=9)
    draft.train()
    opt = torch.optim.Adam(draft.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    n, length = seqs.shape
    for _ in range(steps):
        p = int(torch.randint(5, length - K - 1, (1,), generator=g))
        inp = torch.cat([seqs[:, : p + 1], torch.full((n, K - 1), MASK)], 1)
        logits = draft(inp).logits
        labels = torch.cat([seqs[:, 1 : p + 1], seqs[:, p + 1 : p + 1 + K]], 1)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    draft.eval()
    draft.save_pretrained(folder, safe_serialization=True)
    _mark_pard(folder, MASK)
    return folder


def _mark_pard(folder: Path, mask: int) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(pard_token=mask, spd_type="pard")
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"pard": the target with the PARD draft, "model": the same draft as a plain draft model}."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("pard")
    target = spec_pairs.make_markov_target(root)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    pard = _train_pard(model, root / "pard")
    plain = root / "plain"
    plain.mkdir()
    for f in pard.iterdir():
        (plain / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((plain / "config.json").read_text())
    for key in ("pard_token", "spd_type"):
        cfg.pop(key)
    (plain / "config.json").write_text(json.dumps(cfg))
    out = {}
    for kind, d in (("pard", pard), ("model", plain)):
        out[kind] = root / f"{kind}.engine"
        build_engine(
            target, out[kind], draft=d, draft_len=6, max_batch=2, max_seq_len=160, weights="f32"
        )
    return out


def test_greedy_equals_target_only_with_acceptance_far_above_chance(engines) -> None:
    eng = Engine(engines["pard"], device="cpu")
    assert eng.draft_kind == "pard"
    acceptance, per_iteration = greedy_runs(eng, random_prompts(99, 6))
    assert acceptance > 0.5 and per_iteration > 2.0, (acceptance, per_iteration)


def test_batch_auto_and_sampled_seeds(engines) -> None:
    """Two sequences at once under draft="auto" emit target-only's greedy tokens; a seeded
    sampled request's output does not depend on its batch companion."""
    eng = Engine(engines["pard"], device="cpu")
    ps = random_prompts(5, 2)
    want = [eng.generate(p, max_new_tokens=30, draft="none").token_ids for p in ps]
    got = eng.generate(ps, max_new_tokens=30, draft="auto")
    assert [r.token_ids for r in got] == want
    kw = dict(max_new_tokens=30, temperature=0.8, draft="model", draft_len=4, seed=3)
    alone = eng.generate(ps[0], **kw)
    assert eng.generate(ps, **kw)[0].token_ids == alone.token_ids


def test_penalties_keep_target_only_output_and_acceptance(engines) -> None:
    """With penalties and logit bias, the PARD draft's positions are penalized as the target's
    (each seeing the drafted chain before it): greedy output stays target-only's, and acceptance
    stays far above chance."""
    eng = Engine(engines["pard"], device="cpu")
    kw = dict(frequency_penalty=0.6, presence_penalty=0.3, logit_bias={5: -100.0})
    drafted = accepted = 0
    for p in random_prompts(41, 4):
        want = eng.generate(p, max_new_tokens=30, draft="none", **kw)
        got = eng.generate(p, max_new_tokens=30, draft="model", draft_len=4, **kw)
        assert got.token_ids == want.token_ids and 5 not in got.token_ids
        drafted += got.stats.drafted
        accepted += got.stats.accepted
    assert accepted > 0.3 * drafted, (accepted, drafted)


def test_one_draft_forward_per_iteration(engines) -> None:
    """The CUDA plan (no GPU needed): a PARD iteration launches one draft forward whatever k,
    the same draft as a plain draft model k of them."""
    for k in (1, 4, 6):
        p = _core.cuda_launch_plan(str(engines["pard"]), batch=1, draft_len=k)
        m = _core.cuda_launch_plan(str(engines["model"]), batch=1, draft_len=k)
        spec = 1 + 3 * k + 1 + 4 + 1  # rows, draft_sample x k, verify rows, accept, lookup
        assert p["iteration"] == p["draft_step"] + p["target_step"] + spec
        assert m["iteration"] == k * m["draft_step"] + m["target_step"] + spec


def test_info_shows_the_kind(engines) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "info", str(engines["pard"])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "draft kind: pard" in out


def test_a_mask_token_outside_the_vocabulary_is_refused(tmp_path: Path) -> None:
    target = spec_pairs.make_checkpoint(tmp_path, "t", seed=3, small_vocab=False)
    draft = spec_pairs.make_checkpoint(tmp_path, "d", seed=7, small_vocab=False, layers=1)
    _mark_pard(draft, 384)
    with pytest.raises(ValueError, match="pard_token 384 is not a token id"):
        build_engine(target, tmp_path / "x.engine", draft=draft, weights="f32")


@pytest.mark.slow
def test_sampled_distribution_is_the_targets(tmp_path: Path) -> None:
    """100k completions through a (random, 16-token) PARD draft: the joint distributions of tokens
    (1, 2) and (2, 3) match the target's exact ones (chi-square), as for the draft model's
    chains (test_speculative): each node is drawn from its own row's q, which acceptance uses."""
    target = spec_pairs.make_checkpoint(tmp_path, "t16", seed=3, small_vocab=True)
    draft = spec_pairs.make_checkpoint(tmp_path, "d16", seed=7, small_vocab=True, layers=1)
    _mark_pard(draft, 14)
    path = tmp_path / "pard16.engine"
    build_engine(
        target, path, draft=draft, draft_len=4, max_batch=4, max_seq_len=128, weights="f32"
    )
    assert Engine(path).draft_kind == "pard"
    assert_sampled_follows_target(path, 100_000, "model", 3, 0.7, 0.9, [])


def test_emulated_rows_equal_the_cpu() -> None:
    """The CUDA kernel of the parallel draft's rows, through the host emulation, against the CPU
    op: [prev, last, mask..] at draft positions n_past - 1 on (a prompt window's offset)."""
    import ctypes

    from cuda_helpers import emulation_library, seq_states

    emu = emulation_library("cuda_emu_ops")
    cpu = T.OpRunner("cpu")
    seqs = seq_states(
        3,
        n_past=np.array([10, 40, 7]),
        last=np.array([5, 6, 7]),
        prev=np.array([2, 3, 4]),
        draft_off=np.array([3, 12, 0]),
    )
    slots = np.array([2, 0], np.int32)
    for k in (1, 4, 6):
        want = cpu.spec_pard_rows(seqs, list(slots), k, MASK)
        got = [np.zeros(2 * (k + 1), np.int32) for _ in range(3)]
        emu.emu_spec_pard_rows(
            ctypes.c_void_p(seqs.ctypes.data),
            ctypes.c_void_p(slots.ctypes.data),
            ctypes.c_int(2),
            ctypes.c_int(k),
            ctypes.c_int(MASK),
            *(ctypes.c_void_p(a.ctypes.data) for a in got),
        )
        for a, b in zip(got, want, strict=True):
            assert a.tolist() == list(b)
        tok, pos, _ = want
        assert tok[: k + 1] == [4, 7] + [MASK] * (k - 1) and pos[0] == 6
        assert tok[k + 1 : k + 3] == [2, 5] and pos[k + 1] == 10 - 1 - 3
