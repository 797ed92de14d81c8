"""The CUDA kernels run on the CPU through a small CUDA emulation (tests/cpp/cuda_emu.h): every
kernel of cpp/kernels/cuda/ against the CPU backend and exact references, on any machine.

Loads tests/cpp/cuda_emu_ops.cpp, built by CMake (native_build.py; the kernels as host code:
threads for CUDA threads, barriers for __syncthreads and warp shuffles), and calls it through
ctypes with the same grids and blocks as the CUDA backend. This checks the kernels' indexing,
weight decoding, reductions, the sampling rule's selection algorithm and the acceptance walk; the
GPU tests (test_cuda_ops.py, marker gpu) check the real thing."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda_helpers import (
    RULES,
    SOURCE,
    emulation_library,
    fields,
    params,
    random_logits,
    seq_states,
)
from native import T as native
from trt_spec import _core

TYPES = ["f32", "f16", "bf16", "q8", "q4"]
STATE = np.dtype(
    [("t", "<f4"), ("k", "<i4"), ("p", "<f4"), ("pad", "<i4"), ("seed", "<u8"), ("step", "<u8")]
)


@pytest.fixture(scope="module")
def emu():
    so = emulation_library("cuda_emu_ops")
    assert so.emu_sampling_state_bytes() == STATE.itemsize
    assert so.emu_seq_state_bytes() == native.SEQ_STATE_BYTES
    return so


@pytest.fixture(scope="module")
def cpu():
    return native.OpRunner("cpu")


def P(a: np.ndarray | None):
    return ctypes.c_void_p(0 if a is None else a.ctypes.data)


I64, I32, F32 = ctypes.c_int64, ctypes.c_int, ctypes.c_float
# Threads of the emulated sampling blocks: the backend runs 512; the algorithms take any multiple
# of 32, and fewer threads keep the emulation fast (one test runs 512).
T = I32(64)


def states(ps: list[tuple]) -> np.ndarray:
    s = np.zeros(len(ps), STATE)
    for i, (t, k, p, seed, step) in enumerate(ps):
        s[i] = (t, k, p, 0, seed, step)
    return s


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


# ---- row ops (matrix products: test_cuda_emulated_matmul.py) ------------------------------
@pytest.mark.parametrize("wtype", TYPES)
def test_embed(emu, wtype: str) -> None:
    rng = np.random.default_rng(3)
    t = _core.weight_type_from_name(wtype)
    w = rng.standard_normal((40, 128)).astype(np.float32)
    blob = _core.quantize_weight(w, t)
    # ids outside the table (a target id the draft's vocabulary lacks) read nothing: zero rows
    tok = np.array([0, 39, 7, 7, 40, 1 << 30, -1], np.int32)
    out = np.full((7, 128), np.nan, np.float32)
    emu.emu_embed(t.value, P(blob), I64(40), I64(128), P(tok), I32(7), P(out))
    exact = _core.dequantize_weight(blob, t, 40, 128)[tok[:4]]
    np.testing.assert_allclose(out[:4], exact, rtol=1e-6, atol=1e-7)
    assert not out[4:].any()


def test_rmsnorm_rope_swiglu(emu, cpu) -> None:
    rng = np.random.default_rng(4)
    x = (3 * rng.standard_normal((3, 300))).astype(np.float32)
    g = rng.standard_normal(300).astype(np.float32)
    out = np.zeros_like(x)
    emu.emu_rmsnorm(P(x), P(g), F32(1e-6), I32(3), I32(300), P(out))
    np.testing.assert_allclose(out, cpu.rmsnorm(x, g, 1e-6), rtol=2e-5, atol=1e-6)

    nh, nkv, hd = 4, 2, 32
    half = hd // 2
    ang = np.arange(64, dtype=np.float32)[:, None] * (
        1.0 / 10000 ** (np.arange(half, dtype=np.float32) * 2 / hd)
    )
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    qkv = rng.standard_normal((3, (nh + 2 * nkv) * hd)).astype(np.float32)
    pos = np.array([0, 5, 63], np.int32)
    got = qkv.copy()
    emu.emu_rope(P(got), P(pos), I32(3), I32(nh), I32(nkv), I32(hd), P(c), P(s))
    np.testing.assert_allclose(
        got, cpu.rope(qkv, list(pos), nh, nkv, hd, c, s), rtol=1e-5, atol=1e-6
    )

    gu = (3 * rng.standard_normal((2, 2 * 100))).astype(np.float32)
    out = np.zeros((2, 100), np.float32)
    emu.emu_swiglu(P(gu), I32(2), I32(100), P(out))
    np.testing.assert_allclose(out, cpu.swiglu(gu), rtol=1e-5, atol=1e-6)


# ---- token selection ---------------------------------------------------------------------------
# The multi-block rows (sample_rows.cuh): sample_grid(vocab, SMS, threads, MIN_CHUNK) chunks per
# row. The backend uses its SM count and 4096-element chunks; small chunks split the small rows
# of these tests into several blocks each.
SMS, MIN_CHUNK = I32(64), I32(128)


def scratch(emu, rows: int, vocab: int = 0, threads=T, min_chunk=MIN_CHUNK) -> np.ndarray:
    """Zeroed multi-block row scratch for `rows` rows (one fixed-size record per row, whatever
    the vocabulary and chunks)."""
    return np.zeros(emu.emu_sample_scratch_bytes(I32(rows)), np.uint8)


def counters(emu, buf: np.ndarray, rows: int) -> np.ndarray:
    """The parts of the first `rows` records that must be zero between launches: each row's
    arrival counter and rule-bin histogram (counts and masses), as bytes."""
    size, count, bins, masses = (emu.emu_sample_scratch_layout(I32(i)) for i in range(4))
    rec = buf[: rows * size].reshape(rows, size)
    parts = [rec[:, count : count + 4], rec[:, bins : bins + 4 * 256]]
    return np.concatenate([*parts, rec[:, masses : masses + 8 * 256]], axis=1)


def emu_sample(emu, logits, st, slot=None, threads=T, min_chunk=MIN_CHUNK, buf=None):
    """Backend::sample on the emulation (launch_sample); returns the tokens and the scratch."""
    n, V = logits.shape
    slot = np.arange(n, dtype=np.int32) if slot is None else np.asarray(slot, np.int32)
    buf = scratch(emu, n, V, threads, min_chunk) if buf is None else buf
    out = np.full(n, -1, np.int32)
    logits = np.ascontiguousarray(logits, np.float32)
    emu.emu_sample(
        P(logits), I32(n), I32(V), P(slot), P(st), P(out), threads, SMS, min_chunk, P(buf)
    )
    return out, buf


def test_sample_grid(emu) -> None:
    """Chunks per row from the vocabulary and the SM count only; none empty."""
    assert emu.emu_sample_chunks(I32(151936), I32(132), I32(512), I32(4096)) == 38
    assert emu.emu_sample_chunks(I32(151936), I32(16), I32(512), I32(4096)) == 16
    assert emu.emu_sample_chunks(I32(32000), I32(132), I32(512), I32(4096)) == 8
    assert emu.emu_sample_chunks(I32(1000), I32(132), I32(512), I32(4096)) == 1
    assert emu.emu_sample_chunks(I32(10**6), I32(1000), I32(512), I32(4096)) == 64
    assert emu.emu_sample_chunks(I32(700), SMS, T, MIN_CHUNK) == 6


@pytest.mark.slow
def test_sample(emu, cpu) -> None:
    rng = np.random.default_rng(5)
    n, V = 6, 700
    logits = random_logits(rng, (n, V))
    logits[0, [3, 11]] = logits[0].max() + 1.0  # tied maxima (one chunk)
    logits[1, :] = 0.25  # all equal
    logits[2, :] = np.round(logits[2])  # many ties
    logits[3, [130, 650]] = logits[3].max() + 1.0  # tied maxima in two chunks
    logits[4, ::3] = -np.inf  # masked ids
    for rule in RULES:
        ps = [params(rule, seed=40 + i, step=3 * i) for i in range(n)]
        st = states(ps)
        threads = I32(512) if rule == RULES[5] else T
        out, buf = emu_sample(emu, logits, st, threads=threads)
        want, steps = cpu.sample(logits, list(range(n)), ps)
        assert list(out) == want, rule
        assert list(st["step"]) == steps
        assert not counters(emu, buf, n).any()  # left zero for the next launch / graph replay
        if rule[0] == 0.0:
            assert out[0] == 3 and out[3] == 130  # ties: the lowest index


def test_sample_slot_twice(emu, cpu) -> None:
    """A slot listed twice advances its step twice; rows draw in order."""
    rng = np.random.default_rng(15)
    logits = random_logits(rng, (4, 500))
    slot = [1, 0, 1, 1]
    ps = [params(RULES[2], seed=7, step=5), params(RULES[4], seed=8, step=9)]
    st = states(ps)
    out, _ = emu_sample(emu, logits, st, slot=slot)
    want, steps = cpu.sample(logits, slot, ps)
    assert list(out) == want
    assert list(st["step"]) == steps == [6, 12]


@pytest.mark.slow
def test_sample_chunking_and_replay(emu) -> None:
    """The same tokens whatever the split (one block per row, several, many), and a second
    launch on the same scratch (as a graph replays) gives the same tokens."""
    rng = np.random.default_rng(16)
    n, V = 2, 900
    logits = random_logits(rng, (n, V))
    logits[1, 5:] = -np.inf  # five live ids, all in the first chunk
    for rule in [RULES[0], RULES[2], RULES[3], RULES[4]]:
        ps = [params(rule, seed=90 + i, step=i) for i in range(n)]
        first, buf = emu_sample(emu, logits, states(ps), min_chunk=I32(1 << 20))
        for mc in (I32(64), I32(300)):
            again, buf = emu_sample(emu, logits, states(ps), min_chunk=mc)
            assert list(again) == list(first), (rule, mc.value)
            again, _ = emu_sample(emu, logits, states(ps), min_chunk=mc, buf=buf)
            assert list(again) == list(first), (rule, mc.value)
            assert not counters(emu, buf, n).any()
        if rule[0] > 0:
            assert first[1] < 5


@pytest.mark.slow
def test_sample_scratch_shared_across_shapes(emu, cpu) -> None:
    """One scratch buffer serves launches of any shape, as the backend's does: many rows of one
    chunk each, then a few rows of many chunks with top-k / top-p (the rule-bin histograms), then
    many rows again. (Laid out by each launch's row count, a launch's row stats and partials lay
    where the next launch read its histograms: wrong draws on an H100.)"""
    rng = np.random.default_rng(21)
    buf = scratch(emu, 40)
    shapes = [(40, 100, 1 << 20), (3, 2000, 128), (7, 900, 64), (40, 100, 1 << 20), (3, 2000, 96)]
    for trial, (n, V, mc) in enumerate(shapes):
        logits = random_logits(rng, (n, V))
        for rule in [RULES[2], RULES[3], RULES[4], RULES[5]]:
            ps = [params(rule, seed=trial * 50 + i, step=i) for i in range(n)]
            out, _ = emu_sample(emu, logits, states(ps), min_chunk=I32(mc), buf=buf)
            want, _ = cpu.sample(logits, list(range(n)), ps)
            assert list(out) == want, (n, V, mc, rule)
            assert not counters(emu, buf, 40).any()


@pytest.mark.slow
def test_sample_many_seeds(emu) -> None:
    """Top-p / top-k boundaries and draws over many seeds, one row at a time."""
    rng = np.random.default_rng(6)
    V = 300
    for trial in range(24):
        logits = random_logits(rng, (1, V), scale=float(rng.uniform(0.5, 6.0)))
        rule = RULES[1 + trial % (len(RULES) - 1)]
        st = states([params(rule, seed=trial, step=trial)])
        out, _ = emu_sample(emu, logits, st, min_chunk=I32(64))
        t, k, p, seed, step = params(rule, seed=trial, step=trial)
        assert out[0] == native.sample_row(logits[0], t, k, p, seed, step), (trial, rule)


@pytest.mark.slow
@pytest.mark.parametrize("rule", [(1.0, 3000, 1.0), (0.8, 0, 0.9), (1.2, 2500, 0.7), (5.0, 0, 0.3)])
def test_sample_crowded_rule_bins(emu, cpu, rule) -> None:
    """Top-k / top-p thresholds and draws in rule bins (select.cuh) holding more candidates than
    the key search's shared list (2048): equal logits, logits within one bin's width of each
    other, and many ties; rows of 6,000 ids over several blocks. The same tokens as the CPU."""
    rng = np.random.default_rng(18)
    n, V = 4, 6000
    logits = random_logits(rng, (n, V))
    logits[0, :] = 1.5  # one bin holds the whole row
    logits[1, :] = (0.01 * rng.standard_normal(V)).astype(np.float32)  # all within 1/8 nat
    logits[2, :] = np.round(logits[2] / 4)  # few distinct values, thousands of ties each
    logits[3, : V // 2] = 2.0  # half the row tied at the top, the rest spread below
    ps = [params(rule, seed=60 + i, step=7 * i) for i in range(n)]
    st = states(ps)
    out, buf = emu_sample(emu, logits, st, min_chunk=I32(1024))
    want, steps = cpu.sample(logits, list(range(n)), ps)
    assert list(out) == want, rule
    assert list(st["step"]) == steps
    assert not counters(emu, buf, n).any()
    again, _ = emu_sample(emu, logits, states(ps), min_chunk=I32(1024), buf=buf)  # a replay:
    assert list(again) == want  # the bin histograms were left zero


@pytest.mark.parametrize("rule", [RULES[0], RULES[2]])
def test_sample_qwen_vocab(emu, cpu, rule) -> None:
    """A 151,936-entry vocabulary (Qwen's), 38 chunks per row as on a 132-SM GPU: greedy and
    index-order draws (top-k / top-p run on smaller rows above: slow in the emulation)."""
    rng = np.random.default_rng(17)
    n, V = 2, 151936
    logits = random_logits(rng, (n, V))
    logits[1, [70000, 151935]] = logits[1].max() + 2.0  # tied maxima in distant chunks
    ps = [params(rule, seed=3 + i, step=11 * i) for i in range(n)]
    st = states(ps)
    out, buf = emu_sample(emu, logits, st, min_chunk=I32(4096), slot=[0, 1])
    assert emu.emu_sample_chunks(I32(V), SMS, T, I32(4096)) == 38
    want, steps = cpu.sample(logits, [0, 1], ps)
    assert list(out) == want
    assert list(st["step"]) == steps
    assert not counters(emu, buf, n).any()
    if rule[0] == 0.0:
        assert out[1] == 70000


def test_spec_draft_rows(emu, cpu) -> None:
    """Draft step j's rows on the emulated kernel and the CPU op: positions are the draft's
    (the target's less draft_off, the start of its prompt window)."""
    seqs = seq_states(
        3,
        n_past=np.array([4, 9, 30]),
        last=np.array([1, 2, 3]),
        prev=np.array([7, 8, 9]),
        draft_off=np.array([0, 5, 21]),
    )
    f = fields(seqs)
    f["tree_token"][:, :6] = np.arange(18).reshape(3, 6)
    slots = np.array([2, 0], np.int32)
    for j in (0, 1, 3):
        rows = 2 * (2 if j == 0 else 1)
        tok, pos, rs = (np.zeros(rows, np.int32) for _ in range(3))
        emu.emu_spec_draft_rows(P(seqs), P(slots), I32(2), I32(j), P(tok), P(pos), P(rs))
        ctok, cpos, crs = cpu.spec_draft_rows(seqs, list(slots), j)
        assert (list(ctok), list(cpos), list(crs)) == (list(tok), list(pos), list(rs))
        for b, sl in enumerate(slots):
            s = f[sl]
            base = s["n_past"] - s["draft_off"]
            if j == 0:
                assert list(tok[2 * b : 2 * b + 2]) == [s["prev"], s["last"]]
                assert list(pos[2 * b : 2 * b + 2]) == [base - 1, base]
                assert list(rs[2 * b : 2 * b + 2]) == [sl, sl]
            else:
                assert tok[b] == s["tree_token"][j - 1] and pos[b] == base + j and rs[b] == sl


@pytest.mark.parametrize("vocab,common", [(500, 500), (520, 500)])
def test_spec_draft_sample(emu, cpu, vocab: int, common: int) -> None:
    rng = np.random.default_rng(vocab)
    B = 4
    ps = [params(RULES[i], seed=i) for i in (0, 1, 4, 5)]
    seqs = seq_states(B, n_gen=np.array([0, 3, 8, 1]), draft_off=np.array([0, 2, 0, 7]))
    slots = np.arange(B, dtype=np.int32)
    for j in range(3):
        logits = random_logits(rng, (B, vocab))
        qc, sc = cpu.spec_draft_sample(logits, common, j, seqs, list(slots), ps)
        qg, sg = logits.copy(), seqs.copy()
        buf = scratch(emu, B, vocab)
        nxt = np.full((3, B), -1, np.int32)  # the next draft step's rows: tokens, pos, slots
        emu.emu_spec_draft_sample(
            P(qg),
            I32(B),
            I32(vocab),
            I32(common),
            I32(j),
            P(sg),
            P(slots),
            P(states(ps)),
            T,
            SMS,
            MIN_CHUNK,
            P(buf),
            P(nxt[0]),
            P(nxt[1]),
            P(nxt[2]),
        )
        assert not counters(emu, buf, B).any()
        np.testing.assert_array_equal(sg, sc)
        rec = fields(sc)[np.asarray(slots)]
        np.testing.assert_array_equal(nxt[0], rec["tree_token"][:, j])
        np.testing.assert_array_equal(nxt[1], rec["n_past"] - rec["draft_off"] + j + 1)
        np.testing.assert_array_equal(nxt[2], slots)
        np.testing.assert_allclose(qg, qc, rtol=1e-5, atol=1e-7)
        seqs = sc


def _tree_seqs(rng: np.random.Generator, B: int, V: int, n_nodes: int) -> np.ndarray:
    """SeqStates holding random one-hot (lookup) trees: parents before children, siblings with
    distinct tokens, ready_n = n_nodes."""
    seqs = seq_states(
        B,
        n_past=12,
        last=5,
        prev=4,
        n_gen=np.arange(B) * 3 + 2,
        max_nodes=16,
        sources=(1 << SOURCE["model"]) | (1 << SOURCE["lookup"]),
        ready_n=n_nodes,
    )
    f = fields(seqs)
    for b in range(B):
        used: dict[int, set[int]] = {}
        for i in range(n_nodes):
            par = int(rng.integers(-1, i)) if i else -1
            tok = int(rng.integers(0, V))
            while tok in used.setdefault(par, set()):
                tok = int(rng.integers(0, V))
            used[par].add(tok)
            f[b]["tree_token"][i], f[b]["tree_parent"][i] = tok, par
            f[b]["tree_depth"][i] = 1 if par < 0 else f[b]["tree_depth"][par] + 1
        f[b]["tree_n"] = n_nodes
    return seqs


@pytest.mark.parametrize("k,source", [(0, "none"), (3, "model"), (4, "lookup"), (6, "lookup")])
def test_spec_verify_rows(emu, cpu, k: int, source: str) -> None:
    rng = np.random.default_rng(k)
    B = 3
    seqs = _tree_seqs(rng, B, 300, n_nodes=5)
    fields(seqs)["max_nodes"][1] = 2  # a request capping its nodes
    slots = np.array([2, 0, 1], np.int32)
    want = cpu.spec_verify_rows(seqs, list(slots), k, SOURCE[source])
    rows = B * (k + 1)
    got = [np.zeros(rows, np.int32) for _ in range(5)] + [np.zeros(rows, np.uint64)]
    sg = seqs.copy()
    emu.emu_spec_verify_rows(P(sg), P(slots), I32(B), I32(k), I32(SOURCE[source]), *map(P, got))
    for a, b in zip(got, want[:6], strict=True):
        assert list(a) == list(b)
    np.testing.assert_array_equal(sg, want[6])
    n = fields(want[6])["tree_n"]
    assert n[0] == (0 if k == 0 else min(k, 5 if source == "lookup" else k))  # uncapped
    assert n[1] <= 2  # capped


@pytest.mark.parametrize(
    "k,source",
    [(0, "none")]
    + [
        pytest.param(k, s, marks=pytest.mark.slow)
        for k, s in [(1, "model"), (3, "model"), (5, "lookup")]
    ],
)
def test_spec_accept(emu, cpu, k: int, source: str) -> None:
    """Acceptance, commit, history append and cache moves: the emulated kernels against the CPU
    ops, for draft-model chains (dense q) and lookup trees (one-hot), every sampling rule."""
    rng = np.random.default_rng(10 + k)
    B, V, Vd, max_seq = 3, 400, 420, 40
    slots = np.array([1, 2, 0], np.int32)
    for trial in range(4):
        ps = [params(RULES[(trial + 3 * b) % len(RULES)], seed=100 * trial + b) for b in range(B)]
        target = random_logits(rng, (B * (k + 1), V), scale=2.0)
        q = np.zeros((k * B, Vd), np.float32)
        if source == "lookup":
            seqs = _tree_seqs(rng, B, V, n_nodes=k)
            # Make acceptance likely: boost each node's token in its parent's row.
            f = fields(seqs)
            for b, sl in enumerate(slots):
                for i in range(k):
                    row = b * (k + 1) + f[sl]["tree_parent"][i] + 1
                    target[row, f[sl]["tree_token"][i]] += 3.0
        else:
            seqs = seq_states(
                B,
                n_past=12,
                last=5,
                prev=4,
                n_gen=np.array([2, 6, 9]),
                max_nodes=16,
                sources=1 << SOURCE["model"],
            )
            for j in range(k):
                dl = np.zeros((B, Vd), np.float32)
                # Row b of the batch is slot slots[b]: its draft logits near its target row j.
                dl[:, :V] = target.reshape(B, k + 1, V)[:, j]
                dl += random_logits(rng, (B, Vd), scale=0.8)
                qj, seqs = cpu.spec_draft_sample(dl, V, j, seqs, list(slots), ps)
                q[j * B : (j + 1) * B] = qj
        seqs = cpu.spec_verify_rows(seqs, list(slots), k, SOURCE[source])[6]
        hist = rng.integers(0, V, (B, max_seq)).astype(np.int32)
        want_s, want_h, want_m = cpu.spec_accept(target, q, k, seqs, list(slots), ps, hist)
        got = seqs.copy()
        hg = hist.copy()
        Pbuf = np.zeros(B * (k + 1) * V, np.float32)
        best = np.zeros(B * (k + 1), np.int32)
        mv = [np.zeros(B * 16, np.int32) for _ in range(3)]
        buf = scratch(emu, B * (k + 1), V, min_chunk=I32(64))
        emu.emu_spec_accept(
            P(target),
            P(q if k else None),
            I32(B),
            I32(k),
            I32(V),
            I32(Vd),
            P(got),
            P(slots),
            P(states(ps)),
            P(Pbuf),
            P(best),
            P(hg),
            I32(max_seq),
            *map(P, mv),
            T,
            SMS,
            I32(64),
            P(buf),
        )
        assert not counters(emu, buf, B * (k + 1)).any()
        np.testing.assert_array_equal(got, want_s)
        np.testing.assert_array_equal(hg, want_h)
        for a, b in zip(mv, want_m, strict=True):
            assert list(a) == list(b)


@pytest.mark.parametrize("seed", range(6))
def test_spec_lookup(emu, cpu, seed: int) -> None:
    """Prompt lookup's kernel (matches found by a whole block, in order) equals the CPU op and
    the serial rule, on texts with many repeats, with and without a prediction."""
    rng = np.random.default_rng(seed)
    B, max_seq = 3, 300
    slots = np.array([2, 0, 1], np.int32)
    hist = rng.integers(0, 6 if seed % 2 else 40, (B, max_seq)).astype(np.int32)
    pred = np.zeros((B, max_seq), np.int32)
    m = [0, 50, 280]
    for b in range(B):
        pred[b, : m[b]] = rng.integers(0, 6, m[b])
    seqs = seq_states(
        B,
        n_past=np.array([30, 120, 250]),
        max_nodes=np.array([8, 16, 3]),
        pred_len=np.array(m),
        sources=np.array([1 << SOURCE["lookup"]] * 2 + [0]),
    )
    want = cpu.spec_lookup(seqs, list(slots), hist, pred)
    got = seqs.copy()
    emu.emu_spec_lookup(P(got), P(slots), I32(B), P(hist), P(pred), I32(max_seq), T)
    np.testing.assert_array_equal(got, want)
    f = fields(want)
    for b in range(B):
        if not f[b]["sources"]:
            assert f[b]["ready_n"] == 0
            continue
        n = f[b]["n_past"] + 1
        tok, par, _, _, ngram = native.lookup_propose(
            list(hist[b, :n]), list(pred[b, : m[b]]), int(f[b]["max_nodes"])
        )
        assert f[b]["ready_n"] == len(tok) and f[b]["tree_tag"] == (ngram if tok else 0)
        assert list(f[b]["tree_token"][: len(tok)]) == tok
        assert list(f[b]["tree_parent"][: len(tok)]) == par
