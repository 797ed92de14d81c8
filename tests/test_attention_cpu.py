"""The tiled CPU attention kernel (cpp/kernels/cpu/attention.h) through T.cpu_attention.

- Against a float64 numpy reference: GQA ratios 1 / 2 / 6, head_dim 64 and 128, lengths 1..700
  (several 32-entry tiles, partial tiles), a prefill-like run of rows of one slice plus rows of
  other slices in the same call, with and without tree masks (random ancestor sets).
- Bit identity (greedy speculation depends on it): a row computed alone, inside a 64-row call,
  and under other splits / orders of the kernel's tasks gives the same bits.
- Each instruction set's build this CPU runs (``isa``: AVX2, and AVX-512 where present), and the
  two builds against each other: the 512-bit tiles run the same per-lane chains (same bits).
"""

from __future__ import annotations

import numpy as np
import pytest
from native import T

MAX_SEQ = 704  # not a multiple of the 32-entry tile: the last tile is clipped
ISAS = T.cpu_isas()


def entry_sets(lens, tree_base=None, tree_bits=None):
    """Per row, the attended entries (int array)."""
    out = []
    for i, n in enumerate(lens):
        t = np.arange(n)
        if tree_bits is None:
            out.append(t)
            continue
        b = t - int(tree_base[i])
        bits = int(tree_bits[i])
        keep = [bb < 0 or (bb < 64 and (bits >> int(bb)) & 1) for bb in b]
        out.append(t[np.array(keep, bool)])
    return out


