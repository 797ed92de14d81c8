"""Speculative decoding on tiny target/draft pairs (tests/spec_pairs.py): exactness, the output
distribution, KV rollback, stops inside accepted blocks, batches and statistics."""

from __future__ import annotations

import numpy as np
import pytest
import spec_pairs
from test_spec_acceptance import ALPHA, chi2_matches, rule_probs
from trt_spec import Engine, _core

PROMPTS = [[1, 2, 3, 4], [5, 9, 2], [7] * 10, [100, 200, 300, 17, 42, 8], [3]]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("spec")


def pair(root, kind: str, **kw) -> Engine:
    return Engine(spec_pairs.make_pair(root, kind, **kw))


# ---- greedy exactness ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["same", "noisy", "negated", "padded"])
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_speculation_equals_target_only(root, kind: str, batch: int) -> None:
    e = pair(root, kind, draft_len=4, max_batch=4)
    prompts = PROMPTS[:batch] if batch > 1 else PROMPTS[:1]
    base = e.generate(prompts, max_new_tokens=40, speculate=False, ignore_eos=True)
    for k in [1, 2, 3, 4, "auto"]:
        got = e.generate(prompts, max_new_tokens=40, draft_len=k, ignore_eos=True)
        for b, g in zip(base, got, strict=True):
            assert g.token_ids == b.token_ids, (kind, k)
            assert g.stats.new_tokens == 40
    same = e.generate(prompts[0], max_new_tokens=40, draft_len=4, ignore_eos=True).stats
    if kind == "same":
        assert same.acceptance_rate == 1.0 and same.tokens_per_iteration > 4.0
    if kind == "negated":
        assert same.accepted == 0 and same.drafted > 0  # a draft that always misses


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
def _first_tokens(e: Engine, n: int, k: int, temperature: float, top_p: float) -> np.ndarray:
    """Tokens 1-3 of n sampled completions of [1, 2, 3], 4 requests at a time (seeds 0..n-1)."""
    dec = _core.Decoder(e._rt)
    dec.draft_len = k
    out = np.zeros((n, 3), np.int64)
    for start in range(0, n, 4):
        slots = {
            dec.add([1, 2, 3], 3, temperature, 0, top_p, s, []): s for s in range(start, start + 4)
        }
        got: dict[int, list[int]] = {s: [] for s in slots}
        while dec.running:
            for slot, toks in dec.step():
                got[slot].extend(toks)
        for slot, seed in slots.items():
            out[seed] = got[slot]
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


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_distribution_is_the_targets(root, temperature: float, top_p: float) -> None:
    """100k completions with and without speculation: the joint distributions of tokens
    (1, 2) and (2, 3) match the target's exact ones (chi-square)."""
    e = pair(root, "random", draft_len=2, max_batch=4, small_vocab=True)
    j12, j23 = _exact_joint(e, temperature, top_p)
    V = e.vocab_size
    n = 100_000
    for k in (0, 2):
        toks = _first_tokens(e, n, k, temperature, top_p)
        c12 = np.bincount(toks[:, 0] * V + toks[:, 1], minlength=V * V)
        c23 = np.bincount(toks[:, 1] * V + toks[:, 2], minlength=V * V)
        # Merge sparse cells (expected < 5) into one so the chi-square approximation holds.
        for counts, probs in ((c12, j12.ravel()), (c23, j23.ravel())):
            small = probs * n < 5
            c = np.append(counts[~small], counts[small].sum())
            p = np.append(probs[~small], probs[small].sum())
            assert chi2_matches(c, p) > ALPHA, (k, temperature)


def test_sampling_same_seed_same_output(root) -> None:
    e = pair(root, "noisy", draft_len=4, max_batch=4)
    a = e.generate(PROMPTS[0], max_new_tokens=30, temperature=0.8, seed=5, draft_len=3)
    b = e.generate(PROMPTS[0], max_new_tokens=30, temperature=0.8, seed=5, draft_len=3)
    c = e.generate(PROMPTS[0], max_new_tokens=30, temperature=0.8, seed=6, draft_len=3)
    assert a.token_ids == b.token_ids != c.token_ids
    # A request's draws do not depend on its slot or its batch companions.
    batch = e.generate(
        [PROMPTS[1], PROMPTS[0]], max_new_tokens=30, temperature=0.8, seed=5, draft_len=3
    )
    assert batch[1].token_ids == a.token_ids


