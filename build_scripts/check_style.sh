#!/usr/bin/env bash
# Style gate run by CI: ruff (lint + format) on Python, clang-format (.clang-format) on C++.
# With --fix, rewrites the files instead of failing.
set -euo pipefail
cd "$(dirname "$0")/.."
cpp_files=$(git ls-files 'cpp/*.h' 'cpp/*.cpp' 'cpp/*.cu' 'cpp/*.cuh' 'tests/cpp/*.cpp' 'tests/cpp/*.h' 'benchmarks/cpp/*.cpp')
if [[ "${1:-}" == "--fix" ]]; then
  ruff check --fix python tests benchmarks
  ruff format python tests benchmarks
  clang-format -i $cpp_files
else
  ruff check python tests benchmarks
  ruff format --check python tests benchmarks
  clang-format --dry-run --Werror $cpp_files
fi
echo "style: ok"
