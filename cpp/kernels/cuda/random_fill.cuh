// random_fill.cuh: a random weight blob filled on the device (kernels/random_fill.h defines the
// bits; the CPU fills the same ones). One thread per 16-byte block of a section; the f16 / bf16
// rounding is the device's own (__float2half_rn, and kv.cuh's bf16 rounding), which matches the
// host's round to nearest even bit for bit.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv.cuh"
#include "kernels/random_fill.h"

namespace trt_spec::cuda {

constexpr int kFillThreads = 256;

// grid ceil(blocks / 256), block 256: blocks [0, blocks) of section `section` (s) of the blob at
// dst.
__global__ void random_fill_kernel(RandomFill f, SectionFill s, uint32_t section, uint64_t blocks,
                                   uint8_t* __restrict__ dst) {
  const uint64_t b = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const Philox4 r = random_fill_draw(f, section, b);
  uint32_t* w = reinterpret_cast<uint32_t*>(dst + s.offset + 16 * b);
  const bool half = s.kind == FillKind::kF16, bf = s.kind == FillKind::kBF16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (16 * b + 4 * static_cast<uint64_t>(i) >= s.bytes) return;
    if (half || bf) {
      float lo, hi;
      random_fill_halves(f, r.v[i], &lo, &hi);
      const uint32_t a = half ? kv_f16_bits(lo) : kv_bf16_bits(lo);
      const uint32_t c = half ? kv_f16_bits(hi) : kv_bf16_bits(hi);
      w[i] = a | (c << 16);
    } else {
      w[i] = random_fill_word(f, s, r.v[i]);
    }
  }
}

// Fills the whole [rows, cols] blob of type t at dst (device memory of weight_blob_bytes).
inline void launch_random_fill(cudaStream_t stream, WeightType t, int64_t rows, int64_t cols,
                               const RandomFill& f, uint8_t* dst) {
  SectionFill sections[3];
  const int n = random_fill_sections(t, rows, cols, f, sections);
  for (int s = 0; s < n; ++s) {
    const uint64_t blocks = (sections[s].bytes + 15) / 16;
    if (blocks == 0) continue;
    const unsigned grid = static_cast<unsigned>((blocks + kFillThreads - 1) / kFillThreads);
    TRT_SPEC_LAUNCH(random_fill_kernel, dim3(grid), dim3(kFillThreads), stream, f, sections[s],
                    static_cast<uint32_t>(s), blocks, dst);
  }
}

}  // namespace trt_spec::cuda
