// matmul_avx512.cpp: the AVX-512 (F, BW, VL, VNNI) CPU matmul kernels, built with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c.
//
// Same structure as matmul_avx2.cpp (primitives listed there, body in matmul_impl.h) with:
//   - float weights: 512-bit vectors, 16 columns per step;
//   - Q4 / Q8: blocks of 16 weight rows (Rows16); vpdpbusd (u8 x s8 -> int32, no saturation)
//     replaces maddubs + int16 sums + madd, its activation word a {1to16} broadcast from memory,
//     and Q8 multiplies its unsigned codes q = w + 128 directly (the tile removes the bias with
//     -128 * d_w * ds per group, as on AVX2); up to 12 activation rows per tile.
// Only called when __builtin_cpu_supports reports AVX512 F, BW, VL and VNNI (matmul_dispatch.cpp;
// no BF16 instruction is used, so AVX512_BF16 is not required). Not runnable on AVX2-only
// machines: tests/test_kernels_cpu.py covers it wherever the CPU has these features.
//
// GCC 12.2's AVX-512 headers trip a false -Wuninitialized at -O3 (GCC bug 105593, fixed in 12.3).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul.h"

namespace trt_spec::cpu {
namespace {

struct Isa {
  using VF = __m512;
  static constexpr int W = 16;
  static VF zero() { return _mm512_setzero_ps(); }
  static VF loadu(const float* p) { return _mm512_loadu_ps(p); }
  static VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(VF v) {
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <WeightType T>
  static VF load_w(const uint8_t* row, int64_t c) {
    if constexpr (T == WeightType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
    } else {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + c));
      if constexpr (T == WeightType::F16) {
        return _mm512_cvtph_ps(h);
      } else {  // bf16: the upper half of a float
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
    }
  }

  static void storeu(float* p, VF v) { _mm512_storeu_ps(p, v); }
  static VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
  static VF set1(float v) { return _mm512_set1_ps(v); }

  using VI = __m512i;
  static constexpr CodeLayout kRowLayout = CodeLayout::Rows16;
  static VF to_float(VI v) { return _mm512_cvtepi32_ps(v); }
  static VF load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_rows(float* p, int lo, int hi, VF v) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1)), v);
  }

  template <WeightType T>
  static constexpr int kQuantMt = 12;  // 12 int + 12 float accumulators of the 32 registers

  template <WeightType T, int MT>
  static void group_dots(const uint8_t* w, const int8_t* x, int64_t ld, VI* s) {
    auto word = [&](int m, int k) {  // x word k of activation row m in every lane
      int32_t v;
      std::memcpy(&v, x + m * ld + 4 * k, 4);
      return _mm512_set1_epi32(v);
    };
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) s[m] = _mm512_setzero_si512();
    if constexpr (T == WeightType::Q4) {
      const __m512i nib = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {  // vector j: V_2j low, V_2j+1 high
        const __m512i v = _mm512_loadu_si512(w + 64 * j);
        const __m512i lo = _mm512_and_si512(v, nib);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          s[m] = _mm512_dpbusd_epi32(s[m], lo, word(m, 2 * j));
          s[m] = _mm512_dpbusd_epi32(s[m], hi, word(m, 2 * j + 1));
        }
      }
    } else {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {  // V_k
        const __m512i v = _mm512_loadu_si512(w + 64 * k);
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) s[m] = _mm512_dpbusd_epi32(s[m], v, word(m, k));
      }
    }
  }
};

}  // namespace
}  // namespace trt_spec::cpu

#include "kernels/cpu/matmul_impl.h"

namespace trt_spec::cpu {

const MatmulKernels kMatmulKernelsAvx512 = {"avx512", CodeLayout::Rows16, &quantize_acts,
                                            &matmul_float, &matmul_quant};

}  // namespace trt_spec::cpu
