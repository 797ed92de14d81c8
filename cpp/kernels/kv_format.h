// kv_format.h: the element types of the KV cache, shared by the host code and every backend's
// kernels (the CPU attention, the CUDA kernels and their host emulation).
//
// A KV cache holds k and v, each [slots, layers, kv_heads, max_seq, head_dim] elements of one
// KvType. Values are stored rounded to nearest even from f32 and read back exactly:
//   F32   float
//   F16   IEEE half (uint16 bits)
//   BF16  bfloat16 (uint16 bits: the upper half of a float)
// The f32 <-> f16 / bf16 functions below (and kv_store_f32 / kv_load_f32 on top of them) are the
// one definition of that rounding and decoding; the CPU and the CUDA kernels call them (or
// bit-identical intrinsics, kernels/cuda/kv.cuh), so the backends store the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

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

// f32 -> f16 bits, round to nearest even (overflow to inf, NaN kept a quiet NaN).
inline uint16_t f32_to_f16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)
    return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (ax < 0x38800000u) {                                               // subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);           // < 2^-25: to zero
    const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&x, &v, 4);
    x |= sign;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// f32 -> bf16 bits, round to nearest even (NaN kept a quiet NaN).
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// base[e] = f, rounded to type t.
inline void kv_store_f32(void* base, KvType t, size_t e, float f) {
  switch (t) {
    case KvType::F32: static_cast<float*>(base)[e] = f; break;
    case KvType::F16: static_cast<uint16_t*>(base)[e] = f32_to_f16_bits(f); break;
    case KvType::BF16: static_cast<uint16_t*>(base)[e] = f32_to_bf16_bits(f); break;
  }
}

// base[e] (type t) as f32, exactly.
inline float kv_load_f32(const void* base, KvType t, size_t e) {
  switch (t) {
    case KvType::F32: return static_cast<const float*>(base)[e];
    case KvType::F16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[e]);
    case KvType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[e]);
  }
  return 0.0f;
}

}  // namespace trt_spec
