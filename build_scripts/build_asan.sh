#!/usr/bin/env bash
# build_asan.sh: builds the extension (trt_spec._core and the test module) with AddressSanitizer and
# UndefinedBehaviorSanitizer into a folder outside the repository (CUDA off), for the fuzz run
# (build_scripts/fuzz_formats.py) and for running tests under the sanitizers.
#
#   bash build_scripts/build_asan.sh [BUILD_DIR]      # default /tmp/trt-spec-asan; JOBS=1 default
#
# Every undefined-behaviour finding aborts (-fno-sanitize-recover), so a report cannot scroll by
# unnoticed. Python itself is not instrumented, so the ASan runtime must be preloaded: the script
# ends by printing the environment to use (also written to BUILD_DIR/asan_env.sh):
#   LD_PRELOAD="<libasan.so> <libstdc++.so.6>" ASAN_OPTIONS=detect_leaks=0:... PYTHONPATH=BUILD_DIR/python ...
# BUILD_DIR/python is a copy of python/trt_spec with the sanitized _core linked in, so the normal
# source tree (and its dev build) is left alone.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-/tmp/trt-spec-asan}"
jobs="${JOBS:-1}"
python="${PYTHON:-$(command -v python3)}"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

cmake -G Ninja -S "$repo" -B "$out" \
  -DPython_EXECUTABLE="$python" \
  -DTRT_SPEC_CUDA=OFF \
  -DTRT_SPEC_BUILD_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$san" \
  -DCMAKE_SHARED_LINKER_FLAGS="$san" \
  -DCMAKE_MODULE_LINKER_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san"
ninja -C "$out" -j"$jobs" _core _trt_spec_testing

# A package folder of its own: the Python sources (linked) plus the sanitized extension.
pkg="$out/python/trt_spec"
rm -rf "$out/python"
mkdir -p "$pkg"
for f in "$repo"/python/trt_spec/*; do
  case "$(basename "$f")" in
    _core*.so | __pycache__) ;;
    *) ln -s "$f" "$pkg/" ;;
  esac
done
ln -s "$out"/_core*.so "$pkg/"

libasan="$("${CXX:-c++}" -print-file-name=libasan.so)"
# libstdc++ preloaded too: Python does not link it, so without it ASan starts before the real
# __cxa_throw exists and its interceptor aborts on the first C++ exception.
libstdcxx="$(realpath "$("${CXX:-c++}" -print-file-name=libstdc++.so.6)")"
cat >"$out/asan_env.sh" <<ENV
# Source this to run Python against the sanitized build (written by build_scripts/build_asan.sh).
export LD_PRELOAD="$libasan $libstdcxx"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:handle_segv=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$pkg/..:$repo/tests"
export TRT_SPEC_TESTING_DIR="$out"
export TRT_SPEC_SANITIZED=1
ENV
echo "sanitized build in $out; to use it:  source $out/asan_env.sh"
