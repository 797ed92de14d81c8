"""The peer table of ``benchmarks/bench_peers.py --peers`` and the peer runs (greedy, same
GGUF pair).

Each entry of :data:`PEERS` names a peer, the trt-spec draft source it compares with, a
preflight check (run before the long trt-spec runs: a missing build is an error then) and an
``open`` function that loads the peer and returns a :class:`PeerSession`: its configurations
(``target-only`` and ``<source> K=k``, labelled like trt-spec's so that the report can pair
them) and a ``run(text, config)`` giving one run's numbers. A peer gets the prompts as TEXT:
chat prompts rendered with the engine's chat template. A failing peer becomes a note in the
report; the trt-spec results stay. Adding a peer is one entry in :data:`PEERS`.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trt_spec.bench.common import Config, div, log, percentile

TARGET_ONLY = Config("target-only", "none", 0)


@dataclass(frozen=True)
class PeerSetup:
    """What every peer gets: the GGUF pair and the run settings."""

    target: Path
    draft: Path | None  # None: the engine has no draft model (lookup peers only)
    threads: int
    ctx: int
    seed: int
    max_new_tokens: int
    ks: list[int]
    auto: bool


@dataclass
class PeerSession:
    """A loaded peer: its configurations and one run of a prompt text in one of them."""

    configs: list[Config]
    run: Callable[[str, Config], dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Peer:
    name: str
    source: str  # the trt-spec draft source its speculative runs compare with
    method: str  # one line for the report
    preflight: Callable[[], None]
    open: Callable[[PeerSetup], PeerSession]


def _draft(s: PeerSetup) -> Path:
    if s.draft is None:
        raise ValueError("this peer needs the draft GGUF (--draft-gguf)")
    return s.draft


# ---- llama.cpp: llama-speculative-simple (draft model) and llama-completion (target-only) ----
def _llama_preflight() -> None:
    from peers import llama_spec_runner as m

    m.find_binary(m.SPEC_BIN)
    m.find_binary(m.COMPLETION_BIN)


def _llama_open(s: PeerSetup) -> PeerSession:
    from peers import llama_spec_runner as m

    common = dict(threads=s.threads, ctx=s.ctx, seed=s.seed)
    draft = _draft(s)

    def run(text: str, c: Config) -> dict[str, Any]:
        if c.draft_len == 0:
            return m.run_target_only(s.target, text, s.max_new_tokens, **common)
        return m.run_speculative(s.target, draft, text, s.max_new_tokens, c.draft_len, **common)

    configs = [TARGET_ONLY] + [Config(f"model K={k}", "model", k) for k in s.ks]
    return PeerSession(configs, run, {"version": m.version(), "weights": "GGUF as stored"})


# ---- llama.cpp prompt lookup: llama-speculative-simple --spec-type ngram-simple -------------
def _llama_lookup_open(s: PeerSetup) -> PeerSession:
    from peers import llama_spec_runner as m

    common = dict(threads=s.threads, ctx=s.ctx, seed=s.seed)
    n, m_auto = m.LOOKUP_DEFAULTS
    ks = [k for k in s.ks if k >= m.LOOKUP_NGRAM]
    if not ks and not s.auto:
        raise ValueError(f"llama.cpp's lookup needs K >= {m.LOOKUP_NGRAM} (got --ks {s.ks})")

    def run(text: str, c: Config) -> dict[str, Any]:
        if c.draft_len == 0:
            return m.run_target_only(s.target, text, s.max_new_tokens, **common)
        if c.draft_len == "auto":
            return m.run_lookup(s.target, text, s.max_new_tokens, m_auto, ngram=n, **common)
        return m.run_lookup(s.target, text, s.max_new_tokens, c.draft_len, **common)

    configs = [TARGET_ONLY] + [Config(f"lookup K={k}", "lookup", k) for k in ks]
    if s.auto:
        label = f"lookup auto (llama.cpp defaults n={n}, m={m_auto})"
        configs.append(Config(label, "lookup", "auto"))
    info = {"version": m.version(), "weights": "GGUF as stored", "ngram": m.LOOKUP_NGRAM}
    return PeerSession(configs, run, info)


# ---- transformers: assisted generation -------------------------------------------------------
def _transformers_preflight() -> None:
    for mod in ("torch", "transformers"):
        if importlib.util.find_spec(mod) is None:
            raise ValueError(f"--peers transformers: {mod} is not installed")


def _transformers_open(s: PeerSetup) -> PeerSession:
    from peers.transformers_assisted_runner import AssistedRunner

    log("[transformers] loading the GGUF pair (fp32) ...")
    runner = AssistedRunner(s.target, _draft(s), s.threads)
    configs = [TARGET_ONLY] + [Config(f"model K={k}", "model", k) for k in s.ks]
    if s.auto:
        configs.append(Config("model auto (transformers' schedule)", "model", "auto"))

    def run(text: str, c: Config) -> dict[str, Any]:
        return runner.generate(text, s.max_new_tokens, c.draft_len)

    runner.generate("def f(x):", 4, s.ks[0])  # warm-up
    return PeerSession(configs, run, dict(runner.info))


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            "llama.cpp",
            "model",
            "`llama-speculative-simple` (decode = its 'decoded N tokens in S seconds', first "
            "token included) and `llama-completion` for target-only (its eval counter)",
            _llama_preflight,
            _llama_open,
        ),
        Peer(
            "llama.cpp-lookup",
            "lookup",
            "`llama-speculative-simple --spec-type ngram-simple` (prompt lookup, n-gram 3, "
            "draft K; `auto` = llama.cpp's defaults) and `llama-completion` for target-only",
            _llama_preflight,
            _llama_lookup_open,
        ),
        Peer(
            "transformers",
            "model",
            "assisted generation (`assistant_model`), fp32; decode after the first iteration",
            _transformers_preflight,
            _transformers_open,
        ),
    )
}


# ---- orchestration ---------------------------------------------------------------------------
def resolve_gguf(engine_meta: dict[str, Any], role: str, override: str | None) -> Path:
    """The GGUF file an engine's model was built from (the engine stores its file name)."""
    if override:
        return Path(override).expanduser()
    from trt_spec import models

    src = engine_meta["models"][role]["source"]
    if src.get("format") != "gguf":
        raise ValueError(f"the engine's {role} was not built from a GGUF; pass --{role}-gguf")
    name = Path(src["path"]).name
    for reg, m in models.MODELS.items():
        if getattr(m, "filename", None) == name:
            return models.fetch_model(reg, progress=log)
    for d in (models.cache_dir() / "models", Path.cwd()):
        if (d / name).is_file():
            return d / name
    raise ValueError(f"cannot find the {role} GGUF {name!r}; pass --{role}-gguf")


