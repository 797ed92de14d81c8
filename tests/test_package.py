"""The installed package: private native module, thin Python layer, typed stubs."""

from __future__ import annotations

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
    for symbol in ("class Runtime", "class Decoder", "class WeightType", "def checksum64"):
        assert symbol in stub


def test_engine_schema_comes_from_the_native_core() -> None:
    assert _core.ENGINE_MAGIC == b"TRTSPEC\0"
    assert _core.ENGINE_FORMAT_VERSION == 1
    names = [_core.weight_type_name(t) for t in _core.WeightType]
    assert tuple(names) == trt_spec.WEIGHT_FORMATS
    assert _core.weight_type_from_name("q4") == _core.WeightType.Q4
