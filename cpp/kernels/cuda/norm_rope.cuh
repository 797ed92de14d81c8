// norm_rope.cuh: the per-row ops of the transformer block on the GPU: embedding lookup (any
// weight type), RMSNorm, rotary embedding, SwiGLU, residual add, row gather. Same arithmetic as
// the CPU backend's ops (cpu_backend.cpp), up to float rounding order.
#pragma once

#include "kernels/cuda/common.cuh"

namespace trt_spec::cuda {

constexpr int kRowThreads = 256;

// out [n, table.cols] = rows tokens[i] of table.  grid n, block kRowThreads.
__global__ void __launch_bounds__(kRowThreads)
    embed_kernel(DevWeight table, const int32_t* __restrict__ tokens, float* __restrict__ out) {
  embed_row(table, tokens, blockIdx.x, out);
}

// out [n, dim] = g * (x * 1 / sqrt(mean(x^2) + eps)).  grid n, block kRowThreads.
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ g, float eps, int dim,
                   float* __restrict__ out) {
  const float* xi = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yi = out + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) ss = fmaf(xi[c], xi[c], ss);
  ss = block_sum(ss) / static_cast<float>(dim);
  const float r = 1.0f / sqrtf(ss + eps);
  for (int c = threadIdx.x; c < dim; c += blockDim.x) yi[c] = g[c] * (xi[c] * r);
}

// In place on qkv [n, (n_heads + 2 n_kv_heads) head_dim]: rotates the q and k heads of row i
// by position pos[i] (rotate-half); cos/sin [max_seq, head_dim / 2].  grid n, block kRowThreads.
__global__ void __launch_bounds__(kRowThreads)
    rope_kernel(float* __restrict__ qkv, const int32_t* __restrict__ pos, int n_heads,
                int n_kv_heads, int head_dim, const float* __restrict__ cos_table,
                const float* __restrict__ sin_table) {
  const int i = blockIdx.x, half = head_dim / 2;
  const int heads = n_heads + n_kv_heads;  // q heads then k heads
  const int64_t stride = static_cast<int64_t>(n_heads + 2 * n_kv_heads) * head_dim;
  const float* c = cos_table + static_cast<int64_t>(pos[i]) * half;
  const float* s = sin_table + static_cast<int64_t>(pos[i]) * half;
  for (int e = threadIdx.x; e < heads * half; e += blockDim.x) {
    const int h = e / half, j = e % half;
    float* v = qkv + i * stride + static_cast<int64_t>(h) * head_dim;
    const float x0 = v[j], x1 = v[j + half];
    v[j] = x0 * c[j] - x1 * s[j];
    v[j + half] = x1 * c[j] + x0 * s[j];
  }
}

// out [n, ffn] = silu(gate_up[:, :ffn]) * gate_up[:, ffn:].  grid-stride over n * ffn.
__global__ void swiglu_kernel(const float* __restrict__ gate_up, int64_t n, int ffn,
                              float* __restrict__ out) {
  const int64_t total = n * ffn;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / ffn, c = e % ffn;
    const float g = gate_up[i * 2 * ffn + c], u = gate_up[i * 2 * ffn + ffn + c];
    out[e] = g / (1.0f + expf(-g)) * u;
  }
}

// x [count] += y [count]
__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t count) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[e] += y[e];
}

// dst [n, dim] = src rows rows[i].  grid n, block kRowThreads.
__global__ void __launch_bounds__(kRowThreads)
    gather_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows, int dim,
                       float* __restrict__ dst) {
  gather_row(src, rows, blockIdx.x, dim, dst);
}

// out [n, width]: out[i, c] = src[i, index[c]] where index[c] >= 0, else -inf (Backend::
// expand_columns). Grid-stride over the n * width elements.
__global__ void expand_columns_kernel(const float* __restrict__ src, int src_cols,
                                      const int32_t* __restrict__ index, int64_t n, int width,
                                      float* __restrict__ out) {
  const int64_t total = n * width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / width;
    const int j = index[e - i * width];
    out[e] = j >= 0 ? src[i * src_cols + j] : -INFINITY;
  }
}

// Blocks for a grid-stride elementwise kernel over `count` elements.
inline unsigned elementwise_blocks(int64_t count, int threads) {
  const int64_t b = (count + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// ---- host launch code: one launch each, run by CudaBackend and by the emulated tests ----------

inline void launch_embed(cudaStream_t stream, const DevWeight& table, const int32_t* tokens, int n,
                         float* out) {
  TRT_SPEC_LAUNCH(embed_kernel, n, kRowThreads, stream, table, tokens, out);
}

inline void launch_rmsnorm(cudaStream_t stream, const float* x, const float* g, float eps, int n,
                           int dim, float* out) {
  TRT_SPEC_LAUNCH(rmsnorm_kernel, n, kRowThreads, stream, x, g, eps, dim, out);
}

inline void launch_rope(cudaStream_t stream, float* qkv, const int32_t* pos, int n, int n_heads,
                        int n_kv_heads, int head_dim, const float* cos_table,
                        const float* sin_table) {
  TRT_SPEC_LAUNCH(rope_kernel, n, kRowThreads, stream, qkv, pos, n_heads, n_kv_heads, head_dim,
                  cos_table, sin_table);
}

inline void launch_swiglu(cudaStream_t stream, const float* gate_up, int n, int ffn, float* out) {
  const int64_t count = static_cast<int64_t>(n) * ffn;
  TRT_SPEC_LAUNCH(swiglu_kernel, elementwise_blocks(count, 256), 256, stream, gate_up,
                  static_cast<int64_t>(n), ffn, out);
}

inline void launch_add(cudaStream_t stream, float* x, const float* y, int64_t count) {
  TRT_SPEC_LAUNCH(add_kernel, elementwise_blocks(count, 256), 256, stream, x, y, count);
}

inline void launch_expand_columns(cudaStream_t stream, const float* src, int src_cols,
                                  const int32_t* index, int n, int width, float* out) {
  const int64_t count = static_cast<int64_t>(n) * width;
  TRT_SPEC_LAUNCH(expand_columns_kernel, elementwise_blocks(count, 256), 256, stream, src, src_cols,
                  index, static_cast<int64_t>(n), width, out);
}

inline void launch_gather_rows(cudaStream_t stream, const float* src, const int32_t* rows, int n,
                               int dim, float* dst) {
  TRT_SPEC_LAUNCH(gather_rows_kernel, n, kRowThreads, stream, src, rows, dim, dst);
}

}  // namespace trt_spec::cuda
