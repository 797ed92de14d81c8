"""Prompt lookup's rule (cpp/spec/lookup.h) on host arrays, against a reference written here from
its definition: longest n-gram match, prediction matches first, a trie of continuations ordered
by how many matches agree."""

from __future__ import annotations

import numpy as np
import pytest
import spec_pairs
from cuda_helpers import SOURCE, fields
from native import T

NMIN, NMAX, MATCHES, NODES = T.NGRAM_MIN, T.NGRAM_MAX, T.MAX_MATCHES, T.MAX_DRAFT_NODES
PREDICTED = 2  # DraftNodeFlags::kNodePredicted


def match_len(src: list[int], e: int, h: list[int]) -> int:
    n = 0
    while n < NMAX and e - n - 1 >= 0 and len(h) - n - 1 >= 0 and src[e - n - 1] == h[-n - 1]:
        n += 1
    return n


def reference(h: list[int], pred: list[int], max_nodes: int):
    """The rule of lookup.h, from its comment, as plain Python: (tokens, parents, depths, flags,
    n-gram length)."""
    lens = [(match_len(pred, e, h), e, True) for e in range(len(pred))]
    lens += [(match_len(h, e, h), e, False) for e in range(len(h))]
    best = max((n for n, _, _ in lens), default=0)
    if best < NMIN or max_nodes <= 0:
        return [], [], [], [], 0
    matches = [(pred, e, True) for n, e, p in lens if p and n == best]
    matches += sorted(
        ((h, e, False) for n, e, p in lens if not p and n == best), key=lambda m: -m[1]
    )
    matches = matches[:MATCHES]
    nodes: list[dict] = []  # trie in creation order
    for src, e, predicted in matches:
        cur = -1
        for j in range(min(NODES, len(src) - e)):
            t = src[e + j]
            child = next((i for i, n in enumerate(nodes) if n["p"] == cur and n["t"] == t), None)
            if child is None:
                nodes.append({"t": t, "p": cur, "c": 0, "d": j + 1, "f": 0})
                child = len(nodes) - 1
            nodes[child]["c"] += 1
            if predicted:
                nodes[child]["f"] |= PREDICTED
            cur = child
    order = sorted(range(len(nodes)), key=lambda i: (-nodes[i]["c"], nodes[i]["d"], i))
    order = order[: min(max_nodes, NODES)]
    new = {old: k for k, old in enumerate(order)}
    toks = [nodes[i]["t"] for i in order]
    pars = [-1 if nodes[i]["p"] < 0 else new[nodes[i]["p"]] for i in order]
    depths, flags = [nodes[i]["d"] for i in order], [nodes[i]["f"] for i in order]
    return toks, pars, depths, flags, best if toks else 0


def propose(h, pred=(), max_nodes=16):
    """(tokens, parents, depths, flags) of the tree."""
    return T.lookup_propose(list(h), list(pred), max_nodes)[:4]


def ngram(h, pred=(), max_nodes=16) -> int:
    return T.lookup_propose(list(h), list(pred), max_nodes)[4]


def test_no_match_no_proposal() -> None:
    assert propose([1, 2, 3, 4, 5]) == ([], [], [], []) and ngram([1, 2, 3, 4, 5]) == 0
    assert propose([1, 2, 3, 1], max_nodes=0) == ([], [], [], []) and ngram([1, 2, 1], (), 0) == 0


def test_a_repeated_token_proposes_as_a_1gram() -> None:
    # The newest token alone matches: its earlier continuations, the n-gram length 1.
    assert NMIN == 1
    assert propose([1, 2, 3, 1]) == ([2, 3, 1], [-1, 0, 1], [1, 2, 3], [0, 0, 0])
    assert ngram([1, 2, 3, 1]) == 1
    # A longer match elsewhere wins over every 1-gram; its length goes with the proposal.
    h = [5, 9, 1, 2, 7, 5, 1, 2]
    assert propose(h)[0][0] == 7 and ngram(h) == 2
    assert ngram([4, 1, 2, 3, 4, 8, 8, 1, 2, 3, 4]) == NMAX  # capped at the longest tried
    assert ngram([9, 9], pred=[9, 3]) == 1  # a prediction's first token: a 1-gram


def test_repeated_text_continues_its_earlier_occurrence() -> None:
    toks, pars, depths, flags = propose([7, 1, 2, 3, 4, 5, 6, 9, 1, 2, 3])
    assert toks == [4, 5, 6, 9, 1, 2, 3]  # then the history ends
    assert pars == [-1, 0, 1, 2, 3, 4, 5] and depths == [1, 2, 3, 4, 5, 6, 7]
    assert flags == [0] * 7


def test_the_longest_ngram_wins() -> None:
    # "2 3" matches twice, "1 2 3" once: only the 3-gram's continuation (8) is proposed.
    h = [2, 3, 5, 1, 2, 3, 8, 0, 1, 2, 3]
    assert propose(h)[0][0] == 8 and 5 not in propose(h)[0][:1]


