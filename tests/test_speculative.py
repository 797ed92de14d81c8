"""Speculative decoding on tiny target/draft pairs (tests/spec_pairs.py), every draft source:
greedy exactness, the output distribution, KV rollback (tree moves included), stops inside
accepted blocks, limits and statistics."""

from __future__ import annotations

import numpy as np
import pytest
import spec_pairs
from cuda_helpers import fields
from native import T
from test_spec_acceptance import ALPHA, chi2_matches, rule_probs
from trt_spec import Engine

PROMPTS = [[1, 2, 3, 4], [5, 9, 2], [7] * 10, [100, 200, 300, 17, 42, 8], [3]]
# A prediction whose repeats make prompt lookup propose trees (several continuations of one
# n-gram) for prompts that share its n-grams.
PREDICTION = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 7, 8, 9, 2, 3, 4, 10, 11, 12, 1, 2, 3, 4, 5, 13]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("spec")


def pair(root, kind: str, **kw) -> Engine:
    return Engine(spec_pairs.make_pair(root, kind, **kw))


def run(session, ids: list[int]) -> dict[int, tuple[list[int], str, object]]:
    """Steps a test Session until the requests `ids` finish: id -> (tokens, reason, stats)."""
    out: dict[int, list] = {i: [[], "", None] for i in ids}
    while session.has_work:
        for ev in session.step():
            if ev.id in out:
                out[ev.id][0].extend(ev.tokens)
                if ev.finished:
                    out[ev.id][1], out[ev.id][2] = ev.reason, ev.stats
    return {i: (v[0], v[1], v[2]) for i, v in out.items()}


# ---- greedy exactness ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["same", "noisy", "negated", "padded", "pard", "medusa", "eagle3"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("draft", ["model", "lookup", "auto"])
def test_greedy_speculation_equals_target_only(root, kind: str, batch: int, draft: str) -> None:
    e = pair(root, kind, draft_len=4, max_batch=4)
    prompts = PROMPTS[:batch] if batch > 1 else PROMPTS[:1]
    base = e.generate(prompts, max_new_tokens=40, speculate=False, ignore_eos=True)
    for k in [1, 2, 3, 4, "auto"]:
        got = e.generate(
            prompts,
            max_new_tokens=40,
            draft=draft,
            draft_len=k,
            ignore_eos=True,
            prediction=PREDICTION,
        )
        for b, g in zip(base, got, strict=True):
            assert g.token_ids == b.token_ids, (kind, draft, k)
            assert g.stats.new_tokens == 40
    if draft != "model":
        return
    same = e.generate(prompts[0], max_new_tokens=40, draft="model", draft_len=4, ignore_eos=True)
    if kind == "same":
        assert same.stats.acceptance_rate == 1.0 and same.stats.tokens_per_iteration > 4.0
    if kind == "negated":
        assert same.stats.accepted == 0 and same.stats.drafted > 0  # a draft that always misses


def test_lookup_trees_are_exact_and_accepted(root) -> None:
    """A text that repeats with variations: lookup proposes trees (several continuations), and
    greedy output stays the target-only output token for token."""
    e = pair(root, "random", draft_len=8, max_batch=2)
    base = e.generate(PROMPTS[0], max_new_tokens=60, speculate=False, ignore_eos=True)
    # The answer itself as the prediction: lookup should be accepted nearly always. (A fixed
    # length: with draft_len="auto" how many nodes are verified depends on measured costs.)
    r = e.generate(
        PROMPTS[0],
        max_new_tokens=60,
        draft="lookup",
        draft_len=8,
        ignore_eos=True,
        prediction=base.token_ids,
    )
    assert r.token_ids == base.token_ids
    assert r.stats.by_source["lookup"]["iterations"] > 0
    # Most of the answer comes from lookup. (Acceptance counts every drafted node, siblings
    # included: a loose bound.)
    assert r.stats.tokens_per_iteration > 3.0 and r.stats.acceptance_rate > 0.5
    assert r.stats.prediction_accepted == r.stats.accepted > 0


def test_batch_larger_than_max_batch_is_queued(root) -> None:
    e = pair(root, "noisy", draft_len=4, max_batch=2)
    prompts = PROMPTS * 2  # 10 prompts through 2 slots
    got = e.generate(prompts, max_new_tokens=12, draft_len=3, ignore_eos=True)
    for p, g in zip(prompts, got, strict=True):
        assert (
            g.token_ids
            == e.generate(p, max_new_tokens=12, speculate=False, ignore_eos=True).token_ids
        )
        assert g.prompt_token_ids == p


