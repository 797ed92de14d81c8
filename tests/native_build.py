"""The test-only native targets, built with CMake: ``_trt_spec_testing`` (the test bindings,
cpp/bindings/testing.cpp) and the CUDA emulation libraries ``cuda_emu_ops``, ``emu_attention``,
``emu_matmul`` and ``emu_forward`` (tests/cpp/). CMakeLists.txt defines them behind
``TRT_SPEC_BUILD_TESTS``, which every pip build turns OFF, so the wheel never holds them.

The build folder is the package's own, ``build/<wheel tag>/`` where ``pip install .`` left it
(its runtime library is already compiled): it is configured once more with
``TRT_SPEC_BUILD_TESTS=ON`` and only the named target is built. Without one (the package was
installed some other way) a folder ``build/tests-<SOABI>/`` is configured from scratch, with the
CUDA backend where the installed ``trt_spec._core`` has it. ``$TRT_SPEC_TESTING_DIR`` names
another build folder (build_scripts/build_asan.sh), or a folder that already holds the files.
Ninja keeps the results: a target is rebuilt only when its sources change.

Without cmake, a C++ compiler or nanobind (``pip install '.[test]'`` brings cmake, ninja and
nanobind), ``build`` raises ``Unavailable`` and the tests that need the target skip with its
message. A failed configure or compile raises ``RuntimeError`` with the end of the log.

    python tests/native_build.py [TARGET ...]   # builds them (default: all), prints their files
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTING = "_trt_spec_testing"
EMULATION = ("cuda_emu_ops", "emu_attention", "emu_matmul", "emu_forward")
TARGETS = (TESTING, *EMULATION)
SOABI = sysconfig.get_config_var("SOABI")
INSTALL = "pip install '.[test]' brings cmake, ninja and nanobind"
_built: dict[str, Path] = {}
_failed: dict[str, Exception] = {}


class Unavailable(Exception):
    """A tool the build needs is missing; the message says which."""


def build(target: str) -> Path:
    """Builds one target (cached per process and by Ninja between runs); returns its file."""
    if target not in TARGETS:
        raise ValueError(f"unknown test target {target!r}; one of {TARGETS}")
    if target in _failed:
        raise _failed[target]
    if target not in _built:
        try:
            _built[target] = _build(target)
        except (Unavailable, RuntimeError) as e:
            _failed[target] = e
            raise
    return _built[target]


def output(folder: Path, target: str) -> Path | None:
    """The target's file in a build folder, if it is there."""
    name = (
        TESTING + sysconfig.get_config_var("EXT_SUFFIX") if target == TESTING else f"lib{target}.so"
    )
    path = folder / name
    return path if path.is_file() else None


def _build(target: str) -> Path:
    env_dir = os.environ.get("TRT_SPEC_TESTING_DIR")
    folder = Path(env_dir) if env_dir else _package_build_dir()
    if env_dir and not (folder / "CMakeCache.txt").is_file():  # a folder of prebuilt files
        found = output(folder, target)
        if found is None:
            raise Unavailable(f"TRT_SPEC_TESTING_DIR={env_dir} holds no {target} (and is no build)")
        return found
    cmake = _tool("cmake")
    for tool, missing in (("cmake", cmake is None), ("nanobind", _no_nanobind())):
        if missing:
            raise Unavailable(f"building the test target {target} needs {tool} ({INSTALL})")
    import nanobind

    lock_path = REPO / "build" / ".native_build.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one configure / build of the folder at a time
        cache = _read_cache(folder)
        defines = ["-DTRT_SPEC_BUILD_TESTS=ON", f"-Dnanobind_DIR={nanobind.cmake_dir()}"]
        if cache is None:  # a new folder: the options pip would pass, CUDA as _core was built
            if _compiler() is None:
                raise Unavailable(
                    f"building the test target {target} needs a C++17 compiler "
                    "(c++, g++ or clang++ on PATH, or $CXX)"
                )
            from trt_spec import _core

            defines += [
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DPython_EXECUTABLE={sys.executable}",
                f"-DTRT_SPEC_CUDA={'ON' if _core.cuda_compiled() else 'OFF'}",
            ]
            ninja = _tool("ninja")
            if ninja is not None:
                defines += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
            _run([cmake, "-S", str(REPO), "-B", str(folder), *defines], target)
        else:
            cxx = cache.get("CMAKE_CXX_COMPILER", "")
            if not Path(cxx).is_file() and shutil.which(cxx) is None:
                raise Unavailable(f"the build folder's C++ compiler {cxx!r} is missing")
            tests_on = cache.get("TRT_SPEC_BUILD_TESTS", "OFF").upper() in ("ON", "TRUE", "1")
            if not tests_on or not Path(cache.get("nanobind_DIR", "")).is_dir():
                # (pip's nanobind_DIR lies in its build environment, gone after the build)
                _run([cmake, "-S", str(REPO), "-B", str(folder), *defines], target)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        _run([cmake, "--build", str(folder), "--target", target, "--parallel", jobs], target)
    found = output(folder, target)
    if found is None:
        raise RuntimeError(f"cmake built {target} in {folder} but its file is not there")
    return found


def _package_build_dir() -> Path:
    """pip's build folder of this checkout for this Python (the newest), else build/tests-SOABI."""
    hits = []
    for cache_file in (REPO / "build").glob("*/CMakeCache.txt"):
        cache = _read_cache(cache_file.parent) or {}
        home = cache.get("CMAKE_HOME_DIRECTORY", "")
        if cache.get("SKBUILD_SOABI") == SOABI and home and Path(home).resolve() == REPO:
            hits.append(cache_file.parent)
    if hits:
        return max(hits, key=lambda d: (d / "CMakeCache.txt").stat().st_mtime)
    return REPO / "build" / f"tests-{SOABI}"


def _read_cache(folder: Path) -> dict[str, str] | None:
    path = folder / "CMakeCache.txt"
    if not path.is_file():
        return None
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        if line and line[0] not in "#/" and "=" in line:
            key, value = line.split("=", 1)
            out[key.split(":", 1)[0]] = value
    return out


def _tool(name: str) -> str | None:
    """On PATH, or beside this Python (a venv's bin/ that is not on PATH)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.is_file() else None)


def _no_nanobind() -> bool:
    return importlib.util.find_spec("nanobind") is None


def _compiler() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    return next(filter(None, (shutil.which(c) for c in ("c++", "g++", "clang++"))), None)


def _run(cmd: list[str], target: str) -> None:
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        log = (run.stdout + run.stderr)[-6000:]
        if "No CMAKE_CXX_COMPILER could be found" in log:
            raise Unavailable(f"building the test target {target} needs a C++17 compiler")
        raise RuntimeError(f"building the test target {target} failed: {' '.join(cmd)}\n{log}")


if __name__ == "__main__":
    for name in sys.argv[1:] or TARGETS:
        print(build(name))
