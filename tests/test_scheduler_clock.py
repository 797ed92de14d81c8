"""The scheduler's measurements on a scripted device clock: what the draft-length controller and
the prefill pacer see.

They run on a CPU backend with a scripted device clock (the test module's Session(clock=...)):
every forward costs scripted seconds, the same on the synchronous path the CPU takes ("host") and
on the asynchronous one a GPU with graphs takes ("graphs", where a capture and a graph's first
launch cost far more than any iteration), so the controller must pick the same k on both and never
see the capture. The controller alone, and replayed over acceptance traces:
test_draft_controller.py.
"""

from __future__ import annotations

import pytest
import spec_pairs
from native import T

# ---- the scheduler's measurements on a scripted device clock ----------------------------------
# Seconds of a forward of n rows: fixed + row * n (target, draft); a capture and a graph's first
# launch (graphs) cost far more than any iteration.
TF, TR, DF, DR = 10e-3, 1e-3, 2e-3, 0.2e-3
CAPTURE, FIRST_LAUNCH = 1000.0, 500.0


def _phases(k: int) -> tuple[float, float]:
    """(draft, verify) seconds of an iteration of one sequence drafting k: draft step 0 reads 2
    rows, the others 1; the verify pass k + 1 rows."""
    return (k * DF + (k + 1) * DR if k else 0.0), TF + TR * (k + 1)