# ---- the output distribution -----------------------------------------------------------------
def _first_tokens(
    path, n: int, draft: str, k: int, temperature: float, top_p: float, prediction: list[int]
) -> np.ndarray:
    """Tokens 1-3 of n sampled completions of [1, 2, 3] (seeds 0..n-1), 4 slots at a time."""
    s = T.Session(str(path), "cpu", 2)
    out = np.zeros((n, 3), np.int64)
    for start in range(0, n, 512):
        ids = {
            s.submit(
                [1, 2, 3],
                3,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                prediction=prediction,
                draft=draft,
                draft_len=k,
            ): seed
            for seed in range(start, min(n, start + 512))
        }
        for rid, (toks, _, _) in run(s, list(ids)).items():
            out[ids[rid]] = toks
    return out


def _exact_joint(e: Engine, temperature: float, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact P(t1, t2) and P(t2, t3) of the target under the sampling rule."""
    V = e.vocab_size
    p1 = rule_probs(e.logits([1, 2, 3])[-1], temperature, top_p=top_p)
    j12 = np.zeros((V, V))
    j23 = np.zeros((V, V))
    for t1 in range(V):
        if p1[t1] == 0:
            continue
        p2 = rule_probs(e.logits([1, 2, 3, t1])[-1], temperature, top_p=top_p)
        j12[t1] = p1[t1] * p2
        for t2 in range(V):
            if p2[t2] > 0:
                p3 = rule_probs(e.logits([1, 2, 3, t1, t2])[-1], temperature, top_p=top_p)
                j23[t2] += p1[t1] * p2[t2] * p3
    return j12, j23


def assert_sampled_follows_target(
    path, n: int, draft: str, k: int, temperature: float, top_p: float, prediction: list[int]
) -> None:
    """n sampled completions of [1, 2, 3] (_first_tokens): the joint distributions of tokens
    (1, 2) and (2, 3) match the target's exact ones (chi-square)."""
    e = Engine(path)
    j12, j23 = _exact_joint(e, temperature, top_p)
    V = e.vocab_size
    toks = _first_tokens(path, n, draft, k, temperature, top_p, prediction)
    c12 = np.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V)
    c23 = np.bincount(toks[:, 1] * V + toks[:, 2], minlength=V * V)
    # Merge sparse cells (expected < 5) into one so the chi-square approximation holds.
    for counts, probs in ((c12, j12.ravel()), (c23, j23.ravel())):
        small = probs * n < 5
        c = np.append(counts[~small], counts[small].sum())
        p = np.append(probs[~small], probs[small].sum())
        assert chi2_matches(c, p) > ALPHA, (draft, k, temperature)


# Predictions (16-token vocabulary) that make lookup propose, after the prompt [1, 2, 3]: a chain
# (one continuation of "1 2 3"), or trees branching at the first and at the second token.
LOOKUP_CHAIN = [1, 2, 3, 4, 5, 6, 7]
LOOKUP_TREE = [1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8, 9, 1, 2, 3, 4, 9, 10]


# 100k sampled completions per case: minutes each on 2 cores. The cases: the sampler alone, and
# each draft source (model chains, lookup chains, lookup trees) once, two of them under the
# temperature + top-p rule (the acceptance rule itself: test_spec_acceptance.py, every rule).
@pytest.mark.slow
@pytest.mark.parametrize(
    "temperature, top_p, draft, k, prediction",
    [
        (1.0, 1.0, "none", 0, []),
        (0.7, 0.9, "model", 2, []),
        (1.0, 1.0, "lookup", 2, LOOKUP_CHAIN),
        (0.7, 0.9, "lookup", 4, LOOKUP_TREE),
    ],
)
def test_sampled_distribution_is_the_targets(
    root, temperature: float, top_p: float, draft: str, k: int, prediction: list[int]
) -> None:
    """100k completions: the joint distributions of tokens (1, 2) and (2, 3) match the target's
    exact ones (chi-square), without speculation, with the draft model's chains, and with
    prompt lookup's one-hot chains and trees."""
    path = spec_pairs.make_pair(root, "random", draft_len=4, max_batch=4, small_vocab=True)
    assert_sampled_follows_target(path, 100_000, draft, k, temperature, top_p, prediction)


