"""Write an engine file: tensor blobs streamed to disk, then the JSON metadata and the header.

The layout and every constant come from the C++ side (``trt_spec._core``; see
``cpp/format/engine_file.h``). The file is written under a temporary name in the destination
folder and renamed into place only when complete, so a failed build leaves no partial engine.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from trt_spec import _core


class EngineWriter:
    """Use as a context manager: on an exception the temporary file is removed."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.partial-{os.getpid()}")
        self._f = open(self.tmp, "wb")
        self._data_offset = _core.DATA_ALIGN
        self._f.write(b"\0" * self._data_offset)
        self._cursor = 0  # from data_offset
        self._done = False

    def add(self, blob: np.ndarray, type_name: str, shape: tuple[int, ...]) -> dict:
        """Append one tensor blob; returns its tensor-table entry."""
        rows, cols = (1, shape[0]) if len(shape) == 1 else shape
        t = _core.weight_type_from_name(type_name)
        expect = _core.weight_blob_bytes(t, rows, cols)
        if blob.dtype != np.uint8 or blob.ndim != 1 or blob.size != expect:
            raise ValueError(f"blob of {blob.size} bytes for a {type_name} {shape} tensor")
        pad = -self._cursor % _core.SECTION_ALIGN
        if pad:
            self._f.write(b"\0" * pad)
            self._cursor += pad
        entry = {
            "type": type_name,
            "shape": list(shape),
            "offset": self._cursor,
            "bytes": int(blob.size),
            "checksum": f"{_core.checksum64(blob):016x}",
        }
        self._f.write(memoryview(blob))
        self._cursor += blob.size
        return entry

    def finish(self, metadata: dict) -> None:
        """Write metadata and header, flush to disk and move the file into place."""
        pad = -self._cursor % _core.SECTION_ALIGN
        self._f.write(b"\0" * pad)
        data_bytes = self._cursor + pad
        text = json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode()
        json_offset = self._data_offset + data_bytes
        self._f.write(text)
        header = _core.ENGINE_MAGIC + struct.pack(
            "<IIQQQQQQ",
            int(metadata["format_version"]),
            0,
            json_offset,
            len(text),
            self._data_offset,
            data_bytes,
            _core.checksum64(np.frombuffer(text, dtype=np.uint8)),
            0,
        )
        assert len(header) == _core.ENGINE_HEADER_BYTES
        self._f.seek(0)
        self._f.write(header)
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self.tmp, self.path)
        self._done = True

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> EngineWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort()
