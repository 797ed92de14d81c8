"""The draft's reduced vocabulary (``trt-spec build --draft-vocab N``, builder/draft_vocab.py):
the map the builder records and the corpus it counts, the engine format (version 3; version 2
engines still load), ``trt-spec info``, bad input, and the runtime: the draft proposes inside the
set only, greedy output equals target-only output (chains and trees), sampled output follows the
target's distribution, and the CUDA kernels (emulated) spread and draw as the CPU does."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import spec_pairs
import tiny_models
from cuda_helpers import RULES, SOURCE, fields, params, random_logits, seq_states
from engine_file_tools import load_engine_bytes, parse_header, read_metadata, reserialise
from native import T
from safetensors.numpy import load_file
from test_cuda_emulated import (  # noqa: F401  (emu, cpu: fixtures)
    I32,
    MIN_CHUNK,
    SMS,
    P,
    cpu,
    emu,
    scratch,
    states,
)
from test_cuda_emulated import T as THREADS
from test_spec_acceptance import ALPHA, chi2_matches
from test_speculative import PREDICTION, PROMPTS, _exact_joint, _first_tokens
from trt_spec import Engine, EngineFileError, _core, build_engine, cli
from trt_spec.builder.draft_vocab import (
    choose_draft_vocab,
    stdlib_corpus,
    stdlib_files,
)
from trt_spec.builder.source import BuildError

# The engines here are f32: their prompt rows attend in f32, as decode rows (the distribution
# test's oracle is Engine.logits).

N_V384 = 100  # of 384 tokens
CORPUS_V384 = "".join(tiny_models.TEXT) * 3
# The 16-word vocabulary's corpus: w1..w7 frequent, in that order; w15 (EOS) is required.
CORPUS_V16 = " ".join(f"w{i}" for i in range(1, 8) for _ in range(20 - i)) + " w9 w10"
N_V16 = 8


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("draft_vocab")


def corpus_file(root: Path, text: str) -> Path:
    path = root / f"corpus-{abs(hash(text)) % 10**8}.txt"
    path.write_text(text, encoding="utf-8")
    return path


def pair_paths(root: Path, kind: str, *, small_vocab: bool = False) -> tuple[Path, Path]:
    """(target, draft) checkpoints of tests/spec_pairs.py; kind "tied": a random draft whose
    head is its embedding table."""
    target = spec_pairs.make_checkpoint(
        root, f"target-{'v16' if small_vocab else 'v384'}", seed=3, small_vocab=small_vocab
    )
    if kind != "tied":
        return target, spec_pairs.make_draft(root, target, kind, small_vocab=small_vocab)
    draft = root / f"{target.name}-draft-tied"
    if not (draft / "config.json").exists():
        tiny_models.make_model(draft, "qwen2", vocab_size=384, seed=9, layers=1, tied=True)
    return target, draft


def reduced(
    root: Path,
    kind: str,
    n: int | None,
    *,
    small_vocab: bool = False,
    max_batch: int = 4,
    draft_len: int = 4,
    corpus: str | None = None,
) -> Path:
    """An engine of a tiny pair whose draft head keeps n tokens (None: the full head)."""
    text = corpus or (CORPUS_V16 if small_vocab else CORPUS_V384)
    tag = f"{kind}-{n}-{'v16' if small_vocab else 'v384'}-b{max_batch}-k{draft_len}"
    path = root / f"dv-{tag}.engine"
    if not path.exists():
        target, draft = pair_paths(root, kind, small_vocab=small_vocab)
        build_engine(
            target,
            path,
            draft=draft,
            draft_len=draft_len,
            max_batch=max_batch,
            max_seq_len=128,
            weights="f32",
            draft_vocab=n,
            draft_vocab_corpus=None if n is None else corpus_file(root, text),
        )
    return path


def head_tokens(path: Path) -> np.ndarray:
    return np.asarray(read_metadata(path.read_bytes())["models"]["draft"]["head_tokens"])


def tensor_f32(path: Path, role: str, name: str) -> np.ndarray:
    raw = path.read_bytes()
    h = parse_header(raw)
    t = read_metadata(raw)["models"][role]["tensors"][name]
    assert t["type"] == "f32"
    start = h["data_offset"] + t["offset"]
    return np.frombuffer(raw[start : start + t["bytes"]], np.float32).reshape(t["shape"])


# ---- the builder: map, corpus, metadata -------------------------------------------------------
def test_engine_records_the_most_frequent_tokens(root) -> None:
    path = reduced(root, "noisy", N_V384)
    raw = path.read_bytes()
    assert parse_header(raw)["version"] == 3 == _core.ENGINE_FORMAT_HEAD_VOCAB_VERSION
    meta = read_metadata(raw)
    d, t = meta["models"]["draft"], meta["models"]["target"]
    assert d["config"]["head_vocab"] == N_V384 and "head_vocab" not in t["config"]
    toks = np.asarray(d["head_tokens"])
    assert len(toks) == N_V384 and (np.diff(toks) > 0).all() and 0 <= toks[0] and toks[-1] < 384
    # The special tokens the chat template and the stop rule need are in the set.
    tok = Engine(path).tokenizer
    for s in ("<|im_end|>", "<|endoftext|>"):
        assert tok._tok.token_to_id(s) in toks
    # Every token counted more often than the least frequent one kept is kept, and the coverage
    # is the kept share of the corpus's tokens.
    ids = np.asarray(tok._tok.encode(CORPUS_V384, add_special_tokens=False).ids)
    counts = np.bincount(ids, minlength=384)
    floor = counts[toks].min()
    assert set(np.flatnonzero(counts > floor)) <= set(toks.tolist())
    dv = d["draft_vocab"]
    assert dv["size"] == N_V384 and dv["corpus"]["source"] == "file"
    assert dv["corpus"]["tokens"] == counts.sum()
    assert dv["corpus"]["distinct_tokens"] == np.count_nonzero(counts)
    assert dv["coverage"] == pytest.approx(counts[toks].sum() / counts.sum(), rel=1e-12)
    # The head holds the draft checkpoint's rows of those tokens; the target's is whole.
    lm_head = load_file(str(pair_paths(root, "noisy")[1] / "model.safetensors"))["lm_head.weight"]
    np.testing.assert_array_equal(tensor_f32(path, "draft", "output.weight"), lm_head[toks])
    assert t["tensors"]["output.weight"]["shape"] == [384, 128]


def test_tied_draft_keeps_its_tables_rows(root) -> None:
    """A draft whose head is its embedding table gets a head of that table's rows, and keeps
    the whole table for its input embeddings."""
    path = reduced(root, "tied", N_V384)
    meta = read_metadata(path.read_bytes())["models"]["draft"]
    assert meta["config"]["tied_embeddings"] and meta["config"]["head_vocab"] == N_V384
    table = tensor_f32(path, "draft", "tok_embd.weight")
    assert table.shape == (384, 128)
    toks = head_tokens(path)
    np.testing.assert_array_equal(tensor_f32(path, "draft", "output.weight"), table[toks])
    e = Engine(path)
    base = e.generate(PROMPTS[0], max_new_tokens=24, speculate=False, ignore_eos=True)
    got = e.generate(PROMPTS[0], max_new_tokens=24, draft="model", draft_len=3, ignore_eos=True)
    assert got.token_ids == base.token_ids and got.stats.drafted > 0


def test_draft_logits_are_the_full_heads_inside_the_set(root) -> None:
    """The reduced draft's logits: -inf outside the set, the full draft's logits inside."""
    toks = head_tokens(reduced(root, "noisy", N_V384))
    ids = [5, 17, 42, 100, 7, 7, 300]
    small = T.Session(str(reduced(root, "noisy", N_V384)), "cpu", 2).prompt_logits("draft", ids)
    full = T.Session(str(reduced(root, "noisy", None)), "cpu", 2).prompt_logits("draft", ids)
    outside = np.ones(384, bool)
    outside[toks] = False
    assert np.isneginf(small[:, outside]).all()
    np.testing.assert_allclose(small[:, toks], full[:, toks], rtol=1e-5, atol=1e-5)


def test_the_default_corpus_is_the_standard_library() -> None:
    files = stdlib_files()
    assert files and all(p.suffix in (".py", ".rst", ".txt") for p in files)
    assert not any({"site-packages", "dist-packages"} & set(p.parts) for p in files)
    a, b = stdlib_corpus(300_000), stdlib_corpus(300_000)
    assert a.text == b.text and 250_000 < a.bytes <= 300_000 and a.source == "python-stdlib"


def test_default_corpus_choice_is_deterministic(root) -> None:
    target, _ = pair_paths(root, "noisy")
    tok_json = (target / "tokenizer.json").read_text()
    special = {"eos_id": 1, "chat_template": tiny_models.CHAT_TEMPLATE}
    corpus = stdlib_corpus(300_000)
    x = choose_draft_vocab(64, tok_json, special, 384, corpus)
    y = choose_draft_vocab(64, tok_json, special, 384, stdlib_corpus(300_000))
    np.testing.assert_array_equal(x.tokens, y.tokens)
    assert 1 in x.tokens and x.required >= 1
    assert 0.0 < x.coverage <= 1.0 and x.held_out_coverage is not None
    assert x.held_out_coverage <= x.coverage + 0.05  # (unseen text: no better, about as good)


def test_build_with_the_default_corpus(root) -> None:
    target, draft = pair_paths(root, "noisy")
    path = root / "default-corpus.engine"
    build_engine(target, path, draft=draft, draft_vocab=200, max_seq_len=64, weights="f32")
    dv = read_metadata(path.read_bytes())["models"]["draft"]["draft_vocab"]
    assert dv["corpus"]["source"] == "python-stdlib" and dv["size"] == 200
    assert 0 < dv["corpus"]["bytes"] <= 4 << 20 and dv["coverage"] > 0.5


def test_info_shows_the_size_and_the_coverage(root, capsys) -> None:
    path = reduced(root, "noisy", N_V384)
    assert cli.main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    dv = read_metadata(path.read_bytes())["models"]["draft"]["draft_vocab"]
    line = next(x for x in out.splitlines() if "draft vocabulary" in x)
    assert f"draft vocabulary: {N_V384} of 384 tokens in the head" in line
    assert f"covering {100 * dv['coverage']:.2f}% of the {dv['corpus']['tokens']} tokens" in line


# ---- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, match",
    [
        (0, r"--draft-vocab must be in \[1, 383\].*got 0"),
        (-5, r"--draft-vocab must be in \[1, 383\]"),
        (384, r"--draft-vocab must be in \[1, 383\] \(below the vocabulary of 384 tokens"),
        (10**7, r"--draft-vocab must be in"),
        (True, r"--draft-vocab must be an integer"),
        # <|endoftext|>, <|im_end|> and the config's EOS id (383) end a generation
        (2, r"--draft-vocab 2 cannot hold the 3 special tokens"),
    ],
)
def test_bad_draft_vocab_is_a_clear_error(root, n, match: str) -> None:
    target, draft = pair_paths(root, "noisy")
    corpus = corpus_file(root, CORPUS_V384)
    with pytest.raises(BuildError, match=match):
        build_engine(
            target, root / "x.engine", draft=draft, draft_vocab=n, draft_vocab_corpus=corpus
        )
    assert not (root / "x.engine").exists()


def test_bad_corpus_and_flag_combinations(root) -> None:
    target, draft = pair_paths(root, "noisy")
    out = root / "y.engine"
    with pytest.raises(BuildError, match=r"--draft-vocab needs --draft"):
        build_engine(target, out, draft_vocab=50)
    with pytest.raises(BuildError, match=r"--draft-vocab-corpus needs --draft-vocab"):
        build_engine(target, out, draft=draft, draft_vocab_corpus=corpus_file(root, "x"))
    bad = root / "latin1.txt"
    bad.write_bytes("caf\xe9 d\xe9j\xe0".encode("latin-1"))
    empty = root / "empty.txt"
    empty.write_text("  \n")
    for corpus, match in [
        (root / "missing.txt", r"cannot read the draft vocabulary corpus"),
        (bad, r"is not UTF-8 text"),
        (empty, r"corpus .* is empty"),
    ]:
        with pytest.raises(BuildError, match=match):
            build_engine(target, out, draft=draft, draft_vocab=50, draft_vocab_corpus=corpus)


def test_cli_reports_a_bad_size_in_one_line(root, capsys) -> None:
    target, draft = pair_paths(root, "noisy")
    capsys.readouterr()  # (making the checkpoints may print library warnings)
    args = ["build", "--target", str(target), "--draft", str(draft), "-o", str(root / "z.engine")]
    assert cli.main([*args, "--draft-vocab", "0", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "trt-spec: error: --draft-vocab must be in [1, 383] (below the vocabulary of 384 tokens "
        "the target and the draft share; omit it to keep the full head), got 0"
    ]


# ---- the engine format ------------------------------------------------------------------------
def test_engines_without_a_reduced_head_stay_version_2(root) -> None:
    path = reduced(root, "noisy", None)
    assert parse_header(path.read_bytes())["version"] == 2 == _core.ENGINE_FORMAT_OLDEST_VERSION
    assert Engine(path).generate(PROMPTS[0], max_new_tokens=4).token_ids


def test_a_reduced_head_in_a_version_2_file_is_refused(root, tmp_path) -> None:
    raw = reduced(root, "noisy", N_V384).read_bytes()
    meta = read_metadata(raw)
    meta["format_version"] = 2
    data = bytearray(reserialise(raw, meta))
    struct.pack_into("<I", data, 8, 2)
    with pytest.raises(
        EngineFileError, match=r"reduced output head .* needs engine format version 3"
    ):
        load_engine_bytes(tmp_path, bytes(data))


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda d: d["head_tokens"].reverse(),
            r"head_tokens must list token ids in \[0, 384\) in ",
        ),
        (lambda d: d["head_tokens"].pop(), r"head_tokens lists 99 tokens for a head_vocab of 100"),
        (lambda d: d["head_tokens"].__setitem__(-1, 384), r"head_tokens must list token ids"),
        (lambda d: d["config"].__setitem__("head_vocab", 384), r"head_vocab is 384, not below"),
    ],
)
def test_a_damaged_map_is_refused(root, tmp_path, edit, match: str) -> None:
    raw = reduced(root, "noisy", N_V384).read_bytes()
    meta = read_metadata(raw)
    edit(meta["models"]["draft"])
    with pytest.raises(EngineFileError, match=match):
        load_engine_bytes(tmp_path, reserialise(raw, meta), verify=False)


# ---- the runtime on the CPU: exact output, proposals inside the set ----------------------------
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("draft", ["model", "lookup", "auto"])
def test_greedy_speculation_equals_target_only(root, batch: int, draft: str) -> None:
    """Chains (the draft model) and trees (prompt lookup's, with the draft model in "auto")."""
    e = Engine(reduced(root, "noisy", N_V384))
    prompts = PROMPTS[:batch]
    base = e.generate(prompts, max_new_tokens=40, speculate=False, ignore_eos=True)
    for k in [1, 3, "auto"]:
        got = e.generate(
            prompts, max_new_tokens=40, draft=draft, draft_len=k, ignore_eos=True,
            prediction=PREDICTION,
        )  # fmt: skip
        for b, g in zip(base, got, strict=True):
            assert g.token_ids == b.token_ids, (draft, k)
    if draft == "model":
        one = e.generate(prompts[0], max_new_tokens=40, draft="model", draft_len=4, ignore_eos=True)
        assert 0 < one.stats.accepted < one.stats.drafted  # kept some, corrected some


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_draft_proposes_inside_the_set_only(root, temperature: float) -> None:
    """Every node of a draft-model tree is a token of the set, greedy or sampled; the target's
    corrections come from the whole vocabulary."""
    path = reduced(root, "noisy", N_V384)
    inside = set(head_tokens(path).tolist())
    s = T.Session(str(path), "cpu", 2)
    rids = [
        s.submit(p, 48, temperature=temperature, seed=7, draft="model", draft_len=4)
        for p in PROMPTS[:3]
    ]
    seen, out = 0, {r: [] for r in rids}
    while s.has_work:
        for ev in s.step():
            out[ev.id] += list(ev.tokens)
        for rid in rids:
            if s.slot_of(rid) < 0:
                continue
            st = fields(s.seq_state(rid))[0]
            if st["source"] == SOURCE["model"]:
                seen += int(st["tree_n"])
                assert set(st["tree_token"][: st["tree_n"]].tolist()) <= inside
    assert seen > 20
    emitted = {t for toks in out.values() for t in toks}
    assert emitted - inside  # the output is not confined to the set


def test_sampling_same_seed_same_output(root) -> None:
    e = Engine(reduced(root, "noisy", N_V384))
    kw = dict(max_new_tokens=30, temperature=0.8, draft="model", draft_len=3)
    a = e.generate(PROMPTS[0], seed=5, **kw)
    b = e.generate(PROMPTS[0], seed=5, **kw)
    c = e.generate(PROMPTS[0], seed=6, **kw)
    assert a.token_ids == b.token_ids != c.token_ids
    batch = e.generate([PROMPTS[1], PROMPTS[0]], seed=5, **kw)
    assert batch[1].token_ids == a.token_ids


@pytest.mark.parametrize(
    "temperature, top_p, draft, k",
    [(1.0, 1.0, "model", 2), (0.7, 0.9, "model", 3), (1.0, 1.0, "auto", 4)],
)
def test_sampled_distribution_is_the_targets(
    root, temperature: float, top_p: float, draft: str, k: int
) -> None:
    """100k completions with a draft of 8 of the 16 tokens: the joint distributions of tokens
    (1, 2) and (2, 3) are the target's (chi-square), although the draft cannot propose half the
    vocabulary (q = 0 there: those tokens come from the residual)."""
    path = reduced(root, "random", N_V16, small_vocab=True)
    toks = head_tokens(path)
    assert len(toks) == N_V16 and 15 in toks  # (w15: EOS)
    e = Engine(path)
    j12, j23 = _exact_joint(e, temperature, top_p)
    V = e.vocab_size
    n = 100_000
    got = _first_tokens(path, n, draft, k, temperature, top_p, [])
    outside = np.setdiff1d(np.arange(V), toks)
    assert np.isin(got, outside).mean() > 0.1  # the target emits tokens the draft lacks
    for a, b, probs in ((0, 1, j12), (1, 2, j23)):
        counts = np.bincount(got[:, a] * V + got[:, b], minlength=V * V)
        p = probs.ravel()
        small = p * n < 5
        c = np.append(counts[~small], counts[small].sum())
        assert chi2_matches(c, np.append(p[~small], p[small].sum())) > ALPHA, (draft, k)


# ---- the CUDA kernels, emulated on the CPU (tests/cpp/cuda_emu.h) ------------------------------
@pytest.mark.parametrize("n, width, cols", [(1, 700, 90), (3, 1000, 333), (5, 257, 256)])
def test_expand_columns(emu, cpu, n: int, width: int, cols: int) -> None:  # noqa: F811
    rng = np.random.default_rng(width)
    src = random_logits(rng, (n, cols))
    index = np.full(width, -1, np.int32)
    index[np.sort(rng.choice(width, cols, replace=False))] = np.arange(cols)
    want = np.where(index >= 0, src[:, np.maximum(index, 0)], -np.inf).astype(np.float32)
    got = np.full((n, width), np.nan, np.float32)
    emu.emu_expand_columns(P(src), I32(cols), P(index), I32(n), I32(width), P(got))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cpu.expand_columns(src, list(index)), want)


