"""Prompt attention on the CPU, end to end (TRT_SPEC_CPU_PROMPT_ATTENTION; the low-precision
kernels' own tests are test_attention_bf16.py and test_attention_int16.py).

Prompt rows (prefill chunks, prompt rows carried by verify passes, the draft's prompt reads,
Engine.logits) of f32, f16 and bf16 engines attend in f32, as decode rows do, so that such an
engine gives the same text on every host; those of q8 and q4 engines attend in bf16 where the CPU
has AVX512_BF16, in int16 elsewhere. The variable overrides both (bf16, int16, f32; auto: by the
weights). Checked: the default of each weight format, in the backend's name, Engine's
prompt_attention, the statistics and ``trt-spec info``, and that it reaches the kernel; for each
low-precision mode this CPU runs, the prompt's logits move but stay close to f32's; a prompt's
logits do not depend on the prefill chunk; greedy speculation stays exact when prompt chunks ride
along with other sequences' verify passes; bad values raise; on the real 0.5B (``-m models``),
prompt rows against transformers' float32 logits.
"""

from __future__ import annotations

import numpy as np
import pytest
import spec_pairs
from native import T
from trt_spec import cli
from trt_spec import models as registry
from trt_spec.engine import Engine

HAS_BF16 = T.cpu_attention_bf16("")
NEEDS_BF16 = pytest.mark.skipif(not HAS_BF16, reason="needs AVX512_BF16")
MODES = [pytest.param("bf16", marks=NEEDS_BF16), "int16"]
FAST = "bf16" if HAS_BF16 else "int16"  # q8 / q4 engines' default on this CPU
VAR = "TRT_SPEC_CPU_PROMPT_ATTENTION"
PROMPT = [(7 * i + 3) % 60 + 1 for i in range(70)]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory):
    return spec_pairs.make_pair(tmp_path_factory.mktemp("promptattn"), "noisy", max_batch=4)


@pytest.fixture(scope="module")
def q4_path(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("promptattn_q4")
    return spec_pairs.make_pair(root, "noisy", max_batch=4, weights="q4")


def engine(path, monkeypatch: pytest.MonkeyPatch, mode: str | None, **kw) -> Engine:
    if mode is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, mode)
    return Engine(path, device="cpu", n_threads=2, **kw)


def test_backend_name_says_which(path, q4_path, monkeypatch) -> None:
    assert not engine(path, monkeypatch, None).backend.endswith("-prompt")  # f32 weights
    assert engine(q4_path, monkeypatch, None).backend.endswith(f"+{FAST}-prompt")
    for p in (path, q4_path):
        assert engine(p, monkeypatch, "int16").backend.endswith("+int16-prompt")
        assert engine(p, monkeypatch, "auto").backend == engine(p, monkeypatch, None).backend
        assert not engine(p, monkeypatch, "f32").backend.endswith("-prompt")
        if HAS_BF16:
            assert engine(p, monkeypatch, "bf16").backend.endswith("+bf16-prompt")


@pytest.mark.parametrize("weights", ["f32", "q4"])
def test_the_default_follows_the_weights(path, q4_path, monkeypatch, capsys, weights: str) -> None:
    """An f32 engine attends prompts in f32 on every host, a q4 engine in this CPU's faster
    products; the engine, its statistics and ``trt-spec info`` say which, and the default's
    logits are bit for bit those of that mode asked for by name."""
    p, want = (path, "f32") if weights == "f32" else (q4_path, FAST)
    e = engine(p, monkeypatch, None)
    assert e.weights == weights and e.prompt_attention == want
    r = e.generate(PROMPT[:20], max_new_tokens=4, ignore_eos=True)
    assert r.stats.prompt_attention == want
    assert r.stats.as_dict()["prompt_attention"] == want
    assert cli.main(["info", str(p)]) == 0
    assert f"prompt attention: {want} ({weights} weights)" in capsys.readouterr().out
    ref = np.asarray(engine(p, monkeypatch, want).logits(PROMPT))
    got = np.asarray(engine(p, monkeypatch, None).logits(PROMPT))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    other = np.asarray(engine(p, monkeypatch, "int16" if want == "f32" else "f32").logits(PROMPT))
    assert not np.array_equal(other, ref)


