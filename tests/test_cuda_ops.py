"""Every op of the CUDA backend against the CPU backend (and, for the matrix products, against an
exact float64 product of the dequantized weights), through the test module's OpRunner. Needs a
GPU. The speculative ops (spec/spec_ops.h) too: the CUDA SpecOps against the CPU's.

Tolerances: the GPU computes in float32 with its own summation order (fp16-level tolerances are
ample); token choices (sampling, acceptance) must be identical given identical logits, since both
backends follow one rule with the same Philox numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import GPU, RULES, SOURCE, fields, params, random_logits, seq_states
from native import T, wt
from test_cuda_emulated import _tree_seqs
from trt_spec import _core

pytestmark = GPU

TYPES = ["f32", "f16", "bf16", "q8", "q4"]


@pytest.fixture(scope="module")
def cpu():
    return T.OpRunner("cpu")


@pytest.fixture(scope="module")
def gpu():
    return T.OpRunner("cuda")


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(b)), 1e-30))


# ---- matrix products ---------------------------------------------------------------------------
@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("rows,cols", [(1000, 896), (300, 1536), (64, 128), (33, 4864)])
def test_linear_all_row_counts(cpu, gpu, wtype: str, rows: int, cols: int) -> None:
    rng = np.random.default_rng(rows + cols)
    t = _core.weight_type_from_name(wtype)
    w = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
    blob = _core.quantize_weight(w, t)
    exact_w = _core.dequantize_weight(blob, t, rows, cols).astype(np.float64)
    bias = rng.standard_normal(rows).astype(np.float32)
    x = rng.standard_normal((40, cols)).astype(np.float32)
    one = gpu.linear(blob, wt(t), rows, cols, x[:1], bias)
    for n in [1, 2, 3, 4, 5, 8, 9, 16, 17, 40]:
        ref = x[:n].astype(np.float64) @ exact_w.T + bias
        got = gpu.linear(blob, wt(t), rows, cols, x[:n], bias)
        assert got.shape == (n, rows)
        # q8 / q4 quantize the activations to int8 per group of 32 (matmul.cuh, as the CPU).
        assert rel_err(got, ref) < (2e-2 if wtype in ("q8", "q4") else 2e-5), (wtype, n)
        # A row's result does not depend on the rest of the batch (bitwise).
        np.testing.assert_array_equal(got[:1], one)
        # Both backends quantize q8 / q4 activations alike; the float sums differ in order.
        tol = 1e-2 if wtype in ("q8", "q4") else 1e-5
        assert rel_err(got, cpu.linear(blob, wt(t), rows, cols, x[:n], bias)) < tol
    nobias = gpu.linear(blob, wt(t), rows, cols, x[:3])
    assert rel_err(nobias, x[:3].astype(np.float64) @ exact_w.T) < (
        2e-2 if wtype in ("q8", "q4") else 2e-5
    )


@pytest.mark.parametrize("wtype", ["f32", "f16", "bf16"])
def test_linear_odd_columns(gpu, wtype: str) -> None:
    """Columns that are no multiple of 8: the scalar kernel."""
    rng = np.random.default_rng(5)
    t = _core.weight_type_from_name(wtype)
    w = rng.standard_normal((50, 72 + 3)).astype(np.float32)
    blob = _core.quantize_weight(w, t)
    exact_w = _core.dequantize_weight(blob, t, 50, 75).astype(np.float64)
    x = rng.standard_normal((6, 75)).astype(np.float32)
    assert rel_err(gpu.linear(blob, wt(t), 50, 75, x), x @ exact_w.T) < 2e-5


@pytest.mark.parametrize("wtype", TYPES)
def test_embed(cpu, gpu, wtype: str) -> None:
    rng = np.random.default_rng(2)
    t = _core.weight_type_from_name(wtype)
    w = rng.standard_normal((500, 256)).astype(np.float32)
    blob = _core.quantize_weight(w, t)
    tokens = [0, 499, 17, 17, 250, 500, -1]  # the last two outside the table: zero rows
    got = gpu.embed(blob, wt(t), 500, 256, tokens)
    exact = _core.dequantize_weight(blob, t, 500, 256)[tokens[:5]]
    np.testing.assert_allclose(got[:5], exact, rtol=1e-6, atol=1e-7)
    assert not got[5:].any()
    np.testing.assert_allclose(got, cpu.embed(blob, wt(t), 500, 256, tokens), rtol=1e-6, atol=1e-7)


# ---- row ops -----------------------------------------------------------------------------------
def test_rmsnorm_swiglu_add_gather(cpu, gpu) -> None:
    rng = np.random.default_rng(3)
    for dim in [128, 896, 1536, 4096]:
        x = rng.standard_normal((7, dim)).astype(np.float32) * 3
        g = rng.standard_normal(dim).astype(np.float32)
        np.testing.assert_allclose(
            gpu.rmsnorm(x, g, 1e-6), cpu.rmsnorm(x, g, 1e-6), rtol=2e-5, atol=1e-5
        )
    gu = rng.standard_normal((5, 2 * 1000)).astype(np.float32) * 4
    np.testing.assert_allclose(gpu.swiglu(gu), cpu.swiglu(gu), rtol=1e-5, atol=1e-6)
    a, b = (
        rng.standard_normal(10007).astype(np.float32),
        rng.standard_normal(10007).astype(np.float32),
    )
    np.testing.assert_array_equal(gpu.add(a, b), cpu.add(a, b))
    src = rng.standard_normal((9, 300)).astype(np.float32)
    np.testing.assert_array_equal(gpu.gather_rows(src, [8, 0, 3, 3]), src[[8, 0, 3, 3]])


def _rope_tables(max_seq: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    half = head_dim // 2
    inv = 1.0 / theta ** (np.arange(half, dtype=np.float32) * 2 / head_dim)
    ang = np.arange(max_seq, dtype=np.float32)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


@pytest.mark.parametrize("heads,kv,hd", [(12, 2, 128), (14, 2, 64), (4, 2, 32), (32, 32, 128)])
def test_rope(cpu, gpu, heads: int, kv: int, hd: int) -> None:
    rng = np.random.default_rng(hd)
    c, s = _rope_tables(512, hd, 1e6)
    qkv = rng.standard_normal((6, (heads + 2 * kv) * hd)).astype(np.float32)
    pos = [0, 1, 100, 511, 7, 7]
    np.testing.assert_allclose(
        gpu.rope(qkv, pos, heads, kv, hd, c, s),
        cpu.rope(qkv, pos, heads, kv, hd, c, s),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("heads,kv,hd", [(12, 2, 128), (14, 2, 64), (4, 2, 32), (8, 8, 80)])
@pytest.mark.parametrize(
    "pos,slot",
    [
        ([37], [1]),  # decode
        ([20, 21, 22, 23, 24], [0] * 5),  # a verify block: causal inside it
        ([5, 900, 63], [2, 0, 1]),  # a batch of sequences
        ([2000, 2001], [1, 1]),  # long context: many splits
        (list(range(0, 48)), [2] * 48),  # a prefill chunk
    ],
)
def test_attention(cpu, gpu, heads, kv, hd, pos, slot) -> None:
    rng = np.random.default_rng(len(pos) + hd)
    slots, layers, max_seq, layer = 3, 2, 2048, 1
    size = slots * layers * kv * max_seq * hd
    kc = rng.standard_normal(size).astype(np.float32)
    vc = rng.standard_normal(size).astype(np.float32)
    qkv = rng.standard_normal((len(pos), (heads + 2 * kv) * hd)).astype(np.float32)
    args = (qkv, pos, slot, heads, kv, hd, 1.0 / np.sqrt(hd), kc, vc, slots, layers, max_seq, layer)
    out_g, k_g, v_g = gpu.attention(*args)
    out_c, k_c, v_c = cpu.attention(*args)
    np.testing.assert_array_equal(k_g, k_c)
    np.testing.assert_array_equal(v_g, v_c)
    assert rel_err(out_g, out_c.astype(np.float64)) < 1e-5
    # Each row alone gives the same result (bitwise) as inside the batch.
    for i in [0, len(pos) - 1]:
        one, _, _ = gpu.attention(
            qkv[i : i + 1],
            [pos[i]],
            [slot[i]],
            heads,
            kv,
            hd,
            1.0 / np.sqrt(hd),
            k_g,
            v_g,
            slots,
            layers,
            max_seq,
            layer,
        )
        np.testing.assert_array_equal(one[0], out_g[i])


# ---- token selection ---------------------------------------------------------------------------
@pytest.mark.parametrize("heads,kv,hd", [(12, 2, 128), (14, 2, 64)])
def test_attention_tree(cpu, gpu, heads, kv, hd) -> None:
    """The verify rows of draft trees: siblings share positions, write distinct cache indices,
    and see only their ancestors (tree masks), beside a causal row of another slot."""
    rng = np.random.default_rng(hd)
    slots, layers, max_seq, layer = 2, 2, 1024, 0
    size = slots * layers * kv * max_seq * hd
    kc = rng.standard_normal(size).astype(np.float32)
    vc = rng.standard_normal(size).astype(np.float32)
    pos = [700, 701, 701, 702, 703, 40]
    kv_idx = [700, 701, 702, 703, 704, 40]
    base = [700] * 5 + [40]
    bits = [0b1, 0b11, 0b101, 0b1101, 0b11101, 0b1]
    slot = [0] * 5 + [1]
    qkv = rng.standard_normal((len(pos), (heads + 2 * kv) * hd)).astype(np.float32)
    args = (qkv, pos, slot, heads, kv, hd, 1.0 / np.sqrt(hd), kc, vc, slots, layers, max_seq, layer)
    extra = dict(kv_idx=kv_idx, tree_base=base, tree_bits=bits)
    out_g, k_g, v_g = gpu.attention(*args, **extra)
    out_c, k_c, v_c = cpu.attention(*args, **extra)
    np.testing.assert_array_equal(k_g, k_c)
    np.testing.assert_array_equal(v_g, v_c)
    assert rel_err(out_g, out_c.astype(np.float64)) < 1e-5


@pytest.mark.parametrize("vocab", [1000, 151936])
def test_sample_matches_cpu(cpu, gpu, vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    trials = 24 if vocab > 100000 else 120
    logits = random_logits(rng, (trials, vocab))
    logits[0, [5, 9]] = logits[0].max() + 1.0  # tied maxima: the lower index wins
    logits[1, :] = 0.5  # all equal
    for rule in RULES:
        ps = [params(rule, seed=1000 + i, step=i) for i in range(trials)]
        g, gs = gpu.sample(logits, list(range(trials)), ps)
        c, cs = cpu.sample(logits, list(range(trials)), ps)
        assert g == c, rule
        assert gs == cs
    # One slot listed twice advances its step twice, drawing with step, then step + 1.
    ps = [params((1.0, 0, 1.0), seed=3, step=7)]
    assert gpu.sample(logits[:2], [0, 0], ps) == cpu.sample(logits[:2], [0, 0], ps)


def test_spec_draft_rows_and_verify_rows(cpu, gpu) -> None:
    rng = np.random.default_rng(1)
    seqs = _tree_seqs(rng, 4, 1000, n_nodes=6)
    fields(seqs)["max_nodes"][2] = 3
    for k, source in [(0, "none"), (4, "model"), (6, "lookup"), (8, "lookup")]:
        g = gpu.spec_verify_rows(seqs, [2, 0, 3], k, SOURCE[source])
        c = cpu.spec_verify_rows(seqs, [2, 0, 3], k, SOURCE[source])
        for a, b in zip(g[:6], c[:6], strict=True):
            assert list(a) == list(b)
        np.testing.assert_array_equal(g[6], c[6])


@pytest.mark.parametrize("vocab,vocab_common", [(1000, 1000), (1100, 1000), (151936, 151665)])
def test_spec_draft_sample(cpu, gpu, vocab: int, vocab_common: int) -> None:
    rng = np.random.default_rng(vocab)
    for trial in range(4):
        ps = [params(RULES[(trial * 3 + b) % len(RULES)], seed=trial * 10 + b) for b in range(3)]
        seqs = seq_states(3, n_gen=np.array([0, 5, 17]) + trial)
        logits = random_logits(rng, (3, vocab))
        for j in range(3):
            qg, sg = gpu.spec_draft_sample(logits, vocab_common, j, seqs, [0, 1, 2], ps)
            qc, sc = cpu.spec_draft_sample(logits, vocab_common, j, seqs, [0, 1, 2], ps)
            np.testing.assert_array_equal(sg, sc)
            np.testing.assert_allclose(qg, qc, rtol=1e-5, atol=1e-7)
            seqs = sc


@pytest.mark.parametrize("k", [0, 1, 4, 8])
@pytest.mark.parametrize("vocab,vocab_draft", [(1000, 1000), (1000, 1024), (151936, 151936)])
@pytest.mark.parametrize("source", ["model", "lookup"])
def test_spec_accept(cpu, gpu, k: int, vocab: int, vocab_draft: int, source: str) -> None:
    rng = np.random.default_rng(k * 7 + vocab)
    B, max_seq = 3, 64
    for trial in range(3 if vocab > 10000 else 8):
        ps = [params(RULES[(trial + 2 * b) % len(RULES)], seed=trial * 100 + b) for b in range(B)]
        target = random_logits(rng, (B * (k + 1), vocab), scale=2.0)
        q = np.zeros((k * B, vocab_draft), np.float32)
        if source == "lookup":
            seqs = _tree_seqs(rng, B, vocab, n_nodes=k)
            f = fields(seqs)
            for b in range(B):  # make acceptance likely: boost each node in its parent's row
                for i in range(k):
                    target[b * (k + 1) + f[b]["tree_parent"][i] + 1, f[b]["tree_token"][i]] += 3
        else:
            seqs = seq_states(
                B,
                n_past=20,
                last=11,
                prev=10,
                n_gen=np.array([3, 4, 5]) + trial,
                max_nodes=16,
                sources=1 << SOURCE["model"],
            )
            # Draft proposals from distributions near the target's (some accepted, some not).
            for j in range(k):
                base = np.zeros((B, vocab_draft), np.float32)
                base[:, :vocab] = target.reshape(B, k + 1, vocab)[:, j]
                dl = (base + random_logits(rng, (B, vocab_draft), scale=0.7)).astype(np.float32)
                qj, seqs = cpu.spec_draft_sample(
                    dl, min(vocab, vocab_draft), j, seqs, [0, 1, 2], ps
                )
                q[j * B : (j + 1) * B] = qj
        seqs = cpu.spec_verify_rows(seqs, [0, 1, 2], k, SOURCE[source if k else "none"])[6]
        hist = rng.integers(0, vocab, (B, max_seq)).astype(np.int32)
        g = gpu.spec_accept(target, q, k, seqs, [0, 1, 2], ps, hist)
        c = cpu.spec_accept(target, q, k, seqs, [0, 1, 2], ps, hist)
        np.testing.assert_array_equal(g[0], c[0])
        np.testing.assert_array_equal(g[1], c[1])
        for a, b in zip(g[2], c[2], strict=True):
            assert list(a) == list(b)


@pytest.mark.parametrize("seed", range(4))
def test_spec_lookup(cpu, gpu, seed: int) -> None:
    rng = np.random.default_rng(seed)
    B, max_seq = 4, 4096
    hist = rng.integers(0, 8 if seed % 2 else 200, (B, max_seq)).astype(np.int32)
    pred = rng.integers(0, 8, (B, max_seq)).astype(np.int32)
    seqs = seq_states(
        B,
        n_past=np.array([40, 1000, 3000, 4094]),
        max_nodes=16,
        pred_len=np.array([0, 100, 4000, 10]),
        sources=1 << SOURCE["lookup"],
    )
    g = gpu.spec_lookup(seqs, [3, 1, 0, 2], hist, pred)
    c = cpu.spec_lookup(seqs, [3, 1, 0, 2], hist, pred)
    np.testing.assert_array_equal(g, c)
