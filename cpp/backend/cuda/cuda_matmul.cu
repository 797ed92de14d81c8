// cuda_matmul.cu: CudaBackend's matrix products (cuda_backend.h): linear() and the fused layer
// ops of backend.h, each ONE launch of the fused matmul (kernels/cuda/matmul.cuh):
//
//   norm_linear              rmsnorm in the staging prologue (+ row gather: the output head)
//   qkv_projection           rmsnorm prologue; bias, RoPE and the k / v cache write in the epilogue
//   linear_residual          x += in @ W^T in the epilogue
//   swiglu_linear_residual   silu(gate) * up in the staging prologue, x += ... in the epilogue
//
// plan_matmul (matmul_launch.cuh) fixes grid, tiles and split-K from the shape and the SM count;
// its split-K scratch (partials, zeroed counters) comes from the backend's scratch buffers, sized
// before graph capture like every other scratch.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#include "common/errors.h"
#include "kernels/cuda/layer_args.cuh"
#include "kernels/cuda/matmul_launch.cuh"

namespace trt_spec {

namespace {

const float* f32_or_null(WeightView v) {
  return v.data ? static_cast<const float*>(v.section(0)) : nullptr;
}

}  // namespace

int CudaBackend::set_imma_rows(int rows) {
  imma_rows_ = rows > 0 ? rows : cuda::kImmaRowsDefault;
  return imma_rows_;
}

KernelWave cuda_plan_matmul_wave(WeightType type, int64_t rows, int64_t cols, int n, int sm_count) {
  // Operands 16-byte aligned, as the backend's (only the pointers' alignment is read).
  alignas(16) static const float dummy[4] = {};
  cuda::MatmulArgs a{};
  a.W.type = type;
  a.W.rows = rows;
  a.W.cols = cols;
  a.W.q = reinterpret_cast<const uint8_t*>(dummy);
  a.x = dummy;
  a.out = const_cast<float*>(dummy);
  a.n = n;
  cuda::MatmulPlan p;
  try {
    p = cuda::plan_matmul(a, sm_count);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(e.what());
  }
  KernelWave w;
  w.blocks = static_cast<int64_t>(p.grid.x) * p.grid.y * p.grid.z;
  w.sm_count = sm_count;
  const std::string t = weight_type_name(type);
  if (!p.vectorized) {
    w.kernel = "matmul_fallback_kernel";
    w.blocks_per_sm = 1;
  } else if (p.imma) {
    w.kernel = "matmul_imma_kernel<" + t + ">";
    w.blocks_per_sm = 1;
  } else {
    w.kernel = "matmul_kernel<" + t + ", " + std::to_string(p.tile_rows) + ">";
    w.blocks_per_sm = cuda::matmul_blocks_per_sm(p.tile_rows);
  }
  return w;
}

int cuda_set_imma_rows(Backend& be, int rows) {
  return on_cuda(be, -1, [&](CudaBackend& c) { return c.set_imma_rows(rows); });
}

cuda::WeightHint CudaBackend::hint_after(const cuda::DevWeight* own, int n) {
  if (sizing_) {
    if (own) sized_weights_.push_back(*own);
    return {};
  }
  if (!capturing_) return {};
  if (own) ++weight_cursor_;  // (the sizing pass issued the same ops in the same order)
  if (prefetch_next_ <= 0 || weight_cursor_ >= sized_weights_.size()) return {};
  const int k = static_cast<int>(std::min<size_t>(n, sized_weights_.size() - weight_cursor_));
  return cuda::weight_hint(sized_weights_.data() + weight_cursor_, k, prefetch_next_);
}

void CudaBackend::matmul(const cuda::MatmulArgs& a, const char* what) {
  const cuda::WeightHint next = hint_after(&a.W, 1);  // [the next matmul's weight sections]
  cuda::MatmulPlan p;
  try {
    p = cuda::plan_matmul(a, sm_count_, imma_rows_, one_wave_);
    if (holding_) {  // the persistent forward plans every product with the pass's tile
      if (cuda::fwd_holds_matmul(a.W.type, p))
        p = cuda::plan_matmul(a, sm_count_, imma_rows_, one_wave_, cuda::fwd_tile(held_rows_));
      else
        flush_forward();  // a product it does not hold
    }
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(std::string(what) + ": " + e.what());
  }
  float* partial = nullptr;
  int* counters = nullptr;
  if (p.partial_bytes) partial = static_cast<float*>(scratch(kMatmulPartial, p.partial_bytes));
  if (p.counter_bytes) counters = static_cast<int*>(scratch(kMatmulCounters, p.counter_bytes));
  if (hold_matmul(a, p, partial, counters)) return;
  if (sizing()) return;
  const int times = a.epi == cuda::MatmulOut::kRopeKv ? repeat_qkv_ : 1;  // (set_repeat_qkv)
  for (int r = 0; r < times; ++r) {
    cuda::launch_matmul(stream_, a, p, partial, counters, pdl_, prefetch_, next);
    check_launch(what);
  }
}

void CudaBackend::linear(WeightView w, WeightView bias, const float* x, int n, float* out) {
  if (n <= 0) return;
  matmul(cuda::linear_args(w, f32_or_null(bias), x, n, out), "linear");  // [n, w.rows]
}

void CudaBackend::norm_linear(const float* x, const int32_t* in_rows, WeightView norm, float eps,
                              WeightView w, WeightView bias, int n, float* out, float* tmp) {
  if (n <= 0) return;
  matmul(cuda::norm_linear_args(x, in_rows, static_cast<const float*>(norm.section(0)), eps, w,
                                f32_or_null(bias), n, out),
         "norm_linear");  // [n, w.rows]
}

void CudaBackend::qkv_projection(const float* x, WeightView norm, float eps, WeightView w,
                                 WeightView bias, const Rows& rows, int n,
                                 const AttentionShape& shape, const float* cos_table,
                                 const float* sin_table, KvCache& cache, int layer, float* qkv,
                                 float* tmp) {
  if (n <= 0) return;
  const cuda::KvView kv{cache.k,        cache.v,       cache.type,    cache.layers,
                        cache.kv_heads, cache.max_seq, cache.head_dim};
  matmul(cuda::qkv_args(x, static_cast<const float*>(norm.section(0)), eps, w, f32_or_null(bias),
                        rows.pos, rows.slot, rows.kv_idx, n, shape.n_heads, shape.n_kv_heads,
                        shape.head_dim, cos_table, sin_table, kv, layer, qkv),
         "qkv_projection");  // [n, (n_heads + 2 n_kv_heads) head_dim]
}

void CudaBackend::linear_residual(WeightView w, const float* in, int n, float* x, float* tmp) {
  if (n <= 0) return;
  matmul(cuda::residual_args(w, in, n, x), "linear_residual");  // x [n, w.rows] += in @ W^T
}

void CudaBackend::swiglu_linear_residual(WeightView w, const float* gate_up, int n, float* x,
                                         float* act, float* tmp) {
  if (n <= 0) return;
  // x [n, w.rows] += swiglu(gate_up) @ W^T
  matmul(cuda::swiglu_residual_args(w, gate_up, n, x), "swiglu_linear_residual");
}

}  // namespace trt_spec