# ---- KV rollback -----------------------------------------------------------------------------
def test_kv_caches_equal_fresh_prefill_after_rollbacks(root) -> None:
    """After many iterations with random accepted lengths, both caches hold exactly what a
    fresh prefill of the accepted sequence writes."""
    path = spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=2)
    e = Engine(path)
    dec = _core.Decoder(e._rt)
    dec.draft_len = 4
    slot = dec.add(PROMPTS[0], 80, 1.0, 0, 1.0, 3, [])
    toks = list(PROMPTS[0])
    while dec.running:
        for _, new in dec.step():
            toks.extend(new)
    hist = dec.stats(slot)["accepted_hist"]
    assert sum(1 for h in hist if h > 0) >= 3  # accepted lengths did vary
    n_past = dec.context_len(slot)
    assert n_past == len(toks) - 1  # the newest token is not in the cache yet
    fresh = Engine(path)
    fdec = _core.Decoder(fresh._rt)
    fdec.draft_len = 1  # the prefill also runs the draft over the prompt
    fslot = fdec.add(toks[:n_past], 1, 0.0, 0, 1.0, 0, [])
    fdec.step()
    for role, n in (("target", n_past), ("draft", n_past - 1)):
        k1, v1 = e._rt.kv_cache(role, slot, n)
        k2, v2 = fresh._rt.kv_cache(role, fslot, n)
        np.testing.assert_allclose(k1, k2, rtol=1e-5, atol=1e-6, err_msg=role)
        np.testing.assert_allclose(v1, v2, rtol=1e-5, atol=1e-6, err_msg=role)


# ---- stops and limits ------------------------------------------------------------------------
def test_stop_token_inside_accepted_block(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=30, speculate=False, ignore_eos=True).token_ids
    stop = base[6]
    cut = base.index(stop)
    r = e.generate(PROMPTS[0], max_new_tokens=30, draft_len=4, stop=stop, ignore_eos=True)
    assert r.token_ids == base[: cut + 1] and r.finish_reason == "stop_token"
    assert r.stats.tokens_per_iteration > 1.0  # the stop did fall inside an accepted block


def test_stop_string_inside_accepted_block(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=30, speculate=False, ignore_eos=True)
    stop = e.decode(base.token_ids[5:7])
    assert stop and stop in base.text
    r = e.generate(PROMPTS[0], max_new_tokens=30, draft_len=4, stop=stop, ignore_eos=True)
    assert r.finish_reason == "stop_string" and stop not in r.text
    assert r.text == base.text[: base.text.index(stop)]
    assert len(r.token_ids) <= 7 and r.token_ids == base.token_ids[: len(r.token_ids)]


@pytest.mark.parametrize("n", [1, 2, 5, 7, 11])
def test_max_new_tokens_mid_block(root, n: int) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=n, speculate=False, ignore_eos=True)
    r = e.generate(PROMPTS[0], max_new_tokens=n, draft_len=4, ignore_eos=True)
    assert r.token_ids == base.token_ids and len(r.token_ids) == n
    assert r.finish_reason == "max_new_tokens"


def test_prompt_near_max_seq_len(root) -> None:
    """The draft and the verify pass never write past max_seq_len: k shrinks near the end."""
    e = pair(root, "same", draft_len=8, max_batch=1, max_seq_len=40)
    prompt = list(range(10, 47))[:36]
    base = e.generate(prompt, max_new_tokens=50, speculate=False, ignore_eos=True)
    assert base.finish_reason == "max_seq_len" and len(base.token_ids) == 40 - 36 + 1
    for k in (1, 4, 8, "auto"):
        r = e.generate(prompt, max_new_tokens=50, draft_len=k, ignore_eos=True)
        assert r.token_ids == base.token_ids and r.finish_reason == "max_seq_len"
    full = e.generate(list(range(40)), max_new_tokens=5, draft_len=8, ignore_eos=True)
    assert len(full.token_ids) == 1 and full.finish_reason == "max_seq_len"


