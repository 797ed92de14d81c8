"""Builds and runs the C++ kernel test driver (tests/cpp/test_cpu_kernels.cpp).

The driver checks the CPU kernels from C++ without the bindings: every f16/bf16 conversion,
quantizer error bounds, bit-exact activation quantization, every matmul type, shape, M and row
range on each ISA this CPU runs, and the SwiGLU activation. Compiled here with the same per-file
ISA flags as CMake.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "cpp" / "kernels" / "cpu"
ISA_FLAGS = {
    "quantize.cpp": [],
    "matmul_dispatch.cpp": [],
    "repack_lanes.cpp": [],
    "matmul_avx2.cpp": ["-mavx2", "-mfma", "-mf16c"],
    "activation.cpp": ["-mavx2", "-mfma", "-mf16c"],
    "matmul_avx512.cpp": [
        "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mavx512bf16",
        "-mavx2", "-mfma", "-mf16c",
    ],
}  # fmt: skip


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_cpp_kernel_driver(tmp_path: Path) -> None:
    objs = []
    for src, flags in ISA_FLAGS.items():
        obj = tmp_path / (src + ".o")
        cmd = ["g++", "-std=c++17", "-O2", f"-I{REPO / 'cpp'}", *flags, "-c", str(KERNELS / src)]
        subprocess.run([*cmd, "-o", str(obj)], check=True)
        objs.append(str(obj))
    exe = tmp_path / "test_cpu_kernels"
    driver = REPO / "tests" / "cpp" / "test_cpu_kernels.cpp"
    subprocess.run(
        ["g++", "-std=c++17", "-O2", f"-I{REPO / 'cpp'}", str(driver), *objs, "-lpthread",
         "-o", str(exe)],
        check=True,
    )  # fmt: skip
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert last.endswith("0 failed"), last
