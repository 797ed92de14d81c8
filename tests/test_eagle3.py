"""EAGLE-3 heads as the engine's draft (cpp/spec/eagle3_proposer.h): a head trained here, for a
few seconds with torch, on a tiny target's own greedy outputs and the target's residual stream
at three depths, saved in the published layout (LlamaForCausalLMEagle3: fc, midlayer.*, norm,
lm_head over a reduced draft vocabulary with d2t), built into engines with the target, and
checked against torch's forward of the head, for acceptance far above chance and at least a
tiny draft model's trained on the same data, for output equal to target-only decoding (greedy
and sampled with a seed), and through the CUDA emulation of its kernels."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import eagle3_heads
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
    train_draft_model,
)
from trt_spec import Engine, _core, build_engine

TAPS = [0, 1, 2]  # the 2-layer target's three depths (entering layers 0 and 1, and after 1)
DRAFT_VOCAB = 256


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """(torch target, trained head, {"safetensors" | "bin" | "model": engine path})."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("eagle3")
    target = spec_pairs.make_markov_target(root)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    seqs = target_outputs(model, 48, 40, seed=1)
    head = eagle3_heads.train_head(model, seqs, TAPS)
    small = eagle3_heads.reduce_vocab(head, seqs, DRAFT_VOCAB)
    dirs = {
        "safetensors": eagle3_heads.save_head(head, root / "head-st", taps=TAPS),
        "bin": eagle3_heads.save_head(small, root / "head-bin", taps=TAPS, bin=True),
        "model": train_draft_model(seqs, root / "draft", steps=150),
    }
    engines = {}
    for name, d in dirs.items():
        engines[name] = root / f"{name}.engine"
        build_engine(
            target,
            engines[name],
            draft=d,
            draft_len=6,
            max_batch=2,
            max_seq_len=160,
            weights="f32",
        )
    return model, {"safetensors": head, "bin": small}, engines


@pytest.mark.parametrize("layout", ["safetensors", "bin"])
def test_head_matches_torch(setup, layout: str) -> None:
    """The head's draft-vocabulary logits over a prompt (each row reading the target's taps of
    its position and the next token) equal torch's forward of the head on the Hugging Face
    target's residual stream."""
    model, heads, engines = setup
    s = T.Session(str(engines[layout]), "cpu", 1)
    ids, nxt = [5, 17, 200, 33, 9, 250, 71], 12
    want = eagle3_heads.reference_logits(heads[layout], model, ids, nxt, TAPS)
    got = s.eagle3_logits(ids, nxt)
    assert got.shape == (len(ids), 384 if layout == "safetensors" else DRAFT_VOCAB)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_greedy_equals_target_only_near_the_draft_model(setup) -> None:
    """On prompts the head never saw: draft="model" (the EAGLE-3 head) emits target-only's
    tokens, its length chosen or fixed, accepts most of what it proposes (chance: about 1 in
    384), and about the tokens per iteration of a draft model trained on the same data, at the
    same fixed length."""
    _, _, engines = setup
    eng = Engine(engines["safetensors"], device="cpu")
    assert eng.draft_kind == "eagle3" and eng.has_draft
    prompts = random_prompts(99, 6)
    acceptance, per_iteration = greedy_runs(eng, prompts)
    assert acceptance > 0.3 and per_iteration > 1.6, (acceptance, per_iteration)
    _, model_per_iteration = greedy_runs(Engine(engines["model"], device="cpu"), prompts)
    # (a little below it on this toy target, whose next token is mostly a function of the
    # current one, which a draft model with its own embeddings learns directly; the head
    # trained longer: benchmarks/bench_draft_heads.py)
    assert per_iteration >= 0.85 * model_per_iteration, (per_iteration, model_per_iteration)


def test_chains_under_a_grammar_are_drawn_inside_it(setup) -> None:
    """On the CPU the head's chain steps are masked by the grammar after the chain so far (the
    draft ids mapped to tokens through d2t on the reduced head): no node is pruned, and the
    output equals constrained target-only decoding."""
    _, _, engines = setup
    for layout in ("safetensors", "bin"):
        eng = Engine(engines[layout], device="cpu")
        drafted = 0
        for p in random_prompts(99, 3):
            for rx in (r"[a-z ]+", r"(w[0-9] )+"):
                want = eng.generate(p, max_new_tokens=30, draft="none", regex=rx)
                got = eng.generate(p, max_new_tokens=30, draft="model", draft_len=4, regex=rx)
                assert got.token_ids == want.token_ids, (layout, rx)
                assert got.stats.pruned == 0, (layout, rx)
                drafted += got.stats.drafted
        assert drafted > 100


