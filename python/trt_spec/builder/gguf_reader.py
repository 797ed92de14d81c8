"""A GGUF file's metadata and tensor table, parsed in bulk over a memory map.

The one way the builder reads GGUF metadata (model config and tokenizer alike). The format is
llama.cpp's ``gguf.md``: a header (magic ``GGUF``, version 2 or 3, tensor and key/value counts),
the key/value pairs, the tensor infos (name, dims, ggml type, offset) and the tensor data from
the next ``general.alignment`` boundary. Values come out as plain Python values, as the ``gguf``
package's ``ReaderField.contents()`` gives them; tensors as numpy views over the file with the
shapes and dtypes of ``gguf.GGUFReader``'s tensors, so ``gguf.quants.dequantize`` decodes them.

The ``gguf`` package's own reader builds every element of an array through several numpy calls
(about 13 s for Qwen's 151,936-token vocabulary and merges on 2 cores); this one reads a string
array in one pass of ``struct`` and slicing. Damaged files raise :class:`GGUFFormatError`.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value types -> struct format (scalars); STRING = 8, ARRAY = 9
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1"}
_NUMPY |= {10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY, _BOOL = 8, 9, 7

# ggml types stored as plain numpy items (others are blocks of bytes per row)
_PLAIN = {
    gguf.GGMLQuantizationType.F32: np.float32,
    gguf.GGMLQuantizationType.F16: np.float16,
    gguf.GGMLQuantizationType.F64: np.float64,
    gguf.GGMLQuantizationType.I8: np.int8,
    gguf.GGMLQuantizationType.I16: np.int16,
    gguf.GGMLQuantizationType.I32: np.int32,
    gguf.GGMLQuantizationType.I64: np.int64,
}


class GGUFFormatError(ValueError):
    """The file is not a well-formed little-endian GGUF (version 2 or 3)."""


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor: ``shape`` in GGUF order (``ne0`` first, columns first); ``data`` a view over
    the file: [rows..., cols] items for float/int types, [rows..., bytes per row] for blocks."""

    name: str
    tensor_type: gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


class _Cursor:
    """Little-endian reads over the mapped bytes, each bounds-checked."""

    def __init__(self, buf: np.ndarray) -> None:
        self.buf = buf
        self.mv = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.mv):
            raise GGUFFormatError(f"truncated at byte {self.pos} (wants {n} more)")
        out = self.mv[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))[0]

    def string(self) -> str:
        return bytes(self.take(self.unpack("Q"))).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array()
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise GGUFFormatError(f"unknown value type {vtype} at byte {self.pos}")
        return self.unpack(fmt)

    def array(self) -> list[Any]:
        etype, count = self.unpack("I"), self.unpack("Q")
        if etype == _STRING:
            return self.strings(count)
        if etype in _NUMPY:
            size = np.dtype(_NUMPY[etype]).itemsize
            values = np.frombuffer(self.take(count * size), dtype=_NUMPY[etype]).tolist()
            return [bool(v) for v in values] if etype == _BOOL else values
        if etype == _ARRAY:
            if count > len(self.mv):
                raise GGUFFormatError(f"array of {count} arrays at byte {self.pos}")
            return [self.array() for _ in range(count)]
        raise GGUFFormatError(f"unknown array element type {etype} at byte {self.pos}")

    def strings(self, count: int) -> list[str]:
        if count > len(self.mv) // 8:
            raise GGUFFormatError(f"array of {count} strings at byte {self.pos}")
        out: list[str] = []
        mv, pos, end = self.mv, self.pos, len(self.mv)
        length = struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise GGUFFormatError(f"truncated string array at byte {pos}")
            (n,) = length(mv, pos)
            pos += 8
            if pos + n > end:
                raise GGUFFormatError(f"truncated string array at byte {pos}")
            out.append(bytes(mv[pos : pos + n]).decode("utf-8", errors="replace"))
            pos += n
        self.pos = pos
        return out


class GGUFFile:
    """A GGUF file: ``fields`` (key -> value) and ``tensors`` (in file order). The memory map
    stays open while this object (or a tensor's ``data``) lives."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:  # a plain ndarray over the map (np.memmap's slicing
            size = os.fstat(f.fileno()).st_size  # costs more than gguf's dequantizers)
            if size == 0:
                raise GGUFFormatError("empty file")
            self._map = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
        cur = _Cursor(self._map)
        if bytes(cur.take(4)) != MAGIC:
            raise GGUFFormatError("not a GGUF file (bad magic)")
        self.version = cur.unpack("I")
        if self.version not in (2, 3):
            raise GGUFFormatError(f"GGUF version {self.version} is not supported (2 or 3)")
        n_tensors, n_kv = cur.unpack("Q"), cur.unpack("Q")
        if n_tensors > len(self._map) or n_kv > len(self._map):
            raise GGUFFormatError(f"implausible counts ({n_tensors} tensors, {n_kv} keys)")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            self.fields[key] = cur.value(cur.unpack("I"))
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("I")
            if n_dims > 8:
                raise GGUFFormatError(f"tensor {name}: {n_dims} dims")
            dims = tuple(cur.unpack("Q") for _ in range(n_dims))
            infos.append((name, dims, cur.unpack("I"), cur.unpack("Q")))
        align = self.fields.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0:
            raise GGUFFormatError(f"general.alignment {align!r}")
        start = -(-cur.pos // align) * align
        self.tensors = [self._tensor(start, *info) for info in infos]
        if len({t.name for t in self.tensors}) != len(self.tensors):
            raise GGUFFormatError("duplicated tensor names")

    def _tensor(self, start: int, name: str, dims: tuple[int, ...], raw: int, off: int):
        try:
            ttype = gguf.GGMLQuantizationType(raw)
            block, type_bytes = gguf.GGML_QUANT_SIZES[ttype]
        except (ValueError, KeyError):
            raise GGUFFormatError(f"tensor {name}: unknown ggml type {raw}") from None
        shape = tuple(reversed(dims))  # numpy order: rows first
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not shape or shape[-1] % block:
            raise GGUFFormatError(f"tensor {name}: {dims} does not fit {ttype.name} blocks")
        plain = _PLAIN.get(ttype)
        if plain is not None:
            nbytes, view_shape, dtype = n * np.dtype(plain).itemsize, shape, np.dtype(plain)
        else:
            nbytes = n // block * type_bytes
            view_shape, dtype = (*shape[:-1], shape[-1] // block * type_bytes), np.dtype(np.uint8)
        begin = start + off
        if begin + nbytes > len(self._map):
            raise GGUFFormatError(f"tensor {name}: data past the end of the file")
        data = self._map[begin : begin + nbytes].view(dtype).reshape(view_shape)
        return GGUFTensor(name, ttype, dims, data)
