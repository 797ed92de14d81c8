"""The installed package: private native module, thin Python layer, typed stubs."""

from __future__ import annotations

import fnmatch
import importlib.metadata
from importlib import resources

import trt_spec
from trt_spec import _core


def test_public_api_is_exported() -> None:
    for name in ("Engine", "build_engine", "EngineFileError", "BuildError", "WEIGHT_FORMATS"):
        assert hasattr(trt_spec, name)
    assert trt_spec.WEIGHT_FORMATS == ("f32", "f16", "bf16", "q8", "q4")
    assert issubclass(trt_spec.EngineFileError, ValueError)


def test_generated_stubs_and_py_typed_ship() -> None:
    root = resources.files("trt_spec")
    assert (root / "py.typed").is_file()
    stub = (root / "_core.pyi").read_text()
    for symbol in (
        "class Runtime",
        "class Scheduler",
        "class WeightType",
        "def checksum64",
        "def engine_tensors",
        "DRAFT_SOURCES",
    ):
        assert symbol in stub


def test_test_hooks_are_not_in_the_package() -> None:
    """The test-only module is built beside _core but never installed with the package."""
    root = resources.files("trt_spec")
    assert not [p.name for p in root.iterdir() if "testing" in p.name]
    for name in ("OpRunner", "Session", "spec_trials", "DraftController", "cpu_matmul"):
        assert not hasattr(_core, name)


def test_names_are_defined_once_in_the_native_core() -> None:
    from trt_spec.builder import schema
    from trt_spec.engine import DRAFT_MODES

    assert _core.DRAFT_SOURCES == ("none", "model", "lookup")
    assert DRAFT_MODES == _core.DRAFT_MODES == ("auto", "model", "lookup", "none")
    assert "stop_string" in _core.FINISH_REASONS and "cancelled" in _core.FINISH_REASONS
    assert schema.ARCHITECTURES == _core.ARCHITECTURES == ("qwen2", "llama")
    assert schema.CONFIG_KEYS["rope_theta"] == "float"


def test_engine_schema_comes_from_the_native_core() -> None:
    assert _core.ENGINE_MAGIC == b"TRTSPEC\0"
    # 2: XXH64 checksums (tests/test_checksum_xxh64.py); 3: reduced heads (test_draft_vocab.py);
    # 4: random weights (test_random_weights.py); 5: draft heads (test_medusa.py)
    assert (_core.ENGINE_FORMAT_OLDEST_VERSION, _core.ENGINE_FORMAT_VERSION) == (2, 5)
    assert _core.ENGINE_FORMAT_DRAFT_HEADS_VERSION == 5
    names = [_core.weight_type_name(t) for t in _core.WeightType]
    assert tuple(names) == trt_spec.WEIGHT_FORMATS
    assert _core.weight_type_from_name("q4") == _core.WeightType.Q4


#: What the wheel may hold: the package's modules, the native core, its stubs and data.
PRODUCT = (
    "trt_spec/*.py",
    "trt_spec/bench/*.py",
    "trt_spec/builder/*.py",
    "trt_spec/server/*.py",
    "trt_spec/ray/*.py",
    "trt_spec/_core.*.so",
    "trt_spec/_core.pyi",
    "trt_spec/py.typed",
    "trt_spec/gpu_calibration.json",
)
#: Lab names that must stay in the repository (benchmarks/, tests/), even inside those folders.
LAB = ("*peer*", "*runner*", "*random_engine*", "*testing*", "*fake*", "test_*", "*_test.py")


def _is_product(path: str) -> bool:
    parts = path.split("/")
    if any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in LAB):
        return False
    return any(
        len(parts) == pattern.count("/") + 1 and fnmatch.fnmatch(path, pattern)
        for pattern in PRODUCT
    )


def test_product_rules_catch_lab_files() -> None:
    assert _is_product("trt_spec/builder/gguf_source.py")
    assert _is_product("trt_spec/ray/router.py")
    assert _is_product("trt_spec/_core.cpython-311-x86_64-linux-gnu.so")
    for lab in (
        "trt_spec/bench/peers/runs.py",
        "trt_spec/bench/llama_spec_runner.py",
        "trt_spec/builder/random_engine.py",
        "trt_spec/_trt_spec_testing.cpython-311-x86_64-linux-gnu.so",
        "trt_spec/tests/test_x.py",
        "trt_spec/kernels/matmul.cpp",
    ):
        assert not _is_product(lab), lab


def test_installed_wheel_holds_only_product() -> None:
    """Every file the installed distribution recorded (its RECORD) is product: the package's
    modules, the native core and its stubs; no peer runners, random engines or test modules."""
    files = importlib.metadata.files("trt-spec")
    assert files, "trt-spec is not installed as a distribution (pip install .)"
    paths = [str(f).replace("\\", "/") for f in files]
    package = [p for p in paths if p.startswith("trt_spec/") and "/__pycache__/" not in p]
    others = [p for p in paths if not p.startswith("trt_spec/")]
    assert "trt_spec/engine.py" in package and any(p.endswith(".so") for p in package)
    assert [p for p in package if not _is_product(p)] == []
    assert all(".dist-info/" in p or p.endswith("bin/trt-spec") for p in others), others
