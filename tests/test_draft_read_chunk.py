"""The draft's prompt read after the first token (SchedulerOptions::draft_read_chunk,
``Engine(draft_read_chunk=N)``): the draft model reads none of a prompt before its first token,
then at most N rows per decode step while the request decodes without it, then catches up and
drafts. Needs: the test module, tiny random pairs (CPU)."""

from __future__ import annotations

import pytest
from native import T
from trt_spec import Engine

LONG = [int(x) for x in range(3, 43)]  # a 40-token prompt: the draft reads 39 rows
ROWS = len(LONG) - 1


def target_only(path, prompt: list[int], n: int) -> list[int]:
    r = Engine(path).generate(prompt, max_new_tokens=n, speculate=False, ignore_eos=True)
    return r.token_ids


def first_token(s) -> list[int]:
    """Steps until the first token; the draft reads no prompt row before it."""
    while True:
        got = [t for e in s.step() for t in e.tokens]
        if got:
            return got
        assert s.draft_prompt_rows == 0


def test_the_prompt_is_read_after_the_first_token_a_piece_per_step(noisy) -> None:
    """Prefill chunks of 16 rows, pieces of 12: none before the first token, then 12, 24, 36, 39
    rows, one piece per step; the steps before the last piece are plain target steps, and the
    draft model drafts once it has read the prompt. The output is the target's."""
    s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_read_chunk=12)
    rid = s.submit(LONG, 30, draft="model", draft_len=4)
    out = first_token(s)
    rows, sources = [], []
    while s.has_work:
        for e in s.step():
            assert e.id == rid
            out.extend(e.tokens)
        rows.append(s.draft_prompt_rows)
        sources.append(s.last_source if s.last_k > 0 else "none")
    assert rows[:4] == [12, 24, 36, ROWS]
    assert sources[:3] == ["none"] * 3
    assert "model" in sources[3:]
    assert out == target_only(noisy, LONG, 30)


@pytest.mark.parametrize("layer", [0, 1])
def test_the_pieces_leave_the_draft_cache_of_a_read_with_the_prefill(noisy, layer: int) -> None:
    """The draft's cache of the prompt after pieces of 5 rows equals, bit for bit, the one the
    default read leaves (chunks of 16 during the prefill, the rest after the first token)."""
    caches = []
    for chunk in (5, 0):
        s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_read_chunk=chunk)
        rid = s.submit(LONG, 40, draft="model", draft_len=4)
        while s.draft_prompt_rows < ROWS:
            s.step()
        caches.append(s.draft_kv(s.slot_of(rid), layer, ROWS))
    assert len(caches[0]) > 0 and caches[0] == caches[1]


@pytest.mark.parametrize("chunk", [1, 5, 64])
@pytest.mark.parametrize("draft", ["model", "auto"])
def test_greedy_output_is_the_targets(noisy, chunk: int, draft: str) -> None:
    got = Engine(noisy, draft_read_chunk=chunk, prefill_chunk=16).generate(
        LONG, max_new_tokens=64, draft=draft, ignore_eos=True
    )
    assert got.token_ids == target_only(noisy, LONG, 64)
    if draft == "model":
        assert got.stats.drafted > 0


def test_with_a_window_the_pieces_read_the_window(noisy) -> None:
    s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=8, draft_read_chunk=3)
    s.submit(LONG, 24, draft="model", draft_len=4)
    out = first_token(s)
    rows = []
    while s.has_work:
        for e in s.step():
            out.extend(e.tokens)
        rows.append(s.draft_prompt_rows)
    assert rows[:3] == [3, 6, 8]
    assert out == target_only(noisy, LONG, 24)


def test_a_self_draft_accepts_everything_once_it_has_caught_up(same) -> None:
    """The draft is the target: after its pieces and its catch-up of the tokens generated
    meanwhile, its cache is consistent with the target's, so every greedy draft is accepted."""
    for chunk in (1, 7, 100):
        r = Engine(same, draft_read_chunk=chunk, prefill_chunk=16).generate(
            LONG, max_new_tokens=60, draft="model", draft_len=4, ignore_eos=True
        )
        assert r.stats.drafted > 0 and r.stats.accepted == r.stats.drafted, chunk