def test_k1_and_target_only_mode(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    r = e.generate(PROMPTS[0], max_new_tokens=21, draft_len=1, ignore_eos=True)
    assert r.stats.accepted_hist == (0, 10, 0, 0, 0) and r.stats.iterations == 10
    t = e.generate(PROMPTS[0], max_new_tokens=21, speculate=False, ignore_eos=True).stats
    assert t.spec_iterations == 0 and t.drafted == 0 and t.iterations == 20
    z = e.generate(PROMPTS[0], max_new_tokens=21, draft_len=0, ignore_eos=True).stats
    assert z.spec_iterations == 0


# ---- statistics and streaming ----------------------------------------------------------------
def test_statistics_are_consistent(root) -> None:
    e = pair(root, "noisy", draft_len=4, max_batch=1)
    s = e.generate(
        PROMPTS[3], max_new_tokens=50, temperature=1.0, draft_len=4, ignore_eos=True
    ).stats
    assert s.new_tokens == 50 and s.spec_iterations == s.iterations
    assert sum(s.accepted_hist) == s.spec_iterations
    assert sum(i * h for i, h in enumerate(s.accepted_hist)) == s.accepted
    assert s.drafted == 4 * s.spec_iterations
    assert s.acceptance_rate == pytest.approx(s.accepted / s.drafted)
    # Tokens after the prefill's first one, per iteration (the last block may be cut).
    assert s.tokens_per_iteration == pytest.approx(49 / s.iterations)
    assert s.draft_s > 0 and s.verify_s > 0 and s.draft_len == "4"
    assert "acceptance" in str(s)


def test_stream_yields_each_iteration(root) -> None:
    e = pair(root, "same", draft_len=4, max_batch=1)
    stream = e.generate(PROMPTS[0], max_new_tokens=21, draft_len=4, ignore_eos=True, stream=True)
    pieces = list(stream)
    r = stream.result
    assert r is not None and "".join(pieces) == r.text
    # One arrival per iteration (plus the first token): far fewer than 21 token arrivals.
    assert r.stats.iterations == 4 and r.stats.itl_p50_ms == 0.0


def test_auto_runs_and_reports(root) -> None:
    e = pair(root, "same", draft_len=8, max_batch=1)
    base = e.generate(PROMPTS[0], max_new_tokens=60, speculate=False, ignore_eos=True)
    r = e.generate(PROMPTS[0], max_new_tokens=60, ignore_eos=True)  # draft_len="auto"
    assert r.token_ids == base.token_ids and r.stats.draft_len == "auto"
    assert r.stats.spec_iterations > 0  # it measured drafting before choosing


def test_auto_stops_drafting_with_a_draft_that_always_misses(root) -> None:
    """Once the long-run acceptance says drafting never pays, auto decodes target-only and
    probes drafting only right after a prefill (no long catch-up), with backoff."""
    e = pair(root, "negated", draft_len=4, max_batch=1)
    base = e.generate(PROMPTS[1], max_new_tokens=60, speculate=False, ignore_eos=True)
    for _ in range(3):
        r = e.generate(PROMPTS[1], max_new_tokens=60, ignore_eos=True)
        assert r.token_ids == base.token_ids
    assert r.stats.spec_iterations <= 1 and r.stats.iterations == 59


# ---- the engine file -------------------------------------------------------------------------
def test_engine_stores_draft_len_and_both_models(root) -> None:
    e = pair(root, "padded", draft_len=3, max_batch=1)
    assert e.draft_len == 3 and e.metadata["build"]["draft_len"] == 3 and e.has_draft
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
    from trt_spec.build.builder import choose_type

    assert choose_type("q4", "blk.0.ffn_down.weight", (64, 128), 6.5, False) == "q8"
    assert choose_type("q4", "blk.0.ffn_down.weight", (64, 128), 6.5, False, lean=True) == "q4"
    assert choose_type("q4", "output.weight", (64, 128), 6.5, True, lean=True) == "q8"


def test_cli_generate_speculates(root, capsys) -> None:
    import json

    from trt_spec.cli import main

    path = spec_pairs.make_pair(root, "same", draft_len=4, max_batch=1)
    args = ["generate", str(path), "def f(x):", "--max-new-tokens", "12", "--json"]
    assert main(args + ["--draft-len", "3"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["stats"]["draft_len"] == "3" and spec["stats"]["accepted"] > 0
    assert main(args + ["--no-speculate"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["token_ids"] == spec["token_ids"] and plain["stats"]["drafted"] == 0
    assert main(args + ["--draft-len", "9"]) == 1
    assert "draft_len must be" in capsys.readouterr().err
