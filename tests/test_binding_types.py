"""The scheduler's data across the public binding (cpp/bindings/events.h): a typed Request in, a
typed Event and RequestStats out, each name with one meaning (max_draft_len: the engine's bound;
draft_len: a request's setting, None for auto), validation in C++ (Scheduler.submit), and the
generated stubs saying so."""

from __future__ import annotations

from importlib import resources

import pytest
from engine_file_tools import PROMPT
from trt_spec import Engine, _core

# The tiny engine of conftest.engine_path: vocabulary 384, max_seq_len 64, no draft model,
# prompt lookup up to 8 tokens.
VOCAB, SEQ, K = 384, 64, 8
IDS = [3, 17, 250, 99, 5, 42, 42, 7, 3, 17, 250, 99]


@pytest.fixture
def sched(engine_path) -> _core.Scheduler:
    return _core.Scheduler(_core.Runtime(str(engine_path), "cpu", 2))


def run(s: _core.Scheduler) -> list[_core.Event]:
    events = []
    while s.has_work:
        events += s.step()
    return events


def test_request_fields_and_defaults() -> None:
    r = _core.Request([5, 6, 7])
    assert (r.prompt, r.max_new_tokens, r.temperature, r.top_k, r.top_p, r.seed) == (
        [5, 6, 7], 128, 0.0, 0, 1.0, 0
    )  # fmt: skip
    assert (r.stop_ids, r.stop_strings, r.prediction) == ([], [], [])
    assert r.draft == "auto" and r.draft_len is None  # None: auto
    r = _core.Request([1], 4, temperature=0.5, seed=2**64 - 1, stop_strings=["\n"], draft_len=3)
    assert (r.max_new_tokens, r.temperature, r.seed, r.stop_strings, r.draft_len) == (
        4, 0.5, 2**64 - 1, ["\n"], 3
    )  # fmt: skip
    r.draft_len = None
    r.top_k = 7
    assert r.draft_len is None and r.top_k == 7
    with pytest.raises(TypeError):  # after max_new_tokens, keywords only
        _core.Request([1], 4, 0.5)


def test_events_and_statistics_are_typed(sched) -> None:
    rid = sched.submit(_core.Request(IDS, 6, draft="lookup", draft_len=2))
    events = run(sched)
    assert events and all(isinstance(e, _core.Event) and e.id == rid for e in events)
    *running, last = events
    for e in running:
        assert not e.finished and e.reason == "" and e.stats is None
    assert last.finished and last.reason in _core.FINISH_REASONS
    tokens = [t for e in events for t in e.tokens]
    assert len(tokens) == 6 and all(isinstance(e.text, bytes) for e in events)
    st = last.stats
    assert isinstance(st, _core.RequestStats)
    assert (st.draft, st.draft_len, st.prompt_tokens) == ("lookup", 2, len(IDS))
    assert st.prompt_attention == "f32"  # an f32 engine
    assert len(st.token_times) == 6 and len(st.accepted_hist) == K + 1
    assert set(st.by_source) == set(_core.DRAFT_SOURCES)
    assert set(st.by_source["lookup"]) == {"iterations", "drafted", "accepted"}
    assert sum(c["iterations"] for c in st.by_source.values()) == st.iterations
    assert st.by_source["lookup"]["drafted"] == st.drafted
    assert set(st.accepted_hist_by_source) == set(_core.DRAFT_SOURCES)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"prompt": []}, r"the prompt is empty"),
        ({"prompt": [5, VOCAB]}, rf"the prompt holds token id {VOCAB} at index 1"),
        ({"prompt": [5] * (SEQ + 1)}, rf"more than this engine's max_seq_len of {SEQ}"),
        ({"max_new_tokens": -1}, r"max_new_tokens must be >= 0, got -1"),
        ({"stop_ids": [-3]}, r"stop holds token id -3"),
        ({"prediction": [1, VOCAB]}, r"the prediction holds token id"),
        ({"stop_strings": [""]}, r"stop strings must not be empty"),
        ({"temperature": -1.0}, r"temperature must be a finite number >= 0"),
        ({"top_p": 0.0}, r"top_p must lie in \(0, 1\]"),
        ({"top_k": -2}, r"top_k must be >= 0, got -2"),
        ({"draft": "ngram"}, r"draft must be 'auto', 'model', 'lookup' or 'none'"),
        ({"draft": "model"}, r"this engine has no draft model"),
        ({"draft_len": -1}, r"draft_len must be 'auto' or an integer >= 0, got -1"),
        ({"draft_len": K + 1}, rf"draft_len must be 'auto' or in \[0, {K}\]"),
    ],
)
def test_submit_validates_in_cpp(sched, fields: dict, message: str) -> None:
    """The binding's own checks, with no Python layer in between: a ValueError naming the field,
    and the scheduler keeps working."""
    kw = {"prompt": [5, 6], "max_new_tokens": 2, **fields}
    with pytest.raises(ValueError, match=message):
        sched.submit(_core.Request(kw.pop("prompt"), kw.pop("max_new_tokens"), **kw))
    assert not sched.has_work
    sched.submit(_core.Request([5, 6], 2))
    assert sum(len(e.tokens) for e in run(sched)) == 2


def test_engine_and_request_draft_lengths(small_engine: Engine) -> None:
    """max_draft_len is the engine's bound; a request's draft_len ('auto' or k) comes back as
    it was asked in its statistics."""
    assert small_engine.max_draft_len == K
    fixed = small_engine.generate(PROMPT, max_new_tokens=4, draft="lookup", draft_len=3)
    auto = small_engine.generate(PROMPT, max_new_tokens=4)
    assert (fixed.stats.draft, fixed.stats.draft_len) == ("lookup", 3)
    assert (auto.stats.draft, auto.stats.draft_len) == ("auto", "auto")


def test_stubs_type_the_binding() -> None:
    stub = (resources.files("trt_spec") / "_core.pyi").read_text()
    for text in (
        "class Request:",
        "class Event:",
        "class RequestStats:",
        "def submit(self, request: Request) -> int:",
        "def step(self) -> list[Event]:",
        "def stats(self) -> RequestStats | None:",
        "def draft_len(self) -> int | None:",
        "def max_draft_len(self) -> int:",
    ):
        assert text in stub, text
