"""``trt-spec bench`` with peers: llama.cpp and transformers on the same GGUF pair and prompts.

Runs everything ``trt-spec bench`` runs (same arguments, same report), then each peer named in
``--peers`` (greedy only) on the prompts rendered as text, and stores per configuration the
ratio trt-spec / peer in each greedy result's checks (``vs_<peer>``). A failing peer becomes a
note in the report; trt-spec's results stay. Peers: :mod:`peers.runs`.

Usage: ``python benchmarks/bench_peers.py ENGINE --peers llama.cpp --n 20 --temperatures 0``
(llama.cpp binaries from ``bash benchmarks/peers/build_llama_cpp.sh``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from peers.runs import PEERS, PeerSetup, peer_comparisons, resolve_gguf, run_peer
from trt_spec import bench
from trt_spec.bench.common import available_cpus
from trt_spec.bench.options import parse_draft_lens
from trt_spec.bench.prompts import Prompt
from trt_spec.progress import add_output_flags


class Peers:
    """The peers of one bench (a :class:`trt_spec.bench.BenchExtra`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.names = [p.strip() for p in (args.peers or "").split(",") if p.strip()]
        for p in self.names:
            if p not in PEERS:
                raise ValueError(f"--peers: unknown peer {p!r} (known: {', '.join(PEERS)})")
        self.ks = (
            parse_draft_lens(args.peer_draft_lens, "--peer-draft-lens")
            if args.peer_draft_lens
            else None
        )
        if args.peer_n is not None and args.peer_n < 1:
            raise ValueError(f"--peer-n must be >= 1, got {args.peer_n}")
        self.pairs: list[tuple[Path, Path | None, dict[str, Any]]] = []
        self.prompts: list[Prompt] = []

    def prepare(self, infos: list[dict[str, Any]], prompts: list[Prompt], notes: list[str]) -> None:
        """Preflights each peer and finds the GGUF pair of each distinct engine pair."""
        if self.names and 0 not in self.args.temperatures:
            notes.append("peers skipped: they run greedy only; add temperature 0")
            self.names = []
        for name in self.names:
            PEERS[name].preflight()
        self.prompts = prompts
        for info in infos if self.names else []:
            target = resolve_gguf(info["metadata"], "target", self.args.target_gguf)
            draft = None
            if info["has_draft"] or self.args.draft_gguf:
                draft = resolve_gguf(info["metadata"], "draft", self.args.draft_gguf)
            for name in self.names:
                if PEERS[name].source == "model" and draft is None:
                    raise ValueError(
                        f"--peers {name}: {info['path']} has no draft model; pass --draft-gguf"
                    )
            if all((target, draft) != (t, d) for t, d, _ in self.pairs):
                self.pairs.append((target, draft, info))

    def run(self, results: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
        """Every peer on every distinct pair, then the trt-spec / peer ratios."""
        args = self.args
        n = args.peer_n or len(self.prompts)
        out: list[dict[str, Any]] = []
        for target, draft, info in self.pairs:
            ks = self.ks or info["ks"]
            need = max(info["prompt_tokens"]) + args.max_new_tokens + max(ks, default=0) + 64
            ctx = -(-need // 256) * 256
            threads = args.threads or available_cpus()
            setup = PeerSetup(
                target, draft, threads, ctx, args.seed, args.max_new_tokens, ks, args.auto
            )
            ids = [p.id for p in self.prompts[:n]]
            for name in self.names:
                res = run_peer(PEERS[name], setup, info["texts"][:n], ids, notes)
                if res is not None:
                    out.append(res)
        peer_comparisons(results, out)
        return out

    def settings(self) -> dict[str, Any]:
        return {"peers": self.names, "peer_n": self.args.peer_n, "peer_draft_lens": self.ks}


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench_peers.py",
        description="trt-spec bench, then peers (llama.cpp, transformers) on the same prompts",
    )
    bench.add_arguments(p)
    p.add_argument("--peers", default="", help=f"comma list of {','.join(PEERS)} (default none)")
    p.add_argument("--peer-n", type=int, default=None, help="prompts for peers (default --n)")
    p.add_argument("--peer-draft-lens", default=None, help="K for peers (default: --draft-lens)")
    p.add_argument("--target-gguf", default=None, help="target GGUF for peers (default: found)")
    p.add_argument("--draft-gguf", default=None, help="draft GGUF for peers (default: found)")
    add_output_flags(p, "one line per prompt")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return bench.cmd_bench(args, Peers(args))
    except (ValueError, RuntimeError, OSError) as e:
        text = str(e).strip()
        print(
            f"bench_peers.py: error: {text.splitlines()[0] if text else type(e).__name__}",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
