// kv.cuh: the CUDA kernels' view of a KV cache (kernels/kv_format.h): typed pointers, the layout
// [slots, layers, kv_heads, max_seq, head_dim], and the rounding store / exact load of one
// element in each KvType. The attention kernels read it; the fused QKV projection's epilogue
// (rope + cache write) and kv_copy write it.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/kv_format.h"

namespace trt_spec::cuda {

struct KvView {
  void* k;
  void* v;
  KvType type;
  int layers, kv_heads, max_seq, head_dim;

  // Element offset of (slot, layer, kv head g, index 0, dim 0).
  __device__ __forceinline__ int64_t head_offset(int slot, int layer, int g) const {
    return ((static_cast<int64_t>(slot) * layers + layer) * kv_heads + g) *
           static_cast<int64_t>(max_seq) * head_dim;
  }
};

// f32 -> f16 / bf16 bits, round to nearest even (the same bits as kernels/half_float.h; the
// emulation calls it).
__device__ __forceinline__ uint16_t kv_f16_bits(float f) {
#if defined(TRT_SPEC_CUDA_EMU)
  return f32_to_f16(f);
#else
  return __half_as_ushort(__float2half_rn(f));
#endif
}

__device__ __forceinline__ uint16_t kv_bf16_bits(float f) {
#if defined(TRT_SPEC_CUDA_EMU)
  return f32_to_bf16(f);
#else
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
#endif
}

// base[e] = f, rounded to the cache's type.
__device__ __forceinline__ void kv_store(void* base, KvType t, int64_t e, float f) {
  switch (t) {
    case KvType::F32: static_cast<float*>(base)[e] = f; break;
    case KvType::F16: static_cast<uint16_t*>(base)[e] = kv_f16_bits(f); break;
    case KvType::BF16: static_cast<uint16_t*>(base)[e] = kv_bf16_bits(f); break;
  }
}

// base[e] as f32 (exact).
__device__ __forceinline__ float kv_load(const void* base, KvType t, int64_t e) {
  switch (t) {
    case KvType::F32: return static_cast<const float*>(base)[e];
    case KvType::F16: return f16_bits_to_float(static_cast<const uint16_t*>(base)[e]);
    case KvType::BF16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[e]);
  }
  return 0.0f;
}

}  // namespace trt_spec::cuda
