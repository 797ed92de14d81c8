// backend.cpp: the default fused ops of Backend (backend.h), composed of the primitive ops. The
// CPU backend runs these as they are; the CUDA backend overrides each with one kernel.
#include "backend/backend.h"

namespace trt_spec {

void Backend::norm_linear(const float* x, const int32_t* in_rows, WeightView norm, float eps,
                          WeightView w, WeightView bias, int n, float* out, float* tmp) {
  const int dim = static_cast<int>(w.cols);
  if (in_rows) {
    gather_rows(x, in_rows, n, dim, tmp);  // [n, dim]
    rmsnorm(tmp, norm, eps, n, dim, tmp);  // (in place: each row's sum first, then its values)
  } else {
    rmsnorm(x, norm, eps, n, dim, tmp);
  }
  linear(w, bias, tmp, n, out);  // [n, w.rows]
}

void Backend::qkv_projection(const float* x, WeightView norm, float eps, WeightView w,
                             WeightView bias, const Rows& rows, int n, const AttentionShape& shape,
                             const float* cos_table, const float* sin_table, KvCache& cache,
                             int layer, float* qkv, float* tmp) {
  norm_linear(x, nullptr, norm, eps, w, bias, n, qkv, tmp);  // [n, qkv_dim]
  rope(qkv, rows.pos, n, shape, cos_table, sin_table);
  kv_write(qkv, rows, n, shape, cache, layer);
}

void Backend::linear_residual(WeightView w, const float* in, int n, float* x, float* tmp) {
  linear(w, WeightView{}, in, n, tmp);  // [n, w.rows]
  add(x, tmp, static_cast<size_t>(n) * w.rows);
}

void Backend::swiglu_linear_residual(WeightView w, const float* gate_up, int n, float* x,
                                     float* act, float* tmp) {
  swiglu(gate_up, n, static_cast<int>(w.cols), act);  // [n, ffn]
  linear_residual(w, act, n, x, tmp);
}

}  // namespace trt_spec
