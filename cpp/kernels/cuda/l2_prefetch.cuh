// l2_prefetch.cuh: bytes streamed toward L2 ahead of their use, as hints.
//
// A prefetch is a hint: no thread waits for it and no value changes, so the bits are those
// without it. Weights depend on no earlier op, so a kernel may ask for them before it waits for
// its inputs, or for the next ops' while it runs.
//
//   prefetch_l2          bytes [p, p + n) toward L2: cp.async.bulk.prefetch.L2 (sm_90+, one
//                        instruction per range), prefetch.global.L2 per 128-byte line before;
//                        under the emulation, a note to the test's observer (cuda_emu.h).
//   prefetch_l2_range    a part of an array, rounded to 16-byte lines inside it.
//   WeightHint           the weights of the ops after a launch (a CUDA graph's capture knows
//                        them from its sizing pass: CudaBackend::set_prefetch_next); every block
//                        of the launch streams its share of them (prefetch_hint), so that the
//                        next ops find them in L2 (attention, whose few working blocks leave
//                        DRAM idle, takes the next two matmuls').
// A matmul block's own weights: matmul_prefetch (matmul_kernel.cuh). The default budgets:
// l2_budget.h.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/l2_budget.h"

namespace trt_spec::cuda {

// Bytes [p, p + n) toward L2 (p 16-byte aligned, n a multiple of 16; a hint).
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t n) {
#if defined(TRT_SPEC_CUDA_EMU)
  cuda_emu::note_prefetch(p, n);
#elif __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#else
  for (uint32_t o = 0; o < n; o += 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(p) + o));
#endif
}

// Bytes [lo, hi) of the array [base, base + size), rounded out to 16-byte lines but kept inside
// the array's aligned interior (a partial line at either end of the array is left out).
__device__ __forceinline__ void prefetch_l2_range(const void* base, int64_t size, int64_t lo,
                                                  int64_t hi) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t first = (b + 15) & ~uintptr_t{15}, end = (b + size) & ~uintptr_t{15};
  uintptr_t s = (b + lo) & ~uintptr_t{15}, e = (b + hi + 15) & ~uintptr_t{15};
  s = s < first ? first : s;
  e = e > end ? end : e;
  if (e > s) prefetch_l2(reinterpret_cast<const void*>(s), static_cast<uint32_t>(e - s));
}

// Up to kHintRanges arrays (the sections of the weights of the ops after a launch), each 16-byte
// aligned with bytes a multiple of 16; bytes 0: unused.
constexpr int kHintRanges = 6;
struct WeightHint {
  const void* p[kHintRanges] = {};
  int64_t bytes[kHintRanges] = {};
};

// The sections of weights w[0 .. n) in order, each weight's first rows within a share of
// `budget` bytes in all (every section of a weight cut at the same fraction, 16-byte lines).
inline WeightHint weight_hint(const DevWeight* w, int n, int64_t budget) {
  WeightHint h;
  int64_t total = 0;
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < weight_section_count(w[i].type); ++s)
      total += static_cast<int64_t>(weight_section_bytes(w[i].type, w[i].rows, w[i].cols, s));
  const double keep = total > budget ? static_cast<double>(budget) / total : 1.0;
  int r = 0;
  for (int i = 0; i < n; ++i) {
    const void* sec[3] = {w[i].q, w[i].d, w[i].m};
    for (int s = 0; s < weight_section_count(w[i].type) && r < kHintRanges; ++s) {
      const auto b = static_cast<int64_t>(weight_section_bytes(w[i].type, w[i].rows, w[i].cols, s));
      h.p[r] = sec[s];
      h.bytes[r++] = static_cast<int64_t>(b * keep) / 16 * 16;
    }
  }
  return h;
}

// Block `block` of `blocks` streams its share of h toward L2: the ranges' bytes in order cut
// into `blocks` equal runs of 16-byte lines, a block's run in 4 KiB prefetches dealt over its
// threads. The whole block calls it (before anything else: little is live then).
__device__ __forceinline__ void prefetch_hint(const WeightHint& h, int64_t block, int64_t blocks) {
  int64_t lines = 0;
#pragma unroll
  for (int r = 0; r < kHintRanges; ++r) lines += h.bytes[r] / 16;
  if (lines == 0) return;
  constexpr int64_t kChunk = 4096 / 16;  // lines per prefetch
  const int64_t l0 = lines * block / blocks, l1 = lines * (block + 1) / blocks;
  for (int64_t c = l0 + threadIdx.x * kChunk; c < l1; c += blockDim.x * kChunk) {
    const int64_t a = c * 16, e = (c + kChunk < l1 ? c + kChunk : l1) * 16;  // concatenated
    int64_t base = 0;
#pragma unroll
    for (int r = 0; r < kHintRanges; ++r) {
      const int64_t lo = a > base ? a : base, hi = e < base + h.bytes[r] ? e : base + h.bytes[r];
      if (hi > lo) prefetch_l2_range(h.p[r], h.bytes[r], lo - base, hi - base);
      base += h.bytes[r];
    }
  }
}

}  // namespace trt_spec::cuda