@pytest.mark.parametrize("draft_len", [1, 4, 6])
def test_sampled_equals_target_only_with_the_same_seed(setup, draft_len: int) -> None:
    """The head's nodes are one-hot: the target's own draws (at each position's generation index,
    as target-only decoding draws them) accept them or not, so a seeded sampled request emits
    target-only's tokens (whose distribution test_sampling checks)."""
    _, _, engines = setup
    eng = Engine(engines["bin"], device="cpu")
    assert_seeded_runs_equal_target_only(eng, random_prompts(7, 4), 100, draft_len)


def test_batch_of_two_auto_and_a_long_prompt(setup) -> None:
    """Two sequences at once under draft="auto" (the head weighed with lookup and plain steps),
    and a prompt read in several chunks: still target-only's tokens, and the head ran."""
    _, _, engines = setup
    eng = Engine(engines["safetensors"], device="cpu")
    ps = random_prompts(5, 2)
    want = [eng.generate(p, max_new_tokens=30, draft="none").token_ids for p in ps]
    got = eng.generate(ps, max_new_tokens=30, draft="auto")
    assert [r.token_ids for r in got] == want
    assert sum(r.stats.sources.count("m") for r in got) > 0
    chunked = Engine(engines["safetensors"], device="cpu", prefill_chunk=32)
    long = random_prompts(6, 1)[0] * 20  # 120 tokens: 4 chunks, the head reading each
    want = chunked.generate(long, max_new_tokens=20, draft="none").token_ids
    got = chunked.generate(long, max_new_tokens=20, draft="model", draft_len=4)
    assert got.token_ids == want and got.stats.accepted > 0


def test_trees_equal_target_only_and_keep_more_per_iteration(setup) -> None:
    """eagle_topk > 1 (EAGLE-2's dynamic trees, eagle3_tree.h): greedy output equals target-only's
    at every width, a batch of two under draft="auto" too; at 6 nodes a tree of width 2 emits at
    least about a chain's tokens per iteration (it holds the chain wherever the head is sure,
    siblings where it is not)."""
    _, _, engines = setup
    prompts = random_prompts(99, 6)
    chain = Engine(engines["safetensors"], device="cpu")
    _, chain_per_iteration = greedy_runs(chain, prompts, k=6)
    for w in (2, 4):
        tree = Engine(engines["safetensors"], device="cpu", eagle_topk=w)
        acceptance, per_iteration = greedy_runs(tree, prompts, k=6)
        assert acceptance > 0.3, (w, acceptance)
        assert per_iteration >= 0.97 * chain_per_iteration, (w, per_iteration, chain_per_iteration)
    ps = random_prompts(5, 2)
    want = [chain.generate(p, max_new_tokens=30, draft="none").token_ids for p in ps]
    got = tree.generate(ps, max_new_tokens=30, draft="auto")
    assert [r.token_ids for r in got] == want


@pytest.mark.parametrize("draft_len", [2, 5])
def test_tree_sampled_equals_target_only_with_the_same_seed(setup, draft_len: int) -> None:
    """A tree's nodes are one-hot with distinct siblings: the target's own draws accept one child
    or none, so a seeded sampled request emits target-only's tokens."""
    _, _, engines = setup
    eng = Engine(engines["bin"], device="cpu", eagle_topk=3)
    assert_seeded_runs_equal_target_only(eng, random_prompts(8, 4), 200, draft_len)


def test_tree_width_errors(setup) -> None:
    _, _, engines = setup
    with pytest.raises(ValueError, match="eagle_topk must be in"):
        Engine(engines["bin"], device="cpu", eagle_topk=5)
    with pytest.raises(ValueError, match="draft is model"):
        Engine(engines["model"], device="cpu", eagle_topk=2)


