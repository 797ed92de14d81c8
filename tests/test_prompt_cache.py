"""The prompt cache (SchedulerOptions::prompt_cache): a request takes the free KV slot whose cache
still holds the longest prefix of its prompt, left there by the slot's previous request's
prompt, and prefills only the rest; the draft model keeps what it read of that prefix.

Checks: a second turn that repeats the first turn's prompt reuses it (``stats.cached_tokens``)
and gives the tokens it gives with the cache off, greedy and sampled with the same seed, for
every draft source, on f32 and q4 engines (q4: the CPU's prompt rows attend with cheaper
products than decode rows, which is why only prompt rows are kept); two conversations keep
their own slots; a prompt equal to the cached one still prefills its last token; a request
cancelled mid-prefill leaves only what was prefilled; the server reports the cached tokens."""

from __future__ import annotations

import pytest
import spec_pairs
from trt_spec import Engine

TURN1 = [5, 9, 2, 7, 7, 1, 3, 100, 200, 17, 42, 8, 9, 9, 31, 64, 2, 5, 77, 13] * 3  # 60 tokens


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("prompt_cache")


def engines(root, weights: str, max_batch: int = 1, **kw) -> tuple[Engine, Engine]:
    path = spec_pairs.make_pair(
        root, "noisy", draft_len=4, max_batch=max_batch, max_seq_len=256, weights=weights
    )
    return Engine(path, n_threads=2, **kw), Engine(path, n_threads=2, prompt_cache=False, **kw)


def two_turns(e: Engine, draft: str, **sampling):
    a = e.generate(TURN1, max_new_tokens=12, draft=draft, ignore_eos=True, **sampling)
    turn2 = TURN1 + a.token_ids + [11, 12, 13, 14, 15]
    b = e.generate(turn2, max_new_tokens=24, draft=draft, ignore_eos=True, **sampling)
    return a, b


@pytest.mark.parametrize("weights", ["f32", "q4"])
@pytest.mark.parametrize("draft", ["none", "model", "lookup", "auto"])
def test_second_turn_reuses_the_prompt_and_gives_the_same_tokens(root, weights, draft) -> None:
    on, off = engines(root, weights)
    a_on, b_on = two_turns(on, draft)
    a_off, b_off = two_turns(off, draft)
    assert a_on.token_ids == a_off.token_ids and b_on.token_ids == b_off.token_ids
    assert a_on.stats.cached_tokens == 0
    # Turn 1's prompt rows are reused; its answer's rows are prefilled again (decode rows there).
    assert b_on.stats.cached_tokens == len(TURN1)
    assert b_off.stats.cached_tokens == 0
    assert b_on.stats.prompt_tokens == b_off.stats.prompt_tokens


@pytest.mark.parametrize("draft", ["model", "lookup"])
def test_sampled_second_turn_is_the_same_with_the_cache(root, draft) -> None:
    """Same seed, same tokens: the draft model's kept rows have the bits a fresh read gives. (A
    fixed draft_len: with "auto" the lengths follow measured times, and with them the draws.)"""
    on, off = engines(root, "q4")
    s = dict(temperature=0.9, top_p=0.95, seed=7, draft_len=3)
    a_on, b_on = two_turns(on, draft, **s)
    a_off, b_off = two_turns(off, draft, **s)
    assert a_on.token_ids == a_off.token_ids and b_on.token_ids == b_off.token_ids
    assert b_on.stats.cached_tokens == len(TURN1)


def test_the_same_prompt_again_prefills_its_last_token(root) -> None:
    on, off = engines(root, "f32")
    first = on.generate(TURN1, max_new_tokens=8)
    again = on.generate(TURN1, max_new_tokens=8)
    assert again.stats.cached_tokens == len(TURN1) - 1  # its row gives the first token
    assert again.token_ids == first.token_ids == off.generate(TURN1, max_new_tokens=8).token_ids


def test_two_conversations_keep_their_slots(root) -> None:
    on, _ = engines(root, "f32", max_batch=2)
    other = [300, 301, 302, 303] * 10
    on.generate(TURN1, max_new_tokens=4)
    on.generate(other, max_new_tokens=4)
    # Each follow-up finds its own history, whichever slot holds it.
    assert on.generate(other + [1, 2], max_new_tokens=4).stats.cached_tokens == len(other)
    assert on.generate(TURN1 + [1, 2], max_new_tokens=4).stats.cached_tokens == len(TURN1)
    # A prompt sharing nothing reuses nothing.
    assert on.generate([250, 251, 252], max_new_tokens=2).stats.cached_tokens == 0


