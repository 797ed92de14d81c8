"""The machine code of each CUDA kernel in the built library: bytes of SASS per kernel and GPU
architecture, read from the cubins (CUDA ELF images) that nvcc embeds in ``_core``.

A kernel's code bytes bound what its blocks fetch into an SM's instruction cache: a decode step
runs each kernel for a few microseconds, so code executed once per launch (unrolled loops,
inlined copies of a helper) may be fetched from L2 on every launch (the calibration's
``icache_cold_ns_per_kb`` prices it; profile_gpu.py's step table shows both).

``python benchmarks/kernel_code.py [--lib PATH] [--arch 90] [--top N]`` prints a table (the
installed ``trt_spec._core`` by default). Reads the library's bytes only: no GPU, no CUDA
tools. A fatbin that nvcc compressed holds no plain ELF images: the table is then empty.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

EM_CUDA = 190  # ELF e_machine of a cubin


def _cubin_sections(data: bytes, at: int) -> tuple[int, list[tuple[str, int]]] | None:
    """(sm arch, [(section name, size)]) of the 64-bit CUDA ELF image at offset `at`, or None
    when the bytes there are not one."""
    if data[at + 4] != 2 or data[at + 5] != 1:  # ELFCLASS64, little-endian
        return None
    (machine,) = struct.unpack_from("<H", data, at + 0x12)
    if machine != EM_CUDA:
        return None
    (shoff,) = struct.unpack_from("<Q", data, at + 0x28)
    (flags,) = struct.unpack_from("<I", data, at + 0x30)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, at + 0x3A)
    if shentsize != 64 or shnum == 0 or shstrndx >= shnum or at + shoff + shnum * 64 > len(data):
        return None

    def header(i: int) -> tuple[int, int, int]:  # name offset, file offset, size
        base = at + shoff + i * 64
        (name,) = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, offset, size

    _, str_off, str_size = header(shstrndx)
    names = data[at + str_off : at + str_off + str_size]
    sections = []
    for i in range(shnum):
        name_at, _, size = header(i)
        end = names.find(b"\0", name_at)
        sections.append((names[name_at:end].decode("ascii", "replace"), size))
    return (flags >> 8) & 0xFF, sections  # ABI v8: the SM version in bits 8-15


def demangle(names: list[str]) -> list[str]:
    """Readable names (c++filt where present), without 'void ' and the argument list."""
    out = names
    cxxfilt = shutil.which("c++filt")
    if cxxfilt and names:
        res = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True)
        if res.returncode == 0 and len(res.stdout.splitlines()) == len(names):
            out = res.stdout.splitlines()
    return [short_name(n) for n in out]


def short_name(name: str) -> str:
    """'void ns::k<(T)4, (int)1>(args)' -> 'ns::k<4, 1>': the form both c++filt's and ncu's
    kernel names reduce to (casts, 'void ' and arguments dropped, no spaces)."""
    name = name.removeprefix("void ").strip()
    depth = 0
    for i, ch in enumerate(name):  # cut the argument list: the first '(' outside <>
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    name = re.sub(r"\([A-Za-z_:][\w:]*\)", "", name)  # (trt_spec::WeightType)4 -> 4
    return name.replace(" ", "")


def kernel_code(lib: Path) -> list[dict[str, Any]]:
    """Every kernel of every embedded cubin: {kernel, mangled, arch, bytes}, largest first."""
    data = lib.read_bytes()
    found: dict[tuple[str, int], int] = {}
    at = data.find(b"\x7fELF", 1)  # (offset 0: the library itself)
    while at >= 0:
        parsed = _cubin_sections(data, at) if at + 0x40 <= len(data) else None
        if parsed:
            arch, sections = parsed
            for name, size in sections:
                if name.startswith(".text."):
                    key = (name.removeprefix(".text."), arch)
                    found[key] = max(found.get(key, 0), size)
        at = data.find(b"\x7fELF", at + 4)
    mangled = sorted({k for k, _ in found})
    readable = dict(zip(mangled, demangle(mangled), strict=True))
    rows = [{"kernel": readable[m], "mangled": m, "arch": a, "bytes": b}
            for (m, a), b in found.items()]  # fmt: skip
    return sorted(rows, key=lambda r: (-r["bytes"], r["kernel"], r["arch"]))


def code_bytes_by_name(lib: Path, arch: int = 90) -> dict[str, int]:
    """short_name(kernel) -> code bytes on `arch` (what profile_gpu.py joins ncu's names to)."""
    return {r["kernel"]: r["bytes"] for r in kernel_code(lib) if r["arch"] == arch}


def default_library() -> Path:
    from trt_spec import _core

    return Path(_core.__file__)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", type=Path, default=None, help="default: the installed trt_spec._core")
    ap.add_argument("--arch", type=int, default=90, help="SM version (default 90)")
    ap.add_argument("--top", type=int, default=40, help="rows to print (default 40)")
    args = ap.parse_args()
    lib = args.lib or default_library()
    rows = [r for r in kernel_code(lib) if r["arch"] == args.arch]
    print(f"{lib}: {len(rows)} kernels for sm_{args.arch}, "
          f"{sum(r['bytes'] for r in rows) / 1024:.0f} KiB of code")  # fmt: skip
    print("\n| kernel | KiB |\n|---|---:|")
    for r in rows[: args.top]:
        print(f"| {r['kernel']} | {r['bytes'] / 1024:.1f} |")


if __name__ == "__main__":
    main()
