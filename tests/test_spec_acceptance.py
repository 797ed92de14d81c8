"""The acceptance step alone (draft sampling + accept, `T.spec_trials`) against its closed form.

For fixed per-position target and draft distributions p_j, q_j, speculative sampling must emit
a first token distributed as p_0 whatever q_0 is, accept the first draft token with
probability sum_x min(p_0(x), q_0(x)), and, after keeping d_0, emit the next token as p_1.
Hand-made cases cover q(x) = 0 where p(x) > 0, p = q, and disjoint supports; the filtered rule
(temperature 0.7, top_p 0.9) is checked against a NumPy copy of kernels/sampling.h.
"""

from __future__ import annotations

import numpy as np
import pytest
from native import T
from scipy import stats

N = 100_000
ALPHA = 1e-4  # false-failure rate per chi-square test


def rule_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0):
    """The distribution the sampling rule draws from (kernels/sampling.h), in float64."""
    z = logits.astype(np.float64) / temperature
    order = np.lexsort((np.arange(len(z)), -z))  # decreasing, ties to the lower index
    keep = np.ones(len(z), bool)
    if 0 < top_k < len(z):
        keep[:] = False
        keep[order[:top_k]] = True
    w = np.where(keep, np.exp(z - z[keep].max()), 0.0)
    if top_p < 1.0:
        cum = np.cumsum(w[order])
        n = int(np.searchsorted(cum, top_p * cum[-1])) + 1  # shortest prefix reaching top_p
        mask = np.zeros(len(z), bool)
        mask[order[:n]] = True
        w = np.where(mask, w, 0.0)
    return w / w.sum()


def log(p) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(p, np.float64)).astype(np.float32)