@pytest.mark.parametrize("k", [1, 3])
def test_draft_sample_and_accept_inside_a_set(emu, cpu, k: int) -> None:  # noqa: F811
    """The draft's logits spread from a reduced head (-inf outside): the emulated kernels draw
    the same nodes as the CPU, inside the set, with q = 0 outside it, and accept, correct and
    commit as the CPU does, every sampling rule."""
    rng = np.random.default_rng(20 + k)
    B, V, max_seq = 3, 400, 40
    inside = np.sort(rng.choice(V, 120, replace=False))
    index = np.full(V, -1, np.int32)
    index[inside] = np.arange(len(inside))
    slots = np.array([1, 2, 0], np.int32)
    for trial in range(4):
        ps = [params(RULES[(trial + 3 * b) % len(RULES)], seed=50 * trial + b) for b in range(B)]
        target = random_logits(rng, (B * (k + 1), V), scale=2.0)
        seqs = seq_states(
            B, n_past=12, last=5, prev=4, n_gen=np.array([2, 6, 9]), max_nodes=16,
            sources=1 << SOURCE["model"],
        )  # fmt: skip
        sg = seqs.copy()
        q = np.zeros((k * B, V), np.float32)
        for j in range(k):
            head = target.reshape(B, k + 1, V)[:, j][:, inside] + random_logits(
                rng, (B, len(inside)), scale=0.8
            )
            dl = cpu.expand_columns(head.astype(np.float32), list(index))
            qj, seqs = cpu.spec_draft_sample(dl, V, j, seqs, list(slots), ps)
            qg, buf, st = dl.copy(), scratch(emu, B, V), states(ps)
            nxt = np.zeros((3, B), np.int32)
            emu.emu_spec_draft_sample(
                P(qg), I32(B), I32(V), I32(V), I32(j), P(sg), P(slots), P(st), THREADS, SMS,
                MIN_CHUNK, P(buf), P(nxt[0]), P(nxt[1]), P(nxt[2]),
            )  # fmt: skip
            np.testing.assert_array_equal(sg, seqs)
            np.testing.assert_allclose(qg, qj, rtol=1e-5, atol=1e-7)
            assert set(nxt[0].tolist()) <= set(inside.tolist())
            # (row b is slot slots[b]; greedy rows keep their logits)
            sampled = np.array([ps[sl][0] > 0 for sl in slots])
            assert not qj[sampled][:, index < 0].any()  # q = 0 outside the set
            q[j * B : (j + 1) * B] = qj
        seqs = cpu.spec_verify_rows(seqs, list(slots), k, SOURCE["model"])[6]
        hist = rng.integers(0, V, (B, max_seq)).astype(np.int32)
        want_s, want_h, _ = cpu.spec_accept(target, q, k, seqs, list(slots), ps, hist)
        got, hg = seqs.copy(), hist.copy()
        mv = [np.zeros(B * 16, np.int32) for _ in range(3)]
        st, buf = states(ps), scratch(emu, B * (k + 1), V)  # (alive through the call)
        p_rows, best = np.zeros(B * (k + 1) * V, np.float32), np.zeros(B * (k + 1), np.int32)
        emu.emu_spec_accept(
            P(target), P(q), I32(B), I32(k), I32(V), I32(V), P(got), P(slots), P(st),
            P(p_rows), P(best), P(hg), I32(max_seq), *map(P, mv), THREADS, SMS, I32(64), P(buf),
        )  # fmt: skip
        np.testing.assert_array_equal(got, want_s)
        np.testing.assert_array_equal(hg, want_h)