def reference(q, k, v, slot, lens, scale, tree_base=None, tree_bits=None, cast=None):
    """float64 softmax(scale q.k) v over each row's entry set; cast(x) -> the float64 values
    of q, k and v taken (default: x exactly)."""
    cast = cast or (lambda x: x.astype(np.float64))
    n, nh, hd = q.shape
    group = nh // k.shape[1]
    out = np.zeros((n, nh, hd))
    for i, ent in enumerate(entry_sets(lens, tree_base, tree_bits)):
        for h in range(nh):
            kk = cast(k[slot[i], h // group][ent])
            vv = cast(v[slot[i], h // group][ent])
            s = kk @ cast(q[i, h]) * scale
            p = np.exp(s - s.max())
            out[i, h] = p @ vv / p.sum()
    return out


def make_case(seed, group, hd, length, n_kv=2, tree=False, slots=3):
    """A prefill-like run of rows of slot 0 ending at `length`, plus single rows of slots 1, 2."""
    rng = np.random.default_rng(seed)
    nh = n_kv * group
    k = rng.standard_normal((slots, n_kv, MAX_SEQ, hd)).astype(np.float32)
    v = rng.standard_normal((slots, n_kv, MAX_SEQ, hd)).astype(np.float32)
    run = min(length, 20)
    lens = [length - run + 1 + j for j in range(run)] + [int(rng.integers(1, MAX_SEQ)), 1]
    slot = [0] * run + [1, 2]
    n = len(lens)
    q = (2 * rng.standard_normal((n, nh, hd))).astype(np.float32)  # peaky softmax too
    tb = tbits = None
    if tree:
        # The last up to 40 entries of each row form a tree region: a random ancestor set that
        # always holds the row's own entry.
        tb = np.array([max(0, n_i - 40) for n_i in lens], np.int32)
        bits = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)
        own = np.array(
            [np.uint64(1) << np.uint64(n_i - 1 - b) for n_i, b in zip(lens, tb, strict=True)]
        )
        tbits = (bits | own).astype(np.uint64)
    return (
        q,
        k,
        v,
        np.array(slot, np.int32),
        np.array(lens, np.int32),
        np.float32(1 / np.sqrt(hd)),
        tb,
        tbits,
    )


def rows_call(q, k, v, slot, lens, scale, tb, tbits, sel: slice, **kw) -> np.ndarray:
    """The kernel on rows `sel` of a case only (their masks too)."""
    return T.cpu_attention(
        q[sel],
        k,
        v,
        slot[sel],
        lens[sel],
        scale,
        None if tb is None else tb[sel],
        None if tbits is None else tbits[sel],
        **kw,
    )


def assert_prompt_row_bits_do_not_depend_on_the_call(case, flag: str, **kw) -> None:
    """For prompt rows (flag: "bf16_from" or "int16_from"): each row alone, inside the whole call,
    with the flag anywhere before it, and under another task split: the same bits. Rows before
    the flag: the f32 bits."""
    q, k, v, slot, lens, scale, tb, tbits = case
    n = q.shape[0]
    args = (q, k, v, slot, lens, scale, tb, tbits)
    all_low = T.cpu_attention(*args, **{flag: 0}, **kw)
    f32 = T.cpu_attention(*args, **kw)
    split = n // 2 + 1
    mixed = T.cpu_attention(*args, **{flag: split}, **kw)
    chunked = T.cpu_attention(*args, task_chunk=3, **{flag: 0}, **kw)
    bits = all_low.view(np.uint32)
    assert np.array_equal(mixed[:split].view(np.uint32), f32[:split].view(np.uint32))
    assert np.array_equal(mixed[split:].view(np.uint32), bits[split:])
    assert np.array_equal(chunked.view(np.uint32), bits)
    for i in (0, 7, n - 2, n - 1):
        sel = slice(i, i + 1)
        one = rows_call(q, k, v, slot, lens, scale, tb, tbits, sel, **{flag: 0}, **kw)
        assert np.array_equal(one.view(np.uint32), bits[sel]), f"row {i}"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("length", [1, 5, 31, 33, 100, 700])
@pytest.mark.parametrize("hd", [64, 128])
@pytest.mark.parametrize("group", [1, 2, 6])
def test_attention_matches_float64(group, hd, length, tree, isa):
    q, k, v, slot, lens, scale, tb, tbits = make_case(
        group * 1000 + hd + length, group, hd, length, tree=tree
    )
    got = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, isa=isa)
    ref = reference(q, k, v, slot, lens, scale, tb, tbits)
    assert got.shape == q.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("hd", [72, 80, 96, 136])
def test_attention_odd_head_dim_and_wide_group(hd, isa):
    """head_dims that are not a multiple of 64 (AVX-512's 64-column output tile) or of 16 (the
    256-bit 16-column one): the last chunks take the narrower tiles; 8 query heads per kv head."""
    q, k, v, slot, lens, scale, tb, tbits = make_case(7, 8, hd, 90, n_kv=1)
    got = T.cpu_attention(q, k, v, slot, lens, scale, isa=isa)
    np.testing.assert_allclose(got, reference(q, k, v, slot, lens, scale), rtol=1e-4, atol=2e-5)


@pytest.mark.skipif(len(ISAS) < 2, reason="needs a CPU with AVX-512 (F, BW, VL, VNNI)")
@pytest.mark.parametrize("kv", ["f32", "bf16"])
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("group,hd", [(1, 64), (6, 128), (8, 80)])
def test_attention_builds_give_the_same_bits(group, hd, tree, kv):
    """The AVX-512 build (6-query score tiles, 64-column output tiles) and the AVX2 one agree
    bit for bit, rows of every tile count and a tree mask included."""
    q, k, v, slot, lens, scale, tb, tbits = make_case(group + hd, group, hd, 700, tree=tree)
    if kv != "f32":
        k, v = to_bits(k, kv), to_bits(v, kv)
    out = [T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, kv_type=kv, isa=i) for i in ISAS]
    assert np.array_equal(out[0].view(np.uint32), out[1].view(np.uint32))


def test_attention_rejects_an_unknown_isa():
    q, k, v, slot, lens, scale, _, _ = make_case(1, 1, 64, 5)
    with pytest.raises(Exception, match="ISA"):
        T.cpu_attention(q, k, v, slot, lens, scale, isa="sse2")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("group", [1, 6])
def test_attention_rows_bit_identical(group, tree, isa):
    """A row's bits do not depend on the other rows of the call or on how tasks are split."""
    hd, n_kv = 128, 2
    rng = np.random.default_rng(group)
    q, k, v, _, _, scale, _, _ = make_case(group, group, hd, 8, n_kv=n_kv, slots=2)
    n = 64
    lens = np.concatenate([np.arange(637, 637 + 60), [5, 33, 700, 1]]).astype(np.int32)
    slot = np.array([0] * 60 + [1] * 4, np.int32)
    q = (2 * rng.standard_normal((n, n_kv * group, hd))).astype(np.float32)
    tb = tbits = None
    if tree:
        tb = np.maximum(lens - 50, 0).astype(np.int32)
        own = np.array(
            [np.uint64(1) << np.uint64(n_i - 1 - b) for n_i, b in zip(lens, tb, strict=True)]
        )
        tbits = (rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) | own).astype(
            np.uint64
        )
    full = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, isa=isa)
    for chunk in (1, 3):
        split = T.cpu_attention(q, k, v, slot, lens, scale, tb, tbits, task_chunk=chunk, isa=isa)
        assert np.array_equal(split.view(np.uint32), full.view(np.uint32)), chunk
    for i in [0, 1, 7, 30, 59, 60, 61, 62, 63]:
        sl = slice(i, i + 1)
        alone = rows_call(q, k, v, slot, lens, scale, tb, tbits, sl, isa=isa)
        assert np.array_equal(alone.view(np.uint32), full[sl].view(np.uint32)), i
    # Verify-like: the last 5 rows of the run as their own call.
    part = slice(55, 60)
    sub = rows_call(q, k, v, slot, lens, scale, tb, tbits, part, isa=isa)
    assert np.array_equal(sub.view(np.uint32), full[part].view(np.uint32))
    np.testing.assert_allclose(
        full, reference(q, k, v, slot, lens, scale, tb, tbits), rtol=1e-4, atol=2e-5
    )


