"""A fast `gguf.GGUFReader` for the tests' reference only (transformers' GGUF loading).

trt-spec itself reads GGUF files with the ``gguf`` package's public API (the stock reader, about
13 s for Qwen's 151k-token vocabulary on 2 cores). The tests also load the same files into
transformers as the oracle, which reads them with ``gguf.GGUFReader`` again; this subclass, patched
in for those loads only, parses array fields in bulk. It overrides a private method of ``gguf``, so
it lives here, outside the package: a ``gguf`` release that changes that method breaks only the
tests' speed-up, never trt-spec.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def fast_gguf_reader_class() -> type:
    """A `gguf.GGUFReader` subclass whose array fields parse in bulk, not element by element.

    The stock reader builds each element of a 151k-string array through several numpy calls on a
    memmap (~10 s for Qwen's vocabulary). This one produces the same `ReaderField` parts from
    plain ndarray views (~0.5 s); anything unusual (byte-swapped files, empty or nested arrays)
    goes to the stock code. A drop-in replacement: ``fast_gguf_reader_class()(path)``.
    """
    from gguf import GGUFReader, GGUFValueType

    class _FastGGUFReader(GGUFReader):  # type: ignore[misc]
        def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list, list, list]:
            if raw_type != GGUFValueType.ARRAY or self.byte_order != "I":
                return super()._get_field_parts(orig_offs, raw_type)
            itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            sub, count, offs = GGUFValueType(int(itype[0])), int(alen[0]), orig_offs + 12
            if count == 0:
                return super()._get_field_parts(orig_offs, raw_type)
            parts: list[np.ndarray] = [itype, alen]
            types = [GGUFValueType.ARRAY, sub]
            nptype = self.gguf_scalar_to_np.get(sub)
            if nptype is not None:
                arr = self._get(offs, nptype, count).view(np.ndarray)
                parts += [arr[i : i + 1] for i in range(count)]
                return 12 + int(arr.nbytes), parts, list(range(2, count + 2)), types
            if sub != GGUFValueType.STRING:
                return super()._get_field_parts(orig_offs, raw_type)
            raw = self.data.view(np.ndarray)
            view = memoryview(raw)
            end = offs
            for _ in range(count):
                length = int.from_bytes(view[end : end + 8], "little")
                parts.append(raw[end : end + 8].view(np.uint64))
                parts.append(raw[end + 8 : end + 8 + length])
                end += 8 + length
            return end - orig_offs, parts, list(range(3, 2 * count + 3, 2)), types

    return _FastGGUFReader
