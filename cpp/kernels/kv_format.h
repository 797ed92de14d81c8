// kv_format.h: the element types of the KV cache, shared by the host code and every backend's
// kernels (the CPU attention, the CUDA kernels and their host emulation).
//
// A KV cache holds k and v, each [slots, layers, kv_heads, max_seq, head_dim] elements of one
// KvType. Values are stored rounded to nearest even from f32 and read back exactly:
//   F32   float
//   F16   IEEE half (uint16 bits)
//   BF16  bfloat16 (uint16 bits: the upper half of a float)
// kv_store_f32 / kv_load_f32 below, on top of kernels/half_float.h (the one definition of that
// rounding and decoding), are what the CPU calls; the CUDA kernels use bit-identical intrinsics
// (kernels/cuda/kv.cuh), so the backends store the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/half_float.h"

namespace trt_spec {

enum class KvType : int32_t { F32 = 0, F16 = 1, BF16 = 2 };

inline const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::BF16: return "bf16";
  }
  return "?";
}

// Parses "f32" / "f16" / "bf16"; false for anything else.
inline bool parse_kv_type(const std::string& s, KvType* out) {
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16})
    if (s == kv_type_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

inline constexpr int kv_type_bytes(KvType t) {
  return t == KvType::F32 ? 4 : 2;
}

// base[e] = f, rounded to type t.
inline void kv_store_f32(void* base, KvType t, size_t e, float f) {
  switch (t) {
    case KvType::F32: static_cast<float*>(base)[e] = f; break;
    case KvType::F16: static_cast<uint16_t*>(base)[e] = f32_to_f16(f); break;
    case KvType::BF16: static_cast<uint16_t*>(base)[e] = f32_to_bf16(f); break;
  }
}

// base[e] (type t) as f32, exactly.
inline float kv_load_f32(const void* base, KvType t, size_t e) {
  switch (t) {
    case KvType::F32: return static_cast<const float*>(base)[e];
    case KvType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[e]);
    case KvType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[e]);
  }
  return 0.0f;
}

}  // namespace trt_spec