def _scripted(path, clock: str, draft_fixed: float = DF) -> tuple[object, list, list]:
    """Three greedy requests on the scripted clock: the session, (k, warm-up) per iteration and
    synchronisations per step."""
    s = T.Session(str(path), "cpu", 1, clock=clock)
    s.script_costs(TF, TR, draft_fixed, DR, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    its, syncs = [], []
    for i in range(3):
        s.submit([1 + i, 2, 3, 4, 5], 120, draft="model")
        while s.has_work:
            before, iterations = s.device_syncs, s.iterations
            s.step()
            syncs.append(s.device_syncs - before)
            if s.iterations > iterations:  # (the step that ends a prefill runs no iteration)
                its.append((s.last_k, s.last_warm_up))
    return s, its, syncs


def _mode(ks: list[int]) -> tuple[int, float]:
    best = max(set(ks), key=ks.count)
    return best, ks.count(best) / len(ks)


@pytest.fixture(scope="module")
def same_pair(tmp_path_factory: pytest.TempPathFactory):
    """A draft that is the target (greedy: every draft accepted), up to 6 draft tokens."""
    root = tmp_path_factory.mktemp("ctrl")
    return spec_pairs.make_pair(root, "same", draft_len=6, max_seq_len=256)


@pytest.mark.parametrize("draft_fixed, best", [(DF, 6), (3 * TF, 0)])
def test_graphs_pick_the_k_the_cpu_picks(same_pair, draft_fixed: float, best: int) -> None:
    """Timed with device timers (asynchronous, graphs) the controller converges to the k the
    synchronous CPU path picks: the longest draft when a draft step is cheap, none when it costs
    more than a target step. A capture (1000 s) or a graph's first launch (500 s) would make any
    k it entered look hopeless."""
    host, h_its, _ = _scripted(same_pair, "host", draft_fixed)
    graphs, g_its, _ = _scripted(same_pair, "graphs", draft_fixed)
    h_mode, h_share = _mode([k for k, _ in h_its])
    g_mode, g_share = _mode([k for k, _ in g_its])
    assert h_mode == g_mode == best
    assert h_share >= 0.8 and g_share >= 0.8, (h_share, g_share)
    assert not any(w for _, w in h_its)  # the CPU has no warm-up iterations
    assert graphs.captures > 0 and graphs.clock_s > graphs.captures * CAPTURE  # they were paid


def test_capture_never_enters_the_estimates(same_pair) -> None:
    """On the graph path every (source, B, k) is captured before its timed iteration, its first
    launch is a warm-up left out of the measurements, and the costs learnt are the scripted ones,
    phase by phase, as on the CPU."""
    for clock in ("host", "graphs"):
        s, its, syncs = _scripted(same_pair, clock)
        ks = [k for k, _ in its]
        warm = [i for i, (_, w) in enumerate(its) if w]
        if clock == "graphs":  # exactly the first iteration of each k (B is 1 throughout)
            assert warm == sorted(ks.index(k) for k in set(ks))
            assert s.captures == 2 * len(set(ks))  # two graphs (proposal, verify) per k
        for k in {k for k, w in its if not w}:  # measured: the scripted time (a measured k
            d, v = _phases(k)  # fades towards the model's prior while others run: within 2%)
            assert s.predicted_time("model", 1, k) == pytest.approx(d + v, rel=0.02), (clock, k)
            assert s.verify_time(1, k + 1) == pytest.approx(v, rel=1e-9), (clock, k)
        for k in range(7):  # unmeasured k: interpolated, and nowhere near a capture
            assert 0 < s.predicted_time("model", 1, k) < 2 * sum(_phases(6)), (clock, k)
        # Catch-ups of n tokens cost DF + DR n: per token between DR and DF + DR.
        assert DR < s.catch_up_per_token <= DF + DR + 1e-12, clock
        # One synchronisation per step: the iteration's read-back, or the first token of the
        # step that ends a prefill (that step runs no iteration). A timer read before it would
        # have thrown.
        assert syncs == [1] * len(syncs), syncs


def _drive(s, prompt: list[int], n: int, **kw) -> tuple[object, int, list[int]]:
    """One request on a session, run to its end: (its statistics, the prompt rows the draft model
    read meanwhile, its tokens)."""
    rows = s.draft_prompt_rows
    s.submit(prompt, n, **kw)
    stats, tokens = None, []
    for _ in range(400):
        for ev in s.step():
            tokens += ev.tokens
            if ev.finished:
                stats = ev.stats
        if not s.has_work:
            break
    assert stats is not None
    return stats, s.draft_prompt_rows - rows, tokens


@pytest.mark.parametrize("clock", ["host", "graphs"])
@pytest.mark.parametrize("draft_fixed, pays", [(DF, True), (3 * TF, False)])
def test_auto_leaves_the_prompt_unread_when_the_draft_does_not_pay(
    same_pair, clock: str, draft_fixed: float, pays: bool
) -> None:
    """draft="auto": once the costs are measured (the first request), a request whose draft
    model would not repay reading its prompt decodes without it (no prompt rows read, no 'm'
    iteration, stats.draft_model_skipped), one in 8 of those reading anyway. Where the read pays
    against plain steps, a 4-row prompt is read at once: waiting would save little (4 rows) and
    cost a request that joins anyway 12 tokens' saving; one in 8 of those waits all the same,
    decodes its first 12 tokens (kDeferTokens) with lookup and plain steps, and here, lookup
    finding little, the draft then reads the 4 prompt rows and those tokens in one read and
    drafts from then on. draft="model" and a fixed draft_len always read the prompt at once."""
    s = T.Session(str(same_pair), "cpu", 1, clock=clock)
    s.script_costs(TF, TR, draft_fixed, DR, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    skipped, read = [], []
    for i in range(10):
        stats, rows, _ = _drive(s, [1 + i, 2, 3, 4, 5], 24, draft="auto")
        skipped.append(stats.draft_model_skipped)
        read.append(rows)
        if skipped[-1]:
            assert "m" not in stats.sources and stats.catch_up_s == 0.0
        elif i == 8 and pays:  # 12 tokens or more without the draft, then the draft drafts
            src = stats.sources
            j = src.index("m")  # (after it, a plain step may end the request)
            assert j >= 12 and src[j:].count("m") >= len(src) - j - 1, src
    assert s.read_per_row > 0.0
    if pays:  # the read: after 12 plain steps (graphs: a warm-up is not counted in the 12)
        assert skipped == [False] * 10 and read[:8] + read[9:] == [4] * 9
        assert 4 + 12 <= read[8] <= 4 + (12 if clock == "host" else 16), read
    else:
        assert skipped == [False] + [True] * 7 + [False, True]
        assert read == [0 if k else 4 for k in skipped]
    for first, draft, draft_len in ((21, "model", None), (22, "auto", 2)):  # (nothing cached)
        stats, rows, _ = _drive(s, [first, 2, 3, 4, 5], 24, draft=draft, draft_len=draft_len)
        assert not stats.draft_model_skipped and rows == 4


@pytest.mark.parametrize("clock", ["host", "graphs"])
def test_auto_keeps_the_draft_out_where_lookup_does_better(same_pair, clock: str) -> None:
    """A draft that pays against plain steps and a 40-token prompt whose read (2 ms a row) costs
    more than half the 12 tokens' saving that waiting would lose: the request waits. Its
    predicted output is its answer (after the prompt's last token), so lookup drafts nearly every
    iteration at no draft cost, cheaper per token than the draft model would: the draft never
    reads (draft_model_skipped, no 'm' iteration), the output is the same, and the share of
    waiting requests that joined falls. Without the prediction lookup finds little and the same
    request has the draft join after its first 12 tokens."""
    s = T.Session(str(same_pair), "cpu", 1, clock=clock)
    s.script_costs(TF, TR, DF, 2e-3, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    prompt = [7] + [(3 * i) % 50 + 2 for i in range(39)]
    first, rows, expect = _drive(s, prompt, 64, draft="model")  # the costs, and the answer
    assert rows == 39 and "m" in first.sources
    stats, rows, out = _drive(s, prompt, 64, draft="auto", prediction=prompt[-1:] + expect)
    assert out == expect
    assert stats.draft_model_skipped and rows == 0 and "m" not in stats.sources
    assert stats.prediction_accepted > 40 and stats.sources.count("l") >= 8
    stats, rows, out = _drive(s, prompt, 64, draft="auto")
    assert out == expect
    assert not stats.draft_model_skipped and 39 + 12 <= rows <= 39 + 11 + 7
    assert "m" in stats.sources


@pytest.mark.parametrize("clock", ["host", "graphs"])
def test_auto_drafts_with_lookup_where_its_catch_ups_are_cheap(same_pair, clock: str) -> None:
    """The draft model has read a short prompt (at admission) and drafts every token right, and
    the predicted output is the answer, so lookup's trees are right as well (its acceptance
    learnt from a lookup request before). A lookup iteration of 7 tokens costs its verify pass
    (TF + 7 TR = 17 ms) plus, later, one catch-up of the draft over those 7 tokens (DF + 7 DR =
    3.4 ms): 2.9 ms a token against the model's 6 draft steps and pass (30.4 ms, 4.3 a token),
    so auto drafts with lookup. Priced as seven one-token catch-ups (2.2 ms each, the per-token
    charge before), lookup's iteration read 32.4 ms and the model won every iteration. (The
    prompt cache off: each of the three requests of one prompt reads it.)"""
    s = T.Session(str(same_pair), "cpu", 1, clock=clock, prompt_cache=False)
    s.script_costs(TF, TR, DF, DR, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    prompt = [1, 2, 3, 4, 5]
    _, rows, expect = _drive(s, prompt, 64, draft="model")  # the costs, and the answer
    assert rows == 4
    prediction = prompt[-1:] + expect
    stats, _, out = _drive(s, prompt, 64, draft="lookup", prediction=prediction)
    assert out == expect and stats.sources.count("l") >= 8
    stats, rows, out = _drive(s, prompt, 64, draft="auto", prediction=prediction)
    assert out == expect and rows >= 4 and not stats.draft_model_skipped
    src = stats.sources
    assert src.count("l") > 2 * src.count("m"), src
    assert s.catch_up_per_token > 0.0


@pytest.mark.parametrize("clock", ["host", "graphs"])
def test_lookup_must_beat_a_plain_step_by_a_margin(same_pair, clock: str) -> None:
    """draft="lookup" with the answer as its prediction, so that its nodes are right. Where rows
    are cheap (a pass: 10 ms + 1 ms a row) it drafts; once a verify row costs nearly a plain step
    (0.5 ms + 10.5 ms a row: the same 11 ms step), verifying k right nodes emits k + 1 tokens in
    about k + 1 steps' time, at best 1.05 times a plain step's rate, under
    Scheduler::kPlainMargin (1.1): once the costs are measured again (two requests) it decodes
    with plain steps (with no margin it kept drafting). The output is the same throughout."""
    s = T.Session(str(same_pair), "cpu", 1, clock=clock, prompt_cache=False)
    s.script_costs(TF, TR, DF, DR, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    prompt = [1, 2, 3, 4, 5]
    _, _, expect = _drive(s, prompt, 64, draft="none")
    prediction = prompt[-1:] + expect
    for _ in range(2):  # cheap rows: lookup drafts, right every time
        stats, _, out = _drive(s, prompt, 64, draft="lookup", prediction=prediction)
        assert out == expect and stats.sources.count("l") >= 6, stats.sources
    s.script_costs(0.5e-3, 10.5e-3, DF, DR, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    for _ in range(3):  # dear rows: two requests measure them, the third goes plain
        stats, _, out = _drive(s, prompt, 64, draft="lookup", prediction=prediction)
        assert out == expect
    src = stats.sources
    assert src.count("l") <= len(src) // 4, src


@pytest.fixture(scope="module")
def same_pair4(tmp_path_factory: pytest.TempPathFactory):
    """The same pair for batches of up to 4 sequences."""
    root = tmp_path_factory.mktemp("ctrl4")
    return spec_pairs.make_pair(root, "same", draft_len=6, max_batch=4, max_seq_len=256)


@pytest.mark.parametrize("clock", ["host", "graphs"])
def test_a_batch_catches_up_in_one_draft_forward(same_pair4, clock: str) -> None:
    """Four sequences drafting with the model (every draft token right). A fresh batch size
    measures a plain step after its first drafting iteration, and that step leaves each sequence
    a token the draft has not read: the next drafting iteration first reads all four in ONE draft
    forward. On a clock where a draft forward costs DF whatever its rows, the four requests'
    catch-up seconds (each its share by rows) sum to DF per catch-up, not 4 DF; and the draft,
    having read the right rows, keeps drafting every token right."""
    s = T.Session(str(same_pair4), "cpu", 1, clock=clock)
    s.script_costs(TF, TR, DF, 0.0, capture=CAPTURE, first_launch=FIRST_LAUNCH)
    for i in range(4):
        s.submit([1 + i, 2, 3, 4, 5], 64, draft="model")
    stats, ks = [], []
    for _ in range(400):
        before = s.iterations
        for ev in s.step():
            if ev.finished:
                stats.append(ev.stats)
        if s.iterations > before:
            ks.append(s.last_k)
        if not s.has_work:
            break
    assert len(stats) == 4
    catch_ups = sum(1 for a, b in zip(ks[:-1], ks[1:], strict=True) if a == 0 and b > 0)
    assert catch_ups >= 1, ks
    assert sum(st.catch_up_s for st in stats) == pytest.approx(catch_ups * DF, rel=1e-6)
    for st in stats:
        assert st.catch_up_s == pytest.approx(catch_ups * DF / 4, rel=1e-6)
        assert st.drafted > 0 and st.accepted == st.drafted


# ---- prefill chunks paced by the same device time ---------------------------------------------
PF, PR = 2.0**-6, 2.0**-10  # a target forward of n rows: PF + PR n (binary: exact quotients)


@pytest.mark.parametrize("clock", ["host", "graphs"])
def test_a_long_prompt_is_paced_to_one_decode_iteration(tmp_path, clock: str) -> None:
    """While one sequence decodes (target only: an iteration costs PF + PR), a long prompt is
    prefilled in chunks whose rows cost about one such iteration, (PF + PR) / PR = 17 rows, once
    the pacer has seen two chunk sizes; not the 64-row cap, which would cost 4.8 iterations of the
    decoding stream's time per chunk. On the graph path too: the times are the device's, read
    after the read-back. On the host path the decoding stream's iteration carries each chunk
    (no fixed cost of its own): the pacer learns a carried row's cost from the iteration's time
    less the iteration's predicted cost, and the first chunk comes with B's first token, B's
    first iteration at the next step."""
    path = spec_pairs.make_pair(tmp_path, "same", draft_len=2, max_seq_len=256, max_batch=2)
    s = T.Session(str(path), "cpu", 1, interleave_chunk=64, clock=clock)
    s.script_costs(PF, PR, 0.0, 0.0)
    s.submit([1, 2, 3, 4, 5], 200, draft="none")
    for _ in range(3):  # its prefill (5 rows, alone: prefill_chunk) and iterations (on graphs,
        s.step()  # the first is a warm-up, not measured)
    s.submit([(7 * i) % 300 + 1 for i in range(200)], 4, draft="none")
    chunks = []
    for _ in range(40):
        s.step()
        if sum(chunks) < 200:
            chunks.append(s.last_prefill_rows)
        if s.last_batch == 2:  # B decodes beside A
            break
    assert sum(chunks) == 200, chunks
    assert chunks[0] == 8, chunks  # one size seen (5 rows): per row over-estimated, the minimum
    assert all(c == 17 for c in chunks[1:-1]), chunks
    if clock == "host":  # carried rows at PR; separate chunks seen: the 5-row one alone
        assert s.carried_row_s == pytest.approx(PR, rel=1e-6)
        assert s.prefill_row_s == pytest.approx((PF + 5 * PR) / 5, rel=1e-6)
    else:
        assert s.carried_row_s == 0.0
        assert s.prefill_row_s == pytest.approx(PR, rel=1e-6)
    # The last step's iteration, of both sequences, costs PF + 2 PR: one step of the average (on
    # graphs its first (B = 2) run is a warm-up, left out).
    last = PF + PR if clock == "graphs" else PF + 2 * PR
    assert s.pacer_decode_s == pytest.approx(0.8 * (PF + PR) + 0.2 * last, rel=1e-9)
