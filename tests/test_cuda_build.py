"""The CUDA build on any machine (no GPU needed): the module imports, reports whether the CUDA
backend is compiled in, refuses device="cuda" clearly without a GPU and falls back to the CPU for
device="auto"; the test-only op bindings and the random real-shape engines work on the CPU (the
GPU tests use both)."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import RULES, SOURCE, fields, params, seq_states
from native import T, wt
from random_engine import SHAPES, parameter_count, write_random_engine
from trt_spec import Engine, _core

TINY = dict(
    arch="qwen2",
    n_layers=2,
    dim=128,
    n_heads=4,
    n_kv_heads=2,
    head_dim=32,
    ffn_dim=256,
    vocab_size=512,
    rope_theta=10000.0,
    rms_eps=1e-6,
    tied_embeddings=True,
    qkv_bias=True,
)


def _expect_cuda() -> bool:
    """TRT_SPEC_EXPECT_CUDA=1/0 when set, else: built with CUDA iff nvcc is on PATH."""
    env = os.environ.get("TRT_SPEC_EXPECT_CUDA")
    if env is not None:
        return env == "1"
    return shutil.which("nvcc") is not None


def test_import_reports_cuda_build() -> None:
    import trt_spec  # noqa: F401  (the module imports without a GPU or driver)

    assert isinstance(_core.cuda_compiled(), bool)
    assert isinstance(_core.cuda_available(), bool)
    if _expect_cuda():
        assert _core.cuda_compiled(), "nvcc is on PATH but the CUDA backend was not built"
    if _core.cuda_available():
        assert _core.cuda_compiled()


@pytest.mark.skipif(shutil.which("ldd") is None, reason="needs ldd")
def test_module_needs_no_cuda_libraries() -> None:
    """The CUDA runtime is linked statically and the driver loaded on first use: importing
    needs neither libcudart nor libcuda."""
    import subprocess

    deps = subprocess.run(["ldd", _core.__file__], capture_output=True, text=True).stdout
    assert "libcudart" not in deps and "libcuda.so" not in deps, deps


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("cudabuild") / "tiny.engine"
    return write_random_engine(
        path,
        TINY,
        draft=dict(TINY, n_layers=1, tied_embeddings=False),
        weights="f32",
        max_seq_len=128,
        max_batch=2,
        draft_len=4,
    )


@pytest.mark.skipif(_core.cuda_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_device_without_gpu_is_a_clear_error(tiny_engine, device: str) -> None:
    with pytest.raises(ValueError, match=r"no CUDA GPU is available|has no CUDA backend"):
        Engine(tiny_engine, device=device)


@pytest.mark.skipif(_core.cuda_available(), reason="this machine has a GPU")
def test_auto_falls_back_to_cpu(tiny_engine) -> None:
    e = Engine(tiny_engine, device="auto")
    assert e.backend.startswith("cpu")
    ids = e.generate([1, 2, 3], max_new_tokens=4, ignore_eos=True).token_ids
    assert len(ids) == 4


@pytest.mark.parametrize("device", ["metal", "cuda:x", "cuda:"])
def test_unknown_device_names(tiny_engine, device: str) -> None:
    with pytest.raises(ValueError, match="unknown device"):
        Engine(tiny_engine, device=device)


def test_random_real_shapes() -> None:
    assert parameter_count(SHAPES["qwen2.5-1.5b"]) == pytest.approx(1.54e9, rel=0.02)
    # The 0.5B as the engine holds it: its head stored apart (untied), 0.49e9 + 0.14e9.
    assert parameter_count(SHAPES["qwen2.5-0.5b"]) == pytest.approx(0.63e9, rel=0.02)
    assert parameter_count(SHAPES["llama-7b"]) == pytest.approx(6.74e9, rel=0.02)


def test_random_engine_runs_and_graph_flag(tiny_engine) -> None:
    e = Engine(tiny_engine, device="cpu", n_threads=2)
    assert e.has_draft and e.config()["dim"] == 128
    base = e.generate([5, 6, 7], max_new_tokens=12, speculate=False, ignore_eos=True).token_ids
    spec = e.generate([5, 6, 7], max_new_tokens=12, draft_len=3, ignore_eos=True).token_ids
    assert spec == base
    assert e.use_graphs is True
    e.use_graphs = False
    assert e.use_graphs is False and e.graphs_captured == 0


# ---- the op bindings on the CPU (the harness of tests/test_cuda_ops.py) ----------------------
def test_op_runner_linear_and_sampling_on_cpu() -> None:
    r = T.OpRunner("cpu")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 128), dtype=np.float32)
    x = rng.standard_normal((3, 128), dtype=np.float32)
    b = rng.standard_normal(64, dtype=np.float32)
    blob = _core.quantize_weight(w, _core.WeightType.F32)
    got = r.linear(blob, wt(_core.WeightType.F32), 64, 128, x, b)
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-4)
    logits = (3 * rng.standard_normal((4, 300))).astype(np.float32)
    ps = [params(RULES[i], seed=i, step=5) for i in range(4)]
    toks, steps = r.sample(logits, [0, 1, 2, 3], ps)
    for i in range(4):
        t, k, p, seed, step = ps[i]
        assert toks[i] == T.sample_row(logits[i], t, k, p, seed, step)
    assert steps == [6, 6, 6, 6]


def test_op_runner_spec_ops_on_cpu() -> None:
    r = T.OpRunner("cpu")
    rng = np.random.default_rng(1)
    model = 1 << SOURCE["model"]
    seqs = seq_states(2, n_past=10, last=3, prev=2, n_gen=4, max_nodes=16, sources=model)
    k, V = 2, 50
    p = [params((0.0, 0, 1.0), 0), params((1.0, 0, 1.0), 1)]
    q = np.zeros((k * 2, V), np.float32)
    for j in range(k):
        qj, seqs = r.spec_draft_sample(
            (3 * rng.standard_normal((2, V))).astype(np.float32), V, j, seqs, [0, 1], p
        )
        q[j * 2 : j * 2 + 2] = qj
    assert np.allclose(q[1::2].sum(axis=1), 1.0, atol=1e-5)  # sampling rows became q_j
    tok, pos, rs, idx, base, bits, seqs = r.spec_verify_rows(seqs, [1, 0], k, SOURCE["model"])
    drafted = fields(seqs)
    assert tok[:3] == [3, *drafted[1]["tree_token"][:2]] and pos[:3] == [10, 11, 12]
    assert rs == [1, 1, 1, 0, 0, 0] and idx[:3] == [10, 11, 12] and bits[:3] == [1, 3, 7]
    hist = np.zeros((2, 32), np.int32)
    after, h, moves = r.spec_accept(
        rng.standard_normal((2 * (k + 1), V)).astype(np.float32), q, k, seqs, [0, 1], p, hist
    )
    f = fields(after)
    for s in range(2):
        assert f[s]["n_new"] == f[s]["n_acc"] + 1
        assert f[s]["n_past"] == 10 + f[s]["n_new"] and f[s]["n_gen"] == 4 + f[s]["n_new"]
        n = f[s]["n_acc"]
        assert list(f[s]["out"][:n]) == list(drafted[s]["tree_token"][:n])
        assert list(h[s, 11 : 11 + f[s]["n_new"]]) == list(f[s]["out"][: f[s]["n_new"]])


def test_sources_compile_without_the_cuda_backend() -> None:
    """A machine without nvcc builds the CPU backend alone (TRT_SPEC_CUDA=OFF): every source whose
    code differs there (TRT_SPEC_WITH_CUDA unset: the backend-ops makers get null for CUDA)
    compiles. (Syntax only, each file alone: seconds, where a second full build would take
    minutes.)"""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    repo = Path(__file__).resolve().parents[1]
    files = [
        f
        for f in sorted((repo / "cpp").rglob("*.cpp"))
        if f.parent.name not in ("cuda", "bindings")
        and ("TRT_SPEC_WITH_CUDA" in (t := f.read_text()) or '"spec/backend_ops.h"' in t)
    ]
    assert len(files) >= 8, files
    flags = ["-std=c++17", "-fsyntax-only", f"-I{repo / 'cpp'}", f"-isystem{repo / 'third_party'}"]

    def compile_one(f: Path) -> tuple[Path, subprocess.CompletedProcess]:
        return f, subprocess.run([cxx, *flags, str(f)], capture_output=True, text=True)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for f, r in pool.map(compile_one, files):
            assert r.returncode == 0, f"{f.relative_to(repo)}:\n{r.stderr[-3000:]}"
