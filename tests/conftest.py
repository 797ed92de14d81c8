"""Shared fixtures: tiny random checkpoints and their engines, and the real model files.

Tests that need the real GGUF files carry ``@pytest.mark.models``; the files come from the
cache that ``trt-spec fetch-models`` fills (fetched here on first use).

The test-only native targets (``_trt_spec_testing``, the CUDA emulation libraries) are built on
first use by native_build.py, with CMake, in the package's build folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # random_engine, peers


def pytest_report_header(config: pytest.Config) -> str:
    """The order's seed, also under -q (pytest-randomly shuffles the suite on every run)."""
    return _order_line(config)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(_order_line(config))


def _order_line(config: pytest.Config) -> str:
    seed = getattr(config.option, "randomly_seed", None)
    if not config.pluginmanager.hasplugin("randomly") or not isinstance(seed, int):
        return "test order: as collected (pytest-randomly not active)"
    return f"test order: shuffled with seed {seed} (this order again: --randomly-seed={seed})"


import tiny_models  # noqa: E402
from engine_file_tools import PROMPT, SEQ, read_metadata  # noqa: E402
from trt_spec import Engine, build_engine  # noqa: E402
from trt_spec import models as registry  # noqa: E402

TARGET_05B = "qwen2.5-coder-0.5b-instruct-q4_k_m"
SMOLLM2 = "smollm2-135m-instruct-q4_1"


class TinyFactory:
    """Builds (and caches per session) tiny checkpoints and engines."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._models: dict[tuple, tuple[Path, object]] = {}
        self._engines: dict[tuple, Path] = {}

    def checkpoint(self, arch: str = "qwen2", tied: bool = False, **kw) -> tuple[Path, object]:
        key = (arch, tied, tuple(sorted(kw.items())))
        if key not in self._models:
            folder = self.root / f"ckpt-{len(self._models)}-{arch}"
            model = tiny_models.make_model(folder, arch, tied=tied, **kw)
            self._models[key] = (folder, model)
        return self._models[key]

    def engine(
        self,
        arch: str = "qwen2",
        weights: str = "f32",
        tied: bool = False,
        max_seq_len: int = 256,
        max_batch: int = 1,
        **kw,
    ) -> tuple[Path, object]:
        folder, model = self.checkpoint(arch, tied, **kw)
        key = (folder, weights, max_seq_len, max_batch)
        if key not in self._engines:
            path = self.root / f"e{len(self._engines)}-{arch}-{weights}.engine"
            build_engine(
                folder, path, weights=weights, max_seq_len=max_seq_len, max_batch=max_batch
            )
            self._engines[key] = path
        return self._engines[key], model


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyFactory:
    return TinyFactory(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def default_pair_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default pair built by `trt-spec build` with its defaults (2 threads, SOURCE_DATE_EPOCH
    set): built once for the tests that read it (test_build_reproducible, test_real_speculative)."""
    import os

    target, draft = registry.fetch_default_pair()
    path = tmp_path_factory.mktemp("default_pair") / "pair.engine"
    before = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    try:
        build_engine(target, path, draft=draft, threads=2)
    finally:
        if before is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = before
    return path


@pytest.fixture(scope="session")
def model_05b() -> Path:
    return registry.fetch_model(TARGET_05B)


@pytest.fixture(scope="session")
def model_smollm2() -> Path:
    return registry.fetch_model(SMOLLM2)


@pytest.fixture(scope="session")
def engines_05b(tmp_path_factory: pytest.TempPathFactory, model_05b: Path):
    """Engines of the real 0.5B, built lazily per weight format."""
    root = tmp_path_factory.mktemp("engines05b")
    built: dict[str, Path] = {}

    def get(weights: str) -> Path:
        if weights not in built:
            path = root / f"q05-{weights}.engine"
            build_engine(model_05b, path, weights=weights, max_seq_len=1024)
            built[weights] = path
        return built[weights]

    return get


@pytest.fixture(scope="session")
def hf_05b(model_05b: Path):
    """transformers' own load of the 0.5B GGUF (dequantized to float32): the reference."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    m = AutoModelForCausalLM.from_pretrained(
        model_05b.parent, gguf_file=model_05b.name, dtype=torch.float32
    )
    return m.eval()


# ---- tiny pair engines (tests/spec_pairs.py): draft length 4, batch 2, 128 positions ----------
def _pair_k4_b2(factory: pytest.TempPathFactory, kind: str) -> Path:
    import spec_pairs

    root = factory.mktemp(f"pair_{kind}")
    return spec_pairs.make_pair(root, kind, draft_len=4, max_batch=2, max_seq_len=128)


@pytest.fixture(scope="session")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target and a noisy copy of it as the draft (accepts part of each block)."""
    return _pair_k4_b2(tmp_path_factory, "noisy")


@pytest.fixture(scope="session")
def same(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target as its own draft (greedy accepts everything)."""
    return _pair_k4_b2(tmp_path_factory, "same")


# ---- a small engine for the bad-input tests (tests/test_errors_*.py) ---------------------------
@pytest.fixture(scope="session")
def engine_path(tiny) -> Path:
    path, _ = tiny.engine("qwen2", weights="f32", max_seq_len=SEQ)
    return path


@pytest.fixture(scope="session")
def raw(engine_path: Path) -> bytes:
    return engine_path.read_bytes()


@pytest.fixture(scope="session")
def meta(raw: bytes) -> dict:
    return read_metadata(raw)


@pytest.fixture(scope="session")
def small_engine(engine_path: Path) -> Engine:
    return Engine(engine_path, n_threads=2)


@pytest.fixture(scope="session")
def baseline(small_engine: Engine) -> list[int]:
    ids = small_engine.generate(PROMPT, max_new_tokens=8).token_ids
    assert len(ids) >= 1
    return ids