def prompt_case(seed: int, group: int, hd: int = 128, n_kv: int = 2):
    """A 300-row prompt chunk of slot 0 (lens 401..700) plus two rows of slots 1 and 2."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((3, n_kv, MAX_SEQ, hd)).astype(np.float32)
    v = rng.standard_normal((3, n_kv, MAX_SEQ, hd)).astype(np.float32)
    lens = np.array(list(range(401, 701)) + [57, 1], np.int32)
    slot = np.array([0] * 300 + [1, 2], np.int32)
    q = (2 * rng.standard_normal((len(lens), n_kv * group, hd))).astype(np.float32)
    return q, k, v, slot, lens, np.float32(1 / np.sqrt(hd))


def block_tasks(q: np.ndarray, lens: np.ndarray, bf16_from: int = -1) -> dict[int, int]:
    """Tasks of a call on q for several AttentionArgs::workers."""
    _, nh, hd = q.shape
    return {w: T.cpu_attention_tasks(lens, nh, 2, hd, bf16_from, w) for w in (0, 1, 2, 4, 64)}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("group", [1, 6])
def test_attention_blocks_follow_the_workers_not_the_bits(group, isa):
    """AttentionArgs::workers grows the row blocks of a prompt chunk (fewer tasks, so each K / V
    tile is read by fewer of them) while every worker keeps two tasks: no row's bits change."""
    q, k, v, slot, lens, scale = prompt_case(group, group)
    tasks = block_tasks(q, lens)
    assert tasks[1] < tasks[0] and tasks[1] <= tasks[4] <= tasks[0] == tasks[64], tasks
    # A first chunk (rows reading fewer entries on average than there are rows) keeps them.
    first = np.arange(1, len(lens) + 1, dtype=np.int32)
    assert len(set(block_tasks(q, first).values())) == 1
    assert all(t >= 2 * w for w, t in tasks.items() if 0 < w and t < tasks[0]), tasks
    base = T.cpu_attention(q, k, v, slot, lens, scale, isa=isa).view(np.uint32)
    for w in tasks:
        got = T.cpu_attention(q, k, v, slot, lens, scale, isa=isa, workers=w)
        assert np.array_equal(got.view(np.uint32), base), w
    split = T.cpu_attention(q, k, v, slot, lens, scale, task_chunk=1, isa=isa, workers=1)
    assert np.array_equal(split.view(np.uint32), base)
    one = rows_call(q, k, v, slot, lens, scale, None, None, slice(299, 300), isa=isa, workers=1)
    assert np.array_equal(one.view(np.uint32), base[299:300])


