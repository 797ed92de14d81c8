// xxhash64.h: XXH64, the 64-bit xxHash of Yann Collet (spec: github.com/Cyan4973/xxHash,
// doc/xxhash_spec.md), written from the published algorithm. The engine file checksums every
// tensor and its metadata with XXH64 seed 0, so `xxhsum -H64` or Python's `xxhash.xxh64` can
// verify an engine's bytes; the builder calls this same function through the bindings.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trt_spec {

// XXH64 of `bytes` bytes at `data` (read as little-endian words, as the reference does on x86
// and ARM; trt-spec targets only little-endian hosts).
uint64_t xxh64(const void* data, size_t bytes, uint64_t seed = 0);

}  // namespace trt_spec
