// layer_args.cuh: the fused matmul arguments (matmul.cuh MatmulArgs) of each op of a transformer
// layer and of the output head, as the CUDA backend's fused ops launch them (cuda_matmul.cu) and
// as the persistent forward records them (forward_program.cuh; the emulated tests build the same
// forward from them).
#pragma once

#include "kernels/cuda/matmul.cuh"

namespace trt_spec::cuda {

// out [n, W.rows] = x @ W^T (+ bias [W.rows] or null)
inline MatmulArgs linear_args(const WeightView& w, const float* bias, const float* x, int n,
                              float* out) {
  MatmulArgs a{};
  a.W = dev_weight(w);
  a.x = x;
  a.n = n;
  a.in = MatmulIn::kPlain;
  a.epi = MatmulOut::kStore;
  a.out = out;
  a.bias = bias;
  return a;
}

// out [n, W.rows] = rmsnorm(x row in_rows[i] (null: i)) @ W^T (+ bias)      (norm: f32 [W.cols])
inline MatmulArgs norm_linear_args(const float* x, const int32_t* in_rows, const float* norm,
                                   float eps, const WeightView& w, const float* bias, int n,
                                   float* out) {
  MatmulArgs a = linear_args(w, bias, x, n, out);
  a.in_rows = in_rows;
  a.in = MatmulIn::kRmsNorm;
  a.norm_w = norm;
  a.eps = eps;
  return a;
}

// qkv [n, (n_heads + 2 n_kv_heads) head_dim] = rmsnorm(x) @ W^T + bias, RoPE of q and k at pos,
// k and v written to the cache at (slot, layer, :, kv_idx or pos).
inline MatmulArgs qkv_args(const float* x, const float* norm, float eps, const WeightView& w,
                           const float* bias, const int32_t* pos, const int32_t* slot,
                           const int32_t* kv_idx, int n, int n_heads, int n_kv_heads, int head_dim,
                           const float* cos_t, const float* sin_t, const KvView& kv, int layer,
                           float* qkv) {
  MatmulArgs a = norm_linear_args(x, nullptr, norm, eps, w, bias, n, qkv);
  a.epi = MatmulOut::kRopeKv;
  a.pos = pos;
  a.slot = slot;
  a.kv_idx = kv_idx;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.cos_t = cos_t;
  a.sin_t = sin_t;
  a.kv = kv;
  a.layer = layer;
  return a;
}

// x [n, W.rows] += in @ W^T
inline MatmulArgs residual_args(const WeightView& w, const float* in, int n, float* x) {
  MatmulArgs a = linear_args(w, nullptr, in, n, x);
  a.epi = MatmulOut::kAccumulate;
  return a;
}

// x [n, W.rows] += swiglu(gate_up [n, 2 W.cols]) @ W^T
inline MatmulArgs swiglu_residual_args(const WeightView& w, const float* gate_up, int n, float* x) {
  MatmulArgs a = residual_args(w, gate_up, n, x);
  a.in = MatmulIn::kSwiGLU;
  return a;
}

}  // namespace trt_spec::cuda