def assert_prompt_blocks_keep_the_bits(flag: str, **kw) -> None:
    """For a call with prompt rows from row 2 (flag: "bf16_from" or "int16_from"): larger blocks
    for fewer workers (attention_impl.h: 192 to 768 queries), and a prompt row's bits stay those
    of any other blocking, and the f32 rows' too."""
    q, k, v, slot, lens, scale = prompt_case(5, 6)
    tasks = block_tasks(q, lens, bf16_from=2)  # (the prompt rows' blocks: bf16 or int16 alike)
    assert tasks[1] < tasks[0] and tasks[1] <= tasks[4] <= tasks[0] == tasks[64], tasks
    base = T.cpu_attention(q, k, v, slot, lens, scale, **{flag: 2}, **kw).view(np.uint32)
    for w in tasks:
        got = T.cpu_attention(q, k, v, slot, lens, scale, **{flag: 2}, workers=w, **kw)
        assert np.array_equal(got.view(np.uint32), base), w
    f32 = T.cpu_attention(q, k, v, slot, lens, scale, workers=1, **kw)
    assert np.array_equal(f32[:2].view(np.uint32), base[:2])


def test_attention_rejects_negative_workers():
    q, k, v, slot, lens, scale, _, _ = make_case(1, 1, 64, 5)
    with pytest.raises(Exception, match="workers"):
        T.cpu_attention(q, k, v, slot, lens, scale, workers=-1)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n_past", [20, 29, 60, 64])
def test_tree_row_bits_equal_the_decode_row_after_the_moves(n_past, isa):
    """A tree node's row gives the bits of the decode row that reads its accepted path moved to
    positions n_past + depth (what greedy exactness needs): the branch layout of the tree, and
    tiles it crosses, do not change the sums. Trees of 9 and 17 nodes, whole and in pieces."""
    hd, n_kv, group = 64, 2, 3
    rng = np.random.default_rng(n_past)
    k = rng.standard_normal((1, n_kv, MAX_SEQ, hd)).astype(np.float32)
    v = rng.standard_normal((1, n_kv, MAX_SEQ, hd)).astype(np.float32)
    scale = np.float32(1 / np.sqrt(hd))
    for n_nodes in (9, 17):
        # Node 0 is the root (the last accepted token at n_past); parents precede children.
        parent = [-1] + [int(rng.integers(0, i)) for i in range(1, n_nodes)]
        anc = []
        for i in range(n_nodes):
            path, j = [], i
            while j >= 0:
                path.append(j)
                j = parent[j]
            anc.append(path[::-1])  # root .. node, depth order
        q = (2 * rng.standard_normal((n_nodes, n_kv * group, hd))).astype(np.float32)
        tb = np.full(n_nodes, n_past, np.int32)
        tbits = np.array([sum(1 << j for j in a) for a in anc], np.uint64)
        lens = np.full(n_nodes, n_past + n_nodes, np.int32)
        tree = T.cpu_attention(
            q, k, v, np.zeros(n_nodes, np.int32), lens, scale, tb, tbits, isa=isa
        )
        for i in range(n_nodes):
            moved_k, moved_v = k.copy(), v.copy()
            for d, j in enumerate(anc[i]):
                moved_k[:, :, n_past + d] = k[:, :, n_past + j]
                moved_v[:, :, n_past + d] = v[:, :, n_past + j]
            n_i = np.array([n_past + len(anc[i])], np.int32)
            one = np.zeros(1, np.int32)
            dec = T.cpu_attention(q[i : i + 1], moved_k, moved_v, one, n_i, scale, isa=isa)
            got = tree[i : i + 1]
            assert np.array_equal(dec.view(np.uint32), got.view(np.uint32)), (n_nodes, i)
        np.testing.assert_allclose(
            tree,
            reference(q, k, v, np.zeros(n_nodes, np.int32), lens, scale, tb, tbits),
            rtol=1e-4,
            atol=2e-5,
        )


def test_attention_rejects_bad_shapes():
    q = np.zeros((1, 2, 12), np.float32)  # head_dim 12: not a multiple of 8
    kv = np.zeros((1, 1, 4, 12), np.float32)
    with pytest.raises(Exception):  # noqa: B017 - the bindings map it to their own error type
        T.cpu_attention(q, kv, kv, np.zeros(1, np.int32), np.ones(1, np.int32), 1.0)