def test_an_override_is_recorded(path, monkeypatch) -> None:
    e = engine(path, monkeypatch, "int16")
    assert e.prompt_attention == "int16"
    assert e.generate(PROMPT[:20], max_new_tokens=2).stats.prompt_attention == "int16"


@pytest.mark.skipif(HAS_BF16, reason="needs a CPU without AVX512_BF16")
def test_bf16_refused_where_the_cpu_cannot(path, monkeypatch) -> None:
    with pytest.raises(Exception, match="AVX512_BF16"):
        engine(path, monkeypatch, "bf16")


def test_bad_value_is_a_clear_error(path, monkeypatch) -> None:
    with pytest.raises(Exception, match=f"{VAR}=f8: use auto, bf16, int16 or f32"):
        engine(path, monkeypatch, "f8")


@pytest.mark.parametrize("mode", MODES)
def test_prompt_logits_move_but_stay_close(path, monkeypatch, mode: str) -> None:
    f32 = np.asarray(engine(path, monkeypatch, "f32").logits(PROMPT))
    low = np.asarray(engine(path, monkeypatch, mode).logits(PROMPT))
    err = np.abs(low - f32).max() / np.abs(f32).max()
    assert 0 < err < 2e-2, err
    # the first row attends only itself: softmax 1, output v rounded; later rows move
    assert not np.array_equal(low[-1], f32[-1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_prompt_logits_do_not_depend_on_the_chunk(path, monkeypatch, chunk: int, mode: str) -> None:
    ref = np.asarray(engine(path, monkeypatch, mode).logits(PROMPT))
    got = np.asarray(engine(path, monkeypatch, mode, prefill_chunk=chunk).logits(PROMPT))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("draft", ["model", "lookup"])
def test_greedy_speculation_exact_with_prompts_carried(path, monkeypatch, draft, mode) -> None:
    """Short chunks and a batch of staggered prompts: later prompts' chunks ride along with
    earlier sequences' verify passes (prompt rows after f32 ones in one call)."""
    e = engine(path, monkeypatch, mode, prefill_chunk=8, interleave_chunk=8)
    prompts = [PROMPT[:5], PROMPT[:40], PROMPT[3:70], PROMPT[10:31]]
    base = e.generate(prompts, max_new_tokens=20, speculate=False, ignore_eos=True)
    got = e.generate(prompts, max_new_tokens=20, draft=draft, draft_len=4, ignore_eos=True)
    for b, g in zip(base, got, strict=True):
        assert g.token_ids == b.token_ids


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,bound", [pytest.param("bf16", 3e-2, marks=NEEDS_BF16), ("int16", 1e-2)]
)
def test_real_05b_prompt_logits_against_transformers(
    engines_05b, hf_05b, monkeypatch, mode: str, bound: float
) -> None:
    """The real 0.5B, f32 weights, 3 HumanEval prompts: every prompt row's logits against
    transformers' float32 ones (the f32 path is within 1e-3: test_real_models.py) and their
    argmax, where transformers' top two are not within 0.1 of each other."""
    import torch

    e = engine(engines_05b("f32"), monkeypatch, mode)
    assert e.backend.endswith(f"+{mode}-prompt")
    agree = total = 0
    worst = 0.0
    for row in registry.humaneval_prompts(3):
        ids = e.encode(row["prompt"])
        ours = np.asarray(e.logits(ids))
        with torch.no_grad():
            ref = hf_05b(torch.tensor([ids])).logits[0].numpy()
        worst = max(worst, float(np.abs(ours - ref).max() / np.abs(ref).max()))
        top2 = np.sort(ref, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 0.1
        agree += int((ours.argmax(1) == ref.argmax(1))[clear].sum())
        total += int(clear.sum())
    print(f"{mode} prompts: relative logit error {worst:.2e}, argmax {agree}/{total}")
    # measured (Zen 4): bf16 1.35e-2, int16 3.3e-3; q4 weights alone: ~8e-2
    assert worst < bound
    assert agree == total
