"""Log-probabilities of generated tokens (``Engine.generate(..., logprobs=n)``): the values of
the distribution each token was drawn from (kernels/sampling.h), equal with and without
speculation, against a NumPy oracle over the engine's own logits, on the CPU engine and through
the CUDA kernels' host emulation."""

from __future__ import annotations

import ctypes
import math
import threading

import numpy as np
import pytest
import spec_pairs
from cuda_helpers import emulation_library
from trt_spec import Engine, TokenLogprob

PROMPTS = [[5, 17, 99, 3, 42, 8], [200, 1, 1, 7, 300, 12, 64, 64, 9]]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("logprobs")


@pytest.fixture(scope="module")
def eng(root) -> Engine:
    # A draft that agrees with the target often but not always: accepted and rejected tokens.
    return Engine(spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=2))


def reference(logits: np.ndarray, token: int, t: float, top_k: int, top_p: float, n: int):
    """kernels/sampling.h's log-probabilities, in float64: (token's, [(id, lp)] of the top n)."""
    l32 = logits.astype(np.float32)
    t = t if t > 0 else 1.0
    mx = l32.max()
    z = ((l32 - mx) * np.float32(1.0 / t)).astype(np.float64)  # (the engine's float products)
    order = sorted(range(len(l32)), key=lambda i: (-l32[i], i))
    kept = order
    if 0 < top_k < len(l32):
        kept = kept[:top_k]
    if top_p < 1.0:
        w = np.exp(z[kept])
        need = top_p * w.sum()
        keep = int(np.searchsorted(np.cumsum(w), need) + 1)
        kept = kept[: min(keep, len(kept))]
    log_total = math.log(np.exp(z[kept]).sum())
    kept_set = set(kept)
    own = z[token] - log_total if token in kept_set else -math.inf
    return own, [(i, z[i] - log_total) for i in kept[:n]]


def check(eng: Engine, prompt: list[int], res, t: float, top_k: int, top_p: float, n: int):
    assert res.logprobs is not None and len(res.logprobs) == len(res.token_ids)
    rows = eng.logits(prompt + res.token_ids[:-1])[len(prompt) - 1 :]
    for i, (lp, tok) in enumerate(zip(res.logprobs, res.token_ids, strict=True)):
        assert isinstance(lp, TokenLogprob) and lp.token_id == tok
        own, top = reference(rows[i], tok, t, top_k, top_p, n)
        assert lp.logprob == pytest.approx(own, abs=2e-4), i
        assert len(lp.top) == len(top)
        # The order of near-equal candidates may differ between a prompt row and a decode row.
        for (gi, gv), (ri, rv) in zip(lp.top, top, strict=True):
            assert gv == pytest.approx(rv, abs=2e-4)
            assert gi == ri or abs(rows[i][gi] - rows[i][ri]) < 1e-4
        assert [v for _, v in lp.top] == sorted((v for _, v in lp.top), reverse=True)


@pytest.mark.parametrize("draft", ["none", "model", "lookup"])
def test_greedy_logprobs_match_the_oracle(eng: Engine, draft: str) -> None:
    for p in PROMPTS:
        res = eng.generate(p, max_new_tokens=24, draft=draft, logprobs=5, ignore_eos=True)
        check(eng, p, res, 0.0, 0, 1.0, 5)
        for lp in res.logprobs:  # greedy: the token is the most likely candidate
            assert lp.top[0][0] == lp.token_id and lp.top[0][1] == lp.logprob


@pytest.mark.parametrize(
    "t,top_k,top_p", [(0.8, 0, 1.0), (1.3, 20, 1.0), (0.7, 0, 0.9), (1.0, 50, 0.8)]
)
def test_sampled_logprobs_match_the_oracle(eng: Engine, t: float, top_k: int, top_p: float) -> None:
    for seed, p in enumerate(PROMPTS):
        res = eng.generate(
            p, max_new_tokens=20, temperature=t, top_k=top_k, top_p=top_p, seed=seed,
            draft="model", draft_len=3, logprobs=3, ignore_eos=True,
        )  # fmt: skip
        assert res.stats.accepted > 0
        check(eng, p, res, t, top_k, top_p, 3)


def test_speculation_changes_no_logprob(eng: Engine) -> None:
    """Greedy, and sampled with prompt lookup (whose tokens are the target's own draws): the
    same tokens and, within float rounding, the same values as target-only decoding."""
    for kw in [{}, {"temperature": 0.9, "top_p": 0.95, "seed": 4}]:
        for draft in ["model", "lookup"]:
            if kw and draft == "model":
                continue  # (sampled draft-model tokens follow the distribution, not the seed)
            for p in PROMPTS:
                base = eng.generate(p, max_new_tokens=30, draft="none", logprobs=4, **kw)
                spec = eng.generate(p, max_new_tokens=30, draft=draft, logprobs=4, **kw)
                assert spec.token_ids == base.token_ids
                for a, b in zip(spec.logprobs, base.logprobs, strict=True):
                    assert a.logprob == pytest.approx(b.logprob, abs=1e-5)
                    assert [i for i, _ in a.top] == [i for i, _ in b.top]