def test_a_request_that_ends_before_the_read_leaves_its_slot_clean(same) -> None:
    """Pieces of 8 rows, one slot: a 3-token request ends with its draft's read unfinished; the
    next request in that slot reads its own prompt and accepts every draft (self-draft). (The
    prompt cache off: the second request would copy the first's prompt rows.)"""
    s = T.Session(str(same), "cpu", 1, 16, 4, draft_read_chunk=8, prompt_cache=False)
    first = [s.submit(LONG, 3, draft="model", draft_len=4), s.submit(LONG, 40, draft="model")]
    out: dict[int, list[int]] = {r: [] for r in first}
    stats = {}
    reads = []
    while s.has_work:
        for e in s.step():
            out[e.id].extend(e.tokens)
            if e.finished:
                stats[e.id] = e.stats
                reads.append(s.draft_prompt_rows)
    assert reads[0] == 16  # the first request ended after two pieces
    assert out[first[0]] == target_only(same, LONG, 3)
    assert out[first[1]] == target_only(same, LONG, 40)
    st = stats[first[1]]
    assert st.drafted > 0 and st.accepted == st.drafted


def test_a_request_cancelled_during_the_read_leaves_its_slot_clean(same) -> None:
    """Cancelled after two pieces of 5 rows: its event says so, and the next request in the slot
    reads its own prompt, catches up and accepts every draft (self-draft)."""
    s = T.Session(str(same), "cpu", 1, 16, 4, draft_read_chunk=5)
    a = s.submit(LONG, 50, draft="model", draft_len=4)
    first_token(s)
    s.step()
    s.step()
    assert s.draft_prompt_rows == 10
    s.cancel(a)
    b = s.submit(LONG[5:], 40, draft="model", draft_len=4)
    out: list[int] = []
    stats = None
    reasons = {}
    while s.has_work:
        for e in s.step():
            if e.finished:
                reasons[e.id] = e.reason
            if e.id == b:
                out.extend(e.tokens)
                stats = e.stats if e.finished else stats
    assert reasons[a] == "cancelled"
    assert out == target_only(same, LONG[5:], 40)
    assert stats.drafted > 0 and stats.accepted == stats.drafted


def test_while_another_decodes_each_step_reads_one_piece(noisy) -> None:
    """B's prompt arrives while A decodes with the draft model: B's draft reads 4 rows per step
    after B's first token, A keeps drafting meanwhile, and both outputs are the target's."""
    s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_read_chunk=4)
    a = s.submit([1, 2, 3], 60, draft="model", draft_len=4)
    got: dict[int, list[int]] = {a: []}
    for _ in range(3):
        for e in s.step():
            got[e.id].extend(e.tokens)
    base = s.draft_prompt_rows
    b = s.submit(LONG, 30, draft="model", draft_len=4)
    got[b] = []
    rows = [base]
    while s.has_work:
        for e in s.step():
            got[e.id].extend(e.tokens)
        rows.append(s.draft_prompt_rows)
    steps = [y - x for x, y in zip(rows, rows[1:], strict=False)]
    assert rows[-1] == base + ROWS and max(steps) <= 4 and sum(1 for d in steps if d) >= ROWS // 4
    assert got[a] == target_only(noisy, [1, 2, 3], 60)
    assert got[b] == target_only(noisy, LONG, 30)


def test_bad_values_are_refused(noisy) -> None:
    with pytest.raises(ValueError, match="draft_read_chunk"):
        Engine(noisy, draft_read_chunk=-1)
    with pytest.raises(ValueError, match="draft_read_chunk"):
        T.Session(str(noisy), "cpu", 2, 16, 4, draft_read_chunk=-3)
