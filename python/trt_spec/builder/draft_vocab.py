"""The draft's reduced vocabulary (``trt-spec build --draft-vocab N``): its "hot tokens".

A draft step's output head is a [vocab, dim] product, a large share of a small draft's work
(151,936 rows for Qwen2.5). As FR-Spec and EAGLE-3's ``d2t`` do, the builder keeps the head's rows
of the N tokens most frequent in a text corpus, and records which tokens they are (increasing
id order): the engine's ``head_tokens`` (metadata ``models.draft.head_tokens``, config
``head_vocab``; engine format version 3). The runtime spreads the reduced head's logits over the
whole vocabulary with -inf elsewhere (cpp/model/model.h), so the draft proposes only inside the
set, its distribution q is 0 outside it, and acceptance stays exact: the target's corrections
and bonus tokens come from the full vocabulary.

Frequencies come from a corpus the builder can always reach: by default the Python standard
library's own sources (its ``.py`` files, docstrings included, and any ``.rst`` / ``.txt`` files
under ``sysconfig.get_paths()["stdlib"]``, without site-packages), at most
``DEFAULT_CORPUS_BYTES`` of them, files taken in the order of a hash of their path (a spread over
the whole library, the same on every run); or a text file (``--draft-vocab-corpus FILE``), read
whole. The corpus is tokenized with the target's tokenizer (no special tokens added). Nothing is
cached.

The set always holds the special tokens the chat template and the stop rule need (BOS, EOS,
padding, end-of-generation ids, and every added token the template's text names); the rest are
the most frequent tokens of the corpus, ties and (when the corpus has fewer distinct tokens than
N) the remainder by lower id: byte-level BPE numbers its tokens in merge order, most frequent
pieces first.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trt_spec.builder.source import BuildError

#: Bytes of the standard library read by default: about 3 s of tokenization on one core.
DEFAULT_CORPUS_BYTES = 4 << 20
#: The corpus is tokenized in pieces of about this many bytes (cut at line ends); every
#: HELD_OUT_EVERY-th piece is held out to estimate the coverage on text the choice did not see.
PIECE_BYTES = 16 << 10
HELD_OUT_EVERY = 10
_SUFFIXES = (".py", ".rst", ".txt")
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


@dataclass
class Corpus:
    """Text to count tokens in, and where it came from (for the engine's metadata)."""

    source: str  # "python-stdlib" or "file"
    path: str
    files: int
    bytes: int  # as read
    text: list[str]  # one entry per file


@dataclass
class DraftVocab:
    """The chosen set and what it covered of the corpus."""

    tokens: np.ndarray  # int32 [N], increasing token ids
    required: int  # special tokens forced into the set
    corpus: Corpus
    corpus_tokens: int
    distinct_tokens: int
    coverage: float  # share of the corpus's tokens inside the set
    # The share of the held-out pieces' tokens inside a set chosen without them (None: the
    # corpus was one piece).
    held_out_coverage: float | None

    def metadata(self) -> dict:
        """``models.draft.draft_vocab`` of the engine (what ``trt-spec info`` shows)."""
        return {
            "size": int(self.tokens.size),
            "required_tokens": self.required,
            "corpus": {
                "source": self.corpus.source,
                "path": self.corpus.path,
                "files": self.corpus.files,
                "bytes": self.corpus.bytes,
                "tokens": self.corpus_tokens,
                "distinct_tokens": self.distinct_tokens,
            },
            "coverage": self.coverage,
            "held_out_coverage": self.held_out_coverage,
        }


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's text files (``.py``, ``.rst``, ``.txt``, without site-packages),
    ordered by a hash of their path relative to the library: the same order on every run."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if p.suffix in _SUFFIXES and not _SKIP_DIRS.intersection(rel.parts) and p.is_file():
            files.append((hashlib.sha256(rel.as_posix().encode()).hexdigest(), p))
    files.sort()
    return [p for _, p in files]


def stdlib_corpus(max_bytes: int = DEFAULT_CORPUS_BYTES, root: Path | None = None) -> Corpus:
    """At most ``max_bytes`` of the standard library's text (``stdlib_files`` order; the last
    file cut at a line end)."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    text: list[str] = []
    left = max_bytes
    total = 0
    for p in stdlib_files(root):
        if left <= 0:
            break
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if len(data) > left:
            data = data[: data.rfind(b"\n", 0, left) + 1]
        if data:
            text.append(data.decode("utf-8", errors="replace"))
            left -= len(data)
            total += len(data)
    if not text:
        raise BuildError(
            f"the Python standard library at {root} has no text files to count tokens in; "
            "give a corpus with --draft-vocab-corpus FILE"
        )
    return Corpus("python-stdlib", str(root), len(text), total, text)


def file_corpus(path: str | Path) -> Corpus:
    """A UTF-8 text file, read whole."""
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except OSError as e:
        raise BuildError(f"cannot read the draft vocabulary corpus {p}: {e.strerror}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BuildError(f"the draft vocabulary corpus {p} is not UTF-8 text ({e})") from e
    if not text.strip():
        raise BuildError(f"the draft vocabulary corpus {p} is empty")
    return Corpus("file", str(p), 1, len(data), [text])


def _pieces(text: list[str]) -> list[str]:
    """The corpus cut into pieces of about PIECE_BYTES characters, at line ends."""
    out = []
    for t in text:
        start = 0
        while start < len(t):
            end = min(len(t), start + PIECE_BYTES)
            if end < len(t):
                nl = t.rfind("\n", start, end)
                end = nl + 1 if nl >= start else end
            out.append(t[start:end])
            start = end
    return out


def token_counts(tokenizer_json: str, corpus: Corpus, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Occurrences of each token id below ``vocab`` in the corpus: (in the pieces the choice
    sees, in the held-out pieces), int64 [vocab] each."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    pieces = _pieces(corpus.text)
    seen = np.zeros(vocab, np.int64)
    held = np.zeros(vocab, np.int64)
    for start in range(0, len(pieces), 256):
        batch = pieces[start : start + 256]
        for i, enc in enumerate(tok.encode_batch(batch, add_special_tokens=False)):
            ids = np.asarray(enc.ids, np.int64)
            ids = ids[ids < vocab]
            into = held if (start + i) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else seen
            into += np.bincount(ids, minlength=vocab)
    return seen, held


def required_tokens(tokenizer_json: str, special: dict, vocab: int) -> list[int]:
    """The ids the set must hold: the special ids (BOS, EOS, padding, end of generation) and
    every added token whose text appears in the chat template."""
    ids = set()
    for key, value in special.items():
        if key == "eog_ids":
            ids.update(v for v in value or [] if isinstance(v, int))
        elif key.endswith("_id") and isinstance(value, int):
            ids.add(value)
    template = special.get("chat_template") or ""
    for added in json.loads(tokenizer_json).get("added_tokens", []):
        if added.get("content") and added["content"] in template:
            ids.add(int(added["id"]))
    return sorted(i for i in ids if 0 <= i < vocab)


def _choose(counts: np.ndarray, n: int, required: list[int]) -> np.ndarray:
    """The required ids, then the most frequent (ties and zero counts: lower id first), as
    increasing ids."""
    ids = np.arange(counts.size)
    order = np.lexsort((ids, -counts))  # decreasing count, then increasing id
    chosen = np.zeros(counts.size, bool)
    chosen[required] = True
    rest = order[~chosen[order]][: n - len(required)]
    chosen[rest] = True
    return np.flatnonzero(chosen).astype(np.int32)


def choose_draft_vocab(
    n: int, tokenizer_json: str, special: dict, vocab: int, corpus: Corpus
) -> DraftVocab:
    """The draft vocabulary of ``n`` tokens (ids below ``vocab``: those both models have)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise BuildError(f"--draft-vocab must be an integer, got {n!r}")
    if not 1 <= n < vocab:
        raise BuildError(
            f"--draft-vocab must be in [1, {vocab - 1}] (below the vocabulary of {vocab} tokens "
            f"the target and the draft share; omit it to keep the full head), got {n}"
        )
    required = required_tokens(tokenizer_json, special, vocab)
    if len(required) > n:
        raise BuildError(
            f"--draft-vocab {n} cannot hold the {len(required)} special tokens the chat template "
            "and the stop rule need"
        )
    seen, held = token_counts(tokenizer_json, corpus, vocab)
    counts = seen + held
    total = int(counts.sum())
    if total == 0:
        raise BuildError(f"the draft vocabulary corpus {corpus.path} holds no tokens")
    tokens = _choose(counts, n, required)
    coverage = float(counts[tokens].sum()) / total
    held_total = int(held.sum())
    held_cov = None
    if held_total > 0:  # (a corpus of one piece holds none out)
        held_cov = float(held[_choose(seen, n, required)].sum()) / held_total
    return DraftVocab(
        tokens=tokens,
        required=len(required),
        corpus=corpus,
        corpus_tokens=total,
        distinct_tokens=int(np.count_nonzero(counts)),
        coverage=coverage,
        held_out_coverage=held_cov,
    )