def _aggregate(c: Config, runs: list[dict[str, Any]]) -> dict[str, Any]:
    drafted = sum(r.get("drafted", 0) for r in runs)
    ratios = [(r["ratio_vs_target"], r["id"]) for r in runs if r.get("ratio_vs_target")]
    worst = min(ratios) if ratios else (None, None)
    return {
        "config": c.label,
        "draft": c.draft,
        "draft_len": c.draft_len,
        "prompts": len(runs),
        "new_tokens": [r["new_tokens"] for r in runs],
        "decode_tok_s": div(
            sum(r["decode_tokens"] for r in runs), sum(r["decode_s"] for r in runs)
        ),
        "decode_tok_s_mean": statistics.fmean(r["decode_tok_s"] for r in runs),
        "acceptance_rate": div(sum(r.get("accepted", 0) for r in runs), drafted),
        "per_prompt_ratio_min": worst[0],
        "per_prompt_ratio_min_id": worst[1],
        "per_prompt_ratio_median": percentile((r for r, _ in ratios), 50),
        "runs": [{k: v for k, v in r.items() if k != "token_ids"} for r in runs],
    }


def run_peer(
    peer: Peer, setup: PeerSetup, texts: list[str], ids: list[str], notes: list[str]
) -> dict[str, Any] | None:
    """Every configuration of one peer on the prompt texts; None (and a note) if it fails."""
    try:
        session = peer.open(setup)
        runs: dict[str, list[dict[str, Any]]] = {c.label: [] for c in session.configs}
        for i, (text, pid) in enumerate(zip(texts, ids, strict=True)):
            line, base = [], 0.0
            for c in session.configs:
                r = dict(session.run(text, c), id=pid)
                base = r["decode_tok_s"] if c.draft == "none" else base
                r["ratio_vs_target"] = div(r["decode_tok_s"], base)
                runs[c.label].append(r)
                line.append(f"{c.label} {r['decode_tok_s']:.1f}")
            log(f"[{peer.name}] prompt {i + 1}/{len(texts)} ({pid}): {', '.join(line)} tok/s")
    except Exception as e:  # noqa: BLE001 - report, keep the trt-spec results
        notes.append(f"peer {peer.name} failed: {type(e).__name__}: {str(e).strip()[:300]}")
        log(f"note: {notes[-1]}")
        return None
    aggs = [_aggregate(c, runs[c.label]) for c in session.configs]
    for a in aggs:
        a["speedup"] = div(a["decode_tok_s"], aggs[0]["decode_tok_s"])
    return {
        "runner": peer.name,
        "source": peer.source,
        "method": peer.method,
        "target": str(setup.target),
        "draft": str(setup.draft),
        **session.info,
        "configs": aggs,
    }


def peer_comparisons(results: list[dict[str, Any]], peers: list[dict[str, Any]]) -> None:
    """trt-spec / peer decode tok/s per configuration (same source and K; greedy results),
    stored in each result's checks as ``vs_<peer>``: {trt-spec label: ratio}."""
    for res in results:
        if res["temperature"] != 0:
            continue
        mine = {(a["draft"], a["draft_len"]): a for a in res["configs"]}
        for p in peers:
            cmp = {}
            for a in p["configs"]:
                m = mine.get((a["draft"], a["draft_len"]))
                if m is not None:
                    cmp[m["config"]] = div(m["decode_tok_s"], a["decode_tok_s"])
            res["checks"][f"vs_{p['runner']}"] = cmp