def chi2_matches(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value that counts were drawn from probs (cells with no mass must be empty)."""
    assert counts[probs == 0].sum() == 0, "drew a token the distribution excludes"
    support = probs > 0
    if support.sum() == 1:
        return 1.0  # one possible outcome, and every draw is it
    expected = probs[support] * counts.sum()
    return stats.chisquare(counts[support], expected).pvalue


P = [0.05, 0.4, 0.25, 0.0, 0.2, 0.1]
CASES = {
    "generic": (P, [0.3, 0.1, 0.2, 0.1, 0.2, 0.1]),
    "q-zero-where-p-positive": (P, [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]),
    "p-equals-q": (P, P),
    "disjoint": ([0.5, 0.5, 0, 0, 0, 0], [0, 0, 0.2, 0.3, 0.5, 0]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_first_token_follows_target(case: str) -> None:
    p, q = map(np.asarray, CASES[case])
    p1 = np.array([0.1, 0.2, 0.3, 0.1, 0.2, 0.1])
    out = T.spec_trials(log(np.stack([p, p1])), log(q[None]), 1.0, 0, 1.0, N)
    first = np.bincount(out[:, 0], minlength=len(p))
    assert chi2_matches(first, p) > ALPHA
    accept_rate = (out[:, -1] == 1).mean()
    expected = np.minimum(p, q).sum()
    assert abs(accept_rate - expected) < 5 * np.sqrt(expected * (1 - expected) / N) + 1e-9
    if case == "p-equals-q":
        assert (out[:, -1] == 1).all()  # p/q = 1: every draft is kept
    if case == "disjoint":
        assert (out[:, -1] == 0).all()
    # After a kept draft, the bonus token follows p_1.
    kept = out[out[:, -1] == 1]
    if len(kept) > 1000:
        assert chi2_matches(np.bincount(kept[:, 1], minlength=len(p)), p1) > ALPHA


def test_two_drafts_chain() -> None:
    """k = 2: the second emitted token follows p_1 whether it was a kept draft or a correction."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(8), size=3)
    q = rng.dirichlet(np.ones(8), size=2)
    out = T.spec_trials(log(p), log(q), 1.0, 0, 1.0, N, first_seed=10**6)
    assert chi2_matches(np.bincount(out[:, 0], minlength=8), p[0]) > ALPHA
    second = out[out[:, -1] >= 1][:, 1]
    assert chi2_matches(np.bincount(second, minlength=8), p[1]) > ALPHA
    third = out[out[:, -1] == 2][:, 2]
    assert chi2_matches(np.bincount(third, minlength=8), p[2]) > ALPHA


def test_filtered_rule_temperature_top_p() -> None:
    """Temperature 0.7 and top_p 0.9 applied to both models: the output follows the target's
    filtered distribution."""
    rng = np.random.default_rng(1)
    lt = rng.normal(0, 1.5, size=(2, 12)).astype(np.float32)
    ld = (lt[:1] + rng.normal(0, 1.0, size=(1, 12))).astype(np.float32)
    out = T.spec_trials(lt, ld, 0.7, 0, 0.9, N)
    p0 = rule_probs(lt[0], 0.7, top_p=0.9)
    q0 = rule_probs(ld[0], 0.7, top_p=0.9)
    assert chi2_matches(np.bincount(out[:, 0], minlength=12), p0) > ALPHA
    rate = (out[:, -1] == 1).mean()
    expected = np.minimum(p0, q0).sum()
    assert abs(rate - expected) < 5 * np.sqrt(expected * (1 - expected) / N)


def test_top_k_rule() -> None:
    rng = np.random.default_rng(2)
    lt = rng.normal(0, 1.0, size=(2, 10)).astype(np.float32)
    ld = rng.normal(0, 1.0, size=(1, 10)).astype(np.float32)
    out = T.spec_trials(lt, ld, 1.0, 3, 1.0, N // 2)
    assert chi2_matches(np.bincount(out[:, 0], minlength=10), rule_probs(lt[0], 1.0, 3)) > ALPHA


def test_greedy_acceptance_is_argmax_match() -> None:
    lt = np.array([[0, 3, 1, 0], [2, 0, 0, 0], [0, 0, 0, 5]], np.float32)
    same = lt[:2].copy()
    out = T.spec_trials(lt, same, 0.0, 0, 1.0, 3)
    assert (out == [1, 0, 3, 2]).all()  # both drafts kept, then the bonus argmax
    other = np.array([[0, 3, 1, 0], [0, 9, 0, 0]], np.float32)
    out = T.spec_trials(lt, other, 0.0, 0, 1.0, 2)
    assert (out == [1, 0, -1, 1]).all()  # d_1 = 1 rejected, corrected to the target's 0


def test_draft_vocab_padding() -> None:
    """A draft whose vocabulary has extra (padding) ids never proposes them."""
    lt = log([[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]])
    ld = np.array([[0, 0, 0, 0, 50, 50]], np.float32)  # the mass sits on padding ids 4, 5
    out = T.spec_trials(lt, ld, 1.0, 0, 1.0, 20_000)
    assert out[:, 0].max() < 4
    assert chi2_matches(np.bincount(out[:, 0], minlength=4), np.full(4, 0.25)) > ALPHA


def test_same_seed_same_draws() -> None:
    rng = np.random.default_rng(3)
    lt = rng.normal(size=(3, 9)).astype(np.float32)
    ld = rng.normal(size=(2, 9)).astype(np.float32)
    a = T.spec_trials(lt, ld, 1.0, 0, 1.0, 500, first_seed=42)
    b = T.spec_trials(lt, ld, 1.0, 0, 1.0, 500, first_seed=42)
    c = T.spec_trials(lt, ld, 1.0, 0, 1.0, 500, first_seed=43)
    assert (a == b).all() and not (a == c).all()


# ---- one-hot proposals (prompt lookup): chains and trees ---------------------------------------
def _tree_dist(row_probs: list[np.ndarray], toks, pars, t1: int) -> np.ndarray:
    """P(second token | first token t1) under exact target sampling: row of t1's node if t1 is a
    child of the root, else nothing (the walk stops after emitting t1)."""
    node = next(
        (i for i, (t, p) in enumerate(zip(toks, pars, strict=True)) if p == -1 and t == t1), None
    )
    return row_probs[node + 1] if node is not None else None


TREES = {
    "chain": ([2, 4, 1], [-1, 0, 1]),
    "two-branches": ([2, 4, 1, 0], [-1, -1, 0, 1]),
    "three-siblings-deep": ([1, 2, 4, 0, 5, 3], [-1, -1, -1, 0, 0, 3]),
    "likely-and-unlikely": ([3, 0, 1], [-1, -1, 1]),  # token 3 has p 0 at the root
}


@pytest.mark.parametrize("tree", list(TREES))
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_one_hot_tree_emits_the_target_distribution(tree: str, temperature: float, top_p: float):
    """Recursive rejection sampling over a deterministic tree (accept.h): the first token follows
    p at the root, the second follows p at the first token's node whenever the walk went through
    it, whatever the tree, including siblings tried one after another."""
    toks, pars = TREES[tree]
    rng = np.random.default_rng(len(toks))
    V = 6
    rows = (0.8 * rng.standard_normal((len(toks) + 1, V))).astype(np.float32)
    rows[0, 3] = -np.inf  # the root never emits token 3
    probs = [rule_probs(r, temperature, top_p=top_p) for r in rows]
    out = T.tree_trials(rows, toks, pars, temperature, 0, top_p, N)
    first = np.bincount(out[:, 0], minlength=V)
    assert chi2_matches(first, probs[0]) > ALPHA
    for t1 in range(V):
        cond = _tree_dist(probs, toks, pars, t1)
        sel = out[:, 0] == t1
        if cond is None or sel.sum() < 200:
            continue
        second = np.bincount(out[sel, 1], minlength=V)
        assert chi2_matches(second, cond) > ALPHA, (tree, t1)
    # The accepted count is the depth of the path whose tokens were emitted.
    for row in out[:200]:
        kept = row[-1]
        node = -1
        for d in range(kept):
            node = next(
                i
                for i, (t, p) in enumerate(zip(toks, pars, strict=True))
                if p == node and t == row[d]
            )
        assert node >= -1


def test_one_hot_greedy_keeps_the_argmax_child() -> None:
    rows = np.zeros((4, 6), np.float32)
    rows[0, 4] = 5.0  # root: argmax 4 (the second child)
    rows[2, 1] = 5.0  # node 1 (token 4): argmax 1 (its child, node 2)
    rows[3, 2] = 5.0  # node 2: argmax 2
    out = T.tree_trials(rows, [2, 4, 1], [-1, -1, 1], 0.0, 0, 1.0, 3)
    assert (out == np.array([4, 1, 2, 2])).all()  # 4, 1 accepted, then the target's 2
