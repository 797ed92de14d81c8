"""Structured output (trt_spec/grammar.py, engine/constraint.h): JSON schemas, JSON objects,
regexes, Lark and GBNF grammars through llguidance; the output always matches, and speculation
changes nothing (a draft token the grammar forbids is rejected as if the target never drew it);
bad specs raise with the grammar engine's message; the CUDA mask kernel through the emulation."""

from __future__ import annotations

import ctypes
import json
import re
import threading
from collections import Counter

import numpy as np
import pytest
import spec_pairs
from cuda_helpers import emulation_library
from scipy.stats import chi2_contingency
from test_spec_acceptance import ALPHA
from trt_spec import Engine

PROMPTS = ["w1 w2", "the answer is", "{ x"]
SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "size": {"enum": ["S", "M", "L"]},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "size", "ok"],
    "additionalProperties": False,
}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "item", "schema": SCHEMA}}
REGEX = r"(yes|no)-[0-9]{2}\.[a-c]{1,3}"
LARK = 'start: "(" item ("," item)* ")"\nitem: /[0-9]/ | "ab"\n'
GBNF = 'root ::= "<" [a-c] [a-c]? [a-c]? ">" ("!" | "?")\n'
SPECS = [
    ("schema", dict(response_format=JSON_SCHEMA)),
    ("regex", dict(regex=REGEX)),
    ("lark", dict(grammar=LARK)),
    ("gbnf", dict(grammar=GBNF)),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("structured")


@pytest.fixture(scope="module")
def eng(root) -> Engine:
    return Engine(spec_pairs.make_pair(root, "noisy", draft_len=4, max_batch=2))


def matches(kind: str, text: str) -> bool:
    if kind == "schema":
        v = json.loads(text)
        return (
            set(v) == {"color", "size", "ok"}
            and v["color"] in ("red", "green", "blue")
            and v["size"] in ("S", "M", "L")
            and isinstance(v["ok"], bool)
        )
    if kind == "regex":
        return re.fullmatch(REGEX, text) is not None
    if kind == "lark":
        return re.fullmatch(r"\((?:[0-9]|ab)(?:,(?:[0-9]|ab))*\)", text) is not None
    return re.fullmatch(r"<[a-c]{1,3}>[!?]", text) is not None


@pytest.mark.parametrize("kind,spec", SPECS, ids=[s[0] for s in SPECS])
def test_output_matches_and_speculation_changes_nothing(eng: Engine, kind: str, spec) -> None:
    """Greedy: target-only, the draft model, lookup and auto give the same tokens, which match
    the spec; sampled with lookup: the same tokens as target-only for the seed; sampled with the
    draft model: every output matches."""
    max_new = 120 if kind == "lark" else 60
    for p in PROMPTS:
        base = eng.generate(p, max_new_tokens=max_new, draft="none", **spec)
        if kind != "lark" or base.finish_reason == "stop_token":
            assert base.finish_reason == "stop_token" and matches(kind, base.text), base.text
        for draft in ["model", "lookup", "auto"]:
            got = eng.generate(p, max_new_tokens=max_new, draft=draft, draft_len=4, **spec)
            assert got.token_ids == base.token_ids, (draft, got.text, base.text)
        s = dict(temperature=0.9, top_p=0.95, seed=7)
        base = eng.generate(p, max_new_tokens=max_new, draft="none", **s, **spec)
        got = eng.generate(p, max_new_tokens=max_new, draft="lookup", **s, **spec)
        assert got.token_ids == base.token_ids
        for seed in range(3):
            r = eng.generate(p, max_new_tokens=max_new, draft="model", draft_len=3,
                             temperature=1.0, seed=seed, **spec)  # fmt: skip
            if r.finish_reason == "stop_token":
                assert matches(kind, r.text), r.text


def test_forbidden_draft_tokens_are_pruned(eng: Engine) -> None:
    """Prompt lookup does not see the grammar: on the CPU its tokens the grammar forbids (here
    from a predicted output that breaks the pattern) and the chain after them leave the tree
    before the verify pass, whose rows cost compute; the output is still the constrained
    target-only one."""
    spec = dict(regex=REGEX)
    pruned = 0
    for p in PROMPTS:
        base = eng.generate(p, max_new_tokens=40, draft="none", **spec)
        bad = base.text[:-1] + "zzzz yes-99.zz no-00.zz"  # (its n-grams continue off the pattern)
        got = eng.generate(
            p, max_new_tokens=40, draft="lookup", draft_len=4, prediction=bad, **spec
        )
        assert got.token_ids == base.token_ids and matches("regex", got.text)
        pruned += got.stats.pruned
    assert pruned > 0


def test_the_draft_model_drafts_inside_the_grammar(eng: Engine) -> None:
    """On the CPU the draft model's steps are masked by the grammar after the chain so far: none
    of its nodes is pruned, and the noisy draft, whose own tokens mostly break the patterns,
    keeps most of them; greedy and seeded sampled output equal target-only's."""
    drafted = accepted = 0
    for kind, spec in SPECS:
        for p in PROMPTS:
            base = eng.generate(p, max_new_tokens=40, draft="none", **spec)
            got = eng.generate(p, max_new_tokens=40, draft="model", draft_len=4, **spec)
            assert got.token_ids == base.token_ids, (kind, got.text, base.text)
            assert got.stats.pruned == 0, kind
            drafted += got.stats.drafted
            accepted += got.stats.accepted
            got = eng.generate(p, max_new_tokens=40, draft="model", draft_len=3,
                               temperature=0.8, seed=11, **spec)  # fmt: skip
            assert got.stats.pruned == 0, kind
            if got.finish_reason == "stop_token":
                assert matches(kind, got.text), got.text
    assert accepted >= 0.4 * drafted, (accepted, drafted)


def test_forced_draft_steps_run_no_draft_forward(eng: Engine) -> None:
    """A draft step where the grammar allows one token (a schema's keys and punctuation) draws
    it without running the draft (stats.forced); the output stays target-only's, and the draft
    cache stays right (the unfed rows are caught up): a later request matches too."""
    forced = 0
    for _ in range(2):
        for p in PROMPTS:
            base = eng.generate(p, max_new_tokens=60, draft="none", **SPECS[0][1])
            got = eng.generate(p, max_new_tokens=60, draft="model", draft_len=4, **SPECS[0][1])
            assert got.token_ids == base.token_ids and matches("schema", got.text)
            assert got.stats.forced <= got.stats.drafted
            forced += got.stats.forced
            free = eng.generate(p, max_new_tokens=30, draft="model", draft_len=4)
            assert free.stats.forced == 0
            assert free.token_ids == eng.generate(p, max_new_tokens=30, draft="none").token_ids
    # {"color": "..", "size": "..", "ok": ..}: at least the keys after the first are forced
    assert forced >= 2 * len(PROMPTS) * 2
    # a batch of two (the engine's max_batch): a step is skipped where both are forced
    spec = SPECS[0][1]
    batch = eng.generate(PROMPTS[:2], max_new_tokens=60, draft="model", draft_len=4, **spec)
    for p, got in zip(PROMPTS, batch, strict=False):
        assert got.token_ids == eng.generate(p, max_new_tokens=60, draft="none", **spec).token_ids
        assert got.stats.forced > 0


def test_sampled_drafts_inside_the_grammar_follow_the_target(eng: Engine) -> None:
    """Sampled, the masked draft's q (the grammar's tokens only; one-hot at a forced step) is the
    q acceptance uses: 1,500 constrained completions with the draft model follow the same
    distribution as 1,500 target-only ones (chi-square, two samples)."""
    n, pattern = 1500, r"[a-c]-[a-c]{2}"  # (the "-" a forced step)
    counts = []
    for draft, seed0 in (("none", 1000), ("model", 50_000)):
        seeds = [seed0 + i for i in range(n)]
        rs = eng.generate(["the answer is"] * n, max_new_tokens=8, draft=draft, draft_len=3,
                          temperature=1.0, seed=seeds, regex=pattern)  # fmt: skip
        assert all(re.fullmatch(pattern, r.text) for r in rs)
        counts.append(Counter(r.text for r in rs))
    assert sum(r.stats.accepted for r in rs) > 0.5 * sum(r.stats.drafted for r in rs)
    assert sum(r.stats.forced for r in rs) > n / 2
    keys = sorted(set(counts[0]) | set(counts[1]))
    table = np.array([[c.get(k, 0) for k in keys] for c in counts])
    assert len(keys) > 5 and chi2_contingency(table).pvalue > ALPHA


def test_masks_of_a_tree_past_the_end_leave_the_grammar_as_it_was(eng: Engine) -> None:
    """A draft tree whose path ends the text (a stopped matcher) and goes on after it: walking
    it leaves the constraint where it was (a stopped matcher takes a token without counting it,
    so that rolling the walk back once went one token too far)."""
    from trt_spec.grammar import constraint_spec

    base = eng.generate(PROMPTS[0], max_new_tokens=40, draft="none", regex=REGEX)
    ids, eos = base.token_ids, base.token_ids[-1]
    words = (eng.vocab_size + 31) // 32

    def rows(c, tokens: list[int], parents: list[int]) -> np.ndarray:
        out = np.zeros((len(tokens) + 1, words), np.uint32)
        c.masks(tokens, parents, out)
        return out

    c = eng._grammars.constraint(constraint_spec(regex=REGEX))
    c.commit(ids[:-2])
    before = rows(c, [], [])
    # the last two tokens end the text; then EOS twice more, and a sibling branch
    rows(c, [ids[-2], eos, eos, eos, ids[-2]], [-1, 0, 1, 2, -1])
    assert (rows(c, [], []) == before).all()
    c.commit(ids[-2:])
    assert c.is_accepting() and not c.error


def test_forced_tokens_are_free_drafts(eng: Engine) -> None:
    """Jump-forward: the tokens the grammar forces (a JSON schema's keys and punctuation) are
    proposed as certain draft tokens and accepted, so a constrained answer takes fewer
    iterations than tokens even with nothing else to draft from."""
    for p in PROMPTS:
        base = eng.generate(p, max_new_tokens=60, draft="none", **SPECS[0][1])
        # (a fixed length: draft_len "auto" weighs measured costs, which a loaded host skews)
        got = eng.generate(p, max_new_tokens=60, draft="lookup", draft_len=4, **SPECS[0][1])
        assert got.token_ids == base.token_ids and matches("schema", got.text)
        assert got.stats.accepted >= 8 and got.stats.iterations <= 0.6 * len(got.token_ids)


def test_json_object_and_logprobs(eng: Engine) -> None:
    r = eng.generate("w1", max_new_tokens=40, response_format={"type": "json_object"}, logprobs=3)
    assert r.text.startswith("{")
    if r.finish_reason == "stop_token":
        assert isinstance(json.loads(r.text), dict)
    # Log-probabilities are those of the masked distribution: every top entry is allowed.
    assert all(np.isfinite(lp.logprob) for lp in r.logprobs)
    assert r.logprobs[0].token_id == r.token_ids[0]
    assert eng.generate("w1", max_new_tokens=5, response_format={"type": "text"}).text


def test_batch_mixes_constrained_and_free(eng: Engine) -> None:
    free = eng.generate(PROMPTS[1], max_new_tokens=30, draft="model")
    con = eng.generate(PROMPTS[0], max_new_tokens=60, draft="model", regex=REGEX)
    out: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: out.update(f=eng.generate(PROMPTS[1], max_new_tokens=30, draft="model"))
    )
    t.start()
    got = eng.generate(PROMPTS[0], max_new_tokens=60, draft="model", regex=REGEX)
    t.join()
    assert got.token_ids == con.token_ids and out["f"].token_ids == free.token_ids


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(response_format={"type": "json_schema", "json_schema": {"schema": {"type": 3}}}),
         "grammar|schema|type"),
        (dict(response_format={"type": "xml"}), "response_format"),
        (dict(response_format={"type": "json_schema"}), "json_schema"),
        (dict(regex="(unclosed"), "grammar|regex"),
        (dict(grammar="start: foo"), "grammar|foo"),
        (dict(regex="a", grammar=LARK), "at most one"),
        (dict(regex=5), "regex"),
    ],
)  # fmt: skip
def test_bad_specs_raise(eng: Engine, kw, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        eng.generate("w1", max_new_tokens=4, **kw)
    assert eng.generate("w1", max_new_tokens=4).token_ids  # (and the engine goes on)


def test_emulated_mask_kernel() -> None:
    emu = emulation_library("cuda_emu_ops")
    rng = np.random.default_rng(1)
    V, words = 100, 4
    logits = rng.standard_normal((3, V)).astype(np.float32)
    masks = rng.integers(0, 2**32, (3, words), dtype=np.uint64).astype(np.uint32)
    got = logits.copy()
    P = lambda a: ctypes.c_void_p(a.ctypes.data)  # noqa: E731
    emu.emu_spec_mask_rows(P(got), ctypes.c_int(3), ctypes.c_int(V), P(masks), ctypes.c_int(words))
    bits = np.unpackbits(masks.view(np.uint8), axis=1, bitorder="little")[:, :V].astype(bool)
    np.testing.assert_array_equal(got[bits], logits[bits])
    assert np.isneginf(got[~bits]).all()