def test_sampling_same_seed_same_output(root) -> None:
    e = pair(root, "noisy", draft_len=4, max_batch=4)
    for draft in ("model", "lookup"):
        kw = dict(
            max_new_tokens=30, temperature=0.8, draft=draft, draft_len=3, prediction=PREDICTION
        )
        a = e.generate(PROMPTS[0], seed=5, **kw)
        b = e.generate(PROMPTS[0], seed=5, **kw)
        c = e.generate(PROMPTS[0], seed=6, **kw)
        assert a.token_ids == b.token_ids != c.token_ids
        # A request's draws do not depend on its slot or its batch companions.
        batch = e.generate([PROMPTS[1], PROMPTS[0]], seed=5, **kw)
        assert batch[1].token_ids == a.token_ids


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.8, 0, 1.0), (1.0, 20, 0.9)])
def test_sampled_lookup_output_is_target_onlys_for_the_seed(
    root, temperature: float, top_k: int, top_p: float
) -> None:
    """A lookup token is kept iff it is the target's own draw (accept.h), so sampled output with
    prompt lookup is token for token what target-only decoding draws for the seed, alone or in a
    batch, whatever the prediction: the answer itself (nearly every proposal kept) or text that
    shares only some n-grams with it (rejections)."""
    e = pair(root, "random", draft_len=8, max_batch=4)
    kw = dict(max_new_tokens=48, temperature=temperature, top_k=top_k, top_p=top_p, ignore_eos=True)
    kept = rejected = 0
    for seed in range(3):
        plain = e.generate(PROMPTS[0], seed=seed, draft="none", **kw)
        for prediction in (plain.token_ids, PREDICTION):
            look = e.generate(
                [PROMPTS[0], PROMPTS[1]],
                seed=seed,
                draft="lookup",
                draft_len=8,
                prediction=prediction,
                **kw,
            )[0]
            assert look.token_ids == plain.token_ids, (seed, prediction is PREDICTION)
            kept += look.stats.accepted
            rejected += look.stats.drafted - look.stats.accepted
    assert kept > 100 and rejected > 0  # the rule was exercised both ways


# ---- KV rollback -----------------------------------------------------------------------------
@pytest.mark.parametrize("draft", ["model", "lookup"])
def test_kv_caches_equal_fresh_prefill_after_rollbacks(root, draft: str) -> None:
    """After many iterations with varied accepted lengths, the caches hold exactly what a fresh
    prefill of the accepted sequence writes. The draft model samples (random lengths); lookup
    decodes greedily from a prediction that holds a corrupted copy of the answer before the
    answer itself, so its trees branch and the right branch is often not the first node: the
    accepted nodes' cache entries must move to their positions."""
    path = spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=2)
    s = T.Session(str(path), "cpu", 2)
    if draft == "model":
        rid = s.submit(PROMPTS[0], 80, temperature=1.0, seed=3, draft="model", draft_len=4)
    else:
        base = (
            Engine(path)
            .generate(PROMPTS[0], max_new_tokens=60, speculate=False, ignore_eos=True)
            .token_ids
        )
        corrupt = [(t + 7) % 384 if i % 5 == 4 else t for i, t in enumerate(base)]
        rid = s.submit(
            PROMPTS[0], 60, seed=3, prediction=corrupt + base, draft="lookup", draft_len=4
        )
    slot, stats, moved = -1, None, False
    while s.has_work:
        for ev in s.step():
            if ev.finished:
                stats = ev.stats
        slot = max(slot, s.slot_of(rid))
        if s.slot_of(rid) >= 0:
            st = fields(s.seq_state(rid))[0]
            moved = moved or any(st["path"][d] != d for d in range(st["n_acc"]))
    hist = stats.accepted_hist
    assert sum(1 for h in hist if h > 0) >= (3 if draft == "model" else 2)  # lengths varied
    assert moved or draft == "model"  # accepted tree nodes off the first branch did move
    st = fields(s.slot_state(slot))[0]
    n_past = int(st["n_past"])
    toks = s.history(slot, n_past)
    assert toks[: len(PROMPTS[0])] == PROMPTS[0]
    fresh = T.Session(str(path), "cpu", 2)
    # Two tokens: the draft reads the prompt's last chunk after the first token, at the step of
    # the first iteration (an iteration writes no position compared below).
    fid = fresh.submit(toks, 2, draft="model", draft_len=1)
    run(fresh, [fid])
    roles = [("target", n_past)] + ([("draft", n_past - 1)] if draft == "model" else [])
    for role, n in roles:
        k1, v1 = s.kv_cache(role, slot, n)
        k2, v2 = fresh.kv_cache(role, 0, n)  # (the only request of a fresh session: slot 0)
        np.testing.assert_allclose(k1, k2, rtol=1e-5, atol=1e-6, err_msg=role)
        np.testing.assert_allclose(v1, v2, rtol=1e-5, atol=1e-6, err_msg=role)


