"""The draft model's prompt window (SchedulerOptions::draft_window, ``Engine(draft_window=)``):
the draft reads only the end of a long prompt, after the first token while nothing else decodes,
at draft positions that start at 0 (SeqState::draft_off). Needs: the test module, tiny random
pairs (CPU)."""

from __future__ import annotations

import pytest
from cuda_helpers import fields
from native import T
from trt_spec import Engine

LONG = [int(x) for x in range(3, 43)]  # a 40-token prompt
W = 8
OFF = len(LONG) - 1 - W  # the window's first position


def run(s, rid: int) -> list[int]:
    out: list[int] = []
    while s.has_work:
        for e in s.step():
            assert e.id == rid
            out.extend(e.tokens)
    return out


def test_the_window_is_read_after_the_first_token(noisy) -> None:
    """Chunks of 16 rows: no draft row is read before the first token; the first decode step
    reads the last W prompt rows before P - 1; the sequence's draft_off is their start."""
    s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=W)
    rid = s.submit(LONG, 12, draft="model", draft_len=4)
    first_at = None
    for step in range(10):
        got = [t for e in s.step() for t in e.tokens]
        if got:
            first_at = step
            break
        assert s.draft_prompt_rows == 0
    assert first_at == 2 and s.draft_prompt_rows == 0  # 16 + 16 + 8 rows; the draft read none
    assert fields(s.seq_state(rid))["draft_off"][0] == OFF
    s.step()
    assert s.draft_prompt_rows == W
    run(s, rid)
    assert s.draft_prompt_rows == W


def test_without_a_window_the_draft_reads_every_chunk_but_the_last_before_the_first_token(
    noisy,
) -> None:
    s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=0)
    rid = s.submit(LONG, 4, draft="model", draft_len=4)
    while not [t for e in s.step() for t in e.tokens]:
        pass
    assert s.draft_prompt_rows == 32
    assert fields(s.seq_state(rid))["draft_off"][0] == 0
    run(s, rid)
    assert s.draft_prompt_rows == len(LONG) - 1


@pytest.mark.parametrize("layer", [0, 1])
def test_the_window_is_cached_as_a_sequence_of_its_own(noisy, layer: int) -> None:
    """The draft's cache after reading LONG's window holds, bit for bit, what it holds after
    reading a prompt made of the window alone (the same tokens at draft positions 0 .. W - 1),
    and the prompt's last token, which the first draft step writes, at W."""
    a = T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=W)
    ra = a.submit(LONG, 6, draft="model", draft_len=4)
    b = T.Session(str(noisy), "cpu", 2, 256, 4, draft_window=0)
    rb = b.submit(LONG[OFF:], 6, draft="model", draft_len=4)
    for s in (a, b):
        while not [t for e in s.step() for t in e.tokens]:
            pass
        s.step()  # the draft reads its W rows, then the first iteration runs
    assert a.draft_prompt_rows == b.draft_prompt_rows == W
    ka = a.draft_kv(a.slot_of(ra), layer, W + 1)
    kb = b.draft_kv(b.slot_of(rb), layer, W + 1)
    assert len(ka) > 0 and ka == kb
    # A draft that read the whole prompt holds other entries there.
    c = T.Session(str(noisy), "cpu", 2, 256, 4, draft_window=0)
    rc = c.submit(LONG, 6, draft="model", draft_len=4)
    while not [t for e in c.step() for t in e.tokens]:
        pass
    c.step()
    assert c.draft_kv(c.slot_of(rc), layer, W + 1) != ka


def test_while_others_decode_the_window_is_read_as_the_chunks_pass(noisy) -> None:
    """B's 40-token prompt is carried 4 rows per step while A decodes: the draft reads B's window
    4 rows at a time as its chunks pass (no step reads it all), in order: B's draft cache then
    holds what a lone windowed request's holds. Both outputs are the target's."""
    s = T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=W)
    a = s.submit([1, 2, 3], 100, draft="model", draft_len=4)
    got: dict[int, list[int]] = {a: []}
    for _ in range(2):  # A: prefill and first token; its draft reads 2 rows; an iteration
        for e in s.step():
            got[e.id].extend(e.tokens)
    base = s.draft_prompt_rows
    assert base == 2
    b = s.submit(LONG, 8, draft="model", draft_len=4)
    got[b] = []
    rows = [base]
    while len(got[b]) < 2:
        for e in s.step():
            got[e.id].extend(e.tokens)
        rows.append(s.draft_prompt_rows)
    steps = [y - x for x, y in zip(rows, rows[1:], strict=False)]
    assert rows[-1] == base + W and max(steps) <= 4 and sum(1 for d in steps if d) >= 2
    kb = s.draft_kv(s.slot_of(b), 1, W + 1)
    lone = T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=W)
    rl = lone.submit(LONG, 8, draft="model", draft_len=4)
    while not [t for e in lone.step() for t in e.tokens]:
        pass
    lone.step()
    assert lone.draft_kv(lone.slot_of(rl), 1, W + 1) == kb
    while s.has_work:
        for e in s.step():
            got[e.id].extend(e.tokens)
    engine = Engine(noisy)
    for rid, prompt, n in ((a, [1, 2, 3], 100), (b, LONG, 8)):
        want = engine.generate(prompt, max_new_tokens=n, speculate=False, ignore_eos=True)
        assert got[rid] == want.token_ids


@pytest.mark.parametrize("window", [1, W, 39, 200])
@pytest.mark.parametrize("draft", ["model", "auto"])
def test_greedy_output_with_a_window_is_the_targets(noisy, window: int, draft: str) -> None:
    want = Engine(noisy).generate(LONG, max_new_tokens=24, speculate=False, ignore_eos=True)
    got = Engine(noisy, draft_window=window, prefill_chunk=16).generate(
        LONG, max_new_tokens=24, draft=draft, ignore_eos=True
    )
    assert got.token_ids == want.token_ids
    if draft == "model":
        assert got.stats.drafted > 0


def test_a_self_draft_with_the_whole_prompt_in_its_window_accepts_everything(same) -> None:
    """The draft is the target: with a window that holds the prompt (read after the first token,
    from draft position 0), every greedy draft token is accepted, as without a window."""
    for window in (0, len(LONG) - 1, 100):
        r = Engine(same, draft_window=window, prefill_chunk=16).generate(
            LONG, max_new_tokens=20, draft="model", draft_len=4, ignore_eos=True
        )
        assert r.stats.drafted > 0 and r.stats.accepted == r.stats.drafted, window


def test_bad_windows_are_refused(noisy) -> None:
    with pytest.raises(ValueError, match="draft_window"):
        Engine(noisy, draft_window=-1)
    with pytest.raises(ValueError, match="draft_window"):
        T.Session(str(noisy), "cpu", 2, 16, 4, draft_window=-3)
