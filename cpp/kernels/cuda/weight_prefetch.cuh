// weight_prefetch.cuh: a matmul block's weights streamed toward L2 ahead of their use.
//
// The weights depend on no earlier op, so a block may ask for them before it waits for its
// inputs: the per-operation matmul_kernel before its grid dependency (with PDL, during the
// previous kernel's tail), and the persistent forward (forward_program.cuh) for its NEXT
// instruction before it waits for its current one, so that DRAM streams one op ahead of the
// dependency chain instead of after it. A prefetch is a hint: no thread waits for it and no
// value changes, so the bits are those without it.
//
//   prefetch_l2          bytes [p, p + n) toward L2: cp.async.bulk.prefetch.L2 (sm_90+, one
//                        instruction per range), prefetch.global.L2 per 128-byte line before;
//                        under the emulation, a note to the test's observer (cuda_emu.h).
//   matmul_prefetch      block (bx, by) of a matmul_block's weight rows (every row of its row
//                        pairs, the units of its split, and for q8 / q4 the group scales and
//                        offsets of those units): one range per (row, section), in the order the
//                        block reads them ((rep, pair row a then b), at most `budget` bytes:
//                        what L2 holds for every resident block at once), dealt over the block's
//                        threads.
#pragma once

#include "kernels/cuda/matmul.cuh"

namespace trt_spec::cuda {

// The default budget of one block's prefetch: 396 resident one-row blocks (3 per SM on 132 SMs)
// keep 12.7 MB in flight, the persistent forward two ops of it: well inside a 50 MB L2.
constexpr int kPrefetchBlockBytes = 32 * 1024;

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

// Block (bx, by) of matmul_block over a and g (its rows: matmul_block's pair_rows, its units:
// split by of g), at most `budget` bytes of them in reading order. The whole block calls it
// (first thing: little else is live then).
__device__ __forceinline__ void matmul_prefetch(const MatmulArgs& a, const MatmulGeom& g,
                                                int64_t bx, int by, int budget) {
  const DevWeight& W = a.W;
  const int64_t row_block = g.tile_loop ? bx : bx / g.tiles;
  const int64_t u0 = by * g.split_units;
  const int64_t u1 = u0 + g.split_units < g.units ? u0 + g.split_units : g.units;
  const int sections = W.type == WeightType::Q4 ? 3 : (W.type == WeightType::Q8 ? 2 : 1);
  // Group scales (and q4 offsets) per unit: f16 each; a row's units: 32 bytes each.
  const int64_t gpu = matmul_quantized(W.type) ? matmul_unit_cols(W.type) / kQuantGroup : 0;
  const int64_t row_bytes = g.units * 32, row_groups = W.cols / kQuantGroup;
  const int64_t slice = (u1 - u0) * (32 + 2 * gpu * (sections - 1));  // one row's bytes here
  constexpr int kRows = 2 * kMatmulWarps;                             // rows a, b of a group
  const int64_t rows_cap = slice > 0 ? budget / slice : 0;
  const int64_t want = static_cast<int64_t>(g.reps) * kRows;
  const int64_t rows_in = want < rows_cap ? want : rows_cap;
  for (int64_t it = threadIdx.x; it < rows_in * sections; it += blockDim.x) {
    const int sec = static_cast<int>(it % sections);
    const int64_t k = it / sections, rep = k / kRows, w = k % kMatmulWarps;
    const int64_t p = (row_block * g.reps + rep) * kMatmulWarps + w;
    if (p >= g.pairs) continue;
    int64_t r = matmul_pair_row(g, p);
    if (k % kRows >= kMatmulWarps) {  // row b of the pair
      r += g.half;
      if (r >= W.rows) continue;
    }
    if (sec == 0) {
      prefetch_l2_range(W.q, W.rows * row_bytes, r * row_bytes + u0 * 32, r * row_bytes + u1 * 32);
    } else {
      const int64_t g0 = r * row_groups + u0 * gpu, g1 = r * row_groups + u1 * gpu;
      prefetch_l2_range(sec == 1 ? W.d : W.m, W.rows * row_groups * 2, g0 * 2, g1 * 2);
    }
  }
}

}  // namespace trt_spec::cuda