# ---- stops and limits ------------------------------------------------------------------------
@pytest.mark.parametrize("draft", ["model", "lookup"])
def test_stop_token_inside_accepted_block(root, draft: str) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=30, speculate=False, ignore_eos=True).token_ids
    stop = base[6]
    cut = base.index(stop)
    r = e.generate(
        PROMPTS[0],
        max_new_tokens=30,
        draft=draft,
        draft_len=4,
        stop=stop,
        ignore_eos=True,
        prediction=base,
    )
    assert r.token_ids == base[: cut + 1] and r.finish_reason == "stop_token"
    assert r.stats.tokens_per_iteration > 1.0  # the stop did fall inside an accepted block


def test_stop_string_inside_accepted_block(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=30, speculate=False, ignore_eos=True)
    # Two tokens of well-formed text (stop strings match the output's UTF-8 bytes; a random
    # model's invalid bytes decode to U+FFFD, which no byte sequence matches).
    i = next(
        i
        for i in range(4, 28)
        if "\ufffd" not in e.decode(base.token_ids[i : i + 2]).strip("")
        and e.decode(base.token_ids[i : i + 2])
    )
    stop = e.decode(base.token_ids[i : i + 2])
    assert stop and stop in base.text
    r = e.generate(PROMPTS[0], max_new_tokens=30, draft_len=4, stop=stop, ignore_eos=True)
    assert r.finish_reason == "stop_string" and stop not in r.text
    assert r.text == base.text[: base.text.index(stop)]
    assert len(r.token_ids) <= i + 2 and r.token_ids == base.token_ids[: len(r.token_ids)]


@pytest.mark.parametrize("n", [1, 2, 5, 7, 11])
def test_max_new_tokens_mid_block(root, n: int) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=n, speculate=False, ignore_eos=True)
    for draft in ("model", "lookup"):
        r = e.generate(
            PROMPTS[0],
            max_new_tokens=n,
            draft=draft,
            draft_len=4,
            ignore_eos=True,
            prediction=base.token_ids,
        )
        assert r.token_ids == base.token_ids and len(r.token_ids) == n
        assert r.finish_reason == "max_new_tokens"


def test_prompt_near_max_seq_len(root) -> None:
    """The draft and the verify pass never write past max_seq_len: k shrinks near the end."""
    e = pair(root, "same", draft_len=8, max_batch=1, max_seq_len=40)
    prompt = list(range(10, 47))[:36]
    base = e.generate(prompt, max_new_tokens=50, speculate=False, ignore_eos=True)
    assert base.finish_reason == "max_seq_len" and len(base.token_ids) == 40 - 36 + 1
    for draft in ("model", "lookup", "auto"):
        for k in (1, 4, 8, "auto"):
            r = e.generate(
                prompt,
                max_new_tokens=50,
                draft=draft,
                draft_len=k,
                ignore_eos=True,
                prediction=prompt + base.token_ids,
            )
            assert r.token_ids == base.token_ids and r.finish_reason == "max_seq_len"
    full = e.generate(list(range(40)), max_new_tokens=5, draft_len=8, ignore_eos=True)
    assert len(full.token_ids) == 1 and full.finish_reason == "max_seq_len"