# ---- f16 / bf16 caches ---------------------------------------------------------------------------
def to_bits(x: np.ndarray, kv: str) -> np.ndarray:
    """float32 -> f16 / bf16 bits, rounded to nearest even (as kernels/kv_format.h)."""
    if kv == "f16":
        return x.astype(np.float16).view(np.uint16)
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(b: np.ndarray, kv: str) -> np.ndarray:
    if kv == "f16":
        return b.view(np.float16).astype(np.float32)
    return (b.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("tree", [False, True], ids=["causal", "tree"])
@pytest.mark.parametrize("kv", ["f16", "bf16"])
@pytest.mark.parametrize("group,hd,length", [(1, 64, 33), (2, 128, 700), (6, 64, 100)])
def test_attention_typed_cache_matches_float64(group, hd, length, kv, tree):
    """An f16 / bf16 cache: the reference on the rounded values; the f32 kernel on those values
    (as f32) gives the same bits (tiles are converted exactly on load)."""
    q, k, v, slot, lens, scale, tb, tbits = make_case(
        group * 100 + hd + length, group, hd, length, tree=tree
    )
    kb, vb = to_bits(k, kv), to_bits(v, kv)
    got = T.cpu_attention(q, kb, vb, slot, lens, scale, tb, tbits, kv_type=kv)
    kr, vr = from_bits(kb, kv), from_bits(vb, kv)
    ref = reference(q, kr, vr, slot, lens, scale, tb, tbits)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)
    same = T.cpu_attention(q, kr, vr, slot, lens, scale, tb, tbits)
    np.testing.assert_array_equal(got, same)
    assert np.abs(got - reference(q, k, v, slot, lens, scale, tb, tbits)).max() > 0  # rounded


def test_attention_typed_cache_rejects_wrong_arrays():
    q = np.zeros((1, 1, 16), np.float32)
    kv16 = np.zeros((1, 1, 4, 16), np.uint16)
    one, ln = np.zeros(1, np.int32), np.ones(1, np.int32)
    with pytest.raises(ValueError):  # uint16 bits need kv_type f16 / bf16
        T.cpu_attention(q, kv16, kv16, one, ln, 1.0)
    with pytest.raises(ValueError):
        T.cpu_attention(q, kv16, kv16, one, ln, 1.0, kv_type="f8")


@pytest.mark.parametrize("kv", ["f32", "f16", "bf16"])
def test_backend_kv_write_and_copy_per_type(kv):
    """OpRunner (the CPU backend): kv_write rounds to the type's bits, attention reads them back,
    kv_copy moves element bytes."""
    rng = np.random.default_rng(5)
    slots, layers, nkv, max_seq, hd, nh = 2, 2, 2, 64, 16, 4
    size = slots * layers * nkv * max_seq * hd
    base = rng.standard_normal(size).astype(np.float32)
    cache = base if kv == "f32" else to_bits(base, kv)
    qkv = rng.standard_normal((2, (nh + 2 * nkv) * hd)).astype(np.float32)
    be = T.OpRunner("cpu")
    out, k, v = be.attention(
        qkv,
        [5, 9],
        [0, 1],
        nh,
        nkv,
        hd,
        0.25,
        cache,
        cache.copy(),
        slots,
        layers,
        max_seq,
        1,
        kv_type=kv,
    )
    assert k.dtype == cache.dtype
    kk = k.reshape(slots, layers, nkv, max_seq, hd)
    want = qkv[0, nh * hd : (nh + nkv) * hd].reshape(nkv, hd)
    want = want if kv == "f32" else to_bits(np.ascontiguousarray(want), kv)
    np.testing.assert_array_equal(kk[0, 1, :, 5], want)
    kc, vc = be.kv_copy(k, v, slots, layers, nkv, max_seq, hd, [0], [5], [7], kv_type=kv)
    kc = kc.reshape(slots, layers, nkv, max_seq, hd)
    np.testing.assert_array_equal(kc[0, :, :, 7], kk[0, :, :, 5])
    assert np.isfinite(out).all()
