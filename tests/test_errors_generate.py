"""Bad generation parameters raise ValueError; the same Engine keeps working afterwards."""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pytest
from engine_file_tools import PROMPT, SEQ, load_engine_bytes, reserialise
from trt_spec import Engine

# ---- generation parameters --------------------------------------------------------------------


@pytest.fixture
def engine(small_engine: Engine) -> Engine:
    return small_engine


CHAT_ERR = r"each chat message must be a mapping with 'role' and 'content'"
PROMPT_TYPE_ERR = r"prompt must be a str, a sequence of token ids or a list of chat messages"

PARAM_CASES: list[tuple[str, object, dict, str]] = [
    (
        "prompt-too-long",
        [5] * (SEQ + 1),
        {},
        rf"65 tokens, more than this engine's max_seq_len of {SEQ}",
    ),
    ("prompt-way-too-long", "x " * 500, {}, r"more than this engine's max_seq_len of 64"),
    ("empty-text", "", {}, r"the prompt is empty"),
    ("empty-ids", [], {}, r"the prompt is empty"),
    ("empty-array", np.zeros(0, dtype=np.int64), {}, r"the prompt is empty"),
    ("negative-id", [5, -1], {}, r"token id -1 at index 1, outside the vocabulary \[0, 384\)"),
    ("id-equals-vocab", [384], {}, r"token id 384 at index 0, outside the vocabulary \[0, 384\)"),
    ("negative-id-array", np.array([3, -7], dtype=np.int32), {}, r"token id -7 at index 1"),
    ("id-beyond-int32", [5, 2**40], {}, r"token id"),
    ("id-beyond-int32-array", np.array([2**33], dtype=np.int64), {}, r"token id"),
    ("stop-id-vocab", [5], {"stop": 384}, r"stop holds token id 384"),
    ("stop-id-negative", [5], {"stop": ["ab", -2]}, r"stop holds token id -2"),
    ("stop-id-beyond-int32", [5], {"stop": 2**40}, r"stop"),
    ("stop-float", [5], {"stop": 1.5}, r"stop"),
    (
        "temperature-negative",
        [5],
        {"temperature": -0.5},
        r"temperature must be a finite number >= 0",
    ),
    ("temperature-nan", [5], {"temperature": math.nan}, r"temperature must be a finite number"),
    ("temperature-inf", [5], {"temperature": math.inf}, r"temperature must be a finite number"),
    ("temperature-minus-inf", [5], {"temperature": -math.inf}, r"temperature must be a finite"),
    ("top-p-zero", [5], {"top_p": 0.0}, r"top_p must lie in \(0, 1\]"),
    ("top-p-negative", [5], {"top_p": -0.1}, r"top_p must lie in \(0, 1\]"),
    ("top-p-above-one", [5], {"top_p": 1.5}, r"top_p must lie in \(0, 1\]"),
    ("top-p-nan", [5], {"top_p": math.nan}, r"top_p must lie in \(0, 1\]"),
    ("top-k-negative", [5], {"top_k": -1}, r"top_k must be >= 0, got -1"),
    ("top-k-float", [5], {"top_k": 2.5}, r"top_k must be an integer"),
    ("max-new-negative", [5], {"max_new_tokens": -1}, r"max_new_tokens must be >= 0, got -1"),
    ("max-new-float", [5], {"max_new_tokens": 8.0}, r"max_new_tokens must be an integer"),
    ("max-new-bool", [5], {"max_new_tokens": True}, r"max_new_tokens must be an integer"),
    ("seed-negative", [5], {"seed": -1}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ("seed-too-big", [5], {"seed": 2**64}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ("seed-float", [5], {"seed": 1.5}, r"seed must be an integer"),
    ("prompt-float", 1.5, {}, PROMPT_TYPE_ERR + r", got float"),
    ("prompt-int", 7, {}, PROMPT_TYPE_ERR + r", got int"),
    ("prompt-none", None, {}, PROMPT_TYPE_ERR + r", got NoneType"),
    ("prompt-dict", {"role": "user", "content": "hi"}, {}, PROMPT_TYPE_ERR + r", got dict"),
    ("prompt-float-list", [1.0, 2.0], {}, r"token ids must be integers, got float"),
    ("prompt-bool-list", [True, False], {}, r"token ids must be integers, got bool"),
    ("prompt-str-int-list", [1, "f"], {}, r"token ids must be integers, got str"),
    ("batch-bad-item", ["def", [1, "f"]], {}, r"token ids must be integers, got str"),
    ("batch-stream", ["a", "b"], {"stream": True}, r"stream=True takes one prompt"),
    ("draft-len-bad", [1, 2], {"draft_len": "fast"}, r"draft_len must be .auto. or an integer"),
    ("draft-model-no-draft", [1, 2], {"draft": "model"}, r"this engine has no draft model"),
    ("draft-bad-name", [1, 2], {"draft": "ngram"}, r"draft must be 'auto', 'model', 'lookup'"),
    ("draft-not-str", [1, 2], {"draft": 1}, r"draft must be one of"),
    ("draft-len-too-big", [1, 2], {"draft_len": 9}, r"draft_len must be 'auto' or in \[0, 8\]"),
    ("draft-len-negative", [1, 2], {"draft_len": -1}, r"draft_len must be 'auto' or an integer"),
    ("prediction-bad-type", [1, 2], {"prediction": 3.5}, r"prediction must be text"),
    ("prediction-bad-id", [1, 2], {"prediction": [1, 384]}, r"prediction holds token id 384"),
    ("prediction-float-ids", [1, 2], {"prediction": [1.0]}, r"prediction ids must be integers"),
    ("stop-string-empty", [5], {"stop": ""}, r"stop strings must not be empty"),
    ("speculate-bad", [1, 2], {"speculate": 1}, r"speculate must be True or False"),
    ("seeds-count", ["a", "b"], {"seed": [1]}, r"got 1 seeds for 2 prompts"),
    ("prompt-mixed-list", [1, None], {}, r"token ids must be integers, got NoneType"),
    ("array-2d", np.array([[1, 2]]), {}, r"one-dimensional and integer"),
    ("array-float", np.array([1.0, 2.0]), {}, r"one-dimensional and integer"),
    ("chat-no-content", [{"role": "user"}], {}, CHAT_ERR),
    ("chat-no-role", [{"content": "hi"}], {}, CHAT_ERR),
    ("chat-then-str", [{"role": "user", "content": "hi"}, "oops"], {}, CHAT_ERR),
    ("chat-then-int", [{"role": "user", "content": "hi"}, 3], {}, CHAT_ERR),
    ("stream-validates", [5], {"temperature": -1.0, "stream": True}, r"temperature must be"),
]


@pytest.mark.parametrize(
    "prompt, kwargs, pattern", [c[1:] for c in PARAM_CASES], ids=[c[0] for c in PARAM_CASES]
)
def test_bad_generation_parameter(engine, baseline, prompt, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        engine.generate(prompt, **kwargs)
    # Nothing is lost: the same Engine still generates exactly what it did before.
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_bad_parameters_do_not_disturb_sampling_or_streaming(engine, baseline):
    sampled = engine.generate(PROMPT, max_new_tokens=8, temperature=0.9, top_p=0.9, seed=7)
    for _, prompt, kwargs, _ in PARAM_CASES:
        try:
            engine.generate(prompt, **kwargs)
        except (ValueError, TypeError):
            pass
    again = engine.generate(PROMPT, max_new_tokens=8, temperature=0.9, top_p=0.9, seed=7)
    assert again.token_ids == sampled.token_ids
    stream = engine.generate(PROMPT, max_new_tokens=8, stream=True)
    text = "".join(stream)
    assert stream.result is not None and stream.result.token_ids == baseline
    assert text == stream.result.text
    assert engine.logits(PROMPT).shape[1] == engine.vocab_size


@pytest.mark.parametrize("param", ["max_new_tokens", "top_k"])
def test_huge_integer_parameter_is_accepted_or_value_error(engine, baseline, param):
    """max_new_tokens / top_k of 2**31 and up: either a sensible request (it ends at max_seq_len;
    top_k beyond the vocabulary means off) or a ValueError naming the parameter. Today nanobind
    rejects the C++ int with a TypeError ("incompatible function arguments")."""
    try:
        r = engine.generate([5, 6], **{param: 2**31}, ignore_eos=True)
    except ValueError as e:
        assert param in str(e)
    else:
        assert r.finish_reason in ("max_seq_len", "max_new_tokens")
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_logits_bad_prompt(engine):
    with pytest.raises(ValueError, match=r"token id -1 at index 0"):
        engine.logits([-1])
    with pytest.raises(ValueError, match=r"at least one token"):
        engine.logits([])
    with pytest.raises(ValueError, match=r"max_seq_len is 64"):
        engine.logits([5] * (SEQ + 1))


def test_prompt_of_exactly_max_seq_len(engine, baseline):
    r = engine.generate([5] * SEQ, max_new_tokens=5, ignore_eos=True)
    assert len(r.token_ids) == 1
    assert r.finish_reason == "max_seq_len"
    r = engine.generate([5] * SEQ, max_new_tokens=5)
    assert len(r.token_ids) <= 1
    assert r.finish_reason in ("max_seq_len", "stop_token")
    r = engine.generate([5] * (SEQ - 1), max_new_tokens=5, ignore_eos=True)
    assert len(r.token_ids) == 2 and r.finish_reason == "max_seq_len"
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_max_new_tokens_zero(engine, baseline):
    r = engine.generate(PROMPT, max_new_tokens=0)
    assert r.token_ids == [] and r.text == ""
    assert r.finish_reason == "max_new_tokens"
    assert r.prompt_token_ids == engine.encode(PROMPT)
    stream = engine.generate(PROMPT, max_new_tokens=0, stream=True)
    assert list(stream) == []
    assert stream.result is not None and stream.result.token_ids == []
    assert engine.generate(PROMPT, max_new_tokens=8).token_ids == baseline


def test_chat_prompt_without_template(tmp_path, raw, meta):
    m = copy.deepcopy(meta)
    m["tokenizer"]["chat_template"] = None
    e = load_engine_bytes(tmp_path, reserialise(raw, m))
    with pytest.raises(ValueError, match=r"has no chat template"):
        e.generate([{"role": "user", "content": "hi"}], max_new_tokens=2)
    assert len(e.generate("hi", max_new_tokens=2).token_ids) >= 1


def test_valid_chat_prompt_after_malformed_ones(engine):
    chat = [{"role": "user", "content": "hi"}]
    before = engine.generate(chat, max_new_tokens=4).token_ids
    for bad in ([{"role": "user"}], [chat[0], "oops"], [{"content": "hi"}]):
        with pytest.raises(ValueError, match=CHAT_ERR):
            engine.generate(bad, max_new_tokens=4)
    assert engine.generate(chat, max_new_tokens=4).token_ids == before


# ---- Engine(...) options ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, -1, -64])
def test_bad_thread_count(engine_path, n):
    with pytest.raises(ValueError, match=rf"n_threads must be >= 1, got {n}"):
        Engine(engine_path, n_threads=n)


@pytest.mark.parametrize("device", ["", "metal", "cuda:x"])
def test_unknown_device(engine_path, device):
    with pytest.raises(ValueError, match=rf"unknown device '{re.escape(device)}' \(this build has"):
        Engine(engine_path, device=device)