def test_k1_and_target_only_mode(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    r = e.generate(PROMPTS[0], max_new_tokens=21, draft="model", draft_len=1, ignore_eos=True)
    assert r.stats.accepted_hist == (0, 10, 0, 0, 0) and r.stats.iterations == 10
    assert r.stats.sources == "m" * 10
    t = e.generate(PROMPTS[0], max_new_tokens=21, speculate=False, ignore_eos=True).stats
    assert t.spec_iterations == 0 and t.drafted == 0 and t.iterations == 20
    assert t.sources == "n" * 20
    z = e.generate(PROMPTS[0], max_new_tokens=21, draft_len=0, ignore_eos=True).stats
    assert z.spec_iterations == 0


# ---- statistics and streaming ----------------------------------------------------------------
def test_statistics_are_consistent(root) -> None:
    e = pair(root, "noisy", draft_len=4, max_batch=1)
    s = e.generate(
        PROMPTS[3],
        max_new_tokens=50,
        temperature=1.0,
        draft="model",
        draft_len=4,
        ignore_eos=True,
    ).stats
    assert s.new_tokens == 50
    # Drafts stop one short of the tokens left (Scheduler::choose): the last iteration may draft
    # fewer than 4, or none with a single token left. Whether it does depends on the sampled
    # trajectory; every earlier iteration drafts 4.
    plain = s.iterations - s.spec_iterations
    assert plain in (0, 1) and s.sources == "m" * s.spec_iterations + "n" * plain
    assert s.new_tokens == 1 + s.iterations + s.accepted
    assert sum(s.accepted_hist) == s.spec_iterations
    assert sum(i * h for i, h in enumerate(s.accepted_hist)) == s.accepted
    full = s.spec_iterations - (1 - plain)  # the iterations before the last one
    assert 4 * full + (1 - plain) <= s.drafted <= 4 * s.spec_iterations
    assert s.acceptance_rate == pytest.approx(s.accepted / s.drafted)
    # Tokens after the prefill's first one, per iteration (the last block may be cut).
    assert s.tokens_per_iteration == pytest.approx(49 / s.iterations)
    assert s.draft_s > 0 and s.verify_s > 0 and s.draft_len == 4 and s.draft == "model"
    assert s.by_source["model"] == {
        "iterations": s.iterations,
        "drafted": s.drafted,
        "accepted": s.accepted,
    }
    assert len(s.sources) == s.iterations and "acceptance" in str(s)


def test_prediction_statistics(root) -> None:
    """Draft tokens copied from the prediction: accepted ones and rejected ones are counted."""
    e = pair(root, "same", draft_len=6, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=40, speculate=False, ignore_eos=True).token_ids
    wrong = [(t + 1) % 300 for t in base]  # same n-grams nowhere: lookup finds nothing
    half = base[:20] + wrong[20:]  # right for 20 tokens, then wrong
    s = e.generate(  # (a fixed length: "auto" weighs measured costs, which load skews)
        PROMPTS[0], max_new_tokens=40, draft="lookup", draft_len=6, ignore_eos=True,
        prediction=half,
    ).stats  # fmt: skip
    assert s.prediction_accepted > 10 and s.prediction_accepted <= s.accepted
    assert s.prediction_rejected >= 1
    assert s.prediction_accepted + s.prediction_rejected <= s.drafted
    assert "prediction" in str(s)


def test_stream_yields_each_iteration(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    stream = e.generate(
        PROMPTS[0], max_new_tokens=21, draft="model", draft_len=4, ignore_eos=True, stream=True
    )
    pieces = list(stream)
    r = stream.result
    assert r is not None and "".join(pieces) == r.text
    # One arrival per iteration (plus the first token): far fewer than 21 token arrivals.
    assert r.stats.iterations == 4 and r.stats.itl_p50_ms == 0.0


def test_auto_runs_and_reports(root) -> None:
    e = pair(root, "same", draft_len=8, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=60, speculate=False, ignore_eos=True)
    r = e.generate(PROMPTS[0], max_new_tokens=60, ignore_eos=True)  # draft / draft_len auto
    assert r.token_ids == base.token_ids and r.stats.draft_len == "auto"
    assert r.stats.draft == "auto" and r.stats.spec_iterations > 0


def test_auto_stops_drafting_with_a_draft_that_always_misses(root) -> None:
    """Once the long-run acceptance says drafting never pays, auto decodes target-only and
    probes drafting only right after a prefill (no long catch-up), with backoff. (The prompt
    cache off: each of the requests of one prompt is prefilled whole.)"""
    e = Engine(spec_pairs.make_pair(root, "negated", draft_len=4, max_batch=1), prompt_cache=False)
    base = e.generate(PROMPTS[1], max_new_tokens=60, speculate=False, ignore_eos=True)
    for _ in range(3):
        r = e.generate(PROMPTS[1], max_new_tokens=60, draft="model", ignore_eos=True)
        assert r.token_ids == base.token_ids
    assert r.stats.spec_iterations <= 1 and r.stats.iterations == 59


def test_engine_without_draft_model_speculates_with_lookup(tiny) -> None:
    path, _ = tiny.engine("qwen2", weights="f32", max_seq_len=256)
    e = Engine(path)
    assert not e.has_draft and e.max_draft_len == 8
    base = e.generate(PROMPTS[0], max_new_tokens=40, speculate=False, ignore_eos=True)
    r = e.generate(PROMPTS[0], max_new_tokens=40, ignore_eos=True, prediction=base.token_ids)
    assert r.token_ids == base.token_ids
    assert r.stats.by_source["lookup"]["iterations"] > 0 and r.stats.accepted > 0
    assert r.stats.iterations < 39


# ---- a target vocabulary larger than the draft's ---------------------------------------------
def test_cpu_embedding_of_ids_outside_the_table_is_zero() -> None:
    from trt_spec import _core

    w = np.random.default_rng(1).standard_normal((40, 64)).astype(np.float32)
    blob = _core.quantize_weight(w, _core.weight_type_from_name("f32"))
    got = T.OpRunner("cpu").embed(blob, 0, 40, 64, [3, 40, 1 << 30, -1, 39])
    np.testing.assert_array_equal(got[[0, 4]], w[[3, 39]])
    assert not got[1:4].any()


@pytest.mark.parametrize("draft", ["model", "auto"])
def test_ids_beyond_the_drafts_vocabulary_never_reach_it(root, draft: str) -> None:
    """The target has 24 ids the draft lacks (Qwen2.5-7B and its 0.5B draft differ by 128):
    prompts full of them, read by the draft as zero embeddings, keep greedy output exact."""
    e = pair(root, "narrow", draft_len=4, max_batch=4)
    vt, vd = e.config("target")["vocab_size"], e.config("draft")["vocab_size"]
    assert vt == vd + 24
    prompts = [[1, 2, vd + 3, 4], [vd + 23, 9, 2, vd], [5] * 6 + [vd + 1], [vd + 7] * 3]
    base = e.generate(prompts, max_new_tokens=32, speculate=False, ignore_eos=True)
    for k in [1, 4, "auto"]:
        got = e.generate(prompts, max_new_tokens=32, draft=draft, draft_len=k, ignore_eos=True)
        assert [g.token_ids for g in got] == [b.token_ids for b in base], k
    s = e.generate(prompts[0], max_new_tokens=32, draft="model", draft_len=4, ignore_eos=True)
    assert s.stats.accepted > 0  # the draft (the target's own weights) still drafts well


# ---- the engine file -------------------------------------------------------------------------
def test_engine_stores_draft_len_and_both_models(root) -> None:
    e = pair(root, "padded", draft_len=3, max_batch=1)
    assert e.max_draft_len == 3 and e.metadata["build"]["draft_len"] == 3 and e.has_draft
    assert e.config("draft")["vocab_size"] == e.config("target")["vocab_size"] + 24
    with pytest.raises(ValueError, match=r"draft_len must be 'auto' or in \[0, 3\]"):
        e.generate([1, 2], max_new_tokens=2, draft_len=4)


@pytest.mark.parametrize("bad", [0, -1, 17])
def test_build_rejects_bad_draft_len(root, tmp_path, bad: int) -> None:
    from trt_spec import BuildError, build_engine

    target = spec_pairs.make_checkpoint(root, "target-v384", seed=3, small_vocab=False)
    with pytest.raises(BuildError, match=r"draft_len must be in \[1, 16\]"):
        build_engine(target, tmp_path / "x.engine", draft=target, draft_len=bad, weights="f32")


def test_draft_is_lean_in_q4(root) -> None:
    """In q4 engines the draft keeps only its head at q8 (choose_type's lean rule)."""
    from trt_spec.builder.builder import choose_type

    assert choose_type("q4", "blk.0.ffn_down.weight", (64, 128), 6.5, False) == "q8"
    assert choose_type("q4", "blk.0.ffn_down.weight", (64, 128), 6.5, False, lean=True) == "q4"
    assert choose_type("q4", "output.weight", (64, 128), 6.5, True, lean=True) == "q8"


def test_cli_generate_speculates(root, capsys) -> None:
    import json

    from trt_spec.cli import main

    path = spec_pairs.make_pair(root, "same", draft_len=4, max_batch=1)
    args = ["generate", str(path), "def f(x):", "--max-new-tokens", "12", "--json"]
    assert main(args + ["--draft-len", "3", "--draft", "model"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["stats"]["draft_len"] == "3" and spec["stats"]["accepted"] > 0
    assert main(args + ["--no-speculate"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["token_ids"] == spec["token_ids"] and plain["stats"]["drafted"] == 0
    assert main(args + ["--draft", "lookup", "--prediction", "def f(x): return x"]) == 0
    look = json.loads(capsys.readouterr().out)
    assert look["token_ids"] == spec["token_ids"] and look["stats"]["draft"] == "lookup"
    assert main(args + ["--draft-len", "9"]) == 1
    assert "draft_len must be" in capsys.readouterr().err
