// common.cuh: shared device helpers of the CUDA kernels: weight views as raw pointers, f16/bf16
// decoding, the element decode of every weight type (kernels/weight_format.h), and warp/block
// reductions.
//
// Layering: the CUDA kernels take raw device pointers and plain structs only (the shared
// headers weight_format.h, philox.h, sampling.h); no runtime types. With
// TRT_SPEC_CUDA_EMU the kernels compile as host code against tests/cpp/cuda_emu.h (tests on
// machines without a GPU); launch helpers using <<<>>> are left out there.
#pragma once

#if defined(TRT_SPEC_CUDA_EMU)
#include "cuda_emu.h"  // host emulation for tests without a GPU (tests/cpp/cuda_emu.h)
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/weight_format.h"

namespace trt_spec::cuda {

// Launch recording: while a recorder is set on the calling thread, TRT_SPEC_LAUNCH records each
// launch (kernel name, grid, block, dynamic shared memory) instead of running it. The CUDA
// backend's planning mode (CudaBackend::planning) counts the launches of the very code that
// launches on a GPU, on machines without one; the emulated tests count launches per launch
// function with it.
struct LaunchRecorder {
  virtual ~LaunchRecorder() = default;
  virtual void record(const char* kernel, dim3 grid, dim3 block, size_t smem_bytes) = 0;
};

inline LaunchRecorder*& launch_recorder() {
  static thread_local LaunchRecorder* recorder = nullptr;
  return recorder;
}

}  // namespace trt_spec::cuda

// kernel<<<grid, block, smem, stream>>>(args...), its host emulation, or a record of it (above):
// host launch code written with it runs unchanged in the emulated tests and in planning mode.
// `kernel` must not contain a comma: name a template instance through a function pointer first.
#if defined(TRT_SPEC_CUDA_EMU)
#define TRT_SPEC_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)  \
  do {                                                                \
    if (auto* rec_ = ::trt_spec::cuda::launch_recorder())             \
      rec_->record(#kernel, dim3(grid), dim3(block), (smem));         \
    else                                                              \
      cuda_emu::launch(dim3(grid), dim3(block), kernel, __VA_ARGS__); \
  } while (0)
#else
#define TRT_SPEC_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) \
  do {                                                               \
    if (auto* rec_ = ::trt_spec::cuda::launch_recorder())            \
      rec_->record(#kernel, dim3(grid), dim3(block), (smem));        \
    else                                                             \
      kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__);    \
  } while (0)
#endif
#define TRT_SPEC_LAUNCH(kernel, grid, block, stream, ...) \
  TRT_SPEC_LAUNCH_SMEM(kernel, grid, block, 0, stream, __VA_ARGS__)

// Programmatic dependent launch (Hopper, sm_90+). A kernel launched with TRT_SPEC_LAUNCH_PDL and
// pdl true may start while the previous kernel on the stream is still running: everything it
// does before grid_dependency_wait() must read nothing an earlier kernel writes and write
// nothing an earlier kernel reads (the matmul fetches weights only). grid_dependency_launch()
// lets the next such kernel start early. Both are no-ops before sm_90, in the emulation, and in
// a kernel launched without the attribute (the wait then returns at once: stream order already
// holds). pdl false, planning and the emulation: an ordinary launch.
#if defined(TRT_SPEC_CUDA_EMU)
#define TRT_SPEC_LAUNCH_PDL(pdl, kernel, grid, block, stream, ...) \
  TRT_SPEC_LAUNCH(kernel, grid, block, stream, __VA_ARGS__)
#else
#define TRT_SPEC_LAUNCH_PDL(pdl, kernel, grid, block, stream, ...)                     \
  do {                                                                                 \
    if (!(pdl) || ::trt_spec::cuda::launch_recorder())                                 \
      TRT_SPEC_LAUNCH(kernel, grid, block, stream, __VA_ARGS__);                       \
    else                                                                               \
      ::trt_spec::cuda::launch_programmatic(kernel, dim3(grid), dim3(block), (stream), \
                                            __VA_ARGS__);                              \
  } while (0)
#endif

namespace trt_spec::cuda {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

#if !defined(TRT_SPEC_CUDA_EMU)
// kernel<<<grid, block, 0, stream>>>(args...) with the programmatic stream serialization
// attribute (see TRT_SPEC_LAUNCH_PDL). Throws on a launch error.
template <class... KernelArgs, class... Args>
inline void launch_programmatic(void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                                cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("programmatic launch: ") + cudaGetErrorString(e));
}
#endif

}  // namespace trt_spec::cuda

namespace trt_spec::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// One weight matrix W [rows, cols] in device memory, its sections as typed pointers.
struct DevWeight {
  WeightType type;
  int64_t rows, cols;
  const uint8_t* q;   // section 0: the values (f32 / f16 / bf16) or codes (q8 / q4)
  const uint16_t* d;  // section 1 (q8, q4): f16 scale per group of 32   [rows, cols / 32]
  const uint16_t* m;  // section 2 (q4): f16 offset per group of 32      [rows, cols / 32]
};

inline DevWeight dev_weight(const WeightView& w) {
  DevWeight r{w.type, w.rows, w.cols, static_cast<const uint8_t*>(w.section(0)), nullptr, nullptr};
  if (weight_section_count(w.type) > 1) r.d = static_cast<const uint16_t*>(w.section(1));
  if (weight_section_count(w.type) > 2) r.m = static_cast<const uint16_t*>(w.section(2));
  return r;
}