def test_info_shows_the_kind(setup) -> None:
    _, _, engines = setup
    out = subprocess.run(
        [sys.executable, "-m", "trt_spec.cli", "info", str(engines["bin"])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "draft kind: eagle3" in out


def test_no_draft_model_in_the_cuda_plan(setup) -> None:
    """The CUDA plan (no GPU needed) of an iteration: the target's forward, no draft model's."""
    _, _, engines = setup
    for k in (1, 4):
        p = _core.cuda_launch_plan(str(engines["safetensors"]), batch=1, draft_len=k)
        assert p["draft_step"] == 0 and p["iteration"] > p["target_step"]


# ---- the ops: CPU against the CUDA kernels through the host emulation -------------------------


@pytest.fixture(scope="module")
def emu():
    return emulation_library("cuda_emu_ops")


def P(a: np.ndarray):
    return ctypes.c_void_p(a.ctypes.data)


I32 = ctypes.c_int


def _accepted(k: int) -> np.ndarray:
    """Four slots after a verify pass of draft length k: accepted 0, 2, k nodes, and one near the
    end of the cache."""
    s = fields(seq_states(4, max_nodes=16, sources=1 << SOURCE["model"]))
    s["n_past"] = [10, 21, 7 + k + 1, 63]
    s["n_acc"] = [0, 2, k, 1]
    for slot in range(4):
        s["path"][slot][:k] = np.arange(k)[::-1] if slot == 1 else np.arange(k)
        s["out"][slot][: k + 1] = 100 * slot + np.arange(k + 1)
    return s.view(np.int32).reshape(4, -1)


@pytest.mark.parametrize("k", [0, 3, 6])
def test_absorb_rows_cpu_and_emulated(emu, k: int) -> None:
    """The rows the head absorbs: the accepted path's verify rows at their positions, reading the
    emitted tokens, and rows past it repeating its last; the same on the CPU and the kernel."""
    seqs = _accepted(k)
    slots = np.array([2, 0, 1, 3], np.int32)
    B, R, max_seq = 4, k + 1, 64
    cpu = T.OpRunner("cpu")
    rows, last = cpu.spec_eagle3_absorb(k, max_seq, seqs, list(slots))
    f = fields(seqs)
    for b, slot in enumerate(slots):
        a = min(int(f[slot]["n_acc"]), k)
        root = int(f[slot]["n_past"]) - a - 1
        assert last[b] == b * R + a
        for j in range(R):
            i = min(j, a)
            tok, pos, sl, src = rows[:, b * R + j]
            assert tok == f[slot]["out"][i] and sl == slot
            assert pos == min(root + i, max_seq - 1)
            assert src == b * R + (0 if i == 0 else 1 + int(f[slot]["path"][i - 1]))
    got = [np.zeros(B * R, np.int32) for _ in range(4)]
    got_last = np.zeros(B, np.int32)
    emu.emu_spec_eagle3_absorb(
        P(seqs), P(slots), I32(B), I32(k), I32(max_seq), *map(P, got), P(got_last)
    )
    np.testing.assert_array_equal(np.stack(got), rows)
    np.testing.assert_array_equal(got_last, last)


@pytest.mark.parametrize("j,threads", [(0, 256), (3, 64)])
def test_chain_step_cpu_and_emulated(emu, j: int, threads: int) -> None:
    """A chain step: each row's best draft token (ties to the lower id) mapped through the draft
    vocabulary becomes node j, and the next rows read it at n_past + j; CPU and kernel agree."""
    rng = np.random.default_rng(j)
    B, Vd, max_seq = 3, 700, 40
    seqs = seq_states(4, max_nodes=16, sources=1 << SOURCE["model"], n_past=[5, 9, 38, 2])
    slots = np.array([3, 1, 2], np.int32)
    logits = random_logits(rng, (B, Vd))
    logits[1, 50] = logits[1, 60] = 40.0  # a tie
    tokens = np.sort(rng.choice(5000, Vd, replace=False)).astype(np.int32)
    cpu = T.OpRunner("cpu")
    want, nxt = cpu.spec_eagle3_chain(logits, j, max_seq, list(tokens), seqs, list(slots))
    f = fields(want)
    for b, slot in enumerate(slots):
        best = 50 if b == 1 else int(np.argmax(logits[b]))
        assert f[slot]["tree_n"] == j + 1 and f[slot]["tree_token"][j] == tokens[best]
        assert f[slot]["tree_parent"][j] == j - 1 and f[slot]["tree_depth"][j] == j + 1
        n_past = int(fields(seqs)[slot]["n_past"])
        assert list(nxt[:, b]) == [tokens[best], min(n_past + j, max_seq - 1), slot]
    got = seqs.copy()
    g = [np.zeros(B, np.int32) for _ in range(3)]
    emu.emu_spec_eagle3_chain(
        P(got),
        P(slots),
        I32(B),
        I32(j),
        I32(max_seq),
        P(logits),
        I32(Vd),
        P(tokens),
        *map(P, g),
        I32(threads),
    )
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.stack(g), nxt)
    x = rng.standard_normal((6, 32)).astype(np.float32)
    feat = np.zeros((4, 32), np.float32)
    rows = np.array([4, 0, 5], np.int32)
    emu.emu_spec_eagle3_keep(P(slots), I32(B), P(rows), P(x), I32(32), P(feat))
    np.testing.assert_array_equal(feat[slots], x[rows])
    assert not feat[0].any()


def test_heads_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    """Clear BuildErrors: default taps (2, L // 2, L - 3) past a 2-layer target, a hidden size or
    vocabulary that is not the target's, a missing tensor, two layers, a d2t mapping twice."""
    import json

    from safetensors.torch import load_file, save_file
    from trt_spec import BuildError

    target = spec_pairs.make_checkpoint(tmp_path, "t", seed=3, small_vocab=False)
    out = tmp_path / "x.engine"

    def head(name: str, taps: list[int] | None = TAPS, **cfg) -> Path:
        d = spec_pairs.write_random_eagle3_head(
            tmp_path / name, target, draft_vocab=100, taps=taps or [0, 1, 2]
        )
        c = json.loads((d / "config.json").read_text())
        if taps is None:
            c.pop("eagle_config")
        c.update(cfg)
        (d / "config.json").write_text(json.dumps(c))
        return d

    with pytest.raises(BuildError, match=r"reads target layers \[2, 1, -1\].*2 layers"):
        build_engine(target, out, draft=head("default", taps=None), weights="f32")
    with pytest.raises(BuildError, match="taps|layers"):
        build_engine(target, out, draft=head("far", taps=[0, 1, 3]), weights="f32")
    with pytest.raises(BuildError, match="vocabulary 500 do not fit"):
        build_engine(target, out, draft=head("vocab", vocab_size=500), weights="f32")
    with pytest.raises(BuildError, match="fc.weight is"):
        build_engine(target, out, draft=head("wide", hidden_size=256, head_dim=64), weights="f32")
    with pytest.raises(BuildError, match="heads of 2 layers"):
        build_engine(target, out, draft=head("deep", num_hidden_layers=2), weights="f32")
    d = head("broken")
    state = load_file(str(d / "model.safetensors"))
    del state["midlayer.mlp.up_proj.weight"]
    state["d2t"] = -torch.arange(state["d2t"].numel())  # every draft token target token 0
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(BuildError, match="lacks tensor midlayer.mlp.up_proj.weight"):
        build_engine(target, out, draft=d, weights="f32")
    state["midlayer.mlp.up_proj.weight"] = state["midlayer.mlp.gate_proj.weight"].clone()
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(BuildError, match="d2t maps"):
        build_engine(target, out, draft=d, weights="f32")
    with pytest.raises(BuildError, match="--draft-vocab needs --draft with a draft model"):
        build_engine(target, out, draft=head("ok"), draft_vocab=64)


def _reference_tree(logits: np.ndarray, w: int, n_past: int, n_max: int, tokens: np.ndarray):
    """EAGLE-2's dynamic tree for one sequence in NumPy: logits [k, rows, draft_vocab] per step
    (step 0: row 0). Returns the tree's (token, parent, depth) nodes and each expanded step's rows
    as (token, pos, kv_idx, src, bits)."""
    cands: list[tuple[int, int, int, np.float32]] = []  # (token, parent, depth, score)
    front: list[int] = []
    fbits: list[int] = []
    steps = []
    k = logits.shape[0]

    def rank(c: int):
        return (-cands[c][3], cands[c][2], c)

    for j in range(k):
        first = len(cands)
        for f in range(1 if j == 0 else w):
            x = logits[j, f].astype(np.float32)
            top = sorted(range(x.size), key=lambda i: (-x[i], i))[:w]
            lse = np.float32(x[top[0]] + np.log(np.exp(x - x[top[0]], dtype=np.float32).sum()))
            par = -1 if j == 0 else front[f]
            for i in top:
                score = np.float32(0 if par < 0 else cands[par][3]) + np.float32(x[i] - lse)
                cands.append((int(tokens[i]), par, 1 if par < 0 else cands[par][2] + 1, score))
        if j + 1 == k:
            break
        new = sorted(range(first, len(cands)), key=rank)[:w]
        rows, bits = [], []
        for f, c in enumerate(new):
            src = (c - first) // w
            bits.append((0 if j == 0 else fbits[src]) | (1 << (j * w + f)))
            rows.append((cands[c][0], n_past + j, n_past + j * w + f, src, bits[-1]))
        front, fbits = new, bits
        steps.append(rows)
    chosen = sorted(sorted(range(len(cands)), key=rank)[:n_max], key=lambda c: (cands[c][2], c))
    nodes = [
        (cands[c][0], chosen.index(cands[c][1]) if cands[c][1] >= 0 else -1, cands[c][2])
        for c in chosen
    ]
    return nodes, steps


@pytest.mark.parametrize("w,k,threads", [(2, 6, 256), (3, 4, 64), (4, 16, 128)])
def test_tree_steps_cpu_reference_and_emulated(emu, w: int, k: int, threads: int) -> None:
    """A dynamic tree's steps from given head logits: the CPU ops build NumPy's EAGLE-2 tree (the
    w best of each step's candidates expanded, the k best candidates kept, parents first) and
    its rows (position n_past + j, scratch cache index n_past + j w + f, the ancestors' bits),
    and the CUDA kernels through the host emulation give the same bits."""
    rng = np.random.default_rng(w * 100 + k)
    B, Vd, max_seq = 3, 300, 200
    seqs = seq_states(
        4, max_nodes=[16, 16, 5, 16], sources=1 << SOURCE["model"], n_past=[5, 9, 38, 2]
    )
    slots = np.array([3, 1, 2], np.int32)
    logits = random_logits(rng, (k, B * w, Vd), scale=2.0)
    tokens = np.sort(rng.choice(5000, Vd, replace=False)).astype(np.int32)
    cpu = T.OpRunner("cpu")
    want, rows, bits = cpu.spec_eagle3_tree(logits, w, max_seq, list(tokens), seqs, list(slots))
    f, f0 = fields(want), fields(seqs)
    for b, slot in enumerate(slots):
        n_past, n_max = int(f0[slot]["n_past"]), min(k, int(f0[slot]["max_nodes"]))
        per_seq = np.stack(
            [logits[0, b : b + 1].repeat(w, 0)]
            + [logits[j, b * w : (b + 1) * w] for j in range(1, k)]
        )
        nodes, steps = _reference_tree(per_seq, w, n_past, n_max, tokens)
        n = int(f[slot]["tree_n"])
        got = [
            (
                int(f[slot]["tree_token"][i]),
                int(f[slot]["tree_parent"][i]),
                int(f[slot]["tree_depth"][i]),
            )
            for i in range(n)
        ]
        assert got == nodes and n == n_max
        for j, step in enumerate(steps):
            for i, (tok, pos, kv, src, bit) in enumerate(step):
                r = b * w + i
                src_row = b if j == 0 else b * w + src
                assert list(rows[j, :, r]) == [tok, pos, slot, kv, n_past, src_row]
                assert int(bits[j, r]) == bit
        assert max(d for _, _, d in nodes) <= k
    got = seqs.copy()
    trees = np.zeros(B * T.EAGLE3_TREE_BYTES, np.uint8)
    for j in range(k):
        meta = [np.zeros(B * w, np.int32) for _ in range(5)]
        g_bits, g_src = np.zeros(B * w, np.uint64), np.zeros(B * w, np.int32)
        step = np.ascontiguousarray(logits[j])
        emu.emu_spec_eagle3_tree_step(
            P(got),
            P(slots),
            I32(B),
            I32(j),
            I32(w),
            I32(int(j + 1 < k)),
            I32(max_seq),
            P(step),
            I32(Vd),
            P(tokens),
            P(trees),
            *map(P, meta),
            P(g_bits),
            P(g_src),
            I32(threads),
        )
        if j + 1 < k:
            np.testing.assert_array_equal(np.stack(meta + [g_src]), rows[j])
            np.testing.assert_array_equal(g_bits, bits[j])
    emu.emu_spec_eagle3_tree_select(P(got), P(slots), I32(B), I32(k), P(trees))
    np.testing.assert_array_equal(got, want)
