"""Greedy speculation on the default pair (Qwen2.5-Coder 1.5B target, 0.5B draft, q4 engine):
token for token the target-only output, for K in {1, 2, 4, 8}, at batch 1 and batch 4.

The issue's full check is 30 HumanEval prompts x 128 tokens; on a 2-core CPU that is about 40
minutes (nine decodes of 3840 tokens, each with its prefills), too long for CI. The suite runs
the same check on the first TRT_SPEC_EXACT_PROMPTS prompts (default 4) x TRT_SPEC_EXACT_TOKENS
tokens (default 64); `TRT_SPEC_EXACT_PROMPTS=30 TRT_SPEC_EXACT_TOKENS=128` runs it in full
(the committed run: benchmarks/results/exactness_*.txt).
"""

from __future__ import annotations

import os

import pytest
from trt_spec import Engine, _core
from trt_spec import models as registry

# Slow: the module fixture builds the real default pair and its reference (minutes on 2 cores).
pytestmark = [pytest.mark.models, pytest.mark.slow]

N_PROMPTS = int(os.environ.get("TRT_SPEC_EXACT_PROMPTS", "4"))
N_TOKENS = int(os.environ.get("TRT_SPEC_EXACT_TOKENS", "64"))


@pytest.fixture(scope="module")
def pair_engine(default_pair_engine) -> Engine:
    """The default pair as `trt-spec build` makes it (draft_len 8, max_batch 4; conftest)."""
    return Engine(default_pair_engine)


@pytest.fixture(scope="module")
def reference(pair_engine: Engine) -> tuple[list[list[int]], list[list[int]]]:
    prompts = [pair_engine.encode(p["prompt"]) for p in registry.humaneval_prompts(N_PROMPTS)]
    out = pair_engine.generate(prompts, max_new_tokens=N_TOKENS, speculate=False, ignore_eos=True)
    return prompts, [r.token_ids for r in out]


# Every draft length once, one request at a time and four in a batch twice each (the tiny pairs of
# test_speculative.py run the whole k x batch product).
@pytest.mark.parametrize("k,batch", [(1, 1), (2, 4), (4, 1), (8, 4)])
def test_greedy_speculation_is_exact_on_the_default_pair(pair_engine, reference, k, batch):
    prompts, want = reference
    if batch == 1:
        got = [
            pair_engine.generate(p, max_new_tokens=N_TOKENS, draft_len=k, ignore_eos=True)
            for p in prompts
        ]
    else:
        got = pair_engine.generate(prompts, max_new_tokens=N_TOKENS, draft_len=k, ignore_eos=True)
    rates = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.token_ids == w, f"prompt {i}: first difference at {_first_diff(g.token_ids, w)}"
        rates.append(g.stats.acceptance_rate)
    print(f"K={k} batch={batch}: acceptance {sum(rates) / len(rates):.1%}")
    # The real draft agrees with the target most of the time. One prompt's rate at K = 8 moves
    # with the draft's float rounding (27.7% with the AVX-512 tile, Zen 5): the bound is on the
    # mean, and every prompt must still keep some (a broken draft keeps ~0%).
    assert sum(rates) / len(rates) > 0.5 and min(rates) > 0.15


def _first_diff(a: list[int], b: list[int]) -> int:
    diffs = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(diffs, min(len(a), len(b)))


@pytest.mark.skipif(not _core.cuda_compiled(), reason="needs the CUDA build")
def test_cuda_launches_per_iteration_of_the_default_pair(pair_engine: Engine) -> None:
    """Issue 12: at most 5 launches per layer and at most 650 per K = 4 iteration at batch 1
    (about 1,640 before the fused ops), counted by the CUDA backend's launch code, no GPU."""
    p = _core.cuda_launch_plan(pair_engine.path, batch=1, draft_len=4)
    assert (p["target_step"] - 2) / p["target_layers"] <= 5
    assert (p["draft_step"] - 2) / p["draft_layers"] <= 5
    assert p["iteration"] <= 650, p
