"""draft_len="auto": the C++ DraftController, alone and replayed over acceptance traces.

The replay runs the controller as the Decoder does (per-sequence AcceptanceEstimate, relax()
at k = 0, the draft's catch-up lag) over traces of which draft token the target accepts, with
iteration costs measured on the default pair. Greedy acceptance depends on the position only,
so a trace recorded at K = 8 fixes every policy's outcome: a policy choosing k at position j
keeps min(k, run[j]) tokens, run[j] being the number of consecutive draft agreements from j.
Traces: tests/data/auto_traces_q4_t0.json (30 HumanEval prompts, real pair) and Markov
agreement sequences (a good and a bad state) for drafts from useless to near perfect.

The scheduler's measurements on a scripted device clock: test_scheduler_clock.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from native import T

DATA = json.loads((Path(__file__).parent / "data" / "auto_traces_q4_t0.json").read_text())
N_NEW = DATA["max_new_tokens"]
K_MAX = DATA["draft_len"]


def _interp(table: dict[str, float], x: int) -> float:
    pts = sorted((int(k), v) for k, v in table.items())
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    return float(np.interp(x, xs, ys))


def verify_s(rows: int) -> float:
    return _interp(DATA["verify_ms"], rows) / 1e3


def draft_s(k: int) -> float:
    return 0.0 if k == 0 else (DATA["draft_first_ms"] + (k - 1) * DATA["draft_step_ms"]) / 1e3


def catch_up_s(tokens: int) -> float:
    return _interp(DATA["catch_up_ms"], tokens) / 1e3


def runs_from_trace(trace: list[int]) -> list[int]:
    """run[j]: consecutive draft agreements from generated position j (the K = 8 trace's
    bonus positions, never checked, count as agreements)."""
    agree = [True] * (N_NEW + K_MAX + 2)
    j = 1  # position 0 is the prefill's token
    for emitted in trace:
        if emitted - 1 < K_MAX:
            agree[j + emitted - 1] = False
        j += emitted
    return runs_from_agreement(agree)


def markov_runs(rng: random.Random, p_good: float, p_bad: float, switch: float) -> list[int]:
    agree, good = [], True
    for _ in range(N_NEW + K_MAX + 2):
        if rng.random() < switch:
            good = not good
        agree.append(rng.random() < (p_good if good else p_bad))
    return runs_from_agreement(agree)


def runs_from_agreement(agree: list[bool]) -> list[int]:
    """run[j]: how many positions from j on the draft agrees with the target in a row."""
    run = [0] * (len(agree) + 1)
    for i in range(len(agree) - 1, -1, -1):
        run[i] = run[i + 1] + 1 if agree[i] else 0
    return run


def replay(runs: list[list[int]], k: int | None) -> float:
    """Tokens per second of decoding every request in turn, with fixed k or auto (None)."""
    c = T.DraftController(1, K_MAX)
    total_s = tokens = 0.0
    for run in runs:
        c.observe_catch_up(64, catch_up_s(64))  # the prefill feeds the draft the prompt
        est, lag, g = c.prior(), 0, 1
        while g < N_NEW:
            limit = min(K_MAX, N_NEW - g - 1)
            if limit <= 0:
                kk = 0
            elif k is None:
                kk = c.choose(1, [est.alpha], limit, lag)
            else:
                kk = min(k, limit)
            if kk > 0 and lag > 0:
                total_s += catch_up_s(lag)
                c.observe_catch_up(lag, catch_up_s(lag))
                lag = 0
            t = draft_s(kk) + verify_s(kk + 1)
            total_s += t
            c.observe(1, kk, t, draft_s(kk), verify_s(kk + 1))
            acc = min(kk, run[g])
            if kk > 0:
                est.observe(acc, kk)
                c.observe_acceptance(acc, kk)
            else:
                est.relax(c.long_run_alpha)
                lag += 1
            g += acc + 1
        tokens += N_NEW - 1
    return tokens / total_s


def _check_auto(runs: list[list[int]]) -> tuple[float, float, float]:
    base = replay(runs, 0)
    best = max(replay(runs, k) for k in (1, 2, 3, 4, 8))
    auto = replay(runs, None)
    return auto, base, best


def test_auto_on_the_real_pair_traces() -> None:
    """The default pair, greedy: auto within 3% of the best fixed K (the issue allows 5%)."""
    runs = [runs_from_trace(t) for t in DATA["traces"]]
    # The replay reproduces the benchmark's fixed-K rates (spec_q4_t0.md: 18.25, 20.63, 20.69).
    assert replay(runs, 0) == pytest.approx(18.28, rel=0.01)
    assert replay(runs, 1) == pytest.approx(20.63, rel=0.01)
    assert replay(runs, 2) == pytest.approx(20.69, rel=0.01)
    auto, base, best = _check_auto(runs)
    assert auto >= 0.97 * best and auto >= 1.1 * base, (auto, base, best)


@pytest.mark.parametrize(
    "p_good, p_bad, switch",
    [
        (0.85, 0.85, 0.0),  # steady, drafting pays
        (0.92, 0.5, 0.05),  # short bad stretches
        (0.95, 0.3, 0.02),  # long bad stretches
        (0.7, 0.7, 0.0),  # break-even
        (0.5, 0.5, 0.0),  # drafting loses 12%
        (0.3, 0.3, 0.0),
        (0.05, 0.05, 0.0),  # useless draft
        (0.9, 0.0, 0.03),  # all or nothing
    ],
)
def test_auto_on_markov_traces(p_good: float, p_bad: float, switch: float) -> None:
    """Whatever the draft's quality: auto at least 0.97x target-only and 0.97x the best
    fixed K (the issue: 0.95x and within 5%)."""
    rng = random.Random(hash((p_good, p_bad, switch)) & 0xFFFF)
    runs = [markov_runs(rng, p_good, p_bad, switch) for _ in range(30)]
    auto, base, best = _check_auto(runs)
    assert auto >= 0.97 * max(base, best), (auto, base, best)


# ---- the controller alone ---------------------------------------------------------------------
def _costs(draft_step: float, step: float, per_row: float, k: int) -> float:
    return k * draft_step + step + per_row * k


def _fed(draft_step: float, per_row: float, alpha: float, catch_up: float) -> T.DraftController:
    """A controller fed exact phase costs, long-run acceptance alpha and a catch-up cost."""
    c = T.DraftController(1, 8)
    assert c.choose(1, [alpha], 8) == 4  # nothing measured: a drafting iteration first
    c.observe(1, 4, _costs(draft_step, 1.0, per_row, 4), 4 * draft_step, 1.0 + 4 * per_row)
    assert c.choose(1, [alpha], 8) == 0  # then a plain target step
    c.observe(1, 0, 1.0, 0.0, 1.0)
    c.observe(1, 8, _costs(draft_step, 1.0, per_row, 8), 8 * draft_step, 1.0 + 8 * per_row)
    x = 0.0
    for _ in range(1000):  # k = 1 iterations keeping a fraction alpha of their drafts
        x += alpha
        c.observe_acceptance(int(x >= 1.0), 1)
        x -= int(x >= 1.0)
    assert c.long_run_alpha == pytest.approx(alpha, abs=0.02)
    c.observe_catch_up(1, catch_up)  # catch-ups of two sizes at `catch_up` per token: the line
    c.observe_catch_up(10, 10 * catch_up)  # through the origin
    return c


@pytest.mark.parametrize(
    "draft_step, per_row, alpha",
    [(0.5, 0.35, 0.9), (0.5, 0.35, 0.5), (0.1, 0.05, 0.9), (0.1, 0.05, 0.3), (0.6, 1.0, 0.9)],
)
def test_controller_picks_the_model_optimum(draft_step: float, per_row: float, alpha: float):
    """Fed exact phase costs, the controller picks argmax_k E(alpha, k) / T(k), k = 0 charged
    the catch-up when drafting pays at the long-run acceptance."""
    c = _fed(draft_step, per_row, alpha, catch_up=0.2)
    a_long = c.long_run_alpha

    def rate(a: float, k: int) -> float:
        return T.expected_tokens(a, k) / _costs(draft_step, 1.0, per_row, k)

    rates = [rate(alpha, k) for k in range(9)]
    long_pays = max(rate(a_long, k) for k in range(1, 9))
    rates[0] = 1.0 / (1.0 + (0.2 if long_pays > 1.0 else 0.0))
    best = int(np.argmax(rates))
    for k in range(9):
        assert c.predicted_time(1, k) == pytest.approx(_costs(draft_step, 1.0, per_row, k))
    picks = [c.choose(1, [alpha], 8) for _ in range(40)]
    assert picks.count(best) >= 35  # the rest are probes of neighbours
    # ... and, while drafting, one plain step every kZeroEvery (32) iterations, re-measured.
    zeros = picks.count(0) if best > 0 else 0
    assert zeros <= 2
    assert all(abs(p - best) <= 1 or (p == 0 and best > 0) for p in picks)
    assert c.choose(1, [alpha], 2) == min(best, 2) or rates[min(best, 2)] <= max(rates[:3])


def test_catch_up_keeps_a_short_dip_drafting() -> None:
    """A sequence whose estimate dips while the long-run acceptance says drafting pays: k = 0
    would save 3% of a step but costs a 25%-of-a-step catch-up later, so it keeps drafting."""
    c = _fed(0.4, 0.3, 0.9, catch_up=0.25)
    dip = 0.62  # 1.62 / 1.7 = 0.953 of target-only
    assert c.choose(1, [dip], 8) == 1
    # Without the catch-up charge (a draft so bad that k = 0 is the regime) it would stop.
    c = _fed(0.4, 0.3, 0.3, catch_up=0.25)
    assert c.choose(1, [dip], 8) == 0


def test_probe_from_zero_waits_for_a_short_lag() -> None:
    """In the k = 0 regime drafting is probed, with backoff, only while the lag is short."""
    c = _fed(0.4, 0.3, 0.2, catch_up=0.25)
    assert [c.choose(1, [0.2], 8, lag=100) for _ in range(300)] == [0] * 300
    picks = [c.choose(1, [0.2], 8, lag=0) for _ in range(300)]
    assert picks[0] == 1 and 2 <= picks.count(1) <= 6  # due at once, then 32, 64, 128, 256


@pytest.mark.parametrize(
    "draft_step, per_row, alpha, reads",
    [(0.1, 0.05, 0.9, True), (0.4, 0.3, 0.3, False), (0.6, 1.0, 0.9, False)],
)
def test_a_prompt_is_read_only_where_drafting_saves_more(
    draft_step: float, per_row: float, alpha: float, reads: bool
) -> None:
    """A fully automatic request has the draft read its prompt when new_tokens x the long-run
    saving per token (T(0) - min_k T(k) / E(a_L, k)) exceeds the read's measured cost; of the
    requests that would not read, one in kReadEvery (8) reads anyway. Before the costs are known
    the first request reads and the others do not wait on it. While those exploring reads find
    that it does not pay, the interval doubles up to 64."""
    c = T.DraftController(1, 8)
    assert not c.read_pays(1, 100, 100) and not c.catch_up_pays(1, 1, 1e9)  # nothing known
    assert c.per_token(1) == (-1.0, -1.0)
    assert c.reads_prompt(1, 100, 100)  # nothing measured: read, to learn the costs
    # Requests arriving before those costs are known do not all pay the read: one in 8 does.
    assert [c.reads_prompt(1, 100, 100) for _ in range(8)] == [False] * 7 + [True]
    c = _fed(draft_step, per_row, alpha, catch_up=0.2)
    assert c.reads_prompt(1, 100, 100)  # no read measured yet
    c.observe_read(100, 100 * 0.02)  # 0.02 s per prompt row
    assert c.read_per_row == pytest.approx(0.02)
    a = c.long_run_alpha
    best = min(_costs(draft_step, 1.0, per_row, k) / T.expected_tokens(a, k) for k in range(1, 9))
    saving = 1.0 - best
    assert c.saving_per_token(1) == pytest.approx(saving)
    assert c.saving_per_token(3) == pytest.approx(saving)  # B = 3 unmeasured: B = 1's
    assert (saving > 0) == reads
    assert c.per_token(1) == pytest.approx((best, 1.0))
    assert c.read_pays(1, 100, 100) == reads  # (no counter: the same answer every time)
    assert c.read_pays(1, 100, 100) == reads
    # A request that decoded without the draft: the saving it expects from here on against
    # join_margin (2) times the rows the draft would read first, which all B decoding sequences
    # wait for.
    m = T.DraftController.join_margin
    assert m == 2.0
    assert c.catch_up_pays(1, 100, m * 2.0 * 1.01) and not c.catch_up_pays(1, 100, m * 1.99)
    assert not c.catch_up_pays(2, 100, m * 3.9) and c.catch_up_pays(2, 100, m * 4.1)
    picks = [c.reads_prompt(1, 100, 100) for _ in range(16)]
    if reads:  # the saving (>= 30 s over 100 tokens) beats the read (2 s)
        assert all(picks)
        # ... except where the request is too short and the prompt too long to repay it
        n = int(100 * 0.02 / saving) // 2
        assert [c.reads_prompt(1, 100, n) for _ in range(8)] == [False] * 7 + [True]
        assert [c.reads_prompt(1, 100, n) for _ in range(16)] == [False] * 15 + [True]
        assert c.reads_prompt(1, 100, 100)  # one that pays: back to one in 8
        assert [c.reads_prompt(1, 100, n) for _ in range(8)] == [False] * 7 + [True]
    else:  # and while those reads keep finding that it does not pay, one in 16, 32, .. 64
        assert picks == [False] * 7 + [True] + [False] * 8
        picks = [c.reads_prompt(1, 100, 100) for _ in range(200)]  # (8 of the 16 above)
        assert [i + 1 for i, p in enumerate(picks) if p] == [8, 8 + 32, 40 + 64, 104 + 64]


def test_a_catch_up_is_priced_by_its_tokens() -> None:
    """A catch-up of n tokens is one draft forward over n rows, so it costs a fixed part (the
    draft's weights) plus a part per row, not n one-token catch-ups: priced, before any is
    measured, as a draft step of that many rows (the draft step scaled as the target's pass
    scales with its rows); with one size measured, that size scaled the same way; with two, by
    the line through them."""
    c = T.DraftController(1, 8)
    assert c.catch_up_time(4) == 0.0 and c.catch_up_per_token == 0.0  # nothing known
    c.observe(1, 4, _costs(0.4, 1.0, 0.3, 4), 1.6, 1.0 + 4 * 0.3)  # target pass: 1 + 0.3 / row
    c.observe(1, 0, 1.0, 0.0, 1.0)
    c.observe(1, 8, _costs(0.4, 1.0, 0.3, 8), 3.2, 1.0 + 8 * 0.3)
    assert c.catch_up_time(1) == pytest.approx(0.4)  # a draft step per token, a row's
    assert c.catch_up_time(6) == pytest.approx(0.4 * (1.0 + 0.3 * 5))  # 1.0, not 2.4 s
    c.observe_catch_up(1, 0.5)
    assert c.catch_up_per_token == pytest.approx(0.5)
    assert c.catch_up_time(6) == pytest.approx(0.5 * (1.0 + 0.3 * 5))
    c.observe_catch_up(8, 0.5 + 7 * 0.1)  # the line: 0.4 + 0.1 per token
    assert c.catch_up_time(4) == pytest.approx(0.8) and c.catch_up_time(1) == pytest.approx(0.5)
    assert c.catch_up_time(16) == pytest.approx(1.2 * 2)  # beyond the sizes seen: proportional


@pytest.mark.parametrize("cheap_lookup", [0.25, 0.9])  # lookup's seconds per token / drafting's
def test_joining_saves_where_drafting_beats_what_ran_and_pays_catch_ups_elsewhere(
    cheap_lookup: float,
) -> None:
    """join_saving(): per token of a request that decoded without the draft, joining saves
    t - drafting on the kinds of token that took t seconds more than drafting would (plain
    steps), and costs min(catch-up, drafting - t) on the cheaper ones (lookup's), which the draft
    would catch up on afterwards; the mean over the tokens seen. catch_up_pays() then weighs that
    over the tokens left against twice the read."""
    c = _fed(0.1, 0.05, 0.9, catch_up=0.2)
    drafting, plain = c.per_token(1)
    cu = c.catch_up_per_token
    assert cu == pytest.approx(0.2) and 0.0 < drafting < plain == pytest.approx(1.0)
    assert c.join_saving(1, 0.0, 0, 0.0, 0) == 0.0
    assert c.join_saving(1, 12 * plain, 12, 0.0, 0) == pytest.approx(plain - drafting)
    t = cheap_lookup * drafting
    loss = min(cu, drafting - t)
    assert c.join_saving(1, 0.0, 0, 12 * t, 12) == pytest.approx(-loss)
    assert c.join_saving(1, 3 * plain, 3, 9 * t, 9) == pytest.approx(
        (3 * (plain - drafting) - 9 * loss) / 12
    )
    dear = 2.0 * drafting  # lookup iterations dearer per token than drafting save the difference
    assert c.join_saving(1, 0.0, 0, 4 * dear, 4) == pytest.approx(drafting)
    assert T.DraftController(1, 8).join_saving(1, 12.0, 12, 0.0, 0) == 0.0  # nothing known


@pytest.mark.parametrize(
    "fixed, per_row, step_fixed, step_row, alpha, drafts",
    [
        (0.031, 0.009, 0.015, 0.004, 0.8, False),  # this CPU: rows cost compute; k = 0 at B = 3
        (0.031, 0.0003, 0.004, 0.0001, 0.9, True),  # a GPU: rows are almost free; it drafts
    ],
)
def test_a_batch_size_that_has_not_run_is_priced_from_the_others(
    fixed: float, per_row: float, step_fixed: float, step_row: float, alpha: float, drafts: bool
) -> None:
    """B = 3 has never run: its iterations are priced by the lines every pass and draft step
    fed (a pass of n rows: fixed + per_row n, within the sizes seen, proportional to the largest
    beyond; a draft step: B = 1's, scaled as the pass scales), so it does not open with a kFirstK
    iteration of 3 x 5 rows, and B's own costs, once measured, replace the prior."""

    def passes(n: int) -> float:
        return fixed + per_row * n

    def step(b: int) -> float:
        return step_fixed + step_row * b

    c = T.DraftController(4, 8)
    assert c.choose(3, [alpha] * 3, 8) == 4  # nothing at all measured: measure a drafting B
    assert c.pass_prior(4) == -1.0 and c.step_prior(2) == -1.0
    for k in (4, 0, 5):  # B = 1 measured: passes of 5, 1, 6 rows; a draft step of 1 row
        c.observe(1, k, k * step(1) + passes(k + 1), k * step(1), passes(k + 1))
    for n in range(1, 7):  # within the sizes seen: the line
        assert c.pass_prior(n) == pytest.approx(passes(n), rel=1e-9)
    assert c.pass_prior(12) == pytest.approx(passes(6) * 2, rel=1e-9)  # beyond: proportional
    assert c.step_prior(3) == pytest.approx(step(1) * passes(3) / passes(1), rel=1e-9)
    for k in range(9):
        prior = c.step_prior(3) * k + c.pass_prior(3 * (k + 1))
        assert c.predicted_time(3, k) == pytest.approx(prior, rel=1e-9)
        assert c.predicted_time(3, k, prior=False) < 0  # B = 3's own: nothing yet
        assert c.verify_time(3, k + 1) == pytest.approx(c.pass_prior(3 * (k + 1)), rel=1e-9)
    x = 0.0
    for _ in range(400):  # the long-run acceptance: alpha
        x += alpha
        c.observe_acceptance(int(x >= 1.0), 1)
        x -= int(x >= 1.0)
    rates = [3 * T.expected_tokens(alpha, k) / c.predicted_time(3, k) for k in range(9)]
    rates[0] = 3 / (c.predicted_time(3, 0) + (3 * c.catch_up_per_token if drafts else 0.0))
    best = int(np.argmax(rates))
    assert (best > 0) == drafts
    assert c.choose(3, [alpha] * 3, 8) == best  # from the prior, no measuring iteration first
    # The prompt read is judged at B = 3 by its prior, not by B = 1's saving.
    assert (c.saving_per_token(3) > 0) == drafts
    # B = 3's own measurements replace the prior.
    c.observe(3, 0, 0.5, 0.0, 0.5)
    assert c.predicted_time(3, 0) == pytest.approx(0.5)
    assert c.predicted_time(1, 0) == pytest.approx(passes(1))  # B = 1 keeps its own


def test_one_measured_pass_of_a_batch_size_does_not_price_its_other_row_counts() -> None:
    """B = 4 has run only plain steps (4 rows). Its verify passes of more rows per sequence are
    read off the cross-B line (here: 10 ms + 8 ms per row, a CPU where rows cost compute), not
    extrapolated from that one pass at +10% per row, which priced a lookup iteration of 4 x 7
    rows at 1.6 plain steps where it cost 5.9 and had it chosen over plain steps. Two measured
    row counts of B's own replace the line; B's own costs (prior=False) say nothing before."""

    def passes(n: int) -> float:
        return 10e-3 + 8e-3 * n

    c = T.DraftController(4, 8)
    lc = T.LookupController(4, 8, c)
    for k in (4, 0, 5):  # B = 1: passes of 5, 1 and 6 rows fit the line
        c.observe(1, k, k * 5e-3 + passes(k + 1), k * 5e-3, passes(k + 1))
    c.observe(4, 0, passes(4), 0.0, passes(4))  # B = 4: plain steps only
    for rows in range(2, 10):
        line = c.pass_prior(4 * rows)
        assert line > passes(4) * (1 + 0.1 * (rows - 1)) * 1.5  # far above the one-point guess
        assert c.verify_time(4, rows) == pytest.approx(line, rel=1e-9)
        assert c.verify_time(4, rows, prior=False) == -1.0
        assert lc.predicted_time(4, rows - 1) == pytest.approx(line, rel=1e-9)
    assert c.verify_time(4, 1) == pytest.approx(passes(4))  # measured: its own
    # One sequence of four has 6 lookup nodes at acceptance 0.8: the offer's time is the line's.
    k, tokens, seconds = lc.offer(4, [0.8, 0.5, 0.5, 0.5], [6, 0, 0, 0], 8)
    assert seconds == pytest.approx(c.pass_prior(4 * (k + 1)), rel=1e-9)
    assert tokens / seconds < 4 / passes(4)  # no offer beats a plain step here
    # B = 4 measures a verify of 3 rows per sequence: its own two points take over.
    c.observe_verify(4, 3, 0.2)
    assert c.verify_time(4, 2) == pytest.approx((passes(4) + 0.2) / 2)
    assert c.verify_time(4, 5, prior=False) == pytest.approx(0.2 + (0.2 - passes(4)) / 2 * 2)


def test_lookup_without_a_draft_model_prices_rows_from_its_own_line() -> None:
    """An engine without a draft model has no draft controller to ask: prompt lookup's controller
    fits its own line of iteration seconds against rows over every B, and a B with one measured
    k (plain steps) is priced by it, not at +35% of that step per node."""

    def passes(n: int) -> float:
        return 10e-3 + 8e-3 * n

    lc = T.LookupController(4, 8)
    for k in (0, 4, 5):  # B = 1: iterations of 1, 5 and 6 rows
        lc.observe(1, k, passes(k + 1))
    lc.observe(4, 0, passes(4))  # B = 4: plain steps only
    for k in range(1, 9):
        rows = 4 * (k + 1)
        line = passes(rows) if rows <= 6 else passes(6) * rows / 6  # proportional past 6 rows
        assert lc.predicted_time(4, k) == pytest.approx(line, rel=1e-9)
        assert lc.predicted_time(4, k, prior=False) == -1.0
    assert lc.predicted_time(1, 2) == pytest.approx(passes(3))  # B = 1: its own two points
    lc.observe(4, 2, 0.3)  # a second k of B = 4's own: interpolation takes over
    assert lc.predicted_time(4, 1) == pytest.approx((passes(4) + 0.3) / 2)


def test_lookup_prices_a_compacted_pass_at_the_rows_it_computes() -> None:
    """Where the verify pass skips padding rows (the CPU: Iteration::compact_rows), an offer to
    4 sequences of which one has nodes ready costs a pass of its rows, 3 + (1 + k), not
    4 (k + 1); an iteration that skipped rows feeds the line at its rows and leaves B's table
    alone."""

    def passes(n: int) -> float:
        return 10e-3 + 8e-3 * n

    lc = T.LookupController(4, 8)
    for k in (0, 2):  # B = 1 and 2: a line from 1 to 12 rows
        lc.observe(1, k, passes(k + 1))
    lc.observe(2, 5, passes(12))
    lc.observe(4, 0, passes(4))
    alphas, avail = [0.0, 0.0, 0.0, 0.9], [0, 0, 0, 8]
    for k in (1, 3, 6):
        assert lc.pass_time(4 + k) == pytest.approx(passes(4 + k), rel=1e-9)
    k, tokens, seconds = lc.offer(4, alphas, avail, 8, compact=True)
    assert seconds == pytest.approx(passes(4 + k), rel=1e-9)
    k_full, _, seconds_full = lc.offer(4, alphas, avail, 8)
    assert seconds_full == pytest.approx(lc.predicted_time(4, k_full), rel=1e-9)
    assert seconds_full > passes(4 + k_full)  # priced at 4 (k + 1) rows
    # The offer with compaction drafts deeper: its extra rows are one sequence's, not four.
    assert k > k_full
    before = lc.predicted_time(4, 3, prior=False)
    lc.observe(4, 3, 0.5, rows=7)  # a compacted pass: the line learns 7 rows, B = 4's table not
    assert lc.predicted_time(4, 3, prior=False) == before
    lc.observe(4, 3, passes(16), rows=16)  # a full pass: the table learns it
    assert lc.predicted_time(4, 3, prior=False) == pytest.approx(passes(16), rel=1e-9)


def test_estimate_relaxes_toward_the_long_run() -> None:
    e = T.AcceptanceEstimate()
    for _ in range(30):
        e.observe(0, 4)  # a bad stretch
    low = e.alpha
    assert low < 0.2
    for _ in range(20):
        e.relax(0.9)
    assert 0.75 < e.alpha < 0.9
    mass = e.accepted + e.rejected
    e.relax(0.5)
    assert e.accepted + e.rejected == pytest.approx(mass)


def test_expected_tokens() -> None:
    assert T.expected_tokens(0.0, 4) == 1.0
    assert T.expected_tokens(1.0, 4) == 5.0
    assert T.expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_a_request_waits_for_the_draft_only_where_waiting_is_expected_to_pay() -> None:
    """defers(): waiting costs a request that joins anyway up to defer_tokens x the saving per
    token, and saves one that never joins its prompt's read; weighed at the share of waiting
    requests that joined (0.5 at first, then a running mean over about 8), one in 8 of the
    others waiting all the same to keep that share current."""
    c = _fed(0.1, 0.05, 0.9, catch_up=0.2)
    assert not c.defers(1, 10**6, 12)  # the read's cost is not known yet
    c.observe_read(100, 100 * 0.02)  # 0.02 s a row
    saving = c.saving_per_token(1)
    assert saving > 0.0 and c.join_rate == 0.5
    even = 12 * saving / 0.02  # rows where half the read equals half the 12 tokens' saving
    assert c.defers(1, int(even) + 1, 12)
    assert [c.defers(1, int(even) - 1, 12) for _ in range(8)] == [False] * 7 + [True]
    for _ in range(40):
        c.observe_deferral(True)  # they all joined: waiting only lost their first tokens
    assert c.join_rate > 0.99
    assert [c.defers(1, 10 * int(even), 12) for _ in range(8)] == [False] * 7 + [True]
    for _ in range(40):
        c.observe_deferral(False)  # none joined: each saved its read
    assert c.join_rate < 0.01 and c.defers(1, 10, 12)


def test_passes_are_priced_by_their_measured_row_counts() -> None:
    """A CPU's pass is not a line in its rows: its matmul tiles take rows in blocks, so rows past
    a block cost more than the rows before them. Here 1-4 rows cost 100 ms + 10 ms per row and
    each row past 4 costs 30 ms. The cross-B line, fitted mostly to plain steps of 1-4 rows,
    under-priced the 8-row passes of lookup iterations at batch 4 (which then lost to plain
    steps); a row count that has been measured is priced at its own measurements, one between
    two measured counts on the straight line between them, and the line is left for the rest."""

    def passes(n: int) -> float:
        return 0.1 + 0.01 * min(n, 4) + 0.03 * max(0, n - 4)

    c = T.DraftController(4, 8)
    lc = T.LookupController(4, 8, c)
    for _ in range(6):
        for B in (1, 2, 3, 4):
            c.observe(B, 0, passes(B), 0.0, passes(B))  # plain steps: B rows
    c.observe(1, 3, 0.02 + passes(4), 0.02, passes(4))  # one draft iteration: 4 rows
    c.observe_verify(4, 2, passes(8))  # one pass of 8 rows (batch 4, 2 rows each)
    assert c.pass_prior(8) == pytest.approx(passes(8))
    # (The counts measured a few observations ago have faded towards the line a little.)
    assert c.pass_prior(6) == pytest.approx((passes(4) + passes(8)) / 2, rel=0.01)
    for n in (1, 2, 3, 4):
        assert c.pass_prior(n) == pytest.approx(passes(n), rel=0.03)
    # Batch 4 with one node each: a lookup iteration of 8 rows, priced as measured.
    k, tokens, seconds = lc.offer(4, [0.5] * 4, [1, 1, 1, 1], 1, True)
    assert k == 1 and seconds == pytest.approx(passes(8))
    # At acceptance 0.5 that iteration gives 6 tokens in 0.34 s against 4 in 0.14 s: no offer
    # beats plain steps at this price.
    assert tokens / seconds < 4 / passes(4)


def test_a_stalled_measurement_fades_once_its_k_is_not_chosen() -> None:
    """One iteration at k = 4 stalled by the machine (0.5 s where 0.15 s is usual) priced k = 4
    out; k = 4 was then never chosen again, so nothing corrected it. A T(B, k) that is not
    re-measured fades towards what the rest of the model predicts for it (draft steps and the
    pass line), so that after a few dozen other iterations k = 4 wins again at high acceptance."""
    step, row = 0.012, 0.015

    def verify(rows: int) -> float:
        return 0.04 + row * (rows - 1)

    c = T.DraftController(1, 8)
    c.observe(1, 4, 0.5, 0.4, 0.1)  # the stall
    stalled = c.predicted_time(1, 4)
    assert stalled == pytest.approx(0.5)
    for _ in range(3):
        c.observe(1, 0, verify(1))
        c.observe(1, 1, step + verify(2), step, verify(2))
    for _ in range(30):
        c.observe(1, 1, step + verify(2), step, verify(2))
        c.observe(1, 2, 2 * step + verify(3), 2 * step, verify(3))
    usual = 4 * step + verify(5)
    assert c.predicted_time(1, 4) < 1.2 * usual < 0.5 * stalled
    for _ in range(50):
        c.observe_acceptance(4, 4)
    assert c.choose(1, [0.95], 8) >= 3
