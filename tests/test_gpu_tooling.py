"""The tools a GPU run depends on, checked without a GPU: the kernel code-size reader
(benchmarks/kernel_code.py), the ncu warp-state reader (benchmarks/ncu_csv.py) and the
calibration program (benchmarks/cpp/gpu_calibrate.cu, compiled where nvcc is)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import kernel_code  # noqa: E402
import ncu_csv  # noqa: E402


def elf(machine: int, flags: int, sections: dict[str, int]) -> bytes:
    """A 64-bit little-endian ELF image: header, a string table, then section headers (null,
    the named sections with the given sizes, .shstrtab)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in sections) + b".shstrtab\0"
    shoff = 0x40 + len(names)
    head = bytearray(0x40)
    head[0:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", head, 0x12, machine)
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<I", head, 0x30, flags)
    shnum = len(sections) + 2
    struct.pack_into("<HHH", head, 0x3A, 64, shnum, shnum - 1)
    hdrs, at = bytearray(64), 1  # the null section first
    for name, size in sections.items():
        h = bytearray(64)
        struct.pack_into("<I", h, 0, at)
        struct.pack_into("<QQ", h, 0x18, 0, size)
        hdrs += h
        at += len(name) + 1
    h = bytearray(64)
    struct.pack_into("<I", h, 0, at)
    struct.pack_into("<QQ", h, 0x18, 0x40, len(names))
    return bytes(head) + names + bytes(hdrs + h)


def test_kernel_code_reads_the_cubins_in_a_library(tmp_path: Path) -> None:
    """Every CUDA ELF image in the file is read (its .text sections, its SM version from the
    flags); an image of another machine (the library itself, x86-64) is skipped; a kernel in
    two images of one architecture counts once (the larger)."""
    mangled = "_ZN8trt_spec4cuda13matmul_kernelILNS_10WeightTypeE4ELi1EEEvNS0_10MatmulArgsE"
    lib = b"\x7fELF\x02\x01" + bytes(58) + b"junk"
    lib += elf(62, 0, {".text.host_code": 999})
    lib += bytes(13) + elf(190, 0x6005A04, {".text." + mangled: 4096, ".nv.info": 64})
    lib += elf(190, 0x6005004, {".text." + mangled: 3072, ".text._Z6kernelv": 128})
    lib += elf(190, 0x6005A04, {".text._Z6kernelv": 256})
    path = tmp_path / "lib.so"
    path.write_bytes(lib)
    rows = kernel_code.kernel_code(path)
    got = {(r["kernel"], r["arch"]): r["bytes"] for r in rows}
    name = "trt_spec::cuda::matmul_kernel<4,1>" if shutil.which("c++filt") else mangled
    assert got == {(name, 90): 4096, (name, 80): 3072, ("kernel", 80): 128, ("kernel", 90): 256}
    assert [r["bytes"] for r in rows] == sorted(got.values(), reverse=True)
    assert kernel_code.code_bytes_by_name(path, 80) == {name: 3072, "kernel": 128}


def test_short_names_of_ncu_and_cxxfilt_agree() -> None:
    """ncu's and c++filt's spellings of one kernel reduce to one name."""
    want = "trt_spec::cuda::matmul_kernel<4,1>"
    for spelled in (
        "void trt_spec::cuda::matmul_kernel<(trt_spec::WeightType)4, 1>(trt_spec::cuda::MatmulArgs"
        ", trt_spec::cuda::MatmulGeom, float *, int *, int, trt_spec::cuda::WeightHint)",
        "trt_spec::cuda::matmul_kernel<(trt_spec::WeightType)4, (int)1>(MatmulArgs)",
        "trt_spec::cuda::matmul_kernel<4, 1>",
    ):
        assert kernel_code.short_name(spelled) == want
    assert kernel_code.short_name("void embed_kernel(const float *, int)") == "embed_kernel"


def test_the_built_library_holds_the_decode_kernels() -> None:
    """Where the CUDA backend is compiled: the sm_90 code of the one-row q4 matmul and of the
    128-dim attention (general and one-row) is found, each between 1 KiB and 1 MiB."""
    from trt_spec import _core

    if not _core.cuda_compiled():
        pytest.skip("CUDA backend not compiled")
    code = kernel_code.code_bytes_by_name(kernel_code.default_library(), 90)
    if not code:
        pytest.skip("no plain cubins in the library (a compressed fatbin)")
    att = "trt_spec::cuda::attention_kernel<128,4,"
    for k in ("trt_spec::cuda::matmul_kernel<4,1>", att + "false>", att + "true>"):
        assert 1024 < code.get(k, 0) < 1 << 20, (k, sorted(code)[:8])


def raw_page(states: list[dict[str, float]], family: str) -> str:
    """ncu --csv --page raw text: a header row, a units row, a row per kernel."""
    metric = {
        "ratio": "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio",
        "sampled": "smsp__pcsamp_warps_issue_stalled_{}",
    }[family]
    names = sorted({s for st in states for s in st})
    cols = ["ID", "Kernel Name", "Grid Size", "gpu__time_duration.sum"]
    cols += [metric.format(s) for s in names]
    if family == "sampled":
        cols += [metric.format(s) + "_not_issued" for s in names]
    lines = [",".join(f'"{c}"' for c in cols), ",".join('""' for _ in cols)]
    for i, st in enumerate(states):
        vals = [str(i), "void attention_kernel<128, 4>(AttnArgs)", "(128, 1, 1)", "22,000"]
        vals += [f"{st.get(s, 0.0):,}" for s in names]
        if family == "sampled":
            vals += ["7" for _ in names]
        lines.append(",".join(f'"{v}"' for v in vals))
    return "==PROF== Connected\n" + "\n".join(lines) + "\n==PROF== Disconnected\n"


@pytest.mark.parametrize("family", ["ratio", "sampled"])
def test_warp_states_from_the_raw_page(family: str) -> None:
    """Each launch's states normalized, then averaged per (kernel, grid), largest first; the
    units row and the '_not_issued' counters ignored; the top three as text."""
    text = raw_page(
        [{"no_instruction": 6.0, "long_scoreboard": 3.0, "barrier": 1.0},
         {"no_instruction": 2.0, "long_scoreboard": 2.0, "selected": 4.0}],
        family,
    )  # fmt: skip
    kernels = ncu_csv.ncu_raw(text)
    assert [k["name"] for k in kernels] == ["attention_kernel<128,4>"] * 2
    assert kernels[0]["gpu__time_duration.sum"] == 22000.0
    shares = ncu_csv.warp_state_shares(kernels)[("attention_kernel<128,4>", "(128, 1, 1)")]
    assert shares["launches"] == 2
    assert shares["shares"] == pytest.approx(
        {"no_instruction": 0.425, "long_scoreboard": 0.275, "selected": 0.25, "barrier": 0.05}
    )
    assert list(shares["shares"]) == ["no_instruction", "long_scoreboard", "selected", "barrier"]
    assert ncu_csv.top_states(shares["shares"]) == (
        "no_instruction 42%, long_scoreboard 28%, selected 25%"
    )
    assert ncu_csv.warp_states({"name": "k", "gpu__time_duration.sum": 1.0}) == {}


def test_profile_gpu_step_markdown_shows_code_and_warp_states() -> None:
    """The step table's code and warp-state columns, and the reason a state pass failed."""
    import importlib

    pg = importlib.import_module("profile_gpu")
    row = {
        "kernel": "attention_kernel<128,4>",
        "grid": "(128, 1, 1)",
        "per_forward": 28,
        "mean_us": 22.0,
        "us_per_forward": 616.0,
        "share": 0.4,
        "regs": 128,
        "code_kib": 117.0,
        "states": {"no_instruction": 0.5, "barrier": 0.3, "wait": 0.2},
    }
    case = {"role": "target", "rows": 1, "graph_ms": 1.5, "eager_ms": 1.7, "forwards": 2,
            "kernel_sum_us": 1540.0, "kernels_per_forward": 142, "by_kernel": [row],
            "states_error": None}  # fmt: skip
    md = "\n".join(pg.step_markdown({"cases": [case]}))
    assert "| 128 | 117 | no_instruction 50%, barrier 30%, wait 20% |" in md
    md = "\n".join(pg.step_markdown({"cases": [case | {"states_error": "exit 1: x"}]}))
    assert "(not measured: exit 1: x)" in md


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_calibration_program_compiles(tmp_path: Path) -> None:
    """gpu_calibrate.cu builds for sm_90 as the GPU script builds it (a compile error there
    costs a lent GPU's minutes)."""
    res = subprocess.run(
        ["nvcc", "-O3", "-arch=sm_90", "-c", "-o", str(tmp_path / "gc.o"),
         str(SCRIPTS / "cpp" / "gpu_calibrate.cu")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]


def test_gpu_report_prices_a_warm_launch() -> None:
    """The repeat arms of a decode step: (twice - once) / layers per kind, in microseconds."""
    import gpu_report

    step = {"model": "qwen2.5-1.5b", "weights": "q4", "layers": 28,
            "once_ms": 1.40, "once_spread_ms": 0.01, "attn_x2_ms": 1.54, "attn_x2_spread_ms": 0.0,
            "qkv_x2_ms": 1.68, "qkv_x2_spread_ms": 0.02}  # fmt: skip
    md = "\n".join(gpu_report.warm_launch_markdown([step, {"model": "x", "layers": 24}]))
    assert (
        "| qwen2.5-1.5b | q4 | 1.400 +- 0.010 | 1.540 +- 0.000 | 1.680 +- 0.020 | 5.00 | 10.00 |"
        in md
    )
    assert "| x |" not in md
    assert gpu_report.warm_launch_markdown([{"model": "x"}]) == []