__device__ __forceinline__ float f16_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// W[r, c] as float, for any type (the reference decode of quantize.cpp, one element).
__device__ __forceinline__ float weight_at(const DevWeight& w, int64_t r, int64_t c) {
  switch (w.type) {
    case WeightType::F32: return reinterpret_cast<const float*>(w.q)[r * w.cols + c];
    case WeightType::F16:
      return f16_bits_to_float(reinterpret_cast<const uint16_t*>(w.q)[r * w.cols + c]);
    case WeightType::BF16:
      return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(w.q)[r * w.cols + c]);
    case WeightType::Q8: {
      const int64_t groups = w.cols / kQuantGroup;
      const float d = f16_bits_to_float(w.d[r * groups + c / kQuantGroup]);
      return d * static_cast<float>(static_cast<int>(w.q[r * w.cols + c]) - 128);
    }
    case WeightType::Q4: {
      const int64_t groups = w.cols / kQuantGroup;
      const int64_t sb = c / kQ4SuperBlock, j = c % kQ4SuperBlock;
      const uint8_t byte = w.q[r * (w.cols / 2) + sb * 32 + (j & 31)];
      const int code = j < 32 ? (byte & 0xf) : (byte >> 4);
      const int64_t g = r * groups + c / kQuantGroup;
      return f16_bits_to_float(w.d[g]) * static_cast<float>(code) + f16_bits_to_float(w.m[g]);
    }
  }
  return 0.0f;
}

// ---- rows --------------------------------------------------------------------------------------

// Row i of out [n, table.cols] = table row tokens[i] (zeros for an id outside the table), by the
// whole block (embed_kernel, and the persistent forward's embed rows).
__device__ __forceinline__ void embed_row(const DevWeight& table, const int32_t* tokens, int64_t i,
                                          float* out) {
  const int64_t r = tokens[i];
  float* o = out + i * table.cols;
  const bool inside = r >= 0 && r < table.rows;
  for (int64_t c = threadIdx.x; c < table.cols; c += blockDim.x)
    o[c] = inside ? weight_at(table, r, c) : 0.0f;
}

// Row i of dst [n, dim] = src row rows[i], by the whole block (gather_rows_kernel, and the
// persistent forward's gather rows).
__device__ __forceinline__ void gather_row(const float* src, const int32_t* rows, int64_t i,
                                           int dim, float* dst) {
  const float* s = src + static_cast<int64_t>(rows[i]) * dim;
  float* d = dst + i * dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) d[c] = s[c];
}

// ---- reductions ---------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Sum over the block (every thread gets it). All threads must call; blockDim.x % 32 == 0.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < nw ? part[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // part / total may be reused by the next call
  return r;
}

__device__ __forceinline__ unsigned long long block_sum_u64(unsigned long long v) {
  __shared__ unsigned long long part[32];
  __shared__ unsigned long long total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum_u64(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned long long s = lane < nw ? part[lane] : 0ull;
    s = warp_sum_u64(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const unsigned long long r = total;
  __syncthreads();
  return r;
}

// Exclusive prefix sum over the block in thread order (every thread gets its own prefix and the
// total).
__device__ __forceinline__ unsigned long long block_exclusive_scan_u64(unsigned long long v,
                                                                       unsigned long long* total) {
  __shared__ unsigned long long part[32];
  __shared__ unsigned long long sum_all;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  unsigned long long incl = v;  // inclusive scan within the warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) part[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const unsigned long long p = lane < nw ? part[lane] : 0ull;
    unsigned long long pi = p;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long y = __shfl_up_sync(kFullMask, pi, o);
      if (lane >= o) pi += y;
    }
    if (lane < nw) part[lane] = pi - p;  // exclusive prefix of the warp totals
    if (lane == 31) sum_all = pi;
  }
  __syncthreads();
  const unsigned long long r = part[warp] + incl - v;
  *total = sum_all;
  __syncthreads();
  return r;
}

// Block argmax (value, lowest index among equal maxima); every thread gets the result.
struct ArgMax {
  float v;
  int i;
};

__device__ __forceinline__ ArgMax argmax_pick(ArgMax a, ArgMax b) {
  if (b.i < 0) return a;
  if (a.i < 0) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ __forceinline__ ArgMax warp_argmax(ArgMax a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ArgMax b{__shfl_xor_sync(kFullMask, a.v, o), __shfl_xor_sync(kFullMask, a.i, o)};
    a = argmax_pick(a, b);
  }
  return a;
}

__device__ __forceinline__ ArgMax block_argmax(ArgMax a) {
  __shared__ ArgMax part[32];
  __shared__ ArgMax best;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  a = warp_argmax(a);
  if (lane == 0) part[warp] = a;
  __syncthreads();
  if (warp == 0) {
    ArgMax b = lane < nw ? part[lane] : ArgMax{0.0f, -1};
    b = warp_argmax(b);
    if (lane == 0) best = b;
  }
  __syncthreads();
  const ArgMax r = best;
  __syncthreads();
  return r;
}

// argmax of x [0, n) (lowest index among equal maxima; index 0 when n <= 0).
__device__ __forceinline__ ArgMax block_argmax_row(const float* x, int n) {
  ArgMax a{0.0f, -1};
  for (int i = threadIdx.x; i < n; i += blockDim.x) a = argmax_pick(a, ArgMax{x[i], i});
  a = block_argmax(a);
  if (a.i < 0) a = ArgMax{n > 0 ? x[0] : 0.0f, 0};
  return a;
}

}  // namespace trt_spec::cuda
