"""The ``trt-spec`` command line: fetch-models, build, generate, info.

Every subcommand has ``--help``; errors print one line (``trt-spec: error: ...``) and exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from trt_spec import bench, models
from trt_spec._core import (
    DEFAULT_DRAFT_READ_CHUNK,
    DEFAULT_DRAFT_WINDOW,
    DRAFT_MODES,
    KV_CACHE_DTYPES,
)
from trt_spec.builder.builder import DEFAULT_DRAFT_LEN, DEFAULT_MAX_BATCH, WEIGHT_FORMATS
from trt_spec.engine_options import EngineOptions
from trt_spec.progress import Reporter, add_output_flags, mode_from_flags


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_fetch_models(args: argparse.Namespace) -> int:
    names = list(args.model) if args.model else list(models.DEFAULT_PAIR)
    if args.all:
        names = list(models.MODELS)
    for name in names:
        path = models.fetch_model(name, progress=_progress)
        print(f"{name}: {path}")
    prompts = models.humaneval_prompts(progress=_progress)
    print(f"humaneval: {len(prompts)} prompts")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from trt_spec.builder.builder import build_engine
    from trt_spec.builder.resolve import resolve_checkpoint

    out = Reporter(mode_from_flags(args.quiet, args.verbose))
    hub = {"offline": True if args.offline else None, "progress": out.info, "hub_bars": out.bars}
    target = resolve_checkpoint(args.target, revision=args.revision, **hub)
    draft = None
    if args.draft:
        draft = resolve_checkpoint(args.draft, revision=args.draft_revision, **hub)
    elif args.draft_revision is not None:
        raise ValueError("--draft-revision needs --draft")
    try:
        report = build_engine(
            target,
            args.output,
            draft=draft,
            max_seq_len=args.max_seq_len,
            max_batch=args.max_batch,
            weights=args.weights,
            draft_len=args.draft_len,
            draft_vocab=args.draft_vocab,
            draft_vocab_corpus=args.draft_vocab_corpus,
            progress=out.info,
            on_tensor=lambda role, done, total, line: out.step(role, done, total, line, "tensor"),
            threads=args.threads,
        )
    finally:
        out.close()
    for role, m in report.models.items():
        if "kind" in m:  # draft heads
            print(f"{role}: {m['kind']} heads, {m['weight_bytes'] / 1e6:.1f} MB {m['types']}")
            continue
        print(
            f"{role}: {m['arch']}, {m['weight_bytes'] / 1e6:.1f} MB of weights {m['types']}, "
            f"relative weight error mean {m['quant_error_mean']:.2e} max {m['quant_error_max']:.2e}"
        )
    print(f"engine: {report.path} ({report.file_bytes / 1e6:.1f} MB, {report.seconds:.1f} s)")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    engine = EngineOptions.from_args(args).open(args.engine)
    prompt = [{"role": "user", "content": args.prompt}] if args.chat else args.prompt
    kwargs = dict(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop=args.stop or None,
        draft=args.draft,
        draft_len=args.draft_len,
        speculate=not args.no_speculate,
        prediction=_prediction(args),
    )
    if args.json:
        r = engine.generate(prompt, **kwargs)
        stats = r.stats.as_dict()
        stats["draft_len"] = str(r.stats.draft_len)  # ("auto" or a fixed k, as text)
        print(json.dumps({"text": r.text, "token_ids": r.token_ids, "stats": stats}))
        return 0
    stream = engine.generate(prompt, stream=True, **kwargs)
    for piece in stream:
        print(piece, end="", flush=True)
    print()
    assert stream.result is not None
    print(f"[{engine.backend}, {engine.weights}] {stream.result.stats}", file=sys.stderr)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from trt_spec.engine import Engine

    engine = Engine(args.engine, verify=not args.no_verify, kv_cache_dtype=args.kv_cache_dtype)
    meta = engine.metadata
    print(repr(engine))
    print(f"kv cache: {engine.kv_cache_dtype}, {engine.kv_bytes / 1e6:.1f} MB (target and draft)")
    print(f"prompt attention: {engine.prompt_attention} ({engine.weights} weights)")
    print(f"build: {json.dumps(meta['build'])}; producer {meta['producer']}")
    for role, m in meta["models"].items():
        src = m["source"]
        print(
            f"{role}: {src['name']} ({src['format']}, {src['path']}) "
            f"config {json.dumps(m['config'])}"
        )
        print(
            f"  weights {m['weight_bytes'] / 1e6:.1f} MB {m['tensor_type_counts']}, relative error "
            f"mean {m['quant_error']['mean']:.2e} max {m['quant_error']['max']:.2e}"
        )
        if "draft_vocab" in m:
            print("  " + draft_vocab_line(m))
    heads = meta.get("draft_heads")
    print(f"draft kind: {engine.draft_kind or 'none'}")
    if heads:
        src = heads["source"]
        print(
            f"draft: {heads['kind']} heads {src['name']} ({src['format']} layout, {src['path']}) "
            f"config {json.dumps({k: v for k, v in heads['config'].items() if k != 'rope_freq'})}"
            f", weights {heads['weight_bytes'] / 1e6:.1f} MB "
            f"{heads['tensor_type_counts']}"
        )
    weights = sum(m["weight_bytes"] for m in meta["models"].values())
    weights += heads["weight_bytes"] if heads else 0
    rss = bench.common.proc_status_bytes(["VmRSS"]).get("VmRSS")
    print(
        f"memory: weights {weights / 1e6:.1f} MB (target and draft, as in the file); KV cache "
        f"{engine.kv_bytes / 1e6:.1f} MB ({engine.max_batch} sequences x {engine.max_seq_len} "
        f"positions, {engine.kv_cache_dtype}; on the CPU its pages become resident as they are "
        "used); this process resident after load: "
        + (f"{rss / 1e6:.1f} MB" if rss is not None else "unknown")
    )
    if args.plan:
        draft_len = engine.max_draft_len if engine.has_draft else 0  # (target-only: K = 0)
        print_launch_plan(args.engine, args.draft_len, draft_len)
        print_waves(meta, engine.max_seq_len)
        print_cost_model(meta, args.draft_len, draft_len, args.acceptance)
    elif args.acceptance:
        raise SystemExit("info: --acceptance goes with --plan")
    return 0


def draft_vocab_line(model: dict) -> str:
    """A reduced head's size and the share of its corpus's tokens it covered."""
    dv, c = model["draft_vocab"], model["draft_vocab"]["corpus"]
    held = dv.get("held_out_coverage")
    return (
        f"draft vocabulary: {dv['size']} of {model['config']['vocab_size']} tokens in the head, "
        f"covering {100 * dv['coverage']:.2f}% of the {c['tokens']} tokens of its corpus "
        f"({c['source']}: {c['path']}, {c['files']} files, {c['bytes'] / 1e6:.1f} MB, "
        f"{c['distinct_tokens']} distinct tokens"
        + (f"; {100 * held:.2f}% of held-out text" if held is not None else "")
        + ")"
    )


def print_waves(meta: dict, max_seq: int, sm_count: int = 132) -> None:
    """Each kernel's blocks against the GPU's resident slots, 1-16 rows (trt_spec.cuda_waves)."""
    from trt_spec import cuda_waves

    plan = cuda_waves.plan_waves(meta["models"], max_seq, sm_count)
    for line in cuda_waves.format_plan(plan, sm_count):
        print(line)


def print_cost_model(
    meta: dict, draft_len: int | None, engine_draft_len: int, acceptance: str | None
) -> None:
    """The GPU cost model's figures for this engine (trt_spec.cost_model): MODELLED, from the
    committed calibration, not measured."""
    from trt_spec import cost_model as cm

    cal = cm.Calibration.load()
    models = meta["models"]
    shapes = {
        role: cm.Shape.of(m["config"], cm.matrices_of_engine(m)) for role, m in models.items()
    }
    target, draft = shapes["target"], shapes.get("draft")
    k = min(4, engine_draft_len) if draft_len is None else draft_len
    print(f"cuda cost model (MODELLED, not measured; calibrated on {cal.device}: {cal.source}):")
    for role, m in models.items():
        read = cm.decode_read_bytes(m, context=128)
        print(
            f"  {role}: bytes a decode step reads at context 128 {read['bytes'] / 1e6:.1f} MB "
            f"(one embedding row, KV at f16; counting the whole table and f32 KV: "
            f"{read['old_bytes'] / 1e6:.1f} MB), roofline {read['bytes'] / cal.copy_gbps / 1e3:.1f}"
            " us"
        )
    step = cm.forward_us(cal, target, 1)
    line = f"  modelled target step {step:.0f} us"
    if draft:
        line += f", draft step {cm.forward_us(cal, draft, 1):.0f} us"
    print(line)
    verify = ", ".join(f"{n}: {cm.forward_us(cal, target, n):.0f}" for n in range(1, 10))
    print(f"  modelled verify of n rows (us): {verify}")
    step = cm.forward_us(cal, target, 1, persistent=True)
    line = f"  modelled persistent forward: target step {step:.0f} us"
    if draft:
        line += f", draft step {cm.forward_us(cal, draft, 1, persistent=True):.0f} us"
    hop, launch = cm.boundary_us(cal, True), cm.boundary_us(cal, False)
    print(f"{line} (op waits {hop:.2f} us against launches {launch:.2f} us)")
    ahead = (  # the weight prefetch's variants: how they are priced, named, switched on
        ({"prefetch": True}, "per operation, the next weights hinted", "PREFETCH_NEXT=1"),
        (
            {"persistent": True, "prefetch": True},
            "persistent forward, weights prefetched an op ahead",
            "PERSISTENT=1 TRT_SPEC_CUDA_PREFETCH=1",
        ),
    )
    for how, what, switch in ahead:
        line = f"  modelled {what}: target step {cm.forward_us(cal, target, 1, **how):.0f} us"
        if draft:
            line += f", draft step {cm.forward_us(cal, draft, 1, **how):.0f} us"
        print(f"{line} (TRT_SPEC_CUDA_{switch})")
    base = cm.iteration_us(cal, target, None, 0)["iteration_us"]
    print(f"  modelled target-only iteration {base:.0f} us")
    if not draft or k < 1:
        return
    it = cm.iteration_us(cal, target, draft, k)
    print(
        f"  modelled iteration (B=1, K={k}) {it['iteration_us']:.0f} us: verify "
        f"{it['verify_us']:.0f} + draft {it['draft_step0_us']:.0f} + {k - 1} x "
        f"{it['draft_step_us']:.0f} + extra {cal.kernel['iteration_extra_us']:.0f}"
    )
    if acceptance:
        hists = cm.load_histograms(acceptance)
        if not hists:
            raise SystemExit(f"info --acceptance: no accepted_hist in {acceptance}")
        tokens, how = cm.tokens_per_iteration(hists, k)
        speedup = tokens / it["iteration_us"] * base
        print(
            f"  projected speedup at K={k} (MODELLED): {speedup:.2f}x "
            f"({tokens:.2f} tokens per iteration, {how}, from {acceptance})"
        )
        for how, what, _ in ahead:
            it = cm.iteration_us(cal, target, draft, k, **how)["iteration_us"]
            base = cm.iteration_us(cal, target, None, 0, **how)["iteration_us"]
            print(
                f"  projected speedup at K={k}, {what} (MODELLED): {tokens / it * base:.2f}x "
                f"(iteration {it:.0f} us, target-only {base:.0f} us)"
            )


def print_launch_plan(path: str, draft_len: int | None, engine_draft_len: int) -> None:
    """The CUDA launches per step and per iteration at batch 1, counted by the CUDA backend's own
    launch code on a planning backend (no GPU needed)."""
    from trt_spec import _core

    if not _core.cuda_compiled():
        raise SystemExit("info --plan: this build of trt-spec has no CUDA backend")
    k = min(4, engine_draft_len) if draft_len is None else draft_len
    p = _core.cuda_launch_plan(path, batch=1, draft_len=k)
    t, d = p["target_layers"], p["draft_layers"]
    print(f"cuda plan for {p['sm_count']} SMs at batch 1 (counted, nothing ran):")
    print(
        f"  cuda launches per target step: {p['target_step']} "
        f"({t} layers, {(p['target_step'] - 2) / max(t, 1):.1f} per layer + 2)"
    )
    if d:
        print(
            f"  cuda launches per draft step: {p['draft_step']} "
            f"({d} layers, {(p['draft_step'] - 2) / max(d, 1):.1f} per layer + 2)"
        )
    print(f"cuda launches per iteration (B=1, K={k}): {p['iteration']}")
    kernels = ", ".join(f"{name} {n}" for name, n in sorted(p["iteration_kernels"].items()))
    print(f"  by kernel: {kernels}")
    q = _core.cuda_launch_plan(path, batch=1, draft_len=k, persistent=True)
    draft = f", draft step {q['draft_step']}" if d else ""
    print(
        f"persistent forward (TRT_SPEC_CUDA_PERSISTENT=1): target step {q['target_step']}"
        f"{draft}, iteration (B=1, K={k}) {q['iteration']} launches"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    if any(
        v is not None for v in (args.replicas, args.min_replicas, args.max_replicas, args.address)
    ):
        return _serve_ray(args)
    from trt_spec.server import serve

    serve(
        args.engine,
        host=args.host,
        port=args.port,
        max_queue=args.max_queue,
        api_key=args.api_key or os.environ.get("TRT_SPEC_API_KEY"),
        model_name=args.served_model_name,
        options=EngineOptions.from_args(args),
        drain_timeout=args.drain_timeout,
        log_level=args.log_level,
    )
    return 0


def _serve_ray(args: argparse.Namespace) -> int:
    """serve with --replicas / --min-replicas / --max-replicas / --address: Ray Serve."""
    from trt_spec.ray.deployment import ReplicaConfig
    from trt_spec.ray.launch import RayOptions, serve

    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    replica = ReplicaConfig(
        engine=str(Path(args.engine).resolve()),
        model_name=args.served_model_name or Path(args.engine).stem,
        options=EngineOptions.from_args(args),
        max_queue=args.max_queue,
        api_key=args.api_key or os.environ.get("TRT_SPEC_API_KEY"),
    )
    return serve(
        RayOptions(
            replica,
            replicas=args.replicas,
            min_replicas=args.min_replicas,
            max_replicas=args.max_replicas,
            address=args.address,
            host=args.host,
            port=args.port,
            drain_timeout=args.drain_timeout,
            log_level=args.log_level,
        )
    )


def _prediction(args: argparse.Namespace) -> str | None:
    if args.prediction is not None and args.prediction_file is not None:
        raise ValueError("give --prediction or --prediction-file, not both")
    if args.prediction_file is not None:
        return Path(args.prediction_file).read_text(encoding="utf-8")
    return args.prediction


def _draft_len(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer, got {text!r}") from None


def add_kv_cache_flag(p: argparse.ArgumentParser) -> None:
    """--kv-cache-dtype of the commands that open an engine."""
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=list(KV_CACHE_DTYPES),
        help="KV cache element type (default auto: f16 on a GPU, f32 on the CPU)",
    )


def add_draft_prompt_flags(p: argparse.ArgumentParser) -> None:
    """--draft-window, --draft-read-chunk and --eagle-topk of the commands that generate."""
    p.add_argument(
        "--draft-window",
        type=int,
        default=DEFAULT_DRAFT_WINDOW,
        help="the draft model reads at most this many tokens of a prompt, its end (default "
        f"{DEFAULT_DRAFT_WINDOW}: all); a window keeps the draft out of a long prompt's time to "
        "first token, at some acceptance",
    )
    p.add_argument(
        "--draft-read-chunk",
        type=int,
        default=DEFAULT_DRAFT_READ_CHUNK,
        help="read the prompt into the draft model after the first token, at most this many "
        f"rows per decode step (default {DEFAULT_DRAFT_READ_CHUNK}: with the target's prefill); "
        "keeps the draft out of the time to first token without shortening what it reads",
    )
    p.add_argument(
        "--eagle-topk",
        type=int,
        default=1,
        help="an EAGLE-3 head's proposals: 1 (default) chains; 2-4 dynamic trees that expand "
        "the best W nodes of each depth and keep the best draft_len nodes",
    )


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trt-spec", description="Speculative-decoding LLM engine")
    sub = p.add_subparsers(dest="command", required=True)

    f = sub.add_parser("fetch-models", help="download, assemble and verify the default models")
    f.add_argument("--model", action="append", choices=sorted(models.MODELS), help="one model")
    f.add_argument("--all", action="store_true", help="every model in the registry")
    f.set_defaults(func=cmd_fetch_models)

    b = sub.add_parser("build", help="compile checkpoint(s) into one engine file")
    b.add_argument(
        "--target",
        required=True,
        help="a GGUF file or HF model folder, else a registry name (fetch-models --model), else "
        "a Hugging Face model id: org/name (safetensors) or org/name:file.gguf",
    )
    b.add_argument(
        "--draft", help="draft model (same tokenizer, same forms as --target) for speculation"
    )
    b.add_argument("--revision", default=None, help="Hub branch, tag or commit of --target")
    b.add_argument("--draft-revision", default=None, help="Hub branch, tag or commit of --draft")
    b.add_argument(
        "--offline",
        action="store_true",
        help="read Hub ids from the Hugging Face cache only (also HF_HUB_OFFLINE=1)",
    )
    b.add_argument("-o", "--output", required=True, help="engine file to write")
    b.add_argument(
        "--threads",
        type=int,
        default=None,
        help="tensors read and encoded at once (default: the CPUs available, at most 4); the "
        "engine's bytes do not depend on it (set SOURCE_DATE_EPOCH for identical files)",
    )
    b.add_argument("--max-seq-len", type=int, default=None, help="positions per sequence")
    b.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_BATCH,
        help=f"sequences decoded together (default {DEFAULT_MAX_BATCH})",
    )
    b.add_argument(
        "--draft-len",
        type=int,
        default=DEFAULT_DRAFT_LEN,
        help=f"most draft tokens per iteration, from the draft model or prompt lookup (default "
        f"{DEFAULT_DRAFT_LEN}; 0: never speculate)",
    )
    b.add_argument(
        "--draft-vocab",
        type=int,
        default=None,
        metavar="N",
        help="keep the draft head's rows of the N most frequent tokens only (a cheaper draft "
        "step; the output is unchanged); frequencies from the Python standard library's sources "
        "unless --draft-vocab-corpus is given",
    )
    b.add_argument(
        "--draft-vocab-corpus",
        default=None,
        metavar="FILE",
        help="UTF-8 text whose token frequencies choose the --draft-vocab set",
    )
    b.add_argument(
        "--weights",
        default="q4",
        choices=WEIGHT_FORMATS,
        help="weight format (default q4)",
    )
    add_output_flags(b, "one line per tensor")
    b.set_defaults(func=cmd_build)

    g = sub.add_parser("generate", help="generate a completion with an engine")
    g.add_argument("engine", help="engine file")
    g.add_argument("prompt", help="prompt text")
    g.add_argument("--chat", action="store_true", help="wrap the prompt as a user chat message")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument(
        "--draft-len",
        type=_draft_len,
        default="auto",
        help="draft tokens per iteration: 'auto' (default) or a number up to the engine's",
    )
    g.add_argument(
        "--draft",
        default="auto",
        choices=list(DRAFT_MODES),
        help="draft source: auto (default: per iteration), model, lookup (prompt lookup) or none",
    )
    g.add_argument(
        "--prediction", default=None, help="text the answer will probably repeat (lookup drafts it)"
    )
    g.add_argument("--prediction-file", default=None, help="--prediction read from a file")
    g.add_argument("--no-speculate", action="store_true", help="decode with the target only")
    add_kv_cache_flag(g)
    add_draft_prompt_flags(g)
    g.set_defaults(func=cmd_generate)

    i = sub.add_parser("info", help="describe an engine file")
    i.add_argument("engine")
    i.add_argument("--no-verify", action="store_true", help="skip checksum verification")
    add_kv_cache_flag(i)
    i.add_argument(
        "--plan",
        action="store_true",
        help="CUDA kernel launches per target step, draft step and iteration at batch 1 "
        "(counted without a GPU)",
    )
    i.add_argument(
        "--draft-len",
        type=int,
        default=None,
        help="draft tokens of the planned iteration (default: 4, or the engine's draft length "
        "if smaller)",
    )
    i.add_argument(
        "--acceptance",
        default=None,
        metavar="BENCH.json",
        help="with --plan: the projected speedup from this bench run's acceptance histograms "
        "(trt-spec bench's JSON), modelled",
    )
    i.set_defaults(func=cmd_info)

    s = sub.add_parser("serve", help="serve an engine over an OpenAI-compatible HTTP API")
    s.add_argument("engine")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument(
        "--max-queue",
        type=int,
        default=64,
        help="requests that may wait beyond the engine's max_batch (more get 429)",
    )
    s.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (or $TRT_SPEC_API_KEY)")
    s.add_argument("--served-model-name", help="the model name clients use (default: file stem)")
    s.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    s.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (default: all cores; with replicas: per replica, the cores / replicas)",
    )
    s.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds SIGTERM waits for requests"
    )
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info"])
    s.add_argument(
        "--no-prompt-cache",
        action="store_true",
        help="prefill every prompt whole (default: a request reuses the longest prefix of its "
        "prompt that a free slot's cache holds, as llama-server's cache_prompt)",
    )
    r = s.add_argument_group(
        "replicas (Ray Serve; needs the ray extra)",
        "any of these serves the engine from replicas behind one router on Ray Serve: a "
        "conversation stays on the replica that holds its prompt cache, other requests go to "
        "the least loaded one",
    )
    r.add_argument("--replicas", type=int, default=None, help="replicas, one engine each")
    r.add_argument(
        "--min-replicas", type=int, default=None, help="autoscaling's lower bound (default 1)"
    )
    r.add_argument(
        "--max-replicas",
        type=int,
        default=None,
        help="autoscaling's upper bound: more replicas while requests queue beyond each "
        "replica's max_batch (default: --replicas, no autoscaling)",
    )
    r.add_argument(
        "--address",
        default=None,
        help="join this Ray cluster (auto, or the head node's HOST:6379) instead of starting "
        "Ray here; every node needs trt-spec installed and the engine file at the same path",
    )
    add_kv_cache_flag(s)
    add_draft_prompt_flags(s)
    s.set_defaults(func=cmd_serve)
    bench.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("trt-spec: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one line for the user; TRT_SPEC_DEBUG=1 shows the traceback
        if os.environ.get("TRT_SPEC_DEBUG"):
            raise
        text = str(e).strip()
        msg = text.splitlines()[0] if text else type(e).__name__
        if not isinstance(e, (ValueError, RuntimeError, OSError)):
            msg = f"{type(e).__name__}: {msg}"
        print(f"trt-spec: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
