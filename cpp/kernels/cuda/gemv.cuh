// gemv.cuh: out [n, rows] = x [n, cols] @ W^T (+ bias) for every weight type, the weights
// dequantized inside the kernel (layouts: kernels/weight_format.h).
//
// Memory-bound matrix x (few rows) products for decode (n = 1 .. B (k + 1)) and, slower but
// correct, prefill chunks. One warp computes one output row for a tile of kRows activation
// rows: each lane walks the row's columns in chunks (one vector load of weight bytes per chunk),
// decodes the chunk to floats and multiplies it with the tile's activations (float4 loads, from
// L1/L2), then the warp sums its lanes. Tiles of more than kRows rows are further blocks along
// grid.x, which the scheduler runs next to the blocks of the same weight rows (L2 reuse).
//
// Every output element is computed by the same sequence of float operations whatever n and the
// tile: a row's result does not depend on the other rows of the batch (greedy speculative
// decoding then matches target-only decoding exactly).
//
// gemv_kernel needs cols % chunk columns == 0 (all q8 / q4 matrices, float matrices with
// cols % 8 == 0) and a 16-byte aligned x; gemv_scalar_kernel takes anything.
#pragma once

#include "kernels/cuda/common.cuh"

namespace trt_spec::cuda {

constexpr int kGemvWarps = 8;  // output rows per block (one warp each)
constexpr int kGemvThreads = kGemvWarps * 32;

// A chunk: kRuns runs of 8 contiguous columns, decoded to w[8 * kRuns]; run r starts at
// column start[r]. Chunk c of a row covers the weight bytes [c * kBytes, (c + 1) * kBytes).
template <WeightType T>
struct Chunk;

template <>
struct Chunk<WeightType::F32> {
  static constexpr int kRuns = 1, kCols = 8;
  __device__ __forceinline__ static void load(const DevWeight& W, int64_t row, int64_t c, float* w,
                                              int64_t* start) {
    const float4* p = reinterpret_cast<const float4*>(W.q) + (row * W.cols + c * 8) / 4;
    const float4 a = __ldg(p), b = __ldg(p + 1);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    start[0] = c * 8;
  }
};

// f16 / bf16: 8 columns from one 16-byte load.
template <bool kBf16>
__device__ __forceinline__ void load_half8(const DevWeight& W, int64_t row, int64_t c, float* w,
                                           int64_t* start) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(W.q) + (row * W.cols + c * 8) / 8);
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint16_t lo = static_cast<uint16_t>(words[k] & 0xffffu);
    const uint16_t hi = static_cast<uint16_t>(words[k] >> 16);
    w[2 * k] = kBf16 ? bf16_bits_to_float(lo) : f16_bits_to_float(lo);
    w[2 * k + 1] = kBf16 ? bf16_bits_to_float(hi) : f16_bits_to_float(hi);
  }
  start[0] = c * 8;
}

template <>
struct Chunk<WeightType::F16> {
  static constexpr int kRuns = 1, kCols = 8;
  __device__ __forceinline__ static void load(const DevWeight& W, int64_t row, int64_t c, float* w,
                                              int64_t* start) {
    load_half8<false>(W, row, c, w, start);
  }
};

template <>
struct Chunk<WeightType::BF16> {
  static constexpr int kRuns = 1, kCols = 8;
  __device__ __forceinline__ static void load(const DevWeight& W, int64_t row, int64_t c, float* w,
                                              int64_t* start) {
    load_half8<true>(W, row, c, w, start);
  }
};

// q8: 16 columns (half a group) from one 16-byte load; value = d * (q - 128).
template <>
struct Chunk<WeightType::Q8> {
  static constexpr int kRuns = 2, kCols = 16;
  __device__ __forceinline__ static void load(const DevWeight& W, int64_t row, int64_t c, float* w,
                                              int64_t* start) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(W.q + row * W.cols) + c);
    const float d = f16_bits_to_float(W.d[row * (W.cols / kQuantGroup) + c / 2]);
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int q = static_cast<int>((words[k / 4] >> (8 * (k % 4))) & 0xffu);
      w[k] = d * static_cast<float>(q - 128);
    }
    start[0] = c * 16;
    start[1] = c * 16 + 8;
  }
};

