"""Peers of ``trt-spec bench``: llama.cpp and transformers on the engine's GGUF pair (greedy).

The runners live in the repository, not the package: ``benchmarks/peers/llama_spec_runner.py``
(``llama-speculative-simple`` / ``llama-completion`` built by ``benchmarks/peers/
build_llama_cpp.sh``) and ``benchmarks/peers/transformers_assisted_runner.py`` (assisted
generation). They are found from ``--peers-dir``, ``$TRT_SPEC_PEERS_DIR`` or the working
directory and its parents, and imported only when ``--peers`` asks for them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any

from trt_spec.bench import Config, _div, _log


def find_peers_dir(option: str | None) -> Path:
    candidates = [option, os.environ.get("TRT_SPEC_PEERS_DIR")]
    cwd = Path.cwd().resolve()
    candidates += [str(d / "benchmarks" / "peers") for d in (cwd, *cwd.parents)]
    for c in candidates:
        if c and (Path(c) / "llama_spec_runner.py").is_file():
            return Path(c)
    raise ValueError(
        "--peers: benchmarks/peers not found (run from the repository, or pass --peers-dir "
        "or set TRT_SPEC_PEERS_DIR)"
    )


def _import_peer(peers_dir: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"_trt_spec_peer_{name}", peers_dir / f"{name}.py"
    )
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {peers_dir / name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
            return models.fetch_model(reg, progress=_log)
    for d in (models.cache_dir() / "models", Path.cwd()):
        if (d / name).is_file():
            return d / name
    raise ValueError(f"cannot find the {role} GGUF {name!r}; pass --{role}-gguf")


def _peer_aggregate(label: str, k: int | str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    drafted = sum(r.get("drafted", 0) for r in runs)
    return {
        "config": label,
        "draft_len": k,
        "prompts": len(runs),
        "new_tokens": [r["new_tokens"] for r in runs],
        "decode_tok_s": _div(
            sum(r["decode_tokens"] for r in runs), sum(r["decode_s"] for r in runs)
        ),
        "decode_tok_s_mean": statistics.fmean(r["decode_tok_s"] for r in runs),
        "acceptance_rate": _div(sum(r.get("accepted", 0) for r in runs), drafted),
        "runs": [{k: v for k, v in r.items() if k != "token_ids"} for r in runs],
    }


def run_peers(
    names: list[str],
    pair: tuple[Path, Path],
    prompts: list[str],
    ks: list[int],
    args: argparse.Namespace,
    threads: int,
    ctx: int,
    notes: list[str],
) -> list[dict[str, Any]]:
    """Greedy peer runs on the GGUF pair; a failing peer becomes a note, not an error."""
    peers_dir = find_peers_dir(args.peers_dir)
    target, draft = pair
    out: list[dict[str, Any]] = []
    for name in names:
        configs: list[Config] = [("target-only", 0)] + [(f"K={k}", k) for k in ks]
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in configs}
        try:
            if name == "llama.cpp":
                mod = _import_peer(peers_dir, "llama_spec_runner")
                info = {"version": mod.version(), "weights": "GGUF as stored"}

                def one(prompt: str, k: int | str, mod: ModuleType = mod) -> dict[str, Any]:
                    common = dict(threads=threads, ctx=ctx, seed=args.seed)
                    if k == 0:
                        return mod.run_target_only(target, prompt, args.max_new_tokens, **common)
                    return mod.run_speculative(
                        target, draft, prompt, args.max_new_tokens, k, **common
                    )
            else:
                mod = _import_peer(peers_dir, "transformers_assisted_runner")
                _log("[transformers] loading the GGUF pair (fp32) ...")
                runner = mod.AssistedRunner(target, draft, threads)
                runner.generate(prompts[0], 4, ks[0])  # warm-up
                info = dict(runner.info)
                if args.auto:
                    configs.append(("auto (transformers' schedule)", "auto"))
                    runs[configs[-1][0]] = []

                def one(prompt: str, k: int | str, runner: Any = runner) -> dict[str, Any]:
                    return runner.generate(prompt, args.max_new_tokens, k)

            for i, prompt in enumerate(prompts):
                line = []
                for label, k in configs:
                    r = one(prompt, k)
                    runs[label].append(r)
                    line.append(f"{label} {r['decode_tok_s']:.1f}")
                _log(f"[{name}] prompt {i + 1}/{len(prompts)}: {', '.join(line)} tok/s")
        except Exception as e:  # noqa: BLE001 - report, keep the trt-spec results
            notes.append(f"peer {name} failed: {type(e).__name__}: {str(e).strip()[:300]}")
            _log(f"note: {notes[-1]}")
            continue
        aggs = [_peer_aggregate(label, k, runs[label]) for label, k in configs]
        for a in aggs:
            a["speedup"] = _div(a["decode_tok_s"] or 0.0, aggs[0]["decode_tok_s"] or 0.0)
        out.append(
            {"runner": name, "target": str(target), "draft": str(draft), **info, "configs": aggs}
        )
    return out


def peer_comparisons(results: list[dict[str, Any]], peers: list[dict[str, Any]]) -> None:
    """trt-spec / peer decode tok/s at the same K (greedy), stored in each result's checks."""
    for res in results:
        if res["temperature"] != 0:
            continue
        mine = {a["draft_len"]: a["decode_tok_s"] for a in res["configs"]}
        for p in peers:
            cmp = {
                str(a["draft_len"]): _div(mine[a["draft_len"]] or 0.0, a["decode_tok_s"] or 0.0)
                for a in p["configs"]
                if a["draft_len"] in mine
            }
            res["checks"][f"vs_{p['runner']}"] = cmp
