"""transformers peer of ``trt-spec bench``: assisted generation (``assistant_model``), GGUF pair.

A benchmark peer only, never a dependency of the package (it needs torch and transformers, the
``test`` extra). Both models are loaded the way ``benchmarks/bench_decode.py`` loads its target:
``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=float32)`` (the GGUF weights
dequantized to fp32), with the generation config made greedy and EOS ignored, so every run
yields ``n_new`` tokens like ``trt-spec bench``.

* target-only (``draft_len=0``): plain ``generate(do_sample=False)``.
* fixed K: ``generate(assistant_model=draft, do_sample=False)`` with the draft's
  ``num_assistant_tokens=K``, schedule ``"constant"`` and no confidence cut-off, so every
  iteration drafts exactly K tokens (fewer only at the length limit).
* ``"auto"``: transformers' own defaults for the assistant (20 tokens, schedule and confidence
  threshold as transformers ships them), its counterpart of ``draft_len="auto"``.

Timing: a streamer records when each batch of new tokens reaches it (one ``put`` per
iteration). decode tok/s = (tokens after the first put) / (last put - first put): prompt
processing and the first iteration are excluded, as in trt-spec's ``decode_tokens_per_s``.
Acceptance is derived from the put sizes: an iteration that puts m tokens kept m - 1 drafts.

Usage on its own: ``python benchmarks/peers/transformers_assisted_runner.py --target T.gguf
--draft D.gguf --prompt "def fib(n):" --n 32 --draft-len 4 --threads 2`` prints JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


class AssistedRunner:
    """The target and draft GGUF files loaded into transformers (fp32, CPU)."""

    def __init__(self, target: str | Path, draft: str | Path, threads: int) -> None:
        os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF de-quantization progress bar
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        self.torch = torch
        torch.set_num_threads(threads)
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        target, draft = Path(target), Path(draft)
        t0 = time.perf_counter()
        self.tok = AutoTokenizer.from_pretrained(target.parent, gguf_file=target.name)
        self.target = AutoModelForCausalLM.from_pretrained(
            target.parent, gguf_file=target.name, dtype=torch.float32
        ).eval()
        self.draft = AutoModelForCausalLM.from_pretrained(
            draft.parent, gguf_file=draft.name, dtype=torch.float32
        ).eval()
        self.load_s = time.perf_counter() - t0
        self.info = {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "isa": f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}",
            "weights": "fp32 (dequantized from the GGUF)",
            "load_s": self.load_s,
        }
        cfg = self.target.generation_config
        cfg.eos_token_id = None  # ignore EOS: always n_new tokens
        cfg.pad_token_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
            if hasattr(cfg, key):
                setattr(cfg, key, None)
        cfg.do_sample = False
        self.gen_cfg = cfg
        self._draft_defaults = copy.deepcopy(self.draft.generation_config)

    def _set_draft_len(self, draft_len: int | str) -> None:
        cfg = copy.deepcopy(self._draft_defaults)
        if draft_len != "auto":
            cfg.num_assistant_tokens = int(draft_len)
            cfg.num_assistant_tokens_schedule = "constant"
            cfg.assistant_confidence_threshold = 0.0  # falsy: never stop a draft early
        self.draft.generation_config = cfg

    def generate(self, prompt: str, n_new: int, draft_len: int | str = 0) -> dict[str, Any]:
        """One greedy generation; ``draft_len`` 0 (target-only), K >= 1, or ``"auto"``."""
        from transformers.generation.streamers import BaseStreamer

        class Clock(BaseStreamer):
            def __init__(self) -> None:
                self.puts: list[tuple[float, int]] = []
                self.prompt_seen = False

            def put(self, value: Any) -> None:
                if not self.prompt_seen:  # the first put is the prompt
                    self.prompt_seen = True
                    return
                self.puts.append((time.perf_counter(), int(value.numel())))

            def end(self) -> None:
                pass

        enc = self.tok(prompt, return_tensors="pt")
        cfg = copy.deepcopy(self.gen_cfg)
        cfg.max_new_tokens = n_new
        kwargs: dict[str, Any] = {}
        if draft_len != 0:
            self._set_draft_len(draft_len)
            kwargs["assistant_model"] = self.draft
        clock = Clock()
        t0 = time.perf_counter()
        with self.torch.inference_mode():
            out = self.target.generate(**enc, generation_config=cfg, streamer=clock, **kwargs)
        n_prompt = int(enc["input_ids"].shape[1])
        new_ids = out[0, n_prompt:].tolist()
        puts = clock.puts
        after_first = sum(n for _, n in puts[1:])
        decode_s = puts[-1][0] - puts[0][0] if len(puts) > 1 else 0.0
        iterations = len(puts) - 1  # decode iterations after the first put
        result: dict[str, Any] = {
            "draft_len": draft_len,
            "prompt_tokens": n_prompt,
            "new_tokens": len(new_ids),
            "ttft_s": puts[0][0] - t0 if puts else None,
            "decode_tokens": after_first,
            "decode_s": decode_s,
            "decode_tok_s": after_first / decode_s if decode_s > 0 else 0.0,
            "iterations": iterations,
            "tokens_per_iteration": after_first / iterations if iterations else 0.0,
            "token_ids": new_ids,
        }
        if draft_len != 0:
            kept = sum(n - 1 for _, n in puts)
            result["accepted"] = kept
            if draft_len != "auto":
                # K drafts per iteration (an upper bound near the length limit)
                result["drafted"] = int(draft_len) * len(puts)
                result["acceptance_rate"] = kept / result["drafted"] if puts else 0.0
        return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--target", required=True, help="target GGUF")
    ap.add_argument("--draft", required=True, help="draft GGUF")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--n", type=int, default=32, help="new tokens")
    ap.add_argument("--draft-len", default="4", help="K, 0 (target-only) or auto")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    k: int | str = args.draft_len if args.draft_len == "auto" else int(args.draft_len)
    runner = AssistedRunner(args.target, args.draft, args.threads)
    out = runner.generate(args.prompt, args.n, k)
    out.pop("token_ids")
    print(json.dumps({**runner.info, **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
