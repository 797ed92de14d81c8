"""Repetition, frequency and presence penalties and logit bias (kernels/penalties.h): the tokens
a NumPy oracle picks from the engine's own logits, unchanged by speculation (a verify row counts
the draft tokens above it), their effect, bad values, and the CUDA kernels through the host
emulation."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
import spec_pairs
from cuda_helpers import emulation_library, fields, seq_states
from trt_spec import Engine

PROMPTS = [[5, 17, 99, 3, 42, 8], [200, 1, 1, 7, 300, 12, 64, 64, 9]]
PENALTIES = [
    dict(repetition_penalty=1.3),
    dict(frequency_penalty=0.8),
    dict(presence_penalty=1.5, frequency_penalty=-0.4),
    dict(logit_bias={7: 3.0, 12: -100.0, 300: 2.5}),
    dict(repetition_penalty=0.8, presence_penalty=-1.0, logit_bias={64: 4.0}),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("penalties")


@pytest.fixture(scope="module")
def eng(root) -> Engine:
    return Engine(spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=2))


def penalize(logits: np.ndarray, prompt: list[int], gen: list[int], kw: dict) -> np.ndarray:
    """kernels/penalties.h in float32, from the text (prompt, generated tokens)."""
    out = logits.astype(np.float32).copy()
    rep = np.float32(kw.get("repetition_penalty", 1.0))
    freq = np.float32(kw.get("frequency_penalty", 0.0))
    pres = np.float32(kw.get("presence_penalty", 0.0))
    counts: dict[int, int] = {}
    for t in gen:
        counts[t] = counts.get(t, 0) + 1
    for x in set(prompt) | set(counts):
        v = out[x]
        v = v / rep if v > 0 else v * rep
        c = counts.get(x, 0)
        if c:
            v = np.float32(v - (np.float32(c) * freq + pres))
        out[x] = v
    for x, b in kw.get("logit_bias", {}).items():
        out[x] = np.float32(out[x] + np.float32(b))
    return out


@pytest.mark.parametrize("kw", PENALTIES)
def test_greedy_tokens_follow_the_oracle(eng: Engine, kw: dict) -> None:
    for p in PROMPTS:
        res = eng.generate(p, max_new_tokens=20, draft="none", ignore_eos=True, **kw)
        rows = eng.logits(p + res.token_ids[:-1])[len(p) - 1 :]
        for i, tok in enumerate(res.token_ids):
            pen = penalize(rows[i], p, res.token_ids[:i], kw)
            # (a prompt row's bits may differ from a decode row's: near-ties within 1e-4)
            assert pen[tok] >= pen.max() - 1e-4, (i, tok, int(np.argmax(pen)))
        if 12 in kw.get("logit_bias", {}):
            assert 12 not in res.token_ids


@pytest.mark.parametrize("kw", PENALTIES)
def test_speculation_changes_nothing(eng: Engine, kw: dict) -> None:
    """Greedy with the draft model and lookup, and sampled with lookup (the target's own draws):
    the target-only tokens, and with logprobs the same values."""
    for p in PROMPTS:
        run = dict(max_new_tokens=30, ignore_eos=True, logprobs=2)
        base = eng.generate(p, draft="none", **run, **kw)
        for draft in ["model", "lookup"]:
            got = eng.generate(p, draft=draft, draft_len=4, **run, **kw)
            assert got.token_ids == base.token_ids, draft
            assert [x.logprob for x in got.logprobs] == pytest.approx(
                [x.logprob for x in base.logprobs], abs=1e-5
            )
            assert got.stats.drafted > 0 or draft == "lookup"
        s = dict(temperature=0.9, top_k=40, seed=9)
        base = eng.generate(p, max_new_tokens=30, draft="none", ignore_eos=True, **s, **kw)
        got = eng.generate(p, max_new_tokens=30, draft="lookup", ignore_eos=True, **s, **kw)
        assert got.token_ids == base.token_ids


@pytest.mark.parametrize("kw", PENALTIES)
def test_the_draft_model_drafts_from_penalized_logits(root, kw: dict) -> None:
    """The draft model's step logits get the request's penalties too (each step seeing its chain
    so far), so a draft that is the target itself keeps every token it proposes, penalties or
    not (without them on the draft, every token a penalty turns away from the draft's own choice
    would be rejected); greedy and sampled output stay target-only's."""
    same = Engine(spec_pairs.make_pair(root, "same", draft_len=4, max_batch=2))
    for p in PROMPTS:
        base = same.generate(p, max_new_tokens=30, draft="none", ignore_eos=True, **kw)
        got = same.generate(p, max_new_tokens=30, draft="model", draft_len=4, ignore_eos=True, **kw)
        assert got.token_ids == base.token_ids
        assert got.stats.drafted > 0 and got.stats.acceptance_rate == 1.0, kw
        s = dict(temperature=0.9, seed=4, ignore_eos=True)
        got = same.generate(p, max_new_tokens=30, draft="model", draft_len=3, **s, **kw)
        assert got.stats.acceptance_rate > 0.9, kw  # (q equals p: only ties in draws reject)


def test_penalties_change_the_output(eng: Engine) -> None:
    p = [7, 7, 7, 7, 7, 7]
    plain = eng.generate(p, max_new_tokens=40, ignore_eos=True)
    pres = eng.generate(p, max_new_tokens=40, ignore_eos=True, presence_penalty=2.0)
    assert len(set(pres.token_ids)) > len(set(plain.token_ids))
    forced = eng.generate(p, max_new_tokens=8, ignore_eos=True, logit_bias={123: 100.0})
    assert forced.token_ids == [123] * 8
    banned = plain.token_ids[0]
    assert banned not in eng.generate(p, max_new_tokens=20, logit_bias={banned: -100.0}).token_ids


def test_batch_and_slot_reuse(eng: Engine) -> None:
    """A penalized and a plain request decode in one batch, each as it would alone; a slot's
    next request carries nothing over."""
    kw = dict(frequency_penalty=1.0, logit_bias={5: 2.0})
    alone_pen = eng.generate(PROMPTS[0], max_new_tokens=30, draft="model", **kw)
    alone = eng.generate(PROMPTS[1], max_new_tokens=30, draft="model")
    out: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: out.update(a=eng.generate(PROMPTS[1], max_new_tokens=30, draft="model"))
    )
    t.start()
    pen = eng.generate(PROMPTS[0], max_new_tokens=30, draft="model", **kw)
    t.join()
    assert pen.token_ids == alone_pen.token_ids and out["a"].token_ids == alone.token_ids
    again = eng.generate(PROMPTS[1], max_new_tokens=30, draft="model")
    assert again.token_ids == alone.token_ids


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(repetition_penalty=float("nan")), "repetition_penalty"),
        (dict(frequency_penalty=2.5), "frequency_penalty"),
        (dict(presence_penalty=-3.0), "presence_penalty"),
        (dict(logit_bias={10**6: 1.0}), "logit_bias"),
        (dict(logit_bias={3: 101.0}), "logit_bias"),
        (dict(logit_bias={i: 1.0 for i in range(301)}), "logit_bias"),
        (dict(logit_bias=[1, 2]), "logit_bias"),
        (dict(logit_bias={"a": 1.0}), "logit_bias"),
    ],
)
def test_bad_values_raise(eng: Engine, kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        eng.generate(PROMPTS[0], max_new_tokens=4, **kw)


# ---- the CUDA kernels (penalty_kernels.cuh) through the host emulation ---------------------------
def _p(a: np.ndarray):
    return ctypes.c_void_p(a.ctypes.data)


def test_emulated_kernels_match_the_oracle() -> None:
    emu = emulation_library("cuda_emu_ops")
    I32 = ctypes.c_int
    size = emu.emu_penalty_params_bytes()
    K = 300  # kMaxLogitBias
    dt = np.dtype(
        [("active", "<i4"), ("rep", "<f4"), ("freq", "<f4"), ("pres", "<f4"), ("n", "<i4"),
         ("ids", "<i4", K), ("bias", "<f4", K)]
    )  # fmt: skip
    assert dt.itemsize == size
    V, k = 90, 3
    rng = np.random.default_rng(2)
    params = np.zeros(3, dt)
    params[0] = (1, 1.4, 0.5, 0.3, 2, [4, 60] + [0] * (K - 2), [2.0, -1.5] + [0.0] * (K - 2))
    params[2] = (0, 1.0, 0.0, 0.0, 0, [0] * K, [0.0] * K)  # inactive: rows untouched
    params[1] = (1, 0.7, -0.2, 1.0, 0, [0] * K, [0.0] * K)
    prompts = {0: [1, 4, 4, 9], 1: [60, 2]}
    gens = {0: [4, 30, 30, 7], 1: [8]}
    counts = np.zeros((3, V), np.int32)
    bits = np.zeros((3, (V + 31) // 32), np.uint32)
    for s in (0, 1):
        for t in gens[s]:
            counts[s, t] += 1
        for t in prompts[s]:
            bits[s, t >> 5] |= np.uint32(1 << (t & 31))
    # Trees: slot 0 a chain 30 -> 4 -> 11, slot 1 a branch 8 | 8 -> 50 (node 2 of 2: padding).
    words = seq_states(3)
    recs = fields(words)  # (a view of the words: edits reach them)
    recs["tree_token"][0, :3] = [30, 4, 11]
    recs["tree_parent"][0, :3] = [-1, 0, 1]
    recs["tree_token"][1, :2] = [8, 50]
    recs["tree_parent"][1, :2] = [-1, 0]
    recs["tree_n"] = [3, 1, 3]  # slot 1: row 2 (node 1) is padding
    slots = np.array([0, 1, 2], np.int32)
    logits = (3 * rng.standard_normal((3 * (k + 1), V))).astype(np.float32)
    got = logits.copy()
    emu.emu_spec_penalize(
        _p(words), _p(params), _p(counts), _p(bits), I32(V), _p(slots), I32(3 * (k + 1)), I32(k),
        _p(got), I32(-1), I32(0),
    )  # fmt: skip
    paths = {0: [[], [30], [30, 4], [30, 4, 11]], 1: [[], [8], None, None]}
    kws = {
        0: dict(repetition_penalty=1.4, frequency_penalty=0.5, presence_penalty=0.3,
                logit_bias={4: 2.0, 60: -1.5}),
        1: dict(repetition_penalty=0.7, frequency_penalty=-0.2, presence_penalty=1.0),
    }  # fmt: skip
    for b in range(3):
        for r in range(k + 1):
            i = b * (k + 1) + r
            if b == 2 or paths[b][r] is None:
                np.testing.assert_array_equal(got[i], logits[i])  # inactive, padding
                continue
            want = penalize(logits[i], prompts[b], gens[b] + paths[b][r], kws[b])
            np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-6)
    # Plain rows (a first token): the counts alone.
    got = logits[:2].copy()
    emu.emu_spec_penalize(
        _p(words), _p(params), _p(counts), _p(bits), I32(V), _p(slots), I32(2), I32(-1), _p(got),
        I32(-1), I32(0),
    )  # fmt: skip
    for b in range(2):
        np.testing.assert_allclose(got[b], penalize(logits[b], prompts[b], gens[b], kws[b]))
    # A draft step's rows (draft step 2: each sees node 1's path), rows of a wider draft
    # vocabulary (stride V + 6, ids past V untouched), on the CPU op and the kernel.
    W = V + 6
    wide = (3 * rng.standard_normal((2, W))).astype(np.float32)
    got = wide.copy()
    emu.emu_spec_penalize(
        _p(words), _p(params), _p(counts), _p(bits), I32(V), _p(slots), I32(2), I32(-1), _p(got),
        I32(1), I32(W),
    )  # fmt: skip
    for b, path in ((0, [30, 4]), (1, [8, 50])):
        want = penalize(wide[b, :V], prompts[b], gens[b] + path, kws[b])
        np.testing.assert_allclose(got[b, :V], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got[b, V:], wide[b, V:])
    # The counts after an iteration that emitted out[0 .. n_new).
    recs["n_new"] = [2, 1, 3]
    recs["out"][0, :2] = [4, 88]
    recs["out"][1, :1] = [8]
    recs["out"][2, :3] = [1, 1, 1]
    before = counts.copy()
    emu.emu_spec_count_emitted(_p(words), _p(params), _p(counts), I32(V), _p(slots), I32(3))
    before[0, 4] += 1
    before[0, 88] += 1
    before[1, 8] += 1
    np.testing.assert_array_equal(counts, before)  # (slot 2 inactive: not counted)