def test_prediction_is_a_source_and_flagged() -> None:
    toks, _, _, flags = propose([9, 9, 1, 2], pred=[1, 2, 3, 4, 5])
    assert toks == [3, 4, 5] and flags == [PREDICTED] * 3


def test_several_continuations_form_a_tree_parents_first() -> None:
    h = [1, 2, 3, 4, 1, 2, 3, 5, 6, 1, 2, 3]
    toks, pars, depths, _ = propose(h)
    assert set(toks[:2]) == {4, 5} and pars[:2] == [-1, -1]  # two branches at depth 1
    for i, p in enumerate(pars):
        assert p < i and (p < 0 or depths[i] == depths[p] + 1)
    # Matches that agree merge: the shared node counts both and comes first.
    toks, pars, _, _ = propose([1, 2, 3, 4, 9, 1, 2, 3, 4, 7, 1, 2, 3])
    assert toks[0] == 4 and pars[0] == -1 and set(toks[1:3]) == {9, 7}


def test_max_nodes_keeps_a_prefix() -> None:
    h = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3]
    full = propose(h)
    for m in (0, 1, 3, 5):
        got = propose(h, max_nodes=m)
        assert [x[:m] for x in full] == list(got)


@pytest.mark.parametrize("seed", range(40))
def test_rule_matches_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    alphabet = int(rng.integers(2, 12))
    h = [int(x) for x in rng.integers(0, alphabet, int(rng.integers(1, 300)))]
    pred = [int(x) for x in rng.integers(0, alphabet, int(rng.integers(0, 200)))]
    max_nodes = int(rng.integers(0, 17))
    got = T.lookup_propose(h, pred, max_nodes)
    assert tuple(got) == reference(h, pred, max_nodes)


def test_lookup_acceptance_is_kept_per_ngram_length() -> None:
    """The long-run acceptance (a new request's prior) is one estimate per n-gram length: a
    1-gram's starts at 1/3, a longer match's at 3/4, and each moves with its own proposals only;
    lengths outside 1 .. NGRAM_MAX count as the nearest."""
    lc = T.LookupController(1, 8)
    assert lc.long_run_alpha(1) == pytest.approx(1 / 3)
    assert [lc.long_run_alpha(n) for n in range(2, NMAX + 1)] == [pytest.approx(0.75)] * (NMAX - 1)
    for _ in range(300):
        lc.observe_acceptance(NMAX, 8, 8)  # every node of a 4-gram's proposal kept
        lc.observe_acceptance(1, 0, 2)  # none of a 1-gram's
    assert lc.long_run_alpha(NMAX) > 0.95 and lc.long_run_alpha(1) < 0.05
    assert lc.long_run_alpha(2) == pytest.approx(0.75)
    assert lc.long_run_alpha(0) == lc.long_run_alpha(1)
    assert lc.long_run_alpha(NMAX + 3) == lc.long_run_alpha(NMAX)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    return spec_pairs.make_pair(tmp_path_factory.mktemp("lookup"), "same", max_seq_len=256)


def _run(s, prompt: list[int], n: int, draft: str) -> tuple[list[int], list[tuple[int, int]]]:
    """A request to its end: (its tokens, (n-gram length read back before it, the verified
    tree's) per lookup iteration), reading the sequence's state after every step."""
    rid = s.submit(prompt, n, draft=draft)
    tokens, lookups, ahead = [], [], None
    for _ in range(400):
        for ev in s.step():
            tokens += ev.tokens
        if s.slot_of(rid) < 0:
            break
        f = fields(s.seq_state(rid))[0]
        if f["source"] == SOURCE["lookup"] and f["n_drafted"] > 0:
            lookups.append((ahead, int(f["last_tag"])))
        ahead = int(f["tree_tag"]) if f["ready_n"] > 0 else 0
    return tokens, lookups


def test_a_lookup_iteration_verifies_the_ngram_read_back_before_it(pair) -> None:
    """On a scheduler: the length read back with a proposal (its tree's tag, DraftTree.tag) is
    the one its iteration reports (SeqState.last_tag), so each proposal's outcome feeds its
    length's estimate; 1-gram proposals are verified (rows cheap: 0.1 of a step) and the output
    is the target's."""
    s = T.Session(str(pair), "cpu", 1, clock="host")
    s.script_costs(10e-3, 1e-3, 2e-3, 0.2e-3, capture=1000.0, first_launch=500.0)
    prompt = [7] + [(3 * i) % 50 + 2 for i in range(39)]
    want, _ = _run(s, prompt, 96, "none")
    got, lookups = _run(s, prompt, 96, "lookup")
    assert got == want
    assert lookups and all(a == b for a, b in lookups), lookups
    lengths = {b for _, b in lookups}
    assert 1 in lengths and len(lengths) >= 2, lookups
