"""Drafts trained in the tests, for a few seconds with torch, on a tiny target's own greedy
outputs (the Markov target of spec_pairs), and how they are measured: random prompts, the
target's continuations of them, a 1-layer draft model trained with the next-token loss, and
greedy runs that return acceptance and tokens per iteration at a fixed draft length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tiny_models
import torch
from trt_spec import Engine


def random_prompts(seed: int, n: int) -> list[list[int]]:
    """n random 6-token prompts over the tiny models' 384-token vocabulary."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 383, 6).tolist() for _ in range(n)]


def target_outputs(model, n: int, length: int, seed: int) -> torch.Tensor:
    """Greedy continuations of random 6-token prompts: [n, 6 + length] token ids."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, model.config.vocab_size - 1, (n, 6), generator=g)
    with torch.no_grad():
        return model.generate(
            starts,
            attention_mask=torch.ones_like(starts),
            max_new_tokens=length,
            min_new_tokens=length,
            do_sample=False,
            pad_token_id=0,
        )


def train_draft_model(seqs: torch.Tensor, folder: Path, steps: int, seed: int = 9) -> Path:
    """A 1-layer Qwen2 draft model trained on the sequences [n, T] with the next-token loss
    (full batch, Adam 3e-3), saved to folder."""
    draft = tiny_models.make_model(folder, "qwen2", vocab_size=384, layers=1, seed=seed)
    draft.train()
    opt = torch.optim.Adam(draft.parameters(), lr=3e-3)
    for _ in range(steps):
        logits = draft(seqs[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), seqs[:, 1:].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    draft.eval()
    draft.save_pretrained(folder, safe_serialization=True)
    return folder


def fixed_length_runs(
    eng: Engine, prompts: list[list[int]], k: int, want: list[list[int]]
) -> dict[str, float]:
    """Each prompt greedy with draft="model" at the fixed length k (40 tokens), its tokens equal
    to want's (target-only's); returns acceptance, tokens per iteration and draft milliseconds
    per iteration over all prompts."""
    drafted = accepted = iters = emitted = 0
    draft_s = 0.0
    for p, w in zip(prompts, want, strict=True):
        got = eng.generate(p, max_new_tokens=40, draft="model", draft_len=k)
        assert got.token_ids == w, p
        drafted += got.stats.drafted
        accepted += got.stats.accepted
        iters += got.stats.iterations
        emitted += got.stats.new_tokens - 1  # (the first token is the prefill's)
        draft_s += got.stats.draft_s
    return {
        "acceptance": accepted / max(drafted, 1),
        "tokens_per_iteration": emitted / iters,
        "draft_ms_per_iteration": 1e3 * draft_s / iters,
    }


def greedy_runs(eng: Engine, prompts: list[list[int]], k: int = 3) -> tuple[float, float]:
    """Each prompt greedy with draft="model", its length chosen and fixed to k, both equal to
    target-only; returns the fixed length's acceptance and tokens per iteration (the chosen
    length follows the host's timing)."""
    want = [eng.generate(p, max_new_tokens=40, draft="none").token_ids for p in prompts]
    for p, w in zip(prompts, want, strict=True):
        assert eng.generate(p, max_new_tokens=40, draft="model").token_ids == w
    runs = fixed_length_runs(eng, prompts, k, want)
    return runs["acceptance"], runs["tokens_per_iteration"]


def assert_seeded_runs_equal_target_only(
    eng: Engine, prompts: list[list[int]], seed: int, draft_len: int
) -> None:
    """Each prompt sampled (temperature 0.9, top-p 0.95, seed `seed` + its index) with draft="model"
    at draft_len emits target-only's tokens for the same seed."""
    for i, p in enumerate(prompts):
        kw = dict(max_new_tokens=32, temperature=0.9, top_p=0.95, seed=seed + i)
        want = eng.generate(p, draft="none", **kw)
        got = eng.generate(p, draft="model", draft_len=draft_len, **kw)
        assert got.token_ids == want.token_ids
