"""bf16 prompt attention on the CPU, end to end (TRT_SPEC_CPU_PROMPT_ATTENTION; the kernel's own
tests are test_attention_bf16.py).

Prompt rows (prefill chunks, prompt rows carried by verify passes, the draft's prompt reads,
Engine.logits) attend in bf16 where the CPU has AVX512_BF16, unless the variable says f32. Checked:
the backend's name says which; the prompt's logits move (the flag reaches the kernel) but stay
close to f32's; a prompt's logits do not depend on the prefill chunk; greedy speculation stays
exact when prompt chunks ride along with other sequences' verify passes; bad values raise.
"""

from __future__ import annotations

import numpy as np
import pytest
import spec_pairs
from native import T
from trt_spec.engine import Engine

needs_bf16 = pytest.mark.skipif(not T.cpu_attention_bf16(""), reason="needs AVX512_BF16")
VAR = "TRT_SPEC_CPU_PROMPT_ATTENTION"
PROMPT = [(7 * i + 3) % 60 + 1 for i in range(70)]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory):
    return spec_pairs.make_pair(tmp_path_factory.mktemp("promptattn"), "noisy", max_batch=4)


def engine(path, monkeypatch: pytest.MonkeyPatch, mode: str | None, **kw) -> Engine:
    if mode is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, mode)
    return Engine(path, device="cpu", n_threads=2, **kw)


@needs_bf16
def test_backend_name_says_which(path, monkeypatch) -> None:
    assert engine(path, monkeypatch, None).backend.endswith("+bf16-prompt")  # auto
    assert engine(path, monkeypatch, "bf16").backend.endswith("+bf16-prompt")
    assert not engine(path, monkeypatch, "f32").backend.endswith("+bf16-prompt")


@pytest.mark.skipif(T.cpu_attention_bf16(""), reason="needs a CPU without AVX512_BF16")
def test_bf16_refused_where_the_cpu_cannot(path, monkeypatch) -> None:
    assert not engine(path, monkeypatch, None).backend.endswith("+bf16-prompt")
    with pytest.raises(Exception, match="AVX512_BF16"):
        engine(path, monkeypatch, "bf16")


def test_bad_value_is_a_clear_error(path, monkeypatch) -> None:
    with pytest.raises(Exception, match=VAR):
        engine(path, monkeypatch, "f8")


@needs_bf16
def test_prompt_logits_move_but_stay_close(path, monkeypatch) -> None:
    f32 = np.asarray(engine(path, monkeypatch, "f32").logits(PROMPT))
    bf16 = np.asarray(engine(path, monkeypatch, "bf16").logits(PROMPT))
    err = np.abs(bf16 - f32).max() / np.abs(f32).max()
    assert 0 < err < 2e-2, err
    # the first row attends only itself: softmax 1, output v rounded to bf16; later rows move
    assert not np.array_equal(bf16[-1], f32[-1])


@needs_bf16
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_prompt_logits_do_not_depend_on_the_chunk(path, monkeypatch, chunk: int) -> None:
    ref = np.asarray(engine(path, monkeypatch, "bf16").logits(PROMPT))
    got = np.asarray(engine(path, monkeypatch, "bf16", prefill_chunk=chunk).logits(PROMPT))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


@needs_bf16
@pytest.mark.parametrize("draft", ["model", "lookup"])
def test_greedy_speculation_exact_with_prompts_carried(path, monkeypatch, draft: str) -> None:
    """Short chunks and a batch of staggered prompts: later prompts' chunks ride along with
    earlier sequences' verify passes (bf16 rows after f32 ones in one call)."""
    e = engine(path, monkeypatch, "bf16", prefill_chunk=8, interleave_chunk=8)
    prompts = [PROMPT[:5], PROMPT[:40], PROMPT[3:70], PROMPT[10:31]]
    base = e.generate(prompts, max_new_tokens=20, speculate=False, ignore_eos=True)
    got = e.generate(prompts, max_new_tokens=20, draft=draft, draft_len=4, ignore_eos=True)
    for b, g in zip(base, got, strict=True):
        assert g.token_ids == b.token_ids