// q4: 8 bytes = 16 columns: bytes j0 .. j0 + 7 of super-block sb hold columns 64 sb + j0 + i
// (low nibbles, group 2 sb) and 64 sb + 32 + j0 + i (high nibbles, group 2 sb + 1).
template <>
struct Chunk<WeightType::Q4> {
  static constexpr int kRuns = 2, kCols = 16;
  __device__ __forceinline__ static void load(const DevWeight& W, int64_t row, int64_t c, float* w,
                                              int64_t* start) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(W.q + row * (W.cols / 2)) + c);
    const int64_t sb = c / 4, j0 = (c % 4) * 8;
    const int64_t g = row * (W.cols / kQuantGroup) + 2 * sb;
    const float d0 = f16_bits_to_float(W.d[g]), m0 = f16_bits_to_float(W.m[g]);
    const float d1 = f16_bits_to_float(W.d[g + 1]), m1 = f16_bits_to_float(W.m[g + 1]);
    const uint32_t words[2] = {u.x, u.y};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t byte = (words[k / 4] >> (8 * (k % 4))) & 0xffu;
      w[k] = d0 * static_cast<float>(byte & 0xfu) + m0;
      w[8 + k] = d1 * static_cast<float>(byte >> 4) + m1;
    }
    start[0] = sb * kQ4SuperBlock + j0;
    start[1] = sb * kQ4SuperBlock + 32 + j0;
  }
};

// grid (ceil(n / kRows), row blocks), block kGemvThreads.
template <WeightType T, int kRows>
__global__ void __launch_bounds__(kGemvThreads, 2)
    gemv_kernel(DevWeight W, const float* __restrict__ x, int n, const float* __restrict__ bias,
                float* __restrict__ out) {
  using C = Chunk<T>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i0 = blockIdx.x * kRows;
  const int nr = min(kRows, n - i0);
  const int64_t cols = W.cols, n_chunks = cols / C::kCols;
  const float* xt = x + static_cast<int64_t>(i0) * cols;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * kGemvWarps + warp; row < W.rows;
       row += static_cast<int64_t>(gridDim.y) * kGemvWarps) {
    float acc[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) acc[i] = 0.0f;
#pragma unroll 2
    for (int64_t c = lane; c < n_chunks; c += 32) {
      float w[8 * C::kRuns];
      int64_t start[C::kRuns];
      C::load(W, row, c, w, start);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        if (i < nr) {
#pragma unroll
          for (int r = 0; r < C::kRuns; ++r) {
            const float4* xp = reinterpret_cast<const float4*>(xt + i * cols + start[r]);
            const float4 a = __ldg(xp), b = __ldg(xp + 1);
            const float* wr = w + 8 * r;
            float s = acc[i];
            s = fmaf(wr[0], a.x, s);
            s = fmaf(wr[1], a.y, s);
            s = fmaf(wr[2], a.z, s);
            s = fmaf(wr[3], a.w, s);
            s = fmaf(wr[4], b.x, s);
            s = fmaf(wr[5], b.y, s);
            s = fmaf(wr[6], b.z, s);
            s = fmaf(wr[7], b.w, s);
            acc[i] = s;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (i < nr) {
        const float s = warp_sum(acc[i]);
        if (lane == 0) out[(i0 + i) * W.rows + row] = s + (bias ? bias[row] : 0.0f);
      }
    }
  }
}

// Any shape / alignment: grid (n, row blocks), block kGemvThreads; one warp per (row, x row).
__global__ void __launch_bounds__(kGemvThreads)
    gemv_scalar_kernel(DevWeight W, const float* __restrict__ x, int n,
                       const float* __restrict__ bias, float* __restrict__ out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i = blockIdx.x;
  const float* xi = x + static_cast<int64_t>(i) * W.cols;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * kGemvWarps + warp; row < W.rows;
       row += static_cast<int64_t>(gridDim.y) * kGemvWarps) {
    float s = 0.0f;
    for (int64_t c = lane; c < W.cols; c += 32) s = fmaf(weight_at(W, row, c), xi[c], s);
    s = warp_sum(s);
    if (lane == 0) out[static_cast<int64_t>(i) * W.rows + row] = s + (bias ? bias[row] : 0.0f);
  }
}

