"""Every CPU instruction set the engine dispatches to, end to end, on whatever host runs the
suite: the process picks its kernels once (TRT_SPEC_CPU_ISA, else the best the CPU runs), so each
ISA runs in its own process. An f32 engine's logits match transformers' float32 ones (the 1e-4
bound of test_logits_tiny), and greedy speculation equals target-only on q4 and f32 pairs. An
ISA this host lacks is skipped with a reason that names it; kernel-level tests of every ISA the
host runs are in test_kernels_cpu.py and test_attention_*.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spec_pairs
import tiny_models
from native import T

NEEDS = {"avx2": "AVX2, FMA and F16C", "avx512": "AVX-512 (F, BW, VL, VNNI)"}
PROMPT = [3, 17, 250, 99, 5, 42, 42, 7, 380, 1, 0, 64, 128, 200, 31, 8] * 5

CHILD = r"""
import json, sys
import numpy as np
from trt_spec import Engine
args = json.loads(sys.argv[1])
logits = Engine(args["f32"]).logits(args["prompt"])
np.save(args["out"], logits)
same = {}
for name, path in args["pairs"].items():
    e = Engine(path)
    base = e.generate([3, 5, 7, 11], max_new_tokens=24, speculate=False, ignore_eos=True)
    spec = e.generate([3, 5, 7, 11], max_new_tokens=24, draft="model", draft_len=3,
                      ignore_eos=True)
    same[name] = base.token_ids == spec.token_ids and len(base.token_ids) == 24
print(json.dumps({"backend": Engine(args["f32"]).backend, "same": same}))
"""


@pytest.mark.parametrize("isa", sorted(NEEDS))
def test_every_isa_end_to_end(isa: str, tiny, tmp_path_factory, tmp_path: Path) -> None:
    if isa not in T.cpu_isas():
        pytest.skip(f"this CPU lacks {NEEDS[isa]}: the {isa} kernels cannot run here")
    f32, model = tiny.engine("qwen2", "f32")
    root = tmp_path_factory.mktemp("isa_pairs")
    pairs = {
        w: str(spec_pairs.make_pair(root, "noisy", draft_len=3, weights=w)) for w in ("f32", "q4")
    }
    out = tmp_path / "logits.npy"
    env = dict(os.environ, TRT_SPEC_CPU_ISA=isa)
    env.pop("TRT_SPEC_CPU_PROMPT_ATTENTION", None)  # the defaults: the f32 engine attends in f32
    arg = json.dumps({"f32": str(f32), "prompt": PROMPT, "out": str(out), "pairs": pairs})
    run = subprocess.run(
        [sys.executable, "-c", CHILD, arg], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["backend"].startswith(f"cpu-{isa}"), got
    assert got["same"] == {"f32": True, "q4": True}, got
    ref = tiny_models.reference_logits(model, PROMPT)
    ours = np.load(out)
    assert float(np.abs(ours - ref).max() / np.abs(ref).max()) < 1e-4


def test_unknown_isa_is_a_clear_error(tiny) -> None:
    f32, _ = tiny.engine("qwen2", "f32")
    child = "import sys; from trt_spec import Engine; Engine(sys.argv[1])"
    env = dict(os.environ, TRT_SPEC_CPU_ISA="sse9")
    cmd = [sys.executable, "-c", child, str(f32)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "TRT_SPEC_CPU_ISA=sse9: unknown ISA or not supported" in run.stderr, run.stderr
