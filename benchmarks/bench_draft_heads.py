"""An EAGLE-3 head against a draft model trained on the same data, on the tests' tiny target.

The target is the tests' "Markov" Qwen2 (``spec_pairs.make_markov_target``: 2 layers, hidden 128,
384 tokens, its next token mostly a function of the current one; ``--layer-scale`` above the
tests' 0.1 makes the context weigh more). Per seed: the target's greedy
continuations of 48 random prompts (40 tokens) are the training data of both drafts:
- a 1-layer draft model (``trained_drafts.train_draft_model``, full batch, ``--model-steps``);
- an EAGLE-3 head over the target's layers (0, 1, 2) in the published layout
  (``eagle3_heads.train_head``: ``--head-steps`` Adam steps of 16 sequences, ``--head-depth``
  chain steps unrolled as the runtime drafts them, lm_head started from the target's rows).

Each is built into an f32 engine with the target and decodes ``--n`` unseen random prompts
greedy, 40 tokens, with every fixed draft shape: chains of k = 3 and 6, and for the head
EAGLE-2 trees of width 2 (``eagle_topk=2``) verifying 6 nodes. Reports tokens per iteration,
acceptance and draft milliseconds per iteration for each, per seed and over all seeds, and the
head's tokens per iteration over the draft model's at the same number of verified nodes. Greedy
output is checked equal to target-only for every run.

    python benchmarks/bench_draft_heads.py [--seeds 0,1,2] [--n 16] [--head-steps 800]
        [--head-depth 6] [--head-kv-heads 2] [--model-steps 150] [--threads 2] [--layer-scale 0.1]

Prints a Markdown report (device, commit, settings); writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import eagle3_heads  # noqa: E402
import spec_pairs  # noqa: E402
import torch  # noqa: E402
import trained_drafts  # noqa: E402
from trt_spec import Engine, build_engine  # noqa: E402
from trt_spec.bench.common import environment  # noqa: E402

TAPS = [0, 1, 2]
SHAPES = [("chain k=3", 3, 1), ("chain k=6", 6, 1), ("tree W=2, 6 nodes", 6, 2)]


def one_seed(args: argparse.Namespace, root: Path, seed: int) -> dict[str, dict[str, float]]:
    from transformers import AutoModelForCausalLM

    target = spec_pairs.make_markov_target(root, args.layer_scale)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    seqs = trained_drafts.target_outputs(model, 48, 40, seed=1 + 10 * seed)
    with torch.no_grad():  # each token's successor: the output row along its embedding
        succ = (model.get_input_embeddings().weight @ model.lm_head.weight.T).argmax(-1)
    markov = (succ[seqs[:, 6:-1]] == seqs[:, 7:]).float().mean().item()
    t = time.perf_counter()
    draft = trained_drafts.train_draft_model(
        seqs, root / f"draft{seed}", steps=args.model_steps, seed=9 + seed
    )
    model_train_s = time.perf_counter() - t
    t = time.perf_counter()
    head = eagle3_heads.train_head(
        model,
        seqs,
        TAPS,
        steps=args.head_steps,
        depth=args.head_depth,
        seed=seed,
        kv_heads=args.head_kv_heads,
    )
    head_train_s = time.perf_counter() - t
    head_dir = eagle3_heads.save_head(head, root / f"head{seed}", taps=TAPS)
    prompts = trained_drafts.random_prompts(99 + seed, args.n)
    out: dict[str, dict[str, float]] = {}
    want: list[list[int]] = []  # target-only's tokens (the same on both engines)
    for name, folder in (("draft model", draft), ("EAGLE-3 head", head_dir)):
        path = root / f"{name.split()[0]}{seed}.engine"
        build_engine(target, path, draft=folder, draft_len=6, max_batch=1, max_seq_len=160,
                     weights="f32", threads=args.threads)  # fmt: skip
        for label, k, width in SHAPES:
            if width > 1 and name == "draft model":
                continue
            eng = Engine(path, device="cpu", n_threads=args.threads, eagle_topk=width)
            if not want:
                want = [eng.generate(p, max_new_tokens=40, draft="none").token_ids for p in prompts]
            out[f"{name}, {label}"] = trained_drafts.fixed_length_runs(eng, prompts, k, want)
    out["train_s"] = {"draft model": model_train_s, "EAGLE-3 head": head_train_s}
    out["markov"] = {"share": markov}
    return out


def report(args: argparse.Namespace, runs: dict[int, dict]) -> str:
    env = environment(args.threads)
    lines = [
        "# EAGLE-3 head against a draft model trained on the same data (tiny Markov target)",
        "",
        f"{env['cpu']}, commit {env['git_commit']}, threads {args.threads}, seeds "
        f"{args.seeds}, {args.n} unseen prompts x 40 tokens per seed, head {args.head_steps} "
        f"steps unrolling {args.head_depth}, {args.head_kv_heads} KV heads, draft model "
        f"{args.model_steps} steps; target layer "
        f"scale {args.layer_scale:g}: its next token is the current token's successor at "
        f"{100 * statistics.mean(runs[s]['markov']['share'] for s in runs):.1f}% of the "
        "training positions",
        "",
        "| draft, shape | " + " | ".join(f"seed {s}" for s in runs) + " | mean | acceptance "
        "| draft ms / iteration |",
        "|---|" + "---:|" * (len(runs) + 3),
    ]
    keys = [k for k in next(iter(runs.values())) if k not in ("train_s", "markov")]
    for k in keys:
        tpi = [runs[s][k]["tokens_per_iteration"] for s in runs]
        acc = statistics.mean(runs[s][k]["acceptance"] for s in runs)
        ms = statistics.mean(runs[s][k]["draft_ms_per_iteration"] for s in runs)
        cells = " | ".join(f"{x:.2f}" for x in tpi)
        lines.append(f"| {k} | {cells} | {statistics.mean(tpi):.2f} | {acc:.3f} | {ms:.2f} |")
    lines.append("")
    mean = {k: statistics.mean(runs[s][k]["tokens_per_iteration"] for s in runs) for k in keys}
    for head_shape, model_shape in (
        ("chain k=3", "chain k=3"),
        ("chain k=6", "chain k=6"),
        ("tree W=2, 6 nodes", "chain k=6"),
    ):
        h, m = mean[f"EAGLE-3 head, {head_shape}"], mean[f"draft model, {model_shape}"]
        lines.append(f"- head {head_shape} / draft model {model_shape}: {h / m:.3f}x")
    train = {
        d: statistics.mean(runs[s]["train_s"][d] for s in runs)
        for d in ("draft model", "EAGLE-3 head")
    }
    lines.append(
        f"- training seconds (mean): draft model {train['draft model']:.1f}, "
        f"head {train['EAGLE-3 head']:.1f}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--n", type=int, default=16, help="unseen prompts per seed")
    ap.add_argument("--head-steps", type=int, default=800)
    ap.add_argument("--head-depth", type=int, default=6)
    ap.add_argument(
        "--head-kv-heads",
        type=int,
        default=2,
        choices=[1, 2, 4],
        help="the head's KV heads of its 4 attention heads (default 2, as the target)",
    )
    ap.add_argument("--model-steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--layer-scale",
        type=float,
        default=0.1,
        help="the target's attention and MLP output factor (the tests': 0.1; larger: the "
        "context weighs more in its next token)",
    )
    args = ap.parse_args(argv)
    if args.n < 1 or args.head_steps < 1 or args.model_steps < 1 or not 1 <= args.head_depth <= 8:
        ap.error("--n, --head-steps and --model-steps must be >= 1, --head-depth 1..8")
    torch.set_num_threads(args.threads)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="draft-heads-") as tmp:
        for seed in args.seeds:
            runs[seed] = one_seed(args, Path(tmp), seed)
            print(f"seed {seed} done", file=sys.stderr, flush=True)
    print(report(args, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