def test_a_shorter_common_prefix_is_reused_partly(root) -> None:
    on, off = engines(root, "q4")
    on.generate(TURN1, max_new_tokens=4)
    fork = TURN1[:25] + [99, 98, 97]
    r = on.generate(fork, max_new_tokens=16, draft="model")
    assert r.stats.cached_tokens == 25
    assert r.token_ids == off.generate(fork, max_new_tokens=16, draft="model").token_ids


def test_cancelled_mid_prefill_keeps_only_what_was_prefilled(root) -> None:
    """A long prompt read in 16-row chunks, cancelled after its first chunk: the next request
    reuses those 16 rows only, and its output is still the cache-off output."""
    from native import T

    _, off = engines(root, "f32")
    s = T.Session(off.path, "cpu", 2, 16, 4)  # prefill_chunk 16
    long = (TURN1 * 3)[:150]
    a = s.submit(long, 8, draft="none")
    s.step()  # its first chunk
    s.cancel(a)
    while s.has_work:
        s.step()
    b = s.submit(long, 8, draft="model")
    tokens, done = [], None
    while s.has_work:
        for e in s.step():
            if e.id == b:
                tokens += e.tokens
                done = e if e.finished else done
    assert done is not None and done.stats.cached_tokens == 16
    assert tokens == off.generate(long, max_new_tokens=8, draft="model").token_ids


def test_logits_borrowing_slot_0_clears_the_cache(root) -> None:
    """Engine.logits writes slot 0's cache with its own rows: nothing is reused from it after."""
    on, off = engines(root, "f32")
    on.generate(TURN1, max_new_tokens=4)
    on.logits(TURN1[:20] + [250, 251, 252])
    r = on.generate(TURN1 + [1, 2], max_new_tokens=8)
    assert r.stats.cached_tokens == 0
    assert r.token_ids == off.generate(TURN1 + [1, 2], max_new_tokens=8).token_ids


def test_off_means_off(root) -> None:
    _, off = engines(root, "f32")
    off.generate(TURN1, max_new_tokens=4)
    assert off.generate(TURN1 + [1], max_new_tokens=4).stats.cached_tokens == 0


@pytest.mark.parametrize("kind", ["noisy", "eagle3"])
@pytest.mark.parametrize("weights", ["f32", "q4"])
def test_concurrent_requests_share_a_prompt_prefix(root, kind: str, weights: str) -> None:
    """Requests whose prompts share 32 or more tokens with a live one copy its prompt rows (the
    draft's and the head's too) instead of prefilling them, waiting for it to prefill them
    first: n choices of one prompt are read once. Their tokens are those each gets alone, with
    the cache off, greedy and sampled."""
    path = spec_pairs.make_pair(root, kind, draft_len=4, max_batch=4, max_seq_len=256,
                                weights=weights)  # fmt: skip
    off = Engine(path, n_threads=2, prompt_cache=False)
    shared = TURN1[:50]
    prompts = [shared + [1, 2, 3], shared + [4], shared, shared + [200] * 9]
    for kw in [{}, dict(temperature=0.9, seed=[3, 4, 5, 6])]:
        run = dict(max_new_tokens=20, ignore_eos=True, draft="auto", **kw)
        on = Engine(path, n_threads=2)  # (fresh: no free slot holds a prompt yet)
        got = on.generate(prompts, **run)
        want = off.generate(prompts, **run)
        if not kw:  # (sampled drafts' tokens depend on the proposals, their distribution not)
            assert [r.token_ids for r in got] == [r.token_ids for r in want]
        cached = sorted(r.stats.cached_tokens for r in got)
        assert cached[0] == 0 and all(c >= 32 for c in cached[1:]), cached
        assert all(r.stats.cached_tokens == 0 for r in want)
    greedy = dict(max_new_tokens=20, ignore_eos=True, draft="model")
    alone = off.generate(prompts[1], **greedy)
    assert on.generate(prompts, **greedy)[1].token_ids == alone.token_ids
