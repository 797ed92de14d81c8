// half_float.h: the one definition of f32 <-> f16 and f32 <-> bf16 on the host, header-only.
//
// Used by the weight quantizer (kernels/cpu/quantize.*: f16 scales, f16/bf16 weights), the KV
// cache formats (kernels/kv_format.h: the CPU attention and the CUDA host emulation) and the
// tests. Every conversion is exact in the IEEE sense:
//   f32 -> f16   round to nearest even, subnormals kept, overflow (>= 65520) to inf;
//   f32 -> bf16  round to nearest even, overflow to inf;
//   NaN          stays a quiet NaN with its sign and its top payload bits;
//   f16 / bf16 -> f32 exact.
// The CUDA kernels use the hardware conversions (__float2half_rn), which give the same bits for
// every non-NaN input (tests/test_kernels_cpu.py checks these against numpy's float16).
#pragma once

#include <cstdint>
#include <cstring>

namespace trt_spec {

namespace half_detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace half_detail

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return half_detail::bits_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  return half_detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = half_detail::float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, payload's top bits kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a >= 0x38800000u) {  // normal half: rebias the exponent, round the mantissa
    const uint32_t h = (a - 0x38000000u) >> 13;
    const uint32_t rem = a & 0x1fffu;
    return static_cast<uint16_t>(sign | (h + (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))));
  }
  // Subnormal half (or zero): value / 2^-24 = mant24 * 2^(e + 1), e the unbiased exponent.
  const int e = static_cast<int>(a >> 23) - 127;
  const int shift = -(e + 1);   // >= 14
  if (shift > 24) return sign;  // < 2^-25: rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t k = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  k += (rem > half || (rem == half && (k & 1u)));
  return static_cast<uint16_t>(sign | k);
}

inline float bf16_to_f32(uint16_t h) {
  return half_detail::bits_float(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = half_detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace trt_spec