def test_batch_mixes_requests_with_and_without(eng: Engine) -> None:
    """Two threads' requests decode in one batch, one asking for log-probabilities and one
    not; each gets what it gets alone, and a stream's list grows as it goes."""
    alone = eng.generate(PROMPTS[1], max_new_tokens=16, logprobs=2, draft="model")
    plain = eng.generate(PROMPTS[0], max_new_tokens=40, draft="model")
    out: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: out.update(plain=eng.generate(PROMPTS[0], max_new_tokens=40, draft="model"))
    )
    t.start()
    stream = eng.generate(PROMPTS[1], max_new_tokens=16, logprobs=2, draft="model", stream=True)
    seen = [len(stream.logprobs) for _ in stream]
    t.join()
    assert out["plain"].token_ids == plain.token_ids and out["plain"].logprobs is None
    assert stream.result.token_ids == alone.token_ids
    assert [lp.logprob for lp in stream.result.logprobs] == pytest.approx(
        [lp.logprob for lp in alone.logprobs], abs=1e-5
    )
    assert seen == sorted(seen) and len(stream.logprobs) == len(alone.token_ids)


def test_zero_top_entries_and_bad_values(eng: Engine) -> None:
    res = eng.generate(PROMPTS[0], max_new_tokens=5, logprobs=0)
    assert all(lp.top == [] for lp in res.logprobs)
    for bad in [-1, 21, 2.5, True]:
        with pytest.raises(ValueError, match="logprobs"):
            eng.generate(PROMPTS[0], max_new_tokens=5, logprobs=bad)


# ---- the CUDA kernels (logprobs.cuh) through the host emulation ---------------------------------
ENTRY = np.dtype([("id", "<i4"), ("lp", "<f4")])
STATE = np.dtype(
    [("t", "<f4"), ("k", "<i4"), ("p", "<f4"), ("lp", "<i4"), ("seed", "<u8"), ("step", "<u8")]
)


def _p(a: np.ndarray):
    return ctypes.c_void_p(a.ctypes.data)


@pytest.mark.parametrize("threads,min_chunk", [(64, 128), (512, 4096)])
def test_emulated_kernels_match_the_oracle(threads: int, min_chunk: int) -> None:
    emu = emulation_library("cuda_emu_ops")
    I32 = ctypes.c_int
    rng = np.random.default_rng(5)
    V = 700
    logits = (3 * rng.standard_normal((6, V))).astype(np.float32)
    logits[2, 10:20] = logits[2, 5]  # ties: the lower index first
    params = [(0.0, 0, 1.0, 5), (0.8, 0, 1.0, 20), (1.2, 40, 1.0, 3), (0.6, 0, 0.85, 7),
              (1.0, 30, 0.7, 20), (0.9, 0, 1.0, -1)]  # fmt: skip
    st = np.zeros(len(params), STATE)
    for i, (t, k, p, n) in enumerate(params):
        st[i] = (t, k, p, n, 0, 0)
    # Entries: rows in another order, one skipped row, tokens inside and outside the kept sets.
    rows = np.array([3, 0, 5, 1, -1, 2, 4], np.int32)
    slot = np.array([3, 0, 5, 2, 1, 2, 4], np.int32)
    tokens = np.array([int(np.argmax(logits[r])) if r >= 0 else 0 for r in rows], np.int32)
    tokens[2] = 1  # (row 5 asks for none)
    tokens[3] = int(np.argsort(logits[1])[0])  # the least likely: outside top-k and top-p
    out = np.zeros((len(rows), 21), ENTRY)
    out["id"] = -7
    buf = np.zeros(emu.emu_sample_scratch_bytes(I32(len(rows))), np.uint8)
    emu.emu_logprobs(
        _p(logits), I32(V), I32(len(rows)), _p(rows), _p(tokens), _p(slot), _p(st), _p(out),
        I32(threads), I32(64), I32(min_chunk), _p(buf),
    )  # fmt: skip
    for e, r in enumerate(rows):
        if r < 0 or params[slot[e]][3] < 0:
            assert (out[e]["id"] == -7).all()  # skipped: left as it was
            continue
        t, k, p, n = params[slot[e]]
        own, top = reference(logits[r], int(tokens[e]), t, k, p, n)
        assert out[e][0]["id"] == tokens[e]
        assert out[e][0]["lp"] == pytest.approx(own, abs=1e-5)
        assert [int(i) for i in out[e]["id"][1 : 1 + len(top)]] == [i for i, _ in top]
        np.testing.assert_allclose(out[e]["lp"][1 : 1 + len(top)], [v for _, v in top], atol=1e-5)
        assert (out[e]["id"][1 + len(top) :] == -1).all()
    assert out[3][0]["lp"] == -np.inf
    # The multi-block passes leave their arrival counters and histograms zero (graphs replay).
    size, count, bins, masses = (emu.emu_sample_scratch_layout(I32(i)) for i in range(4))
    rec = buf.reshape(len(rows), size)
    assert not rec[:, count : count + 4].any()
    assert not rec[:, bins : bins + 4 * 256].any() and not rec[:, masses : masses + 8 * 256].any()