inline int gemv_chunk_cols(WeightType t) {
  return (t == WeightType::Q8 || t == WeightType::Q4) ? 16 : 8;
}

// Activation rows per tile for n rows: 1, 2, 4, 8 or 16 (more rows: several tiles).
inline int gemv_tile_rows(int n) {
  return n <= 1 ? 1 : (n <= 2 ? 2 : (n <= 4 ? 4 : (n <= 8 ? 8 : 16)));
}

// Whether gemv_kernel can take this product (else gemv_scalar_kernel).
inline bool gemv_vectorized(const DevWeight& W, const float* x) {
  return W.cols % gemv_chunk_cols(W.type) == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         (W.type != WeightType::F32 || reinterpret_cast<uintptr_t>(W.q) % 16 == 0);
}

// grid (tiles, row blocks) for tiles of `tile` rows (tile 1 and n tiles for the scalar kernel).
inline dim3 gemv_grid(const DevWeight& W, int n, int tile) {
  const int64_t row_blocks = (W.rows + kGemvWarps - 1) / kGemvWarps;
  return dim3((n + tile - 1) / tile,
              static_cast<unsigned>(row_blocks < 65535 ? row_blocks : 65535));
}

#if !defined(TRT_SPEC_CUDA_EMU)
// Launches out [n, W.rows] = x [n, W.cols] @ W^T (+ bias) on a stream.
template <WeightType T>
inline void launch_gemv_typed(const DevWeight& W, const float* x, int n, const float* bias,
                              float* out, cudaStream_t stream) {
  const int tile = gemv_tile_rows(n);
  const dim3 grid = gemv_grid(W, n, tile);
  switch (tile) {
    case 1: gemv_kernel<T, 1><<<grid, kGemvThreads, 0, stream>>>(W, x, n, bias, out); break;
    case 2: gemv_kernel<T, 2><<<grid, kGemvThreads, 0, stream>>>(W, x, n, bias, out); break;
    case 4: gemv_kernel<T, 4><<<grid, kGemvThreads, 0, stream>>>(W, x, n, bias, out); break;
    case 8: gemv_kernel<T, 8><<<grid, kGemvThreads, 0, stream>>>(W, x, n, bias, out); break;
    default: gemv_kernel<T, 16><<<grid, kGemvThreads, 0, stream>>>(W, x, n, bias, out); break;
  }
}

inline void launch_gemv(const DevWeight& W, const float* x, int n, const float* bias, float* out,
                        cudaStream_t stream) {
  if (!gemv_vectorized(W, x)) {
    gemv_scalar_kernel<<<gemv_grid(W, n, 1), kGemvThreads, 0, stream>>>(W, x, n, bias, out);
    return;
  }
  switch (W.type) {
    case WeightType::F32: launch_gemv_typed<WeightType::F32>(W, x, n, bias, out, stream); break;
    case WeightType::F16: launch_gemv_typed<WeightType::F16>(W, x, n, bias, out, stream); break;
    case WeightType::BF16: launch_gemv_typed<WeightType::BF16>(W, x, n, bias, out, stream); break;
    case WeightType::Q8: launch_gemv_typed<WeightType::Q8>(W, x, n, bias, out, stream); break;
    case WeightType::Q4: launch_gemv_typed<WeightType::Q4>(W, x, n, bias, out, stream); break;
  }
}
#endif

}  // namespace trt_spec::cuda
