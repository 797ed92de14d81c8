"""Structured output: the token constraints of JSON schemas, JSON objects, regexes and Lark or
GBNF grammars, through llguidance (a grammar engine with no dependencies of its own, and masks in
about 50 us for a 150k-token vocabulary).

A :class:`GrammarConstraint` is a ``_core.TokenConstraint`` (engine/constraint.h): each
iteration the scheduler asks it for the masks of a sequence's verify rows (the root, then every
draft node's path, found by a walk of the draft tree that consumes each allowed node's token and
rolls it back) and tells it which tokens became final. The masks set forbidden logits to -inf
before acceptance, so the output is the constrained target-only output, token for token.

Specs (``constraint_spec``): OpenAI's ``response_format`` (``{"type": "json_object"}``,
``{"type": "json_schema", "json_schema": {"schema": ...}}``), ``regex`` and ``grammar`` (Lark,
or GBNF when it has ``::=``). A malformed one raises ``ValueError`` with llguidance's message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import llguidance
import llguidance.gbnf_to_lark as gbnf
import numpy as np
import tokenizers

from trt_spec import _core

__all__ = ["GrammarConstraint", "Grammars", "constraint_spec"]

_JSON_OPTIONS = {"whitespace_flexible": False}


def constraint_spec(
    response_format: Mapping[str, Any] | None = None,
    regex: str | None = None,
    grammar: str | None = None,
) -> str | None:
    """The llguidance grammar of a request's constraint (at most one of the three), or None."""
    given = [x is not None for x in (response_format, regex, grammar)]
    if sum(given) > 1:
        raise ValueError("give at most one of response_format, regex and grammar")
    if regex is not None:
        if not isinstance(regex, str):
            raise ValueError("regex must be a string")
        return llguidance.LLMatcher.grammar_from_regex(regex)
    if grammar is not None:
        if not isinstance(grammar, str):
            raise ValueError("grammar must be a string (Lark, or GBNF)")
        if "::=" in grammar:
            try:
                grammar = gbnf.gbnf_to_lark(grammar)
            except Exception as e:  # (GbnfToLarkError and the parser's own)
                raise ValueError(f"invalid GBNF grammar: {e}") from None
        return llguidance.LLMatcher.grammar_from_lark(grammar)
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise ValueError("response_format must be an object with a 'type'")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema: Any = {"type": "object"}
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise ValueError("response_format json_schema needs {'json_schema': {'schema': ...}}")
        schema = spec["schema"]
        if not isinstance(schema, (Mapping, bool)):
            raise ValueError("response_format: the JSON schema must be an object")
    else:
        raise ValueError(
            f"response_format type must be text, json_object or json_schema, got {kind!r}"
        )
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), overrides=_JSON_OPTIONS
        )
    except (ValueError, TypeError) as e:
        raise ValueError(f"response_format: {e}") from None


class Grammars:
    """An engine's grammar tokenizer (built once, about a second for a large vocabulary) and
    the constraints made from it."""

    def __init__(self, tokenizer_json: str, vocab_size: int, eos_ids: list[int]) -> None:
        self._json = tokenizer_json
        self._vocab = vocab_size
        self._eos = list(eos_ids)
        self._tok: llguidance.LLTokenizer | None = None
        self._mu = threading.Lock()

    def tokenizer(self) -> llguidance.LLTokenizer:
        with self._mu:
            if self._tok is None:
                # (end-of-generation ids past the tokenizer's own, e.g. a padded vocabulary's, are
                # not tokens llguidance knows)
                own = tokenizers.Tokenizer.from_str(self._json).get_vocab_size(True)
                eos = [i for i in self._eos if i < own] or None
                self._tok = llguidance.LLTokenizer(self._json, n_vocab=self._vocab, eos_token=eos)
            return self._tok

    def is_special_text(self, text: str) -> bool:
        """Whether text is one special token of the tokenizer (a grammar names it <text>)."""
        tok = self.tokenizer()
        ids = tok.tokenize_str(text, parse_special=True)
        return len(ids) == 1 and tok.is_special_token(ids[0])

    def constraint(self, grammar: str) -> GrammarConstraint:
        """A fresh constraint for one request; ValueError for a grammar llguidance refuses."""
        tok = self.tokenizer()
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tok)
        if is_error:
            raise ValueError(f"invalid grammar: {messages[0] if messages else 'unknown error'}")
        return GrammarConstraint(llguidance.LLMatcher(tok, grammar, log_level=0))


class GrammarConstraint(_core.TokenConstraint):
    """One request's constraint: an llguidance matcher that follows the final text."""

    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        super().__init__()
        self._m = matcher
        if matcher.is_error():
            raise ValueError(f"invalid grammar: {matcher.get_error()}")

    @property
    def error(self) -> str:
        """The matcher's error ('' when none): a final token the grammar did not allow."""
        return self._m.get_error()

    def is_accepting(self) -> bool:
        return self._m.is_accepting()

    def _fill(self, out: np.ndarray, row: int) -> None:
        v = out[row]
        self._m.unsafe_compute_mask_ptr(v.ctypes.data, v.nbytes)

    def masks(self, tokens: list[int], parents: list[int], out: np.ndarray) -> None:
        try:
            children: dict[int, list[int]] = {}
            for i, p in enumerate(parents):
                children.setdefault(p, []).append(i)
            if self._m.is_error():
                out[:] = 0xFFFFFFFF  # (broken: unconstrained; `error` says why)
                return
            self._fill(out, 0)
            # Depth first from the root: a node whose token its parent's row allows is consumed,
            # its row filled, its subtree walked, and rolled back; the rows of the others
            # (never accepted) allow all.
            stack = [(c, 0) for c in reversed(children.get(-1, []))]
            out[1:] = 0xFFFFFFFF
            depth = 0  # tokens consumed for the current path
            while stack:
                node, row_of_parent = stack.pop()
                want = self._path_depth(node, parents)
                if depth >= want:
                    self._m.rollback(depth - want + 1)
                    depth = want - 1
                t = tokens[node]
                allowed = (int(out[row_of_parent, t >> 5]) >> (t & 31)) & 1
                # (a stopped matcher's text has ended: nothing after it is ever accepted, and it
                # would take the token without counting it, so that a rollback went too far)
                if not allowed or self._m.is_stopped() or not self._m.consume_token(t):
                    continue
                depth += 1
                self._fill(out, 1 + node)
                for c in reversed(children.get(node, [])):
                    stack.append((c, 1 + node))
            if depth:
                self._m.rollback(depth)
        except Exception:  # never into the engine: unconstrained rows instead
            out[:] = 0xFFFFFFFF

    @staticmethod
    def _path_depth(node: int, parents: list[int]) -> int:
        d = 1
        while parents[node] >= 0:
            node = parents[node]
            d += 1
        return d

    def forced(self, max_tokens: int) -> list[int]:
        """The tokens the grammar forces next (jump-forward), at most max_tokens."""
        try:
            if self._m.is_error() or self._m.is_stopped():
                return []
            return list(self._m.compute_ff_tokens()[:max_tokens])
        except Exception:
            return []

    def commit(self, tokens: list[int]) -> None:
        try:
            for t in tokens:
                if self._m.is_stopped() or self._m.is_error():
                    break
                self._m.consume_token(t)
        except Exception:
            pass
