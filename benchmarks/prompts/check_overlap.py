"""How much of a model's answer repeats its prompt: the case for prompt-lookup drafting.

For each selected prompt of a JSONL prompt file (``messages`` chat, see README.md), the chat is
rendered with the model's own chat template (``add_generation_prompt=True``), the model answers
greedily (Hugging Face transformers, CPU, fp32 weights de-quantized from the GGUF, stopping at
EOS or after ``--max-new-tokens``), and the answer is scored token by token:

* ``overlap_prompt``: the fraction of generated tokens ``t[i]`` whose n-gram
  ``t[i-n+1] .. t[i]`` (the n-1 tokens before it, from the prompt or the answer, plus the token
  itself) occurs somewhere in the rendered prompt. It is the share of the answer that an ideal
  n-gram lookup over the prompt could have proposed with a key of n-1 tokens.
* ``overlap_context``: the same, with the n-gram searched in the prompt and in the answer
  generated before ``t[i]`` (what a lookup that also indexes its own output sees).
* ``mean_run`` / ``max_run``: lengths of the maximal runs of consecutive prompt-matching tokens
  (long runs are what make long drafts pay).

Without generation (``--lengths-only``) it prints the token counts of the rendered prompts and
of the ``prediction`` fields, i.e. the composition of the prompt file.

Usage::

    python benchmarks/prompts/check_overlap.py benchmarks/prompts/code_edits.jsonl \\
        --ids typehints-inventory,fix-lru-cache --max-new-tokens 200 --threads 2
    python benchmarks/prompts/check_overlap.py benchmarks/prompts/code_edits.jsonl --lengths-only

Standard library plus transformers (torch, and ``gguf`` for reading the GGUF file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_MODEL = (
    Path(os.environ.get("TRT_SPEC_CACHE", Path.home() / ".cache" / "trt-spec"))
    / "models"
    / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
)


def load_prompts(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def ngram_overlap(prompt: list[int], generated: list[int], n: int = 3) -> dict[str, Any]:
    """Score ``generated`` against ``prompt``; see the module docstring for the definitions."""
    if n < 1:
        raise ValueError("n must be >= 1")
    prompt_grams = {tuple(prompt[i : i + n]) for i in range(len(prompt) - n + 1)}
    seen_grams = set(prompt_grams)
    seq = list(prompt)
    in_prompt: list[bool] = []
    in_context = 0
    for tok in generated:
        seq.append(tok)
        gram = tuple(seq[-n:]) if len(seq) >= n else None
        hit = gram is not None and gram in prompt_grams
        in_prompt.append(hit)
        if gram is not None and gram in seen_grams:
            in_context += 1
        if gram is not None:
            seen_grams.add(gram)
    runs: list[int] = []
    run = 0
    for hit in in_prompt:
        if hit:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    if run:
        runs.append(run)
    total = len(generated)
    return {
        "n": n,
        "generated_tokens": total,
        "overlap_prompt": sum(in_prompt) / total if total else 0.0,
        "overlap_context": in_context / total if total else 0.0,
        "mean_run": statistics.fmean(runs) if runs else 0.0,
        "max_run": max(runs, default=0),
    }


def _load_tokenizer(model: Path) -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    return AutoTokenizer.from_pretrained(model.parent, gguf_file=model.name)


def render(tok: Any, messages: list[dict[str, str]]) -> str:
    """The chat rendered with the tokenizer's chat template, ready for the assistant's turn."""
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def lengths(tok: Any, prompts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for p in prompts:
        text = render(tok, p["messages"])
        rows.append(
            {
                "id": p["id"],
                "task": p.get("task"),
                "language": p.get("language"),
                "prompt_tokens": len(tok(text, add_special_tokens=False)["input_ids"]),
                "prediction_tokens": len(
                    tok(p.get("prediction", ""), add_special_tokens=False)["input_ids"]
                ),
                "prediction_lines": p.get("prediction", "").count("\n"),
            }
        )
    return rows


def check(
    model: Path,
    prompts: list[dict[str, Any]],
    *,
    max_new_tokens: int,
    threads: int,
    n: int,
    show: bool,
) -> list[dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    tok = _load_tokenizer(model)
    t0 = time.perf_counter()
    lm = AutoModelForCausalLM.from_pretrained(
        model.parent, gguf_file=model.name, dtype=torch.float32
    ).eval()
    print(f"# loaded {model.name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    results = []
    for p in prompts:
        text = render(tok, p["messages"])
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = lm.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.eos_token_id,
            )
        gen = out[0, ids.shape[1] :].tolist()
        if gen and gen[-1] == tok.eos_token_id:
            gen = gen[:-1]
        row = {
            "id": p["id"],
            "task": p.get("task"),
            "prompt_tokens": ids.shape[1],
            "wall_s": round(time.perf_counter() - t0, 1),
            **ngram_overlap(ids[0].tolist(), gen, n),
        }
        results.append(row)
        print(json.dumps(row), flush=True)
        if show:
            print(tok.decode(gen), file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("prompts", help="JSONL prompt file")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="GGUF model file")
    ap.add_argument("--ids", help="comma-separated prompt ids (default: all, or --limit)")
    ap.add_argument("--limit", type=int, help="only the first N prompts")
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=3, help="n-gram length (default 3)")
    ap.add_argument("--lengths-only", action="store_true", help="token counts, no generation")
    ap.add_argument("--show", action="store_true", help="print each answer to stderr")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported: GGUF loading bars

    prompts = load_prompts(args.prompts)
    if args.ids:
        wanted = args.ids.split(",")
        by_id = {p["id"]: p for p in prompts}
        missing = [i for i in wanted if i not in by_id]
        if missing:
            ap.error(f"unknown ids: {', '.join(missing)}")
        prompts = [by_id[i] for i in wanted]
    if args.limit is not None:
        prompts = prompts[: args.limit]

    if args.lengths_only:
        rows = lengths(_load_tokenizer(args.model), prompts)
        for row in rows:
            print(json.dumps(row))
        toks = [r["prompt_tokens"] for r in rows]
        print(
            f"# {len(rows)} prompts; rendered prompt tokens min {min(toks)}, "
            f"median {statistics.median(toks):.0f}, max {max(toks)}",
            file=sys.stderr,
        )
    else:
        rows = check(
            args.model,
            prompts,
            max_new_tokens=args.max_new_tokens,
            threads=args.threads,
            n=args.n,
            show=args.show,
        )
        if rows:
            mean = statistics.fmean(r["overlap_prompt"] for r in rows)
            print(f"# mean overlap_prompt (n={args.n}): {mean:.3f}", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
