"""Engine.generate on a tiny engine: inputs, streaming, stops, seeds, statistics."""

from __future__ import annotations

import pytest
from trt_spec import Engine, GenerationStream

PROMPT = [5, 9, 33, 120, 7, 7, 250, 3]


@pytest.fixture(scope="module")
def engine(tiny) -> Engine:
    path, _ = tiny.engine("qwen2", "f32")
    return Engine(path)


def test_text_tokens_and_messages_inputs(engine: Engine) -> None:
    text = "def f(x):\n    return x"
    by_text = engine.generate(text, max_new_tokens=8)
    by_ids = engine.generate(engine.encode(text), max_new_tokens=8)
    assert by_text.token_ids == by_ids.token_ids
    assert by_text.prompt_token_ids == engine.encode(text)
    msgs = [{"role": "user", "content": "hi"}]
    r = engine.generate(msgs, max_new_tokens=4)
    assert r.prompt_token_ids == engine.encode(engine.tokenizer.apply_chat_template(msgs))


def test_stream_yields_the_same_text(engine: Engine) -> None:
    full = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True)
    stream = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True, stream=True)
    assert isinstance(stream, GenerationStream)
    pieces = list(stream)
    assert "".join(pieces) == full.text
    assert stream.result is not None and stream.result.token_ids == full.token_ids
    assert full.text == engine.decode(full.token_ids)


def test_stop_token_ends_generation_inclusive(engine: Engine) -> None:
    full = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True)
    stop_at = full.token_ids[5]
    first = full.token_ids.index(stop_at)
    r = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True, stop=[stop_at])
    assert r.token_ids == full.token_ids[: first + 1]
    assert r.finish_reason == "stop_token"


def test_stop_string_cuts_text_exactly(engine: Engine) -> None:
    full = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True)
    assert len(full.text) > 12
    needle = full.text[8:11]
    cut = full.text.index(needle)
    r = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True, stop=needle)
    assert r.text == full.text[:cut]
    assert r.finish_reason == "stop_string"
    s = engine.generate(PROMPT, max_new_tokens=30, ignore_eos=True, stop=[needle], stream=True)
    assert "".join(s) == full.text[:cut]


def test_eos_stops_unless_ignored(engine: Engine) -> None:
    eos = engine.metadata["tokenizer"]["eos_id"]
    assert eos in engine.metadata["tokenizer"]["eog_ids"]
    full = engine.generate(PROMPT, max_new_tokens=60, ignore_eos=True)
    r = engine.generate(PROMPT, max_new_tokens=60)
    if eos in full.token_ids:
        assert r.token_ids == full.token_ids[: full.token_ids.index(eos) + 1]
        assert r.finish_reason == "stop_token"
    else:
        assert r.token_ids == full.token_ids


def test_max_new_tokens_and_context_limit(engine: Engine) -> None:
    assert engine.generate(PROMPT, max_new_tokens=0).token_ids == []
    r = engine.generate(PROMPT, max_new_tokens=7, ignore_eos=True)
    assert len(r.token_ids) == 7 and r.finish_reason == "max_new_tokens"
    near = [3] * (engine.max_seq_len - 4)
    r = engine.generate(near, max_new_tokens=100, ignore_eos=True)
    # 4 free positions: 4 tokens fed back plus the one sampled from the last position.
    assert len(r.token_ids) == 5 and r.finish_reason == "max_seq_len"


def test_sampling_is_seeded_and_reproducible(engine: Engine) -> None:
    kw = dict(max_new_tokens=24, temperature=1.0, ignore_eos=True)
    a = engine.generate(PROMPT, seed=1, **kw).token_ids
    b = engine.generate(PROMPT, seed=1, **kw).token_ids
    c = engine.generate(PROMPT, seed=2, **kw).token_ids
    assert a == b and a != c
    greedy = engine.generate(PROMPT, max_new_tokens=24, ignore_eos=True).token_ids
    assert engine.generate(PROMPT, seed=5, top_k=1, **kw).token_ids == greedy
    assert engine.generate(PROMPT, seed=5, top_p=1e-6, **kw).token_ids == greedy


def test_statistics_are_consistent(engine: Engine) -> None:
    # Target-only: the prefill gives the first token, each decode iteration one more.
    plain = engine.generate(PROMPT, max_new_tokens=20, ignore_eos=True, speculate=False).stats
    assert plain.iterations == 19 and plain.spec_iterations == 0 and plain.accepted == 0
    # The default (auto: prompt lookup on this draft-less engine) drafts where its measured costs
    # say it pays, so the iteration count varies; each iteration still emits its kept draft
    # tokens plus one.
    r = engine.generate(PROMPT, max_new_tokens=20, ignore_eos=True)
    s = r.stats
    assert s.prompt_tokens == len(PROMPT) and s.new_tokens == 20
    assert s.new_tokens == 1 + s.iterations + s.accepted and s.iterations <= 19
    assert 0 < s.ttft_s <= s.total_s
    assert s.tokens_per_s == pytest.approx(20 / s.total_s)
    assert s.decode_tokens_per_s > 0 and s.prefill_tokens_per_s > 0
    assert 0 <= s.itl_p50_ms <= s.itl_p95_ms <= s.itl_p99_ms
    assert "tok/s" in str(s) and s.as_dict()["stop_reason"] == "max_new_tokens"


def test_engine_reports_itself(engine: Engine) -> None:
    assert engine.backend.startswith("cpu-")
    assert engine.weights == "f32" and not engine.has_draft
    assert engine.config()["arch"] == "qwen2"
    assert "qwen2" in repr(engine)
